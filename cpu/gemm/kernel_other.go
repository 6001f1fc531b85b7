//go:build (!amd64 && !arm64) || purego

package gemm

// archKernels lists no assembly kernels: this GOARCH (or the purego tag)
// runs the Go kernel.
func archKernels() []*microKernel { return nil }
