package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestErfMatchesMath compares Erf with float32(math.Erf(float64(x))), the
// reference engine's value: special values exactly, and 2·10⁶ random
// float32 bit patterns plus a dense walk of [-4.5, 4.5], where at most one
// ulp may differ and only rarely (the series is 1e-11 from math.Erf, so
// only values within that of a rounding boundary can round the other way;
// an exhaustive run over every float32 in [0, 4.5) found 4 in 1.08·10⁹).
func TestErfMatchesMath(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 2, 3, 4, -4, 1e-30, -1e-45,
		float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.MaxFloat32, 0.99999994, 1.0000001, 3.9999998}
	for _, x := range special {
		got, want := erf32(x), float32(math.Erf(float64(x)))
		var asm [1]float32
		erfWith(active, asm[:], []float32{x})
		if math.Float32bits(asm[0]) != math.Float32bits(want) {
			t.Errorf("%v: erf(%g) = %g, want %g", active, x, asm[0], want)
		}
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("erf(%g) = %g (%#x), want %g (%#x)", x, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	if got := erf32(float32(math.NaN())); got == got {
		t.Errorf("erf(NaN) = %g, want NaN", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	xs := make([]float32, 0, 3_000_000)
	for range 2_000_000 {
		xs = append(xs, math.Float32frombits(rng.Uint32()))
	}
	for x := float32(-4.5); x < 4.5; x += 1e-5 {
		xs = append(xs, x)
	}
	for _, k := range availableKernels() {
		t.Run(k.String(), func(t *testing.T) { checkErf(t, k, xs) })
	}
}

// checkErf checks kernel k's Erf of xs against math.Erf, at most 3 values
// one ulp off; every length up to 40 from each offset too, for the
// assembly's masked tail.
func checkErf(t *testing.T, k kernel, xs []float32) {
	d := make([]float32, len(xs))
	erfWith(k, d, xs)
	for n := range 40 {
		for off := range 3 {
			part := make([]float32, n)
			erfWith(k, part, xs[off:off+n])
			for i, v := range part {
				if math.Float32bits(v) != math.Float32bits(d[off+i]) {
					t.Fatalf("n=%d off=%d: erf(%g) = %g alone, %g in the long run", n, off, xs[off+i], v, d[off+i])
				}
			}
		}
	}
	off := 0
	for i, x := range xs {
		want := float32(math.Erf(float64(x)))
		if x != x {
			if d[i] == d[i] {
				t.Fatalf("erf(NaN) = %g", d[i])
			}
			continue
		}
		if diff := int64(math.Float32bits(d[i])) - int64(math.Float32bits(want)); diff != 0 {
			if diff > 1 || diff < -1 {
				t.Fatalf("erf(%g) = %g, want %g: %d ulps", x, d[i], want, diff)
			}
			off++
		}
	}
	if off > 3 {
		t.Errorf("%d of %d values one ulp from math.Erf's rounding, want at most 3", off, len(xs))
	}
}

// BenchmarkErf is the cost per element of Erf against math.Erf in float64.
func BenchmarkErf(b *testing.B) {
	a, d := make([]float32, 4096), make([]float32, 4096)
	for i := range a {
		a[i] = float32(i-2048) / 512
	}
	for _, k := range availableKernels() {
		b.Run(k.String(), func(b *testing.B) {
			for b.Loop() {
				erfWith(k, d, a)
			}
		})
	}
	b.Run("math.Erf", func(b *testing.B) {
		for b.Loop() {
			for i, x := range a {
				d[i] = float32(math.Erf(float64(x)))
			}
		}
	})
}
