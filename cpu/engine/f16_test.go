package engine

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/x448/float16"
)

// TestFloat16Conversions checks the native conversions against an
// independent binary16 implementation (x448/float16, round to nearest
// even) on every float16 and on float32 values around every float16
// rounding boundary, and float64 to float16 against exact rational
// rounding, double-rounding traps included. Fault injected once: rounding
// float64 through a plain float32 (two roundings) fails the traps.
func TestFloat16Conversions(t *testing.T) {
	e, _ := newPair(t)
	var f32 []float32
	for h := range 1 << 16 {
		v := float16.Frombits(uint16(h)).Float32()
		f32 = append(f32, v, math.Nextafter32(v, float32(math.Inf(1))), math.Nextafter32(v, float32(math.Inf(-1))))
		if next := float16.Frombits(uint16(h + 1)).Float32(); h&0x7fff < 0x7bff && !math.IsNaN(float64(next)) {
			mid := float32((float64(v) + float64(next)) / 2) // a tie, exact in float32
			f32 = append(f32, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1))))
		}
	}
	f32 = append(f32, 65520, 65519.996, 1e-8, -3e-8, float32(math.Inf(-1)))
	s := shapes.Make(dtypes.Float32, len(f32))
	got := runGraph(t, e, []shapes.Shape{s}, []any{f32}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		h, err := b.ConvertDType(p[0], dtypes.Float16)
		if err != nil {
			return nil, err
		}
		back, err := b.ConvertDType(h, dtypes.Float32)
		return []backends.Op{h, back}, err
	})
	hs, back := got[0].([]float16.Float16), got[1].([]float32)
	for i, v := range f32 {
		want := float16.Fromfloat32(v)
		if want.IsNaN() {
			if !hs[i].IsNaN() || !math.IsNaN(float64(back[i])) {
				t.Fatalf("%g: got %#04x, want a NaN", v, hs[i].Bits())
			}
			continue
		}
		if hs[i] != want || back[i] != want.Float32() {
			t.Fatalf("%g (%#08x): float16 %#04x -> %g, want %#04x -> %g", v, math.Float32bits(v), hs[i].Bits(), back[i], want.Bits(), want.Float32())
		}
	}

	traps := []float64{1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-11 - 0x1p-40, 1 + 3*0x1p-11 - 0x1p-45, 65504 + 15.9999, 65520 - 1e-9,
		0x1p-25 + 0x1p-60, 0x1p-25, -0x1p-25 - 0x1p-70, 0x1.8p-24 - 0x1p-80, math.Copysign(0, -1), 1e300, math.NaN()}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		traps = append(traps, (rng.Float64()-0.5)*math.Pow(2, float64(rng.IntN(40)-24)))
	}
	s64 := shapes.Make(dtypes.Float64, len(traps))
	got = runGraph(t, e, []shapes.Shape{s64}, []any{traps}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		h, err := b.ConvertDType(p[0], dtypes.Float16)
		return []backends.Op{h}, err
	})
	for i, x := range traps {
		g, want := got[0].([]float16.Float16)[i], nearestFloat16(x)
		if g != want && !(g.IsNaN() && want.IsNaN()) {
			t.Errorf("float64 %v: float16 %#04x (%g), want %#04x (%g)", x, g.Bits(), g.Float32(), want.Bits(), want.Float32())
		}
	}
}

// nearestFloat16 rounds x to binary16 exactly (ties to even), by comparing
// rational distances to every finite float16 around it.
func nearestFloat16(x float64) float16.Float16 {
	switch {
	case math.IsNaN(x):
		return float16.NaN()
	case x == 0:
		return float16.Fromfloat32(float32(x))
	case math.Abs(x) >= 65520: // half way between the largest float16 and 2^16
		return float16.Inf(int(math.Copysign(1, x)))
	}
	// The answer is float32 rounding's float16 or a neighbour of it (two
	// roundings are off by at most one unit).
	bx := new(big.Float).SetPrec(0).SetFloat64(x)
	c0 := float16.Fromfloat32(float32(x))
	best, bestD := float16.Float16(0), new(big.Float)
	first := true
	for _, bits := range []uint16{c0.Bits() - 1, c0.Bits(), c0.Bits() + 1} {
		c := float16.Frombits(bits)
		if c.IsNaN() || c.IsInf(0) || (bits^c0.Bits())&0x8000 != 0 {
			continue
		}
		d := new(big.Float).SetPrec(0).Sub(bx, new(big.Float).SetPrec(0).SetFloat64(float64(c.Float32())))
		d.Abs(d)
		cmp := d.Cmp(bestD)
		if first || cmp < 0 || (cmp == 0 && c.Bits()&1 == 0) {
			best, bestD, first = c, d, false
		}
	}
	if best.Bits()&0x7fff == 0 {
		return float16.Fromfloat32(float32(math.Copysign(0, x)))
	}
	return best
}

// TestFloat16Graph runs a graph on float16 parameters and constants
// (elementwise ops, a broadcast, an iota, a reduction, a matrix product,
// a concatenation and a comparison) and checks every output against the
// same computation done by hand: each op in float32 on the widened
// operands, its result rounded to float16.
func TestFloat16Graph(t *testing.T) {
	e, _ := newPair(t)
	rng := rand.New(rand.NewPCG(3, 4))
	ha, hb := make([]float16.Float16, 6), make([]float16.Float16, 6)
	for i := range ha {
		ha[i] = float16.Fromfloat32(float32(rng.NormFloat64() * 3))
		hb[i] = float16.Fromfloat32(float32(rng.NormFloat64()))
	}
	s := shapes.Make(dtypes.Float16, 2, 3)
	got := runGraph(t, e, []shapes.Shape{s, s}, []any{ha, hb}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		must := func(o backends.Op, err error) backends.Op {
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
		c := must(b.Constant([]float16.Float16{float16.Fromfloat32(0.1)}))
		cb := must(b.BroadcastInDim(c, s, []int{}))
		prod := must(b.Mul(p[0], p[1]))
		sum := must(b.Add(prod, cb))
		ex := must(b.Exp(sum))
		iota := must(b.Iota(s, 1))
		red := must(b.ReduceSum(p[0], 1))
		dot := must(b.DotGeneral(p[0], []int{1}, nil, p[1], []int{1}, nil))
		cat := must(b.Concatenate(0, p[0], p[1]))
		gt := must(b.GreaterThan(p[0], p[1]))
		return []backends.Op{sum, ex, iota, red, dot, cat, gt}, nil
	})
	r := func(f float32) float32 { return float16.Fromfloat32(f).Float32() }
	w := func(h float16.Float16) float32 { return h.Float32() }
	for i := range 6 {
		prod := r(w(ha[i]) * w(hb[i]))
		sum := r(prod + r(0.1))
		check(t, "a*b+0.1", got[0], i, sum)
		check(t, "exp", got[1], i, r(float32(math.Exp(float64(sum)))))
		check(t, "iota", got[2], i, float32(i%3))
		check(t, "concat", got[5], i, w(ha[i]))
		check(t, "concat", got[5], i+6, w(hb[i]))
		if g := got[6].([]bool)[i]; g != (w(ha[i]) > w(hb[i])) {
			t.Errorf("a > b [%d]: %v", i, g)
		}
	}
	for row := range 2 {
		acc := float32(0)
		for k := range 3 {
			acc += w(ha[row*3+k])
		}
		check(t, "reduce", got[3], row, r(acc))
		for col := range 2 {
			acc := float32(0)
			for k := range 3 {
				acc += w(ha[row*3+k]) * w(hb[col*3+k])
			}
			check(t, "dot", got[4], row*2+col, r(acc))
		}
	}
}

func check(t *testing.T, what string, flat any, i int, want float32) {
	t.Helper()
	g := flat.([]float16.Float16)[i]
	if g.Float32() != want {
		t.Errorf("%s [%d]: %g, want %g", what, i, g.Float32(), want)
	}
}

// TestFloat16Bitcast: a bitcast of float16 is refused when recorded, with
// an error naming it, not at run time.
func TestFloat16Bitcast(t *testing.T) {
	e, _ := newPair(t)
	b := e.Builder("bitcast")
	p, err := b.Parameter("x", shapes.Make(dtypes.Float16, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Bitcast(p, dtypes.Uint16); err == nil {
		t.Fatal("Bitcast of float16 recorded; want an error")
	}
}
