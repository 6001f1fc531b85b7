//go:build (!amd64 && !arm64) || purego

package gemv

// archKernels lists no SIMD kernels: this GOARCH (or the purego tag) runs
// the Go kernel.
func archKernels() []kernel { return nil }

// f32BlockArch reports that no assembly kernel ran.
func f32BlockArch(kern kernel, x []float32, ldx, mb int, w []float32, ldw, k int, y []float32, ldy, pf int) bool {
	return false
}

// int8BlockArch reports that no assembly kernel ran.
func int8BlockArch(kern kernel, x []float32, ldx, mb int, w []int8, ldw, k int, scale, y []float32, ldy, pf int) bool {
	return false
}

// knBlockArch reports that no assembly F32KN kernel ran.
func knBlockArch(kern kernel, x []float32, ldx, mb int, b []float32, ldb, k int, y []float32, ldy, n int) bool {
	return false
}

// knArch reports that no kernel here has an assembly F32KN.
func knArch(kern kernel) bool { return false }
