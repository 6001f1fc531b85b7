package gemv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// eps32 is float32 machine epsilon, 2^-23.
const eps32 = 1.0 / (1 << 23)

// tolEps bounds a result's error in units of eps32·Σ_k|x·w| (times |scale|
// for int8). The worst measured over every case below (go test -v logs
// it per kernel) is 1.74 for the go kernel (int8, M=1 N=64 K=784), 1.41 for
// avx2 and 1.18 for avx512 (both at K=7, where the final rounding alone is
// up to half of one unit); on arm64 under qemu, 1.77 for go and 1.52 for
// neon. The bound, 4, is within 3× of the worst, and kernels are compared
// with each other at 2·tolEps.
//
// Fault injection, done once by hand: making the AVX-512 kernels skip the
// K tail (JEQ → JMP on the "_tail: CMPQ AX, DX" test in gemv_amd64.s, so the
// masked step never runs) failed 3312 checks, every one on kernel avx512
// and every K with K%16 ≠ 0 (1, 7, 8, 15, 31, 33, 100 here and 9, 17, 1000
// in TestInt8Extreme), errors 10⁴–10⁷ eps32·Σ|x·w|, both against the
// reference and against the go kernel; K ∈ {0, 16, 784, 4096} passed.
const tolEps = 4

// worst records, per kernel, the largest error seen in units of
// eps32·Σ|x·w| and the case that made it, so that the bound above can be
// checked against what the kernels do (go test -v prints them).
var worst = map[string]struct {
	v    float64
	what string
}{}

var (
	testM = []int{1, 2, 3, 5, 8, 16}
	testN = []int{1, 3, 7, 64, 129}
	testK = []int{0, 1, 7, 8, 15, 16, 31, 33, 100, 784, 4096}
)

// Padding added to every leading dimension, and sentinel values that fill
// the padding: NaN in x and w so that a kernel reading past a row's K
// elements poisons its result, and a marker in y that must survive.
const (
	padX, padW, padY = 3, 5, 2
	ySlack           = 7
)

var ySentinel = float32(-12345.5)

// problem is one random test case, float32 or int8 weights.
type problem struct {
	M, N, K, ldx, ldw, ldy int
	x                      []float32
	wf                     []float32
	wi                     []int8
	scale                  []float32
}

// newProblem builds x and W with NaN (f32) or -128 (int8) padding and
// slices of exactly the required length, so that a Go-level overrun
// panics.
func newProblem(rng *rand.Rand, M, N, K int, int8w bool) *problem {
	return newProblemLD(rng, M, N, K, K+padX, K+padW, N+padY, int8w)
}

// newProblemLD is newProblem with given leading dimensions.
func newProblemLD(rng *rand.Rand, M, N, K, ldx, ldw, ldy int, int8w bool) *problem {
	p := &problem{M: M, N: N, K: K, ldx: ldx, ldw: ldw, ldy: ldy}
	p.x = make([]float32, need(M, K, p.ldx))
	for i := range p.x {
		if i%p.ldx < K {
			p.x[i] = float32(rng.Float64()*2 - 1)
		} else {
			p.x[i] = float32(math.NaN())
		}
	}
	if int8w {
		p.wi = make([]int8, need(N, K, p.ldw))
		for i := range p.wi {
			p.wi[i] = -128
			if i%p.ldw < K {
				p.wi[i] = int8(rng.IntN(256) - 128)
			}
		}
		p.scale = make([]float32, N)
		for i := range p.scale {
			p.scale[i] = float32(rng.Float64()*0.02 - 0.01)
		}
		return p
	}
	p.wf = make([]float32, need(N, K, p.ldw))
	for i := range p.wf {
		if i%p.ldw < K {
			p.wf[i] = float32(rng.Float64()*2 - 1)
		} else {
			p.wf[i] = float32(math.NaN())
		}
	}
	return p
}

// need is the length of a rows×cols matrix with leading dimension ld.
func need(rows, cols, ld int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

// newY returns y with every element, padding and slack included, set to
// the sentinel.
func (p *problem) newY() []float32 {
	y := make([]float32, need(p.M, p.N, p.ldy)+ySlack)
	for i := range y {
		y[i] = ySentinel
	}
	return y
}

// wAt is W[n, k] as float64.
func (p *problem) wAt(n, k int) float64 {
	if p.wi != nil {
		return float64(p.wi[n*p.ldw+k])
	}
	return float64(p.wf[n*p.ldw+k])
}

// reference computes the product in float64 with Σ|x·w|·|scale|, the
// scale of the rounding error a float32 sum may make, for each output.
func (p *problem) reference() (ref, mag []float64) {
	ref = make([]float64, p.M*p.N)
	mag = make([]float64, p.M*p.N)
	for m := range p.M {
		for n := range p.N {
			var s, a float64
			for k := range p.K {
				v := float64(p.x[m*p.ldx+k]) * p.wAt(n, k)
				s += v
				a += math.Abs(v)
			}
			if p.scale != nil {
				sc := float64(p.scale[n])
				s, a = s*sc, a*math.Abs(sc)
			}
			ref[m*p.N+n], mag[m*p.N+n] = s, a
		}
	}
	return ref, mag
}

// run computes the product with one kernel.
func (p *problem) run(kern kernel, y []float32, threads int) error {
	if p.wi != nil {
		return int8With(kern, p.M, p.N, p.K, p.x, p.ldx, p.wi, p.ldw, p.scale, y, p.ldy, threads)
	}
	return f32With(kern, p.M, p.N, p.K, p.x, p.ldx, p.wf, p.ldw, y, p.ldy, threads)
}

// errUnits is |got-want| in units of eps32·mag, with the smallest
// subnormal as absolute slack for products scaled into the subnormals.
func errUnits(got float32, want, mag float64) float64 {
	d := math.Abs(float64(got) - want)
	if d <= math.SmallestNonzeroFloat32 {
		return 0
	}
	if math.IsNaN(d) {
		return math.Inf(1)
	}
	return d / (eps32 * mag)
}

// checkY compares y with the reference and checks that every element
// outside the M×N result still holds the sentinel.
func (p *problem) checkY(t *testing.T, what string, y []float32, ref, mag []float64) {
	t.Helper()
	bad := 0
	for i, v := range y {
		m, n := i/p.ldy, i%p.ldy
		if m >= p.M || n >= p.N {
			if v != ySentinel && bad < 3 {
				bad++
				t.Errorf("%s: y[%d] (padding) = %v, was %v", what, i, v, ySentinel)
			}
			continue
		}
		e := errUnits(v, ref[m*p.N+n], mag[m*p.N+n])
		if kern := strings.Fields(what)[0]; e > worst[kern].v {
			worst[kern] = struct {
				v    float64
				what string
			}{e, what}
		}
		if e > tolEps && bad < 3 {
			bad++
			t.Errorf("%s: y[%d,%d] = %v, want %v (error %.3g eps·Σ|xw|, bound %d)", what, m, n, v, ref[m*p.N+n], e, tolEps)
		}
	}
}

// compareKernels checks two kernels' results against each other at
// 2·tolEps, which holds when each is within tolEps of the reference.
func (p *problem) compareKernels(t *testing.T, what string, a, b []float32, mag []float64) {
	t.Helper()
	for m := range p.M {
		for n := range p.N {
			i := m*p.ldy + n
			if e := errUnits(a[i], float64(b[i]), mag[m*p.N+n]); e > 2*tolEps {
				t.Errorf("%s: y[%d,%d] = %v vs %v (difference %.3g eps·Σ|xw|)", what, m, n, a[i], b[i], e)
				return
			}
		}
	}
}

// testShapes runs every shape on every kernel and thread count against the
// reference, and the kernels against each other.
func testShapes(t *testing.T, int8w bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	kernels := availableKernels()
	t.Logf("kernels: %v", kernels)
	for _, K := range testK {
		for _, N := range testN {
			for _, M := range testM {
				p := newProblem(rng, M, N, K, int8w)
				ref, mag := p.reference()
				for _, threads := range []int{1, 3} {
					var first []float32
					for _, v := range variants(kernels) {
						kern := v.kern
						what := fmt.Sprintf("%v M=%d N=%d K=%d threads=%d", v, M, N, K, threads)
						y := p.newY()
						var err error
						withPrefetch(v.pf, func() { err = p.run(kern, y, threads) })
						if err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						p.checkY(t, what, y, ref, mag)
						if first == nil {
							first = y
						} else {
							p.compareKernels(t, what+" vs "+kernels[0].String(), y, first, mag)
						}
					}
				}
			}
		}
	}
	for _, v := range variants(kernels) {
		w := worst[v.String()]
		t.Logf("worst error so far %.3g eps32·Σ|x·w| (%s); bound %d", w.v, w.what, tolEps)
	}
}

// variant is a kernel with its prefetching forced on or off: the assembly
// kernels come in both forms (the PF functions of gen_asm.go), which must
// compute the same.
type variant struct {
	kern kernel
	pf   bool
}

// String names the variant as the test messages and the worst table do.
func (v variant) String() string {
	if v.pf {
		return v.kern.String() + "+pf"
	}
	return v.kern.String()
}

// variants lists each kernel without prefetching, and each assembly kernel
// with it too (the Go kernel has nothing to prefetch).
func variants(kernels []kernel) []variant {
	var vs []variant
	for _, k := range kernels {
		vs = append(vs, variant{k, false})
		if k != kernGo {
			vs = append(vs, variant{k, true})
		}
	}
	return vs
}

// withPrefetch runs fn with the kernels' prefetching forced on (every
// product size) or off, and restores the thresholds.
func withPrefetch(on bool, fn func()) {
	f, i := prefetchMinF32, prefetchMinInt8
	defer func() { prefetchMinF32, prefetchMinInt8 = f, i }()
	prefetchMinF32, prefetchMinInt8 = math.MaxInt, math.MaxInt
	if on {
		prefetchMinF32, prefetchMinInt8 = 0, 0
	}
	fn()
}

// TestPrefetchBitwise checks that the prefetching kernels give the same
// bits as the others (they run the same arithmetic), at the sizes of the
// decode products and at odd ones, threads 1 and 2.
func TestPrefetchBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, int8w := range []bool{false, true} {
		for _, s := range [][3]int{{1, 256, 768}, {3, 130, 2048}, {16, 64, 768}, {5, 33, 100}} {
			p := newProblem(rng, s[0], s[1], s[2], int8w)
			for _, kern := range availableKernels() {
				for _, threads := range []int{1, 2} {
					var y0, y1 []float32
					withPrefetch(false, func() { y0 = p.newY(); _ = p.run(kern, y0, threads) })
					withPrefetch(true, func() { y1 = p.newY(); _ = p.run(kern, y1, threads) })
					for i := range y0 {
						if math.Float32bits(y0[i]) != math.Float32bits(y1[i]) {
							t.Fatalf("%v int8=%v M=%d N=%d K=%d threads=%d: y[%d] = %v prefetching, %v not", kern, int8w, s[0], s[1], s[2], threads, i, y1[i], y0[i])
						}
					}
				}
			}
		}
	}
}

func TestF32(t *testing.T)  { testShapes(t, false) }
func TestInt8(t *testing.T) { testShapes(t, true) }

// TestTightLD runs packed operands (each leading dimension equal to its
// row length) on every kernel.
func TestTightLD(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, int8w := range []bool{false, true} {
		for _, K := range testK {
			for _, N := range []int{1, 7, 129} {
				for _, M := range []int{1, 5} {
					p := newProblemLD(rng, M, N, K, K, K, N, int8w)
					ref, mag := p.reference()
					for _, kern := range availableKernels() {
						y := p.newY()
						if err := p.run(kern, y, 2); err != nil {
							t.Fatal(err)
						}
						p.checkY(t, fmt.Sprintf("%v tight int8=%v M=%d N=%d K=%d", kern, int8w, M, N, K), y, ref, mag)
					}
				}
			}
		}
	}
}

// TestInt8Extreme uses only the extreme weights -128 and 127 and scales
// that are 0, subnormal, negative, tiny and large.
func TestInt8Extreme(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	scales := []float32{0, math.SmallestNonzeroFloat32, 1e-40, -3e-39, 1.5e-38, -1, 1e-3, 3e30}
	for _, K := range []int{1, 9, 17, 256, 1000} {
		for _, M := range []int{1, 4, 7} {
			p := newProblem(rng, M, len(scales), K, true)
			copy(p.scale, scales)
			for i := range p.wi {
				if i%p.ldw < K {
					p.wi[i] = []int8{-128, 127}[rng.IntN(2)]
				}
			}
			ref, mag := p.reference()
			for _, kern := range availableKernels() {
				y := p.newY()
				if err := p.run(kern, y, 1); err != nil {
					t.Fatal(err)
				}
				p.checkY(t, fmt.Sprintf("%v extreme M=%d K=%d", kern, M, K), y, ref, mag)
				for m := range M {
					if v := y[m*p.ldy]; v != 0 {
						t.Errorf("%v: scale 0 gave %v, want 0", kern, v)
					}
				}
			}
		}
	}
}

// TestThreadsBitwise checks that splitting N across workers changes no bit:
// each block of four rows is computed the same way whichever worker runs it.
func TestThreadsBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, int8w := range []bool{false, true} {
		p := newProblem(rng, 3, 1001, 300, int8w)
		for _, kern := range availableKernels() {
			y1 := p.newY()
			if err := p.run(kern, y1, 1); err != nil {
				t.Fatal(err)
			}
			for _, threads := range []int{2, 3, 7, 0} {
				y := p.newY()
				if err := p.run(kern, y, threads); err != nil {
					t.Fatal(err)
				}
				for i := range y {
					if math.Float32bits(y[i]) != math.Float32bits(y1[i]) {
						t.Fatalf("%v int8=%v threads=%d: y[%d] = %v, threads=1 gave %v", kern, int8w, threads, i, y[i], y1[i])
					}
				}
			}
		}
	}
}

// TestBadSizes checks that every malformed call returns an error naming
// the operand, and panics on none.
func TestBadSizes(t *testing.T) {
	x, w, y, s := make([]float32, 100), make([]float32, 100), make([]float32, 100), make([]float32, 10)
	wi := make([]int8, 100)
	cases := []struct {
		name           string
		M, N, K        int
		nx, nw, ny, ns int
		ldx, ldw, ldy  int
		want           string
	}{
		{"negative M", -1, 2, 2, 100, 100, 100, 10, 2, 2, 2, "negative size"},
		{"negative K", 1, 2, -2, 100, 100, 100, 10, 2, 2, 2, "negative size"},
		{"short x", 3, 2, 10, 29, 100, 100, 10, 10, 10, 2, "operand x too short: need 30"},
		{"short w", 2, 9, 10, 100, 97, 100, 10, 10, 11, 9, "operand w too short: need 98"},
		{"short y", 4, 5, 2, 100, 100, 22, 10, 2, 2, 6, "operand y too short: need 23"},
		{"ldx < K", 2, 2, 5, 100, 100, 100, 10, 4, 5, 2, "operand x: ldx=4"},
		{"ldw < K", 2, 2, 5, 100, 100, 100, 10, 5, 3, 2, "operand w: ldw=3"},
		{"ldy < N", 2, 3, 5, 100, 100, 100, 10, 5, 5, 2, "operand y: ldy=2"},
		{"overflow", 3, 2, 2, 100, 100, 100, 10, math.MaxInt / 2, 2, 2, "operand x"},
		{"short scale", 1, 10, 2, 100, 100, 100, 9, 2, 2, 10, "operand scale too short: need N=10"},
	}
	for _, c := range cases {
		for _, int8w := range []bool{false, true} {
			var err error
			if int8w {
				err = Int8(c.M, c.N, c.K, x[:c.nx], c.ldx, wi[:c.nw], c.ldw, s[:c.ns], y[:c.ny], c.ldy, 1)
			} else {
				err = F32(c.M, c.N, c.K, x[:c.nx], c.ldx, w[:c.nw], c.ldw, y[:c.ny], c.ldy, 1)
				if c.name == "short scale" {
					continue // F32 takes no scale
				}
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s (int8=%v): error %v, want one containing %q", c.name, int8w, err, c.want)
			}
		}
	}
	// Empty products validate and do nothing.
	if err := F32(0, 0, 0, nil, 0, nil, 0, nil, 0, 1); err != nil {
		t.Errorf("empty product: %v", err)
	}
}

// TestNoAllocs checks the single-threaded steady state allocates nothing,
// full blocks and tail rows alike.
func TestNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, int8w := range []bool{false, true} {
		p := newProblem(rng, 5, 67, 100, int8w)
		y := p.newY()
		for _, kern := range availableKernels() {
			if a := testing.AllocsPerRun(50, func() { _ = p.run(kern, y, 1) }); a != 0 {
				t.Errorf("%v int8=%v: %v allocations per call, want 0", kern, int8w, a)
			}
		}
	}
}

// TestKernelName checks the exported dispatch names the fastest kernel.
func TestKernelName(t *testing.T) {
	ks := availableKernels()
	if got, want := KernelName(), ks[len(ks)-1].String(); got != want {
		t.Errorf("KernelName() = %q, want %q", got, want)
	}
	t.Logf("kernel %s", KernelName())
}
