package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Every function is checked on every kernel this machine has against the
// plain Go expression of its doc comment, written out again here, bit for
// bit (math.Float32bits). The one allowance: where the result is a NaN
// made by arithmetic (Add, Sub, Mul, Div, Sqrt and their scalar forms),
// any NaN is accepted, because which operand's payload propagates is the
// compiler's choice of operand order, not part of Go's semantics. (With
// go1.26.8 on amd64 the payloads match too: a run with the allowance
// switched off passed.) Every other result, NaNs included, must match to
// the bit: Max and Min replicate the amd64 compiler's MINSS sequence, whose
// NaN payloads are an OR of both operands' bits.
//
// Fault injection, done once by hand: in gen_asm.go's AVX-512 tail the
// "DECL BX" was dropped, so the tail mask became 1<<r (lane r alone)
// instead of (1<<r)-1 (lanes 0..r-1), and vec_amd64.s regenerated. go test
// then failed TestBinary, TestScalar, TestUnary, TestSelectFill, TestGather
// (stride 0 is Fill) and TestExported with 26818 error lines, every one on
// kernel avx512 and for every length with n%16 ≠ 0 (1..15, 17..31, ...,
// 511, 1000): wrong elements, and 5168 "wrote past len(d)" guard hits;
// lengths 0, 16, 32, 48, 64 and 512 passed, as did kernels go and avx2 and
// MaxReduce/BoolToF32/F32ToBool (their tails are separate code). Restored;
// the regenerated vec_amd64.s was byte-identical to the checked-in one.

// specials are the values mixed into every input.
var specials = func() []float32 {
	bits := []uint32{
		0x00000000, 0x80000000, // ±0
		0x7f800000, 0xff800000, // ±Inf
		0x7fc00000, 0xffc00000, // quiet NaNs
		0x7fc12345, 0xffd00001, // quiet NaNs with payloads
		0x7f800001, 0xff812345, // signalling NaNs
		0x00000001, 0x80000001, 0x007fffff, 0x807fffff, // subnormals
		0x00800000, 0x80800000, // smallest normals
		0x7f7fffff, 0xff7fffff, // ±MaxFloat32
		0x3f800000, 0xbf800000, 0x3f000000, 0x40000000, // 1, -1, 0.5, 2
	}
	f := make([]float32, len(bits))
	for i, b := range bits {
		f[i] = math.Float32frombits(b)
	}
	return f
}()

// lengths covers every tail of both vector widths, several unrolled
// iterations, and tile sizes.
var lengths = func() []int {
	var ls []int
	for n := 0; n <= 70; n++ {
		ls = append(ls, n)
	}
	return append(ls, 511, 512, 1000)
}()

// randVal is a special value one time in three, else a random float of
// random sign and magnitude (small integers now and then, for exact ties).
func randVal(rng *rand.Rand) float32 {
	switch rng.IntN(6) {
	case 0, 1:
		return specials[rng.IntN(len(specials))]
	case 2:
		return float32(rng.IntN(5) - 2)
	}
	return float32((rng.Float64()*2 - 1) * math.Pow(2, float64(rng.IntN(80)-40)))
}

// randVec returns n random values; when like is non-nil, each element is
// like's, or its negation, one time in four, so that equal operands and
// (-0, +0) pairs are common.
func randVec(rng *rand.Rand, n int, like []float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = randVal(rng)
		if like != nil && rng.IntN(4) == 0 {
			v[i] = like[i]
			if rng.IntN(2) == 0 {
				v[i] = -like[i]
			}
		}
	}
	return v
}

const guard = 4 // sentinel words after every output

var sentinel = math.Float32frombits(0x7fbadbad)

// newOut returns a slice of length n whose backing array continues with
// guard sentinels, and a function that fails the test if any was written.
func newOut(t *testing.T, n int) ([]float32, func(string)) {
	buf := make([]float32, n+guard)
	for i := range buf {
		buf[i] = -7.25 // stale contents; a skipped element keeps them
	}
	for i := n; i < len(buf); i++ {
		buf[i] = sentinel
	}
	return buf[:n], func(what string) {
		t.Helper()
		for i := n; i < len(buf); i++ {
			if math.Float32bits(buf[i]) != math.Float32bits(sentinel) {
				t.Errorf("%s: wrote past len(d)=%d at %d: %v", what, n, i, buf[i])
				return
			}
		}
	}
}

// same reports whether got is want bit for bit, or both are NaN when
// anyNaN.
func same(got, want float32, anyNaN bool) bool {
	if anyNaN && want != want {
		return got != got
	}
	return math.Float32bits(got) == math.Float32bits(want)
}

// check compares got with want element by element, reporting the first
// few mismatches.
func check(t *testing.T, what string, got, want []float32, anyNaN bool, in ...[]float32) {
	t.Helper()
	bad := 0
	for i := range want {
		if !same(got[i], want[i], anyNaN) {
			if bad < 3 {
				args := ""
				for _, v := range in {
					args += fmt.Sprintf(" %v(%#08x)", v[i], math.Float32bits(v[i]))
				}
				t.Errorf("%s: d[%d] = %v (%#08x), want %v (%#08x); inputs%s", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]), args)
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d mismatches in all", what, bad)
	}
}

func bf(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// binCases are the two-operand functions, with their Go expressions.
var binCases = []struct {
	name   string
	op     binOp
	f      func(x, y float32) float32
	anyNaN bool
}{
	{"Add", opAdd, func(x, y float32) float32 { return x + y }, true},
	{"Sub", opSub, func(x, y float32) float32 { return x - y }, true},
	{"Mul", opMul, func(x, y float32) float32 { return x * y }, true},
	{"Div", opDiv, func(x, y float32) float32 { return x / y }, true},
	{"Max", opMax, func(x, y float32) float32 { return max(x, y) }, false},
	{"Min", opMin, func(x, y float32) float32 { return min(x, y) }, false},
	{"CmpEQ", opEQ, func(x, y float32) float32 { return bf(x == y) }, false},
	{"CmpNE", opNE, func(x, y float32) float32 { return bf(x != y) }, false},
	{"CmpLT", opLT, func(x, y float32) float32 { return bf(x < y) }, false},
	{"CmpLE", opLE, func(x, y float32) float32 { return bf(x <= y) }, false},
	{"CmpGT", opGT, func(x, y float32) float32 { return bf(x > y) }, false},
	{"CmpGE", opGE, func(x, y float32) float32 { return bf(x >= y) }, false},
	// Scalar-only: s - a, s / a (y is the scalar).
	{"SubR", opSubR, func(x, y float32) float32 { return y - x }, true},
	{"DivR", opDivR, func(x, y float32) float32 { return y / x }, true},
}

func TestBinary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, k := range availableKernels() {
		for _, c := range binCases {
			if c.op == opSubR || c.op == opDivR {
				continue
			}
			for _, n := range lengths {
				a := randVec(rng, n, nil)
				b := randVec(rng, n, a)
				want := make([]float32, n)
				for i := range want {
					want[i] = c.f(a[i], b[i])
				}
				what := fmt.Sprintf("%v/%s/n=%d", k, c.name, n)
				d, guardOK := newOut(t, n)
				binary(k, c.op, d, a, b)
				check(t, what, d, want, c.anyNaN, a, b)
				guardOK(what)
				// In place, d = a.
				a2 := append([]float32(nil), a...)
				binary(k, c.op, a2, a2, b)
				check(t, what+"/inplace", a2, want, c.anyNaN, a, b)
			}
		}
	}
}

func TestScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, k := range availableKernels() {
		for _, c := range binCases {
			for _, n := range lengths {
				a := randVec(rng, n, nil)
				// Each special scalar once per length would be slow on the
				// long ones; take three of them and a random value.
				for r := 0; r < 4; r++ {
					s := specials[rng.IntN(len(specials))]
					if r == 3 {
						s = randVal(rng)
					}
					if n > 0 && r == 2 {
						s = a[rng.IntN(n)] // ties
					}
					want := make([]float32, n)
					for i := range want {
						want[i] = c.f(a[i], s)
					}
					what := fmt.Sprintf("%v/%sS/n=%d/s=%v", k, c.name, n, s)
					d, guardOK := newOut(t, n)
					scalar(k, c.op, d, a, s)
					check(t, what, d, want, c.anyNaN, a)
					guardOK(what)
				}
			}
		}
	}
}

func TestUnary(t *testing.T) {
	cases := []struct {
		name   string
		op     unOp
		f      func(x float32) float32
		anyNaN bool
	}{
		{"Neg", opNeg, func(x float32) float32 { return -x }, false},
		{"Abs", opAbs, func(x float32) float32 {
			if x < 0 {
				return -x
			}
			return x
		}, false},
		{"Sqrt", opSqrt, func(x float32) float32 { return float32(math.Sqrt(float64(x))) }, true},
		{"NonZero", opNonZero, func(x float32) float32 { return bf(x != 0) }, false},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, k := range availableKernels() {
		for _, c := range cases {
			for _, n := range lengths {
				a := randVec(rng, n, nil)
				want := make([]float32, n)
				for i := range want {
					want[i] = c.f(a[i])
				}
				what := fmt.Sprintf("%v/%s/n=%d", k, c.name, n)
				d, guardOK := newOut(t, n)
				unary(k, c.op, d, a)
				check(t, what, d, want, c.anyNaN, a)
				guardOK(what)
				unary(k, c.op, a, a)
				check(t, what+"/inplace", a, want, c.anyNaN)
			}
		}
	}
}

func TestSelectFill(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, k := range availableKernels() {
		for _, n := range lengths {
			c := randVec(rng, n, nil)
			for i := range c {
				if rng.IntN(3) == 0 {
					c[i] = float32(rng.IntN(2)) // 0/1 masks as well
				}
			}
			a, b := randVec(rng, n, nil), randVec(rng, n, nil)
			want := make([]float32, n)
			for i := range want {
				if c[i] != 0 {
					want[i] = a[i]
				} else {
					want[i] = b[i]
				}
			}
			what := fmt.Sprintf("%v/Select/n=%d", k, n)
			d, guardOK := newOut(t, n)
			selectK(k, d, c, a, b)
			check(t, what, d, want, false, c, a, b)
			guardOK(what)

			for _, v := range []float32{specials[rng.IntN(len(specials))], randVal(rng)} {
				for i := range want {
					want[i] = v
				}
				what := fmt.Sprintf("%v/Fill/n=%d/v=%v", k, n, v)
				d, guardOK := newOut(t, n)
				fill(k, d, v)
				check(t, what, d, want, false)
				guardOK(what)
			}
		}
	}
}

func TestGather(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range lengths {
		for _, stride := range []int{0, 1, 2, 3, 7, 64} {
			src := randVec(rng, max(1, (n-1)*stride+1), nil)
			want := make([]float32, n)
			for i := range want {
				want[i] = src[i*stride]
			}
			what := fmt.Sprintf("Gather/n=%d/stride=%d", n, stride)
			d, guardOK := newOut(t, n)
			Gather(d, src, stride)
			check(t, what, d, want, false)
			guardOK(what)
		}
	}
}

func TestBoolConv(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, k := range availableKernels() {
		for _, n := range lengths {
			bs := make([]bool, n)
			for i := range bs {
				bs[i] = rng.IntN(2) == 0
			}
			want := make([]float32, n)
			for i := range want {
				want[i] = bf(bs[i])
			}
			what := fmt.Sprintf("%v/BoolToF32/n=%d", k, n)
			d, guardOK := newOut(t, n)
			boolToF32(k, d, bs)
			check(t, what, d, want, false)
			guardOK(what)

			a := randVec(rng, n, nil)
			buf := make([]bool, n+guard)
			for i := range buf {
				buf[i] = true
			}
			for i := n; i < len(buf); i++ {
				buf[i] = false
			}
			f32ToBool(k, buf[:n], a)
			for i := range buf {
				if want := i < n && a[i] != 0; buf[i] != want {
					t.Errorf("%v/F32ToBool/n=%d: d[%d] = %v for %v, want %v", k, n, i, buf[i], a[i], want)
					break
				}
				if i < n && *(*uint8)(unsafePointer(&buf[i])) > 1 {
					t.Errorf("%v/F32ToBool/n=%d: d[%d] is byte %d, not 0 or 1", k, n, i, *(*uint8)(unsafePointer(&buf[i])))
					break
				}
			}
		}
	}
}

func TestMaxReduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, k := range availableKernels() {
		for _, n := range lengths {
			for r := 0; r < 6; r++ {
				var a []float32
				switch r {
				case 0, 1: // no NaN: the SIMD path
					a = randVec(rng, n, nil)
					for i := range a {
						for a[i] != a[i] {
							a[i] = randVal(rng)
						}
					}
				case 2: // only zeros of both signs and negatives: ±0 ordering
					a = make([]float32, n)
					for i := range a {
						a[i] = float32(math.Copysign(0, float64(rng.IntN(2)*2-1)))
						if rng.IntN(4) == 0 {
							a[i] = -float32(rng.IntN(3))
						}
					}
				default: // NaNs anywhere: the fallback
					a = randVec(rng, n, nil)
				}
				for _, init := range []float32{float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 0, specials[rng.IntN(len(specials))]} {
					want := init
					for _, v := range a {
						want = max(want, v)
					}
					got := maxReduce(k, a, init)
					if !same(got, want, false) {
						t.Errorf("%v/MaxReduce/n=%d/r=%d/init=%v: got %v (%#08x), want %v (%#08x)", k, n, r, init, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
			}
		}
	}
}

func TestSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	a := randVec(rng, 1000, nil)
	var want float32
	for _, v := range a {
		want += v
	}
	if got := Sum(a); !same(got, want, false) {
		t.Errorf("Sum = %v, want %v", got, want)
	}
}

// TestExported runs each exported function once on the active kernel
// against its reference, so that the wiring (op codes, argument order) is
// checked too.
func TestExported(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const n = 37
	a, b := randVec(rng, n, nil), randVec(rng, n, nil)
	s := float32(1.5)
	d := make([]float32, n)
	want := make([]float32, n)
	run := func(name string, anyNaN bool, f func(), ref func(i int) float32) {
		t.Helper()
		f()
		for i := range want {
			want[i] = ref(i)
		}
		check(t, name, d, want, anyNaN, a, b)
	}
	run("Add", true, func() { Add(d, a, b) }, func(i int) float32 { return a[i] + b[i] })
	run("Sub", true, func() { Sub(d, a, b) }, func(i int) float32 { return a[i] - b[i] })
	run("Mul", true, func() { Mul(d, a, b) }, func(i int) float32 { return a[i] * b[i] })
	run("Div", true, func() { Div(d, a, b) }, func(i int) float32 { return a[i] / b[i] })
	run("Max", false, func() { Max(d, a, b) }, func(i int) float32 { return max(a[i], b[i]) })
	run("Min", false, func() { Min(d, a, b) }, func(i int) float32 { return min(a[i], b[i]) })
	run("AddS", true, func() { AddS(d, a, s) }, func(i int) float32 { return a[i] + s })
	run("SubS", true, func() { SubS(d, a, s) }, func(i int) float32 { return a[i] - s })
	run("SubSR", true, func() { SubSR(d, a, s) }, func(i int) float32 { return s - a[i] })
	run("MulS", true, func() { MulS(d, a, s) }, func(i int) float32 { return a[i] * s })
	run("DivS", true, func() { DivS(d, a, s) }, func(i int) float32 { return a[i] / s })
	run("DivSR", true, func() { DivSR(d, a, s) }, func(i int) float32 { return s / a[i] })
	run("MaxS", false, func() { MaxS(d, a, s) }, func(i int) float32 { return max(a[i], s) })
	run("MinS", false, func() { MinS(d, a, s) }, func(i int) float32 { return min(a[i], s) })
	run("Neg", false, func() { Neg(d, a) }, func(i int) float32 { return -a[i] })
	run("Abs", false, func() { Abs(d, a) }, func(i int) float32 {
		if a[i] < 0 {
			return -a[i]
		}
		return a[i]
	})
	run("Sqrt", true, func() { Sqrt(d, a) }, func(i int) float32 { return float32(math.Sqrt(float64(a[i]))) })
	run("NonZero", false, func() { NonZero(d, a) }, func(i int) float32 { return bf(a[i] != 0) })
	run("Select", false, func() { Select(d, a, a, b) }, func(i int) float32 {
		if a[i] != 0 {
			return a[i]
		}
		return b[i]
	})
	run("Fill", false, func() { Fill(d, s) }, func(i int) float32 { return s })
	run("Gather", false, func() { Gather(d[:n/3], a, 3) }, func(i int) float32 {
		if i < n/3 {
			return a[3*i]
		}
		return s // left from Fill
	})
	cmp := []func(x, y float32) bool{
		func(x, y float32) bool { return x == y }, func(x, y float32) bool { return x != y },
		func(x, y float32) bool { return x < y }, func(x, y float32) bool { return x <= y },
		func(x, y float32) bool { return x > y }, func(x, y float32) bool { return x >= y },
	}
	for op := CmpEQ; op <= CmpGE; op++ {
		run("Compare"+op.String(), false, func() { Compare(op, d, a, b) }, func(i int) float32 { return bf(cmp[op](a[i], b[i])) })
		run("CompareS"+op.String(), false, func() { CompareS(op, d, a, s) }, func(i int) float32 { return bf(cmp[op](a[i], s)) })
	}
	bs := make([]bool, n)
	F32ToBool(bs, a)
	BoolToF32(d, bs)
	check(t, "F32ToBool+BoolToF32", d, func() []float32 {
		for i := range want {
			want[i] = bf(a[i] != 0)
		}
		return want
	}(), false)
	if got, want := MaxReduce(b, -1), func() float32 {
		m := float32(-1)
		for _, v := range b {
			m = max(m, v)
		}
		return m
	}(); !same(got, want, false) {
		t.Errorf("MaxReduce = %v, want %v", got, want)
	}
}

func TestBadCmpOp(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("Compare with a bad CmpOp did not panic")
		}
	}()
	d := make([]float32, 4)
	Compare(CmpOp(99), d, d, d)
}

// TestShortInput checks a too-short input panics rather than being read
// past its end.
func TestShortInput(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("Add with len(b) < len(d) did not panic")
		}
	}()
	Add(make([]float32, 20), make([]float32, 20), make([]float32, 19))
}

func TestNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	const n = 512
	a, b, c := randVec(rng, n, nil), randVec(rng, n, nil), randVec(rng, n, nil)
	d := make([]float32, n)
	bs := make([]bool, n)
	for _, k := range availableKernels() {
		allocs := testing.AllocsPerRun(20, func() {
			binary(k, opMax, d, a, b)
			scalar(k, opDivR, d, a, 3)
			unary(k, opAbs, d, a)
			selectK(k, d, c, a, b)
			fill(k, d, 1)
			boolToF32(k, d, bs)
			f32ToBool(k, bs, a)
			_ = maxReduce(k, a, 0)
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per run, want 0", k, allocs)
		}
	}
	if a := testing.AllocsPerRun(20, func() { Gather(d[:100], a, 5); _ = Sum(a) }); a != 0 {
		t.Errorf("Gather/Sum: %v allocations per run", a)
	}
}

func TestKernelName(t *testing.T) {
	ks := availableKernels()
	if got, want := KernelName(), ks[len(ks)-1].String(); got != want {
		t.Errorf("KernelName() = %q, want %q", got, want)
	}
	t.Logf("kernels %v, active %s", ks, KernelName())
}
