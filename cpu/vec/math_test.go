package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// mathFunc is one of the float64-lane functions (Erf, Exp, Logistic) and
// its reference: the float64 function rounded to float32, as the
// reference engine computes it.
type mathFunc struct {
	name    string
	with    func(k kernel, d, a []float32)
	ref     func(float32) float32
	lo, hi  float32 // the range walked densely
	maxOffs int     // how many values may be one ulp off the reference
}

var mathFuncs = []mathFunc{
	// The series is 3e-15 from math.Erf, so only values that close to a
	// rounding boundary round the other way: an exhaustive run over every
	// float32 in [0, 4.5) found 4 in 1.08·10⁹.
	{"erf", erfWith, func(x float32) float32 { return float32(math.Erf(float64(x))) }, -4.5, 4.5, 3},
	{"exp", expWith, func(x float32) float32 { return float32(math.Exp(float64(x))) }, -110, 90, 0},
	{"logistic", logisticWith, func(x float32) float32 { return logistic64(float64(x)) }, -110, 110, 0},
}

// TestMathMatchesReference compares each function on every kernel with
// its reference: special values bit for bit, then 2·10⁶ random float32
// bit patterns and a dense walk of the function's range, where at most
// maxOffs values may differ, by one ulp.
func TestMathMatchesReference(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 2, 3, 4, -4, 1e-30, -1e-45, 88.72283, 88.72284,
		-87.33655, -103.27893, -103.97208, -104, float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32,
		-math.MaxFloat32, 0.99999994, 1.0000001, 3.9999998, math.Float32frombits(0x7fc01234), float32(math.NaN())}
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]float32, 2_000_000)
	for i := range random {
		random[i] = math.Float32frombits(rng.Uint32())
	}
	for _, f := range mathFuncs {
		xs := append(append([]float32{}, special...), random...)
		for x, step := f.lo, (f.hi-f.lo)/1e6; x < f.hi; x += step {
			xs = append(xs, x)
		}
		for _, k := range availableKernels() {
			t.Run(f.name+"/"+k.String(), func(t *testing.T) {
				d := make([]float32, len(xs))
				f.with(k, d, xs)
				checkTails(t, f, k, xs, d)
				off := 0
				for i, x := range xs {
					got, want := math.Float32bits(d[i]), math.Float32bits(f.ref(x))
					if diff := int64(got) - int64(want); diff != 0 {
						if i < len(special) || x != x || diff > 1 || diff < -1 {
							t.Fatalf("%s(%g) = %g (%#x), want %g (%#x)", f.name, x, d[i], got, f.ref(x), want)
						}
						off++
					}
				}
				if off > f.maxOffs {
					t.Errorf("%d of %d values one ulp off the reference, want at most %d", off, len(xs), f.maxOffs)
				}
			})
		}
	}
}

// checkTails runs every length up to 40 from three offsets, for the
// assembly's masked tail: each element as in the long run d.
func checkTails(t *testing.T, f mathFunc, k kernel, xs, d []float32) {
	for n := range 40 {
		for off := range 3 {
			part := make([]float32, n)
			f.with(k, part, xs[off:off+n])
			for i, v := range part {
				if math.Float32bits(v) != math.Float32bits(d[off+i]) {
					t.Fatalf("n=%d off=%d: %s(%g) = %g alone, %g in the long run", n, off, f.name, xs[off+i], v, d[off+i])
				}
			}
		}
	}
}

// BenchmarkMath is the cost of each function per 4096 elements on each
// kernel, against the float64 math package loop.
func BenchmarkMath(b *testing.B) {
	a, d := make([]float32, 4096), make([]float32, 4096)
	for i := range a {
		a[i] = float32(i-2048) / 512
	}
	for _, f := range mathFuncs {
		for _, k := range availableKernels() {
			b.Run(f.name+"/"+k.String(), func(b *testing.B) {
				for b.Loop() {
					f.with(k, d, a)
				}
			})
		}
		b.Run(f.name+"/math", func(b *testing.B) {
			for b.Loop() {
				for i, x := range a {
					d[i] = f.ref(x)
				}
			}
		})
	}
}
