//go:build !amd64 || purego

package conv

// dwArchKernels lists no SIMD row kernels: this GOARCH (or the purego tag)
// runs the Go kernel.
func dwArchKernels() []dwKernel { return nil }

// dwAsm reports that no assembly kernel exists.
func dwAsm(kern dwKernel, k, s int) dwPlaneFunc { return nil }
