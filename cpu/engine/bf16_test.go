package engine

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/precision"
)

// nearestBF16 rounds x to bfloat16 by exact arithmetic, independently of
// the code under test: big.Float rounds to 8 significant bits, ties to
// even; below 2⁻¹²⁶ (bfloat16's subnormals, fixed ulp 2⁻¹³³) x·2¹³³ is
// rounded to an integer; a magnitude that rounds to 2¹²⁸ or more is
// infinity. It returns the bfloat16 value as a float64.
func nearestBF16(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return x
	}
	var r float64
	if math.Abs(x) < 0x1p-126 {
		r = math.RoundToEven(x*0x1p133) * 0x1p-133 // exact: scaling by powers of two
		if r == 0 {
			r = math.Copysign(0, x)
		}
	} else {
		r, _ = new(big.Float).SetMode(big.ToNearestEven).SetPrec(8).SetFloat64(x).Float64()
	}
	if math.Abs(r) >= 0x1p128 {
		return math.Inf(int(math.Copysign(1, x)))
	}
	return r
}

// bfv returns the value of bfloat16 bits as a float64.
func bfv(h bfloat16.BFloat16) float64 {
	return float64(math.Float32frombits(uint32(h) << 16))
}

// bfOf returns the bfloat16 holding x, which must be a bfloat16 value.
func bfOf(t testing.TB, x float64) bfloat16.BFloat16 {
	b := math.Float32bits(float32(x))
	if float64(float32(x)) != x && !math.IsNaN(x) || b&0xffff != 0 {
		t.Fatalf("%g is not a bfloat16 value", x)
	}
	return bfloat16.BFloat16(b >> 16)
}

func sameBF16(got bfloat16.BFloat16, want float64) bool {
	g := bfv(got)
	if math.IsNaN(want) {
		return math.IsNaN(g)
	}
	return g == want && math.Signbit(g) == math.Signbit(want)
}

// TestBFloat16Conversions checks ConvertDType float32 → bfloat16 → float32
// and float64 → bfloat16 against exact rounding (nearestBF16): every
// bfloat16 value, its float32 neighbours, every tie between two bfloat16
// values and its neighbours, random bit patterns; float64 inputs include
// double-rounding traps (a float32 rounding first would make a tie), and
// int32 inputs beyond 2²⁴ (through float32 they would round twice). Fault
// injected once: rounding by truncation (GoMLX's bfloat16.FromFloat32)
// fails every inexact case; routing int32 through float32 fails the trap.
func TestBFloat16Conversions(t *testing.T) {
	e, _ := newPair(t)
	var f32 []float32
	for h := range 1 << 16 {
		v := math.Float32frombits(uint32(h) << 16)
		f32 = append(f32, v, math.Nextafter32(v, float32(math.Inf(1))), math.Nextafter32(v, float32(math.Inf(-1))))
		f32 = append(f32, math.Float32frombits(uint32(h)<<16|0x8000), math.Float32frombits(uint32(h)<<16|0x7fff), math.Float32frombits(uint32(h)<<16|0x8001))
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		f32 = append(f32, math.Float32frombits(rng.Uint32()))
	}
	f64 := []float64{1 + 0x1p-8 + 0x1p-40, 1 + 0x1p-8 - 0x1p-40, 1 + 3*0x1p-8 - 0x1p-50, 0x1p-130 + 0x1p-160, 0x1.01p-133,
		-(0x1p-134 + 0x1p-170), 0x1.fep127 + 0x1p110, 0x1.ffp127 - 0x1p90, 1e300, -1e-300, math.Copysign(0, -1), math.NaN()}
	for range 2000 {
		f64 = append(f64, (rng.Float64()-0.5)*math.Pow(2, float64(rng.IntN(300)-150)))
	}
	ints := []int32{1<<24 + 1<<16 + 1, -(1<<24 + 1<<16 + 1), 1<<30 + 1<<22 + 1, 255, 257, 1<<31 - 1}
	s32, s64, si := shapes.Make(dtypes.Float32, len(f32)), shapes.Make(dtypes.Float64, len(f64)), shapes.Make(dtypes.Int32, len(ints))
	got := runGraph(t, e, []shapes.Shape{s32, s64, si}, []any{f32, f64, ints}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		var outs []backends.Op
		for _, x := range p {
			h, err := b.ConvertDType(x, dtypes.BFloat16)
			if err != nil {
				return nil, err
			}
			outs = append(outs, h)
		}
		back, err := b.ConvertDType(outs[0], dtypes.Float32)
		back64, err2 := b.ConvertDType(outs[1], dtypes.Float64)
		if err == nil {
			err = err2
		}
		return append(outs, back, back64), err
	})
	bad := 0
	report := func(what string, x float64, g bfloat16.BFloat16, want float64) {
		if bad++; bad <= 10 {
			t.Errorf("%s %v (%#x): bfloat16 %#04x (%g), want %g", what, x, math.Float64bits(x), uint16(g), bfv(g), want)
		}
	}
	for i, v := range f32 {
		g, want := got[0].([]bfloat16.BFloat16)[i], nearestBF16(float64(v))
		if !sameBF16(g, want) {
			report("float32", float64(v), g, want)
		}
		if w := got[3].([]float32)[i]; float64(w) != bfv(g) && !math.IsNaN(float64(w)) {
			t.Fatalf("widening %#04x: %g, want %g", uint16(g), w, bfv(g))
		}
	}
	for i, v := range f64 {
		g, want := got[1].([]bfloat16.BFloat16)[i], nearestBF16(v)
		if !sameBF16(g, want) {
			report("float64", v, g, want)
		}
		if w := got[4].([]float64)[i]; w != bfv(g) && !math.IsNaN(w) {
			t.Fatalf("widening %#04x to float64: %g, want %g", uint16(g), w, bfv(g))
		}
	}
	for i, v := range ints {
		if g, want := got[2].([]bfloat16.BFloat16)[i], nearestBF16(float64(v)); !sameBF16(g, want) {
			report("int32", float64(v), g, want)
		}
	}
	if bad > 0 {
		t.Errorf("%d conversions differ from exact rounding", bad)
	}
}

// bf16Case is one graph of TestBFloat16Ops: build records it over
// bfloat16 parameters of shapes ins; want gives each output element from
// the inputs' values, computed independently (exact or float32
// arithmetic, rounded by nearestBF16).
type bf16Case struct {
	name  string
	ins   [][]int
	build func(b backends.Builder, p []backends.Op) (backends.Op, error)
	want  func(in [][]float64, i int) float64
	// normal draws the inputs from N(0, 4) rounded to bfloat16 instead of
	// smallInts, so that every op's float32 result needs rounding.
	normal bool
}

// smallInts returns n bfloat16 values j/8 with j uniform in [-15, 15]: the
// products and sums the tests form from them are exact in float32 (at
// most 2¹⁷ in units of 2⁻⁶), so float32 accumulation in any order gives
// the exact result, and the one rounding to bfloat16 (8 bits) is the only
// rounding: the engine must match nearestBF16 of the exact value bit for
// bit, ties included.
func smallInts(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(rng.IntN(31)-15) / 8
	}
	return v
}

func bf16Cases() []bf16Case {
	bin := func(name string, f func(b backends.Builder, x, y backends.Op) (backends.Op, error), op func(x, y float32) float32) bf16Case {
		return bf16Case{name: name, ins: [][]int{{3, 37}, {3, 37}},
			build: func(b backends.Builder, p []backends.Op) (backends.Op, error) { return f(b, p[0], p[1]) },
			want: func(in [][]float64, i int) float64 {
				return nearestBF16(float64(op(float32(in[0][i]), float32(in[1][i]))))
			}}
	}
	dot := func(m, k, n int) bf16Case {
		return bf16Case{name: fmt.Sprintf("dot %dx%dx%d", m, k, n), ins: [][]int{{m, k}, {n, k}},
			build: func(b backends.Builder, p []backends.Op) (backends.Op, error) {
				return b.DotGeneral(p[0], []int{1}, nil, p[1], []int{1}, nil)
			},
			want: func(in [][]float64, i int) float64 {
				row, col, acc := i/n, i%n, 0.0
				for q := range k {
					acc += in[0][row*k+q] * in[1][col*k+q]
				}
				return nearestBF16(acc)
			}}
	}
	reduce := func(name string, f func(b backends.Builder, x backends.Op) (backends.Op, error), k int, fold func(acc, v float64) float64) bf16Case {
		return bf16Case{name: name, ins: [][]int{{5, k}},
			build: func(b backends.Builder, p []backends.Op) (backends.Op, error) { return f(b, p[0]) },
			want: func(in [][]float64, i int) float64 {
				acc := in[0][i*k]
				for q := 1; q < k; q++ {
					acc = fold(acc, in[0][i*k+q])
				}
				return nearestBF16(acc)
			}}
	}
	return []bf16Case{
		bin("add", func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Add(x, y) }, func(x, y float32) float32 { return x + y }),
		bin("sub", func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Sub(x, y) }, func(x, y float32) float32 { return x - y }),
		bin("mul", func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Mul(x, y) }, func(x, y float32) float32 { return x * y }),
		bin("div", func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Div(x, y) }, func(x, y float32) float32 { return x / y }),
		bin("max", func(b backends.Builder, x, y backends.Op) (backends.Op, error) { return b.Max(x, y) }, func(x, y float32) float32 { return max(x, y) }),
		{name: "mul, add, exp, mul (a rounding after each)", ins: [][]int{{3, 370}, {3, 370}}, normal: true,
			build: func(b backends.Builder, p []backends.Op) (backends.Op, error) {
				m, err := b.Mul(p[0], p[1])
				if err != nil {
					return nil, err
				}
				if m, err = b.Add(m, p[0]); err != nil {
					return nil, err
				}
				e, err := b.Exp(p[1])
				if err != nil {
					return nil, err
				}
				return b.Mul(m, e)
			},
			want: func(in [][]float64, i int) float64 {
				m := nearestBF16(float64(float32(nearestBF16(in[0][i]*in[1][i])) + float32(in[0][i])))
				// float32's Exp is within an ulp of exp's; a bfloat16
				// rounding boundary that close to exp's value is too
				// improbable for these 1110 inputs (checked: none).
				e := nearestBF16(float64(float32(math.Exp(in[1][i]))))
				return nearestBF16(float64(float32(m) * float32(e)))
			}},
		dot(1, 300, 40),   // the matrix-vector kernel
		dot(40, 300, 33),  // the GEMM
		dot(64, 1024, 96), // the GEMM, several K blocks
		reduce("reduce sum", func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.ReduceSum(x, 1) }, 4099,
			func(a, v float64) float64 { return a + v }),
		reduce("reduce max", func(b backends.Builder, x backends.Op) (backends.Op, error) { return b.ReduceMax(x, 1) }, 77,
			func(a, v float64) float64 { return max(a, v) }),
	}
}

// TestBFloat16Ops runs each op of bf16Cases on bfloat16 parameters and
// checks every output element, bit for bit, against its independent
// reference: the op computed in float32 (exactly, for the products and
// sums) and rounded once to nearest even. Faults injected once (see
// TestBFloat16Conversions): truncating instead of rounding fails the
// arithmetic cases; recording the DotGeneral on bfloat16 without the
// float32 rewrite (simplego's bfloat16 product, truncating) fails the dots.
func TestBFloat16Ops(t *testing.T) {
	e, _ := newPair(t)
	for _, fuse := range []bool{true, false} {
		e.fuse = fuse
		for ci, c := range bf16Cases() {
			t.Run(fmt.Sprintf("%s/fuse=%v", c.name, fuse), func(t *testing.T) { runBF16Case(t, e, ci, c) })
		}
	}
}

// runBF16Case runs case c on e and compares every element with c.want.
func runBF16Case(t *testing.T, e *Engine, ci int, c bf16Case) {
	rng := rand.New(rand.NewPCG(7, uint64(ci)))
	var ins []shapes.Shape
	var vals []any
	var refs [][]float64
	for _, dims := range c.ins {
		s := shapes.Make(dtypes.BFloat16, dims...)
		v := smallInts(rng, s.Size())
		if c.normal {
			for i := range v {
				v[i] = nearestBF16(rng.NormFloat64() * 2)
			}
		}
		if c.name == "div" && len(refs) == 1 {
			for i := range v {
				if v[i] == 0 {
					v[i] = 0.375
				}
			}
		}
		h := make([]bfloat16.BFloat16, len(v))
		for i, x := range v {
			h[i] = bfOf(t, x)
		}
		ins, vals, refs = append(ins, s), append(vals, h), append(refs, v)
	}
	got := runGraph(t, e, ins, vals, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		o, err := c.build(b, p)
		return []backends.Op{o}, err
	})[0].([]bfloat16.BFloat16)
	bad := 0
	for i, g := range got {
		if want := c.want(refs, i); !sameBF16(g, want) {
			if bad++; bad <= 5 {
				t.Errorf("[%d]: %g (%#04x), want %g", i, bfv(g), uint16(g), want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d elements differ", bad, len(got))
	}
}

// TestBFloat16Bitcast: a bitcast between bfloat16 and uint16 keeps the
// bits both ways; one to a dtype of another size is refused when recorded.
func TestBFloat16Bitcast(t *testing.T) {
	e, _ := newPair(t)
	h := []bfloat16.BFloat16{0x3f80, 0xc2f7, 0x7fc1, 0x0001}
	u := []uint16{0x4049, 0x8000, 0xff80, 0x1234}
	sb, su := shapes.Make(dtypes.BFloat16, 4), shapes.Make(dtypes.Uint16, 4)
	got := runGraph(t, e, []shapes.Shape{sb, su}, []any{h, u}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		x, err := b.Bitcast(p[0], dtypes.Uint16)
		if err != nil {
			return nil, err
		}
		y, err := b.Bitcast(p[1], dtypes.BFloat16)
		return []backends.Op{x, y}, err
	})
	for i := range h {
		if g := got[0].([]uint16)[i]; g != uint16(h[i]) {
			t.Errorf("bfloat16 %#04x to uint16: %#04x", uint16(h[i]), g)
		}
		if g := got[1].([]bfloat16.BFloat16)[i]; uint16(g) != u[i] {
			t.Errorf("uint16 %#04x to bfloat16: %#04x", u[i], uint16(g))
		}
	}
	b := e.Builder("bitcast")
	p, err := b.Parameter("x", shapes.Make(dtypes.BFloat16, 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Bitcast(p, dtypes.Float32); err == nil {
		t.Fatal("Bitcast of bfloat16 to float32 recorded; want an error")
	}
}

// BenchmarkBF16Dot times a Linear layer's product x·Wᵀ (x [m, k], W
// [n, k], both parameters, as a LoRA base weight is) in bfloat16 and in
// float32 on this engine, and bfloat16 on simplego (what the engine ran
// before bfloat16 became a storage type).
func BenchmarkBF16Dot(b *testing.B) {
	e, oracle := newPair(b)
	for _, sz := range [][3]int{{1024, 768, 768}, {16, 768, 2048}} {
		m, k, n := sz[0], sz[1], sz[2]
		for _, run := range []struct {
			name string
			eng  backends.Backend
			dt   dtypes.DType
		}{{"engine/float32", e, dtypes.Float32}, {"engine/bfloat16", e, dtypes.BFloat16}, {"simplego/bfloat16", oracle, dtypes.BFloat16}} {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", run.name, m, k, n), func(b *testing.B) {
				benchDot(b, run.eng, run.dt, m, k, n)
			})
		}
	}
}

func benchDot(b *testing.B, eng backends.Backend, dt dtypes.DType, m, k, n int) {
	rng := rand.New(rand.NewPCG(1, 2))
	ins := []shapes.Shape{shapes.Make(dt, m, k), shapes.Make(dt, n, k)}
	bl := eng.Builder("dot")
	x, _ := bl.Parameter("x", ins[0], nil)
	w, _ := bl.Parameter("w", ins[1], nil)
	o, err := bl.DotGeneral(x, []int{1}, nil, w, []int{1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	exe, err := bl.Compile([]backends.Op{o}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer exe.Finalize()
	bufs := make([]backends.Buffer, 2)
	for i, s := range ins {
		f := randF32(rng, s.Size())
		var flat any = f
		if dt == dtypes.BFloat16 {
			h := make([]bfloat16.BFloat16, len(f))
			for j, v := range f {
				h[j] = bfloat16.FromFloat32(v)
			}
			flat = h
		}
		if bufs[i], err = eng.BufferFromFlatData(0, flat, s); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(2 * m * n * k)) // "MB/s" reads as MFLOP/s
	b.ResetTimer()
	for range b.N {
		res, err := exe.Execute(bufs, nil, 0)
		if err != nil {
			b.Fatal(err)
		}
		_ = eng.BufferFinalize(res[0])
	}
}

// TestBFloat16ChainFuses: a chain of bfloat16 element-wise ops runs as
// widenings of the inputs (one per use: a widening shared by distant uses
// would keep a float32 copy of a bfloat16 weight alive between them), one
// fused region computing every op in float32 with the rounding to
// bfloat16 after each (the ConvertDType members), and one narrowing of the
// result; nothing runs in a segment of the inner engine.
func TestBFloat16ChainFuses(t *testing.T) {
	e, _ := newPair(t)
	s := shapes.Make(dtypes.BFloat16, 4, 33)
	b := e.Builder("chain")
	x, _ := b.Parameter("x", s, nil)
	y, _ := b.Parameter("y", s, nil)
	m, err := b.Mul(x, y)
	if err == nil {
		m, err = b.Add(m, x)
	}
	if err == nil {
		m, err = b.Exp(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile([]backends.Op{m}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	got := fmt.Sprint(exe.(*Executable).Steps())
	want := "[native ConvertDType native ConvertDType native ConvertDType fused[Mul ConvertDType Add ConvertDType Exp] in place native ConvertDType]"
	if got != want {
		t.Fatalf("steps %s\nwant %s", got, want)
	}
}

// TestBF16LoopsMatchScalar: the conversion loops (AVX2 on amd64, with Go
// tails) give precision.BFloat16's bits exactly, NaN payloads included,
// and exact widenings, at every length from 0 to 70 and at every offset
// of the input: all float32 bit patterns with low half 0x7fff, 0x8000,
// 0x8001 and 0xffff around every bfloat16, and random patterns. Fault
// injected once: dropping the ties-to-even term (VPAND with 1) from the
// assembly fails here and in TestBFloat16Conversions.
func TestBF16LoopsMatchScalar(t *testing.T) {
	var src []float32
	for h := range uint32(1 << 16) {
		for _, low := range []uint32{0, 0x7fff, 0x8000, 0x8001, 0xffff} {
			src = append(src, math.Float32frombits(h<<16|low))
		}
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 1 << 16 {
		src = append(src, math.Float32frombits(rng.Uint32()))
	}
	check := func(a []float32) {
		n := len(a)
		nb, rd, wd := make([]uint16, n), make([]float32, n), make([]float32, n)
		narrowBF16(nb, a)
		roundBF16Reg(rd, a)
		widenBF16(wd, nb)
		for i, x := range a {
			want := precision.BFloat16(x)
			if nb[i] != want || math.Float32bits(rd[i]) != uint32(want)<<16 || math.Float32bits(wd[i]) != uint32(nb[i])<<16 {
				t.Fatalf("n=%d [%d] %#08x: narrow %#04x, round %#08x, widen %#08x; want %#04x", n, i, math.Float32bits(x), nb[i], math.Float32bits(rd[i]), math.Float32bits(wd[i]), want)
			}
		}
	}
	check(src)
	for n := range 71 {
		for off := range 3 {
			check(src[off*7919 : off*7919+n])
		}
	}
}

// TestBFloat16RoundTripWindow: a bfloat16 value widened more than
// roundTripWindow ops after it was narrowed is read in its 2-byte form (a
// native widening), not as the rounding of the float32 value before it,
// which would keep that 4-byte value live in between.
func TestBFloat16RoundTripWindow(t *testing.T) {
	e, _ := newPair(t)
	s := shapes.Make(dtypes.BFloat16, 4, 33)
	b := e.Builder("window")
	x, _ := b.Parameter("x", s, nil)
	z, _ := b.Parameter("z", s, nil)
	m, err := b.Mul(x, x)
	if err != nil {
		t.Fatal(err)
	}
	for range roundTripWindow / 2 {
		if z, err = b.Neg(z); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := b.Add(m, z)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile([]backends.Op{sum}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	// x widened for Mul (twice: once per use), m narrowed, z and m widened
	// (m from its bfloat16 form), the Neg chain with its roundings and the
	// Add fused, the sum narrowed.
	got := fmt.Sprint(exe.(*Executable).Steps())
	want := "[native ConvertDType native ConvertDType fused[Mul] in place native ConvertDType native ConvertDType native ConvertDType fused[" +
		strings.Repeat("Neg ConvertDType ", roundTripWindow/2) + "Add] in place native ConvertDType]"
	if got != want {
		t.Fatalf("steps %s\nwant %s", got, want)
	}
}
