package gemv

// KernelName is for the tests only (TestKernelName checks that the dispatch
// picks the fastest kernel the CPU has); nothing outside the package needs
// it.

// KernelName names the kernel F32 and Int8 run on this machine: "avx512",
// "avx2", "neon" or "go".
func KernelName() string { return active.String() }
