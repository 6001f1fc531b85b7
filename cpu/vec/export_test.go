package vec

// Entry points only the tests and benchmarks call: the engine uses none of
// them, so they live here rather than in the package's API. The scalar
// forms drive the kernels' scalar-operand loops (kernel.go), which the
// tests check against plain Go like every other loop.

// KernelName names the kernel this machine runs: "avx512", "avx2" or "go".
func KernelName() string { return active.String() }

// AddS sets d[i] = a[i] + s.
func AddS(d, a []float32, s float32) { scalar(active, opAdd, d, a, s) }

// SubS sets d[i] = a[i] - s.
func SubS(d, a []float32, s float32) { scalar(active, opSub, d, a, s) }

// SubSR sets d[i] = s - a[i].
func SubSR(d, a []float32, s float32) { scalar(active, opSubR, d, a, s) }

// MulS sets d[i] = a[i] * s.
func MulS(d, a []float32, s float32) { scalar(active, opMul, d, a, s) }

// DivS sets d[i] = a[i] / s.
func DivS(d, a []float32, s float32) { scalar(active, opDiv, d, a, s) }

// DivSR sets d[i] = s / a[i].
func DivSR(d, a []float32, s float32) { scalar(active, opDivR, d, a, s) }

// MaxS sets d[i] = max(a[i], s).
func MaxS(d, a []float32, s float32) { scalar(active, opMax, d, a, s) }

// MinS sets d[i] = min(a[i], s).
func MinS(d, a []float32, s float32) { scalar(active, opMin, d, a, s) }

// CompareS sets d[i] = 1 if a[i] op s, else 0.
func CompareS(op CmpOp, d, a []float32, s float32) { scalar(active, cmpBinOp(op), d, a, s) }

// Sum returns the float32 sum of a in order, s += a[i] from s = 0. It
// stays a sequential Go loop: any reassociation (SIMD partial sums) would
// change the rounding and so the bits.
func Sum(a []float32) float32 {
	var s float32
	for _, v := range a {
		s += v
	}
	return s
}
