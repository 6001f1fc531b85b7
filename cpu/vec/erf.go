package vec

import "math"

// Erf sets d[i] = erf(a[i]) rounded to float32: the error function GELU
// spends its time in. float32(math.Erf(float64(x))), what the reference
// engine computes, costs a branchy float64 evaluation with an exp per
// element (a third of a BERT encoder's run); here each element is one
// Chebyshev series in float64 whose error (below 3e-15 absolute,
// measured against math.Erf when the degrees were chosen) is far below half a
// float32 ulp, so the result is math.Erf's rounded value except where
// that value lies within about 1e-15 of a float32 rounding boundary
// (one ulp off, and rare: every float32 in [0, 4.5), 1.08·10⁹ values, was
// checked once: 4 differ, on both kernels).
//
// Where: |x| < 1: x·g(x²) with g(u) = erf(√u)/√u (odd, so the sign and
// -0 come out of the product); 1 ≤ |x| < 4 on three unit intervals; beyond
// 4, ±1 (erf(4) = 1 - 1.5e-8 rounds to 1 in float32); NaN gives math.Erf's NaN.
//
//go:generate go run gen_math.go
func Erf(d, a []float32) { erfWith(active, d, a) }

// erfWith is Erf on kernel k: the AVX-512 assembly (gen_math.go, the same
// series in float64 lanes with fused multiply-adds, so within one ulp of
// the Go loop and as rarely off math.Erf's rounding) or the Go loop.
func erfWith(k kernel, d, a []float32) {
	if erfArch(k, d, a) {
		return
	}
	for i, x := range a[:len(d)] {
		d[i] = erf32(x)
	}
}

// erf32 is one element of Erf.
func erf32(x float32) float32 {
	v := float64(x)
	ax := math.Abs(v)
	switch {
	case ax < 1:
		return float32(v * erfSmall.eval(v*v))
	case ax < 4:
		r := erfLarge[int(ax)-1].eval(ax)
		if v < 0 {
			r = -r
		}
		return float32(r)
	case v != v:
		return float32(math.NaN()) // as math.Erf: its own NaN, not the input's
	}
	return float32(math.Copysign(1, v))
}

// chebSeries is a Chebyshev series on [lo, hi]: f(x) ≈ Σ c[j]·T_j(t) with
// t the image of x in [-1, 1].
type chebSeries struct {
	lo, hi float64
	c      []float64
}

// The series of erf: 12 terms for g on [0, 1] and 16 per unit interval
// (errors 2e-15 and 3e-15, from an interpolation of math.Erf at the
// Chebyshev nodes, computed once at start-up).
const erfSmallN, erfLargeN = 12, 16

var (
	erfSmall = chebInterpolate(func(u float64) float64 {
		s := math.Sqrt(u)
		return math.Erf(s) / s
	}, 0, 1, erfSmallN)
	erfLarge = [3]chebSeries{
		chebInterpolate(math.Erf, 1, 2, erfLargeN),
		chebInterpolate(math.Erf, 2, 3, erfLargeN),
		chebInterpolate(math.Erf, 3, 4, erfLargeN),
	}
)

// chebInterpolate returns the degree n-1 series through f at the n
// Chebyshev nodes of [lo, hi] (none is an end point, so g's 0/0 at u = 0
// is never evaluated).
func chebInterpolate(f func(float64) float64, lo, hi float64, n int) chebSeries {
	fx := make([]float64, n)
	for k := range fx {
		t := math.Cos(math.Pi * (float64(k) + 0.5) / float64(n))
		fx[k] = f(lo + (hi-lo)*(t+1)/2)
	}
	c := make([]float64, n)
	for j := range c {
		s := 0.0
		for k, y := range fx {
			s += y * math.Cos(math.Pi*float64(j)*(float64(k)+0.5)/float64(n))
		}
		c[j] = 2 * s / float64(n)
	}
	c[0] /= 2
	return chebSeries{lo, hi, c}
}

// eval sums the series at x by Clenshaw's recurrence.
func (p *chebSeries) eval(x float64) float64 {
	t := (2*x - p.lo - p.hi) / (p.hi - p.lo)
	var b1, b2 float64
	for j := len(p.c) - 1; j >= 1; j-- {
		b1, b2 = 2*t*b1-b2+p.c[j], b1
	}
	return t*b1 - b2 + p.c[0]
}
