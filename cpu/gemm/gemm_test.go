package gemm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// u is the unit roundoff of float32, 2⁻²⁴.
var u = math.Ldexp(1, -24)

// layout names a way of storing a logical matrix: row-major, column-major
// (transposed), or either with neither stride 1.
type layout int

const (
	rowMajor layout = iota
	colMajor
	rowStrided // column stride 2, rows further apart
	colStrided // row stride 3, columns further apart
)

func (l layout) String() string { return [...]string{"N", "T", "Ns", "Ts"}[l] }

// store lays out the rows×cols values (row-major) in layout l. Data is
// exactly as long as the strides need, and every element the view does
// not cover is NaN, so reading one poisons the result.
func store(vals []float32, rows, cols int, l layout) Matrix {
	var rs, cs int
	switch l {
	case rowMajor:
		rs, cs = cols+1, 1
	case colMajor:
		rs, cs = 1, rows+2
	case rowStrided:
		rs, cs = 2*cols+3, 2
	case colStrided:
		rs, cs = 3, 3*rows+1
	}
	n, _ := span(rows, cols, rs, cs)
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(math.NaN())
	}
	for i := range rows {
		for j := range cols {
			d[i*rs+j*cs] = vals[i*cols+j]
		}
	}
	return Matrix{Data: d, RowStride: rs, ColStride: cs}
}

// randoms returns n normally distributed float32s.
func randoms(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// problem is one test product: logical row-major A (m×k) and B (k×n), the
// initial C (m×ldc, padding columns included) and how to run it.
type problem struct {
	m, n, k, ldc int
	la, lb       layout
	acc          bool
	threads      int
	a, b, c0     []float32
}

func (p problem) String() string {
	return fmt.Sprintf("m=%d n=%d k=%d A=%v B=%v acc=%v threads=%d ldc=%d", p.m, p.n, p.k, p.la, p.lb, p.acc, p.threads, p.ldc)
}

func newProblem(rng *rand.Rand, m, n, k int, la, lb layout, acc bool, threads int) problem {
	p := problem{m: m, n: n, k: k, ldc: n + 3, la: la, lb: lb, acc: acc, threads: threads}
	p.a, p.b, p.c0 = randoms(rng, m*k), randoms(rng, k*n), randoms(rng, m*p.ldc)
	return p
}

// run multiplies on kern and returns C (m×ldc).
func (p problem) run(t testing.TB, kern *microKernel) []float32 {
	t.Helper()
	c := append([]float32(nil), p.c0...)
	err := sgemm(kern, p.m, p.n, p.k, store(p.a, p.m, p.k, p.la), store(p.b, p.k, p.n, p.lb), c, p.ldc, p.acc, Options{}, p.threads)
	if err != nil {
		t.Fatalf("%v on %s: %v", p, kern.name, err)
	}
	return c
}

// exact returns C[i,j] in float64 and Σ|terms| (the products a·b and,
// when accumulating, the initial C), the scale of its rounding error.
func (p problem) exact(i, j int) (sum, mag float64) {
	for q := range p.k {
		t := float64(p.a[i*p.k+q]) * float64(p.b[q*p.n+j])
		sum += t
		mag += math.Abs(t)
	}
	if p.acc {
		c := float64(p.c0[i*p.ldc+j])
		sum += c
		mag += math.Abs(c)
	}
	return sum, mag
}

// check compares c with the float64 product and returns the worst error
// in units of u·Σ|terms|. The tolerance is the classic bound for a sum
// of terms+1 float32 roundings, (terms+1)·u·Σ|terms| (Higham, Accuracy
// and Stability of Numerical Algorithms, §3.1); a dropped or doubled
// product is of the order of Σ/k, far above it. The padding columns of C
// must be untouched.
func (p problem) check(t testing.TB, kern string, c []float32) float64 {
	t.Helper()
	terms := p.k
	if p.acc {
		terms++
	}
	worst := 0.0
	for i := range p.m {
		for j := range p.ldc {
			got := c[i*p.ldc+j]
			if j >= p.n {
				if got != p.c0[i*p.ldc+j] {
					t.Fatalf("%v on %s: padding C[%d,%d] changed to %g", p, kern, i, j, got)
				}
				continue
			}
			want, mag := p.exact(i, j)
			e := math.Abs(float64(got)-want) / (u*mag + 1e-38)
			if !(e <= float64(terms+1)) {
				t.Fatalf("%v on %s: C[%d,%d] = %g, want %g (error %.3g·u·Σ|terms|, bound %d)", p, kern, i, j, got, want, e, terms+1)
			}
			worst = max(worst, e)
		}
	}
	return worst
}

// testDims are the sizes the shape sweep combines.
var testDims = []int{0, 1, 2, 3, 5, 7, 13, 16, 17, 31, 33, 64, 100, 257}

// testKs are the inner sizes, past one kc block (256) and two (600).
var testKs = []int{0, 1, 3, 17, 64, 257, 600}

// TestSgemmAgainstFloat64 runs every m×n of testDims with rotating k,
// operand layouts, accumulation and thread counts on the active kernel,
// checked against float64.
//
// Faults injected once each, every one caught (the tests failed), then
// removed:
//   - copyTile copying nv-1 columns of an edge tile: m=1 n=1 k=1 failed
//     with an error of 3.7e8·u·Σ (C[0,0] never written);
//   - panels() setting add = accumulate (each kc block overwriting the
//     last): m=1 n=7 k=257 failed, error 1.9e6·u·Σ;
//   - share() giving odd row ranges one sliver less (threads=3): m=257
//     n=100 k=257 failed at C[162,0];
//   - packShare() leaving out the last sliver of the last share: C[0,64]
//     = 0 at m=353 n=101;
//   - the in-place B sliver read one column off: checkedTile's bounds
//     check turned it into a *parallel.PanicError, not a wild read;
//   - packSliver's contiguous case packing one step fewer: C[0,0] = 0 at
//     k=1;
//   - in kernels_amd64.s, the AVX-512 kc%4 tail loop count ANDQ $3 → $2:
//     failed at k=1; in the AVX2 kernel, row 5's second FMA taking the
//     first B vector: TestSgemmSmallM failed on avx2 (m=6 n=63 k=5);
//   - the Go kernel's c33 using b2: failed on go (m=5 n=63 k=1).
func TestSgemmAgainstFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worst, i := 0.0, 0
	for _, m := range testDims {
		for _, n := range testDims {
			if m*n > 100*257 && i%3 != 0 {
				i++
				continue // the two largest squares once in three
			}
			k := testKs[i%len(testKs)]
			p := newProblem(rng, m, n, k, layout(i%4), layout(i/4%4), i%2 == 0, 1+2*(i/2%2))
			worst = max(worst, p.check(t, active.name, p.run(t, active)))
			i++
		}
	}
	t.Logf("%s: worst error %.3g·u·Σ|a·b| over %d shapes", active.name, worst, i)
}

// TestSgemmLayouts runs every pair of operand layouts, with and without
// accumulation, on 1 and 3 threads, on an odd shape spanning several kc
// and mc blocks and both edges.
func TestSgemmLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for la := rowMajor; la <= colStrided; la++ {
		for lb := rowMajor; lb <= colStrided; lb++ {
			for _, acc := range []bool{false, true} {
				for _, threads := range []int{1, 3} {
					p := newProblem(rng, 353, 101, 531, la, lb, acc, threads)
					p.check(t, active.name, p.run(t, active))
				}
			}
		}
	}
}

// TestSgemmSmallM covers the path for short A, where the kernels read the
// full slivers of a row-major B in place and pack only the last: every
// kernel, m up to and past two slivers, n around the slivers' widths.
func TestSgemmSmallM(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, kern := range availableKernels() {
		for _, m := range []int{1, 2, 5, 6, 7, 12, 13, 17} {
			for _, n := range []int{3, 63, 64, 65, 129, 300} {
				for _, k := range []int{1, 5, 1000} {
					lb := layout(m % 2) // row-major (in place) or transposed
					p := newProblem(rng, m, n, k, rowStrided, lb, n%2 == 1, 1+m%2)
					p.check(t, kern.name, p.run(t, kern))
				}
			}
		}
	}
}

// TestKernelsAgree runs every kernel this machine has on the same
// problems: each must pass the float64 check, and any two must agree to
// within kernelTol·u·Σ|a·b| per element.
func TestKernelsAgree(t *testing.T) {
	ks := availableKernels()
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.name
	}
	t.Logf("kernels here: %s (active %s)", strings.Join(names, ", "), KernelName())
	rng := rand.New(rand.NewPCG(5, 6))
	worst := map[string]float64{}
	for _, s := range [][3]int{{1, 1, 1}, {5, 7, 3}, {14, 32, 256}, {33, 17, 257}, {100, 64, 600}, {257, 31, 64}, {29, 257, 300}} {
		for _, acc := range []bool{false, true} {
			p := newProblem(rng, s[0], s[1], s[2], colMajor, rowStrided, acc, 2)
			results := make([][]float32, len(ks))
			for i, k := range ks {
				results[i] = p.run(t, k)
				p.check(t, k.name, results[i])
			}
			for i := range ks {
				for j := i + 1; j < len(ks); j++ {
					pair := ks[i].name + "/" + ks[j].name
					worst[pair] = max(worst[pair], agree(t, p, ks[i].name, ks[j].name, results[i], results[j]))
				}
			}
		}
	}
	for pair, w := range worst {
		t.Logf("worst difference %s: %.3g·u·Σ|a·b| (tolerance %d)", pair, w, kernelTol)
	}
}

// kernelTol bounds the difference of two kernels' results in units of
// u·Σ|terms|. The kernels sum in different orders (kc blocks of 192 or
// 256, C added first or last) and with or without fused multiply-adds
// (the Go kernel's products are rounded on amd64, fused on arm64). The
// worst measured (logged by TestKernelsAgree) is 2.88 on amd64 and 4.78 on
// arm64 under qemu; the tolerance, 8, is within 10× of both.
const kernelTol = 8

// agree returns the worst difference between two kernels' results, in
// units of u·Σ|terms|, failing beyond kernelTol.
func agree(t *testing.T, p problem, n1, n2 string, c1, c2 []float32) float64 {
	t.Helper()
	worst := 0.0
	for i := range p.m {
		for j := range p.n {
			_, mag := p.exact(i, j)
			x, y := c1[i*p.ldc+j], c2[i*p.ldc+j]
			d := math.Abs(float64(x)-float64(y)) / (u*mag + 1e-38)
			if !(d <= kernelTol) {
				t.Fatalf("%v: %s gives C[%d,%d] = %g, %s %g (%.3g·u·Σ apart)", p, n1, i, j, x, n2, y, d)
			}
			worst = max(worst, d)
		}
	}
	return worst
}

// TestCheckCatchesOneProduct shows the float64 check is fine enough to see
// one product of k = 600 dropped from one element.
func TestCheckCatchesOneProduct(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	p := newProblem(rng, 3, 3, 600, rowMajor, rowMajor, false, 1)
	c := p.run(t, active)
	c[p.ldc+1] -= p.a[p.k+5] * p.b[5*p.n+1]
	ft := &fakeTB{TB: t}
	func() {
		defer func() { recover() }()
		p.check(ft, active.name, c)
	}()
	if !ft.failed {
		t.Fatal("a dropped product passed the check")
	}
	t.Log("caught:", ft.msg)
}

// fakeTB records a Fatalf and stops the check, without failing the test.
type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	panic("fatal")
}

// TestSgemmEmpty: zero sizes. k = 0 sets C to 0 (or leaves it when
// accumulating) and m or n = 0 accepts empty operands.
func TestSgemmEmpty(t *testing.T) {
	c := []float32{1, 2, 3, 4, 5, 6}
	a, b := Matrix{RowStride: 0, ColStride: 1}, Matrix{RowStride: 3, ColStride: 1}
	if err := Sgemm(2, 2, 0, a, b, c, 3, true, 1); err != nil || c[0] != 1 {
		t.Fatalf("k=0 accumulate: %v %v", err, c)
	}
	if err := Sgemm(2, 2, 0, a, b, c, 3, false, 1); err != nil || fmt.Sprint(c) != "[0 0 3 0 0 6]" {
		t.Fatalf("k=0: %v %v", err, c)
	}
	if err := Sgemm(0, 5, 7, Matrix{}, Matrix{Data: make([]float32, 35), RowStride: 5, ColStride: 1}, nil, 5, false, 1); err != nil {
		t.Fatal(err)
	}
	if err := Sgemm(5, 0, 7, Matrix{Data: make([]float32, 35), RowStride: 7, ColStride: 1}, Matrix{}, nil, 0, false, 1); err != nil {
		t.Fatal(err)
	}
}

// TestSgemmBadOperands: operands shorter than their strides imply, and
// negative sizes or strides, are errors naming the operand and the
// lengths, before anything is read.
func TestSgemmBadOperands(t *testing.T) {
	ok := Matrix{Data: make([]float32, 12), RowStride: 4, ColStride: 1}  // A, 3×4
	okB := Matrix{Data: make([]float32, 12), RowStride: 3, ColStride: 1} // B, 4×3
	for _, c := range []struct {
		want string
		a, b Matrix
		c    []float32
		ldc  int
	}{
		{"operand A (3×4, strides 4,1) needs 12 elements, got 11", Matrix{Data: make([]float32, 11), RowStride: 4, ColStride: 1}, ok, make([]float32, 12), 3},
		{"operand A (3×4, strides 1,3) needs 12 elements, got 11", Matrix{Data: make([]float32, 11), RowStride: 1, ColStride: 3}, ok, make([]float32, 12), 3},
		{"operand B (4×3, strides 3,1) needs 12 elements, got 5", ok, Matrix{Data: make([]float32, 5), RowStride: 3, ColStride: 1}, make([]float32, 12), 3},
		{"operand B (4×3, strides 1,1000) needs 2004 elements, got 12", ok, Matrix{Data: make([]float32, 12), RowStride: 1, ColStride: 1000}, make([]float32, 12), 3},
		{"operand C (3×3, ldc 4) needs 11 elements, got 10", ok, okB, make([]float32, 10), 4},
		{"ldc 2 < n 3", ok, okB, make([]float32, 12), 2},
		{"operand B has negative strides", ok, Matrix{Data: make([]float32, 12), RowStride: -3, ColStride: 1}, make([]float32, 12), 3},
		{"needs more than MaxInt elements", ok, Matrix{Data: make([]float32, 12), RowStride: math.MaxInt / 2, ColStride: 1}, make([]float32, 12), 3},
	} {
		err := Sgemm(3, 3, 4, c.a, c.b, c.c, c.ldc, false, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("got %v, want an error containing %q", err, c.want)
		}
	}
	if err := Sgemm(-1, 1, 1, ok, ok, nil, 1, false, 1); err == nil {
		t.Fatal("negative size accepted")
	}
}

// TestSgemmWorkerPanic: a panic inside a worker (here a kernel that
// panics) comes back from Sgemm as a *parallel.PanicError.
func TestSgemmWorkerPanic(t *testing.T) {
	bad := *goKernel
	bad.tile = func(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool) { panic("injected kernel fault") }
	rng := rand.New(rand.NewPCG(9, 10))
	p := newProblem(rng, 64, 64, 64, rowMajor, rowMajor, false, 2)
	c := append([]float32(nil), p.c0...)
	err := sgemm(&bad, p.m, p.n, p.k, store(p.a, p.m, p.k, p.la), store(p.b, p.k, p.n, p.lb), c, p.ldc, false, Options{}, 2)
	var pe *parallel.PanicError
	if !errors.As(err, &pe) || pe.Value != "injected kernel fault" {
		t.Fatalf("got %v, want the worker's panic", err)
	}
}

// TestSgemmAllocs: a steady stream of calls reuses the pooled plan and
// packing buffers, so one thread allocates nothing; with two, what is left
// is parallel.For's pieces and the workers' closures.
func TestSgemmAllocs(t *testing.T) {
	n := 128
	a := Matrix{Data: make([]float32, n*n), RowStride: n, ColStride: 1}
	c := make([]float32, n*n)
	for _, x := range []struct{ threads, most int }{{1, 0}, {2, 16}} {
		allocs := testing.AllocsPerRun(20, func() {
			if err := sgemm(active, n, n, n, a, a, c, n, false, Options{}, x.threads); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("threads=%d: %.1f allocations per call", x.threads, allocs)
		if allocs > float64(x.most) {
			t.Fatalf("threads=%d: %.1f allocations per call, want ≤ %d", x.threads, allocs, x.most)
		}
	}
}

// TestGrid: the worker grid never exceeds the threads or the slivers,
// and splits the larger of m and n.
func TestGrid(t *testing.T) {
	for _, c := range []struct{ threads, m, nc, tm, tn int }{
		{1, 1024, 1024, 1, 1},
		{2, 2048, 128, 2, 1},  // tall A: rows
		{2, 128, 768, 1, 2},   // wide B: columns
		{2, 1, 512, 1, 2},     // one row
		{2, 512, 64, 2, 1},    // one sliver of B
		{3, 12, 64, 2, 1},     // two slivers of A, one of B
		{4, 1000, 1000, 2, 2}, // square
		{8, 1, 1, 1, 1},
	} {
		if tm, tn := grid(c.threads, c.m, c.nc, 6, 64); tm != c.tm || tn != c.tn {
			t.Errorf("grid(%d, m=%d, nc=%d) = %d×%d, want %d×%d", c.threads, c.m, c.nc, tm, tn, c.tm, c.tn)
		}
	}
}
