package gemv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// knProblem is one random F32KN case: x M×K (ldx), b K×N (ldb), with NaN in
// every padding element, so that a kernel reading a column of b past N or
// an element of x past K poisons its result, and slices of exactly the
// required length.
type knProblem struct {
	M, N, K, ldx, ldb, ldy int
	x, b                   []float32
}

// newKNProblem builds a case with the given padding of each leading
// dimension.
func newKNProblem(rng *rand.Rand, M, N, K, padX, padB, padY int) *knProblem {
	p := &knProblem{M: M, N: N, K: K, ldx: K + padX, ldb: N + padB, ldy: N + padY}
	fill := func(n, ld, cols int) []float32 {
		v := make([]float32, n)
		for i := range v {
			if i%ld < cols {
				v[i] = float32(rng.Float64()*2 - 1)
			} else {
				v[i] = float32(math.NaN())
			}
		}
		return v
	}
	p.x = fill(need(M, K, p.ldx), p.ldx, K)
	p.b = fill(need(K, N, p.ldb), p.ldb, N)
	return p
}

// reference computes y in float64 and Σ|x·b| for each output.
func (p *knProblem) reference() (ref, mag []float64) {
	ref = make([]float64, p.M*p.N)
	mag = make([]float64, p.M*p.N)
	for m := range p.M {
		for j := range p.N {
			var s, a float64
			for k := range p.K {
				v := float64(p.x[m*p.ldx+k]) * float64(p.b[k*p.ldb+j])
				s += v
				a += math.Abs(v)
			}
			ref[m*p.N+j], mag[m*p.N+j] = s, a
		}
	}
	return ref, mag
}

// newY returns y, padding and slack included, filled with the sentinel.
func (p *knProblem) newY() []float32 {
	y := make([]float32, need(p.M, p.N, p.ldy)+ySlack)
	for i := range y {
		y[i] = ySentinel
	}
	return y
}

// check compares y with the reference within tolEps and checks that every
// element outside the M×N result still holds the sentinel.
func (p *knProblem) check(t *testing.T, what string, y []float32, ref, mag []float64) {
	t.Helper()
	bad := 0
	for i, v := range y {
		m, j := i/p.ldy, i%p.ldy
		if m >= p.M || j >= p.N {
			if v != ySentinel && bad < 3 {
				bad++
				t.Errorf("%s: y[%d] (padding) = %v, was %v", what, i, v, ySentinel)
			}
			continue
		}
		e := errUnits(v, ref[m*p.N+j], mag[m*p.N+j])
		if kern := "kn-" + strings.Fields(what)[0]; e > worst[kern].v {
			worst[kern] = struct {
				v    float64
				what string
			}{e, what}
		}
		if e > tolEps && bad < 3 {
			bad++
			t.Errorf("%s: y[%d,%d] = %v, want %v (error %.3g eps·Σ|xb|, bound %d)", what, m, j, v, ref[m*p.N+j], e, tolEps)
		}
	}
}

// TestF32KN runs F32KN on every kernel, several thread counts and every
// shape below (panel edges: N around multiples of 8, 16 and 64; M around
// the kernels' row blocks) against the float64 reference, and the kernels
// against the Go kernel at 2·tolEps.
func TestF32KN(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	kernels := availableKernels()
	for _, K := range []int{1, 2, 7, 64, 256, 300, 1024} {
		for _, N := range []int{1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 129} {
			for _, M := range []int{1, 2, 3, 4, 5, 8, 16} {
				p := newKNProblem(rng, M, N, K, 3, 5, 2)
				ref, mag := p.reference()
				for _, threads := range []int{1, 3} {
					var first []float32
					for _, kern := range kernels {
						what := fmt.Sprintf("%v M=%d N=%d K=%d threads=%d", kern, M, N, K, threads)
						y := p.newY()
						if err := f32knWith(kern, M, N, K, p.x, p.ldx, p.b, p.ldb, y, p.ldy, threads); err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						p.check(t, what, y, ref, mag)
						if first == nil {
							first = y
							continue
						}
						for m := range M {
							for j := range N {
								i := m*p.ldy + j
								if e := errUnits(y[i], float64(first[i]), mag[m*N+j]); e > 2*tolEps {
									t.Fatalf("%s: y[%d,%d] = %v, go kernel %v (difference %.3g eps·Σ|xb|)", what, m, j, y[i], first[i], e)
								}
							}
						}
					}
				}
			}
		}
	}
	for _, kern := range kernels {
		w := worst["kn-"+kern.String()]
		t.Logf("%v: worst error %.3g eps32·Σ|x·b| (%s); bound %d", kern, w.v, w.what, tolEps)
	}
}

// TestF32KNTight runs operands without padding (ld equal to the row
// length), where a read past the last element of x or b would leave the
// slice.
func TestF32KNTight(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, c := range [][3]int{{1, 1, 1}, {3, 64, 256}, {5, 17, 9}, {2, 129, 33}} {
		p := newKNProblem(rng, c[0], c[1], c[2], 0, 0, 0)
		ref, mag := p.reference()
		for _, kern := range availableKernels() {
			y := p.newY()
			if err := f32knWith(kern, p.M, p.N, p.K, p.x, p.ldx, p.b, p.ldb, y, p.ldy, 2); err != nil {
				t.Fatal(err)
			}
			p.check(t, fmt.Sprintf("%v tight M=%d N=%d K=%d", kern, p.M, p.N, p.K), y, ref, mag)
		}
	}
}

// TestF32KNBadSizes checks that malformed calls return an error naming
// the operand and that empty products do nothing.
func TestF32KNBadSizes(t *testing.T) {
	v := make([]float32, 100)
	cases := []struct {
		name          string
		M, N, K       int
		nx, nb, ny    int
		ldx, ldb, ldy int
		want          string
	}{
		{"negative N", 1, -2, 2, 100, 100, 100, 2, 2, 2, "negative size"},
		{"short x", 3, 2, 10, 29, 100, 100, 10, 2, 2, "operand x too short: need 30"},
		{"short b", 2, 9, 10, 100, 98, 100, 10, 10, 9, "operand b too short: need 99"},
		{"short y", 4, 5, 2, 100, 100, 22, 2, 5, 6, "operand y too short: need 23"},
		{"ldb < N", 2, 3, 5, 100, 100, 100, 5, 2, 3, "operand b: ldb=2"},
		{"ldx < K", 2, 3, 5, 100, 100, 100, 4, 3, 3, "operand x: ldx=4"},
	}
	for _, c := range cases {
		err := F32KN(c.M, c.N, c.K, v[:c.nx], c.ldx, v[:c.nb], c.ldb, v[:c.ny], c.ldy, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if err := F32KN(0, 0, 0, nil, 0, nil, 0, nil, 0, 1); err != nil {
		t.Errorf("empty product: %v", err)
	}
	y := []float32{7, 7, 7}
	if err := F32KN(1, 2, 0, nil, 0, nil, 2, y, 2, 1); err != nil || y[0] != 0 || y[1] != 0 || y[2] != 7 {
		t.Errorf("K=0: y = %v, err %v; want [0 0 7]", y, err)
	}
}

// TestF32KNNoAllocs checks the single-threaded call allocates nothing.
func TestF32KNNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	p := newKNProblem(rng, 3, 64, 100, 1, 1, 1)
	y := p.newY()
	for _, kern := range availableKernels() {
		if a := testing.AllocsPerRun(50, func() { _ = f32knWith(kern, p.M, p.N, p.K, p.x, p.ldx, p.b, p.ldb, y, p.ldy, 1) }); a != 0 {
			t.Errorf("%v: %v allocations per call, want 0", kern, a)
		}
	}
}
