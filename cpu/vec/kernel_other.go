//go:build !amd64 || purego

package vec

// archKernels lists no SIMD kernels: this GOARCH (or the purego tag) runs
// the Go kernel. The *Arch functions report that no assembly ran.
func archKernels() []kernel { return nil }

func binaryArch(k kernel, op binOp, d, a, b []float32) bool                  { return false }
func scalarArch(k kernel, op binOp, d, a []float32, s float32) bool          { return false }
func unaryArch(k kernel, op unOp, d, a []float32) bool                       { return false }
func clampArch(k kernel, op clampOp, d, a []float32, s, lo, hi float32) bool { return false }
func selectArch(k kernel, d, c, a, b []float32) bool                         { return false }
func fillArch(k kernel, d []float32, v float32) bool                         { return false }
func boolToF32Arch(k kernel, d []float32, b []bool) int                      { return 0 }
func f32ToBoolArch(k kernel, d []bool, a []float32) int                      { return 0 }

func maxReduceArch(k kernel, a []float32) (m float32, nan, ok bool) { return 0, false, false }

func erfArch(k kernel, d, a []float32) bool      { return false }
func expArch(k kernel, d, a []float32) bool      { return false }
func logisticArch(k kernel, d, a []float32) bool { return false }
