package conv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// Plane kernel tests. An output sums ky·k ≤ 25 products; recursive
// summation (with or without FMA contraction, in any order or split over
// two accumulators) of m terms errs by at most γ_m·Σ|terms| with γ_m ≈ m·u
// and u = eps32/2, so ky·k·eps32·Σ|w·in| is that bound with a factor 2 to
// spare; kernels are compared with each other at twice that.
//
// Fault injection, done once by hand in gen_dw.go (regenerated, then
// reverted):
//   - fma reading weight r·K+kx+1 for kx = 1: TestDWPlane, TestDWPlanesChannels
//     and TestDWPlanePageGuard fail on the first assembly case, and
//     TestDepthwiseKernels on every case for avx2 and avx512 (728 subtests
//     each, none for go); 48 TestConv subtests fail too.
//   - pair backing its second chunk up one element short: all five fail
//     (buf written outside the copy, wrong outputs).
//   - the channel loop not advancing the input: TestDWPlanesChannels and
//     TestDepthwiseKernels (many-channels*, mobilenet-112-*, both
//     kernels) fail; the other cases run one channel per call.

// dwTestWidths are the input row lengths: every width up to 70 (vector
// tails, rows shorter than a vector) and MobileNet's 112 and an odd 113.
func dwTestWidths() []int {
	var ws []int
	for w := 1; w <= 70; w++ {
		ws = append(ws, w)
	}
	return append(ws, 112, 113)
}

// dwPlaneCase is one channel problem: the shape, the input rows (in[iy·ldin
// + i] for i < width; NaN between and around the rows, so that reading
// outside a row or the input shows in the result), the weights and the
// assembly's zeroed buffer.
type dwPlaneCase struct {
	d          dwShape
	in, w, buf []float32
	name       string
	ldout, out int // output row stride; extra sentinel elements after the last row
}

// dwGuard is how many NaNs surround the input.
const dwGuard = 40

// newDWPlaneCase builds a square-kernel case with random data: K×K kernel,
// stride s and padding pad, padHi along both axes (stride sy, dilation dy
// along y), an h × width input.
func newDWPlaneCase(rng *rand.Rand, kern dwKernel, k, s, width, pad, padHi, h, sy, dy int) (dwPlaneCase, bool) {
	n := floorDiv(width+pad+padHi-k, s) + 1
	outH := floorDiv(h+pad+padHi-(k-1)*dy-1, sy) + 1
	if n <= 0 || outH <= 0 {
		return dwPlaneCase{}, false
	}
	d := dwShape{ky: k, k: k, sy: sy, dy: dy, padY: pad, height: h, ldin: width + 3, outH: outH, s: s, width: width, pad: pad, n: n}
	d.init(kern)
	buf := make([]float32, 2*dwGuard+h*d.ldin)
	fill(buf, float32(math.NaN()))
	c := dwPlaneCase{d: d, in: buf[dwGuard:], w: randSlice(rng, k*k), buf: make([]float32, d.bufLen()), ldout: n + 2, out: dwGuard}
	c.randomize(rng)
	c.name = fmt.Sprintf("%v/K%d/s%d/%dx%d/pad%d,%d/sy%d/dy%d", kern, k, s, h, width, pad, padHi, sy, dy)
	return c, true
}

// randomize sets the input rows to new random values.
func (c *dwPlaneCase) randomize(rng *rand.Rand) {
	for iy := range c.d.height {
		copy(c.in[iy*c.d.ldin:iy*c.d.ldin+c.d.width], randSlice(rng, c.d.width))
	}
}

// ref computes the outputs in float64, row-major, and Σ|w·in| for each.
func (c *dwPlaneCase) ref() (ref, mag []float64) {
	d := c.d
	for y := range d.outH {
		for x := range d.n {
			var sum, abs float64
			for ky := range d.ky {
				iy := y*d.sy - d.padY + ky*d.dy
				for kx := range d.k {
					if i := x*d.s - d.pad + kx; iy >= 0 && iy < d.height && i >= 0 && i < d.width {
						v := float64(c.w[ky*d.k+kx]) * float64(c.in[iy*d.ldin+i])
						sum, abs = sum+v, abs+math.Abs(v)
					}
				}
			}
			ref, mag = append(ref, sum), append(mag, abs)
		}
	}
	return ref, mag
}

// run computes the plane into a sentinel-filled buffer, rows ldout apart
// with c.out elements after the last, checks that nothing outside the rows
// was written and that the assembly's buffer is still zero outside the
// copied input, and returns the outputs row-major.
func (c *dwPlaneCase) run(t *testing.T) []float32 {
	t.Helper()
	d := &c.d
	buf := make([]float32, (d.outH-1)*c.ldout+d.n+c.out)
	fill(buf, sentinel)
	d.planes(buf, c.ldout, 0, c.in, 0, c.w, c.buf, 1)
	var got []float32
	for i, v := range buf {
		if x := i % c.ldout; i/c.ldout < d.outH && x < d.n {
			got = append(got, v)
		} else if v != sentinel {
			t.Fatalf("%s: element %d outside the output rows overwritten: %v", c.name, i, v)
		}
	}
	var skip int // the assembly starts buf on a cache line
	if len(c.buf) > 0 {
		skip = int(-uintptr(unsafe.Pointer(&c.buf[0])) % 64 / 4)
	}
	for i, v := range c.buf {
		r, col := (i-skip)/d.ldbuf, (i-skip)%d.ldbuf
		if half := d.ldbuf / 2; d.s == 2 {
			col = 2*(col%half) + col/half // even columns, then odd
		}
		data := i >= skip && r-d.padY >= 0 && r-d.padY < d.height && col >= d.cpDst && col < d.cpDst+d.cpN
		if !data && v != 0 {
			t.Fatalf("%s: buf[%d] (row %d, column %d) outside the input copy is %v", c.name, i, r, col, v)
		}
	}
	return got
}

// check compares got with want (or with the float64 reference when want
// is nil) at tol units of eps32·Σ|w·in| per term.
func (c *dwPlaneCase) check(t *testing.T, got []float32, want []float32, tol float64) {
	t.Helper()
	ref, mag := c.ref()
	eps := float64(math.Nextafter32(1, 2) - 1)
	bound := tol * float64(c.d.ky*c.d.k) * eps
	for i, r := range ref {
		if want != nil {
			r = float64(want[i])
		}
		if diff := math.Abs(float64(got[i]) - r); !(diff <= bound*mag[i]) {
			t.Fatalf("%s: output (%d, %d) = %v, want %v (Σ|w·in| %v)", c.name, i/c.d.n, i%c.d.n, got[i], r, mag[i])
		}
	}
}

// TestDWPlane runs every kernel on K ∈ {3, 5}, strides 1 and 2, every
// width in dwTestWidths, low padding −1 … K−1 with high padding one less,
// equal and one more (the same along y over K+1 input rows), and on a few
// row geometries (y stride 3, y dilation 2, rows all padding), against the
// float64 reference and against the Go kernel.
func TestDWPlane(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	kernels := dwKernels()
	t.Logf("kernels: %v", kernels)
	for _, k := range []int{3, 5} {
		for _, s := range []int{1, 2} {
			for _, width := range dwTestWidths() {
				for pad := -1; pad < k; pad++ {
					for padHi := pad - 1; padHi <= pad+1; padHi++ {
						dwPlaneAllKernels(t, rng, kernels, k, s, width, pad, padHi, k+1, s, 1)
					}
				}
			}
			for _, y := range [][4]int{{9, 3, 1, 1}, {11, 1, 2, 2}, {2, 1, 1, 6}, {1, 2, 1, 1}} {
				for _, width := range []int{5, 16, 33, 112} {
					dwPlaneAllKernels(t, rng, kernels, k, s, width, y[3], y[3], y[0], y[1], y[2])
				}
			}
		}
	}
}

// TestDWPlanesChannels runs three channels in one planes call, inputs and
// outputs with gaps between the channels, on every kernel, K, stride and a
// few widths, against each channel's reference.
func TestDWPlanesChannels(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const nch = 3
	for _, kern := range dwKernels() {
		for _, k := range []int{3, 5} {
			for _, s := range []int{1, 2} {
				for _, width := range []int{3, 7, 14, 29, 56} {
					var cs [nch]dwPlaneCase
					for c := range cs {
						cs[c], _ = newDWPlaneCase(rng, kern, k, s, width, k/2, k/2, width, s, 1)
					}
					dwCheckChannels(t, cs[:])
				}
			}
		}
	}
}

// dwCheckChannels lays the cases' inputs and weights out one channel after
// another and runs them as one planes call.
func dwCheckChannels(t *testing.T, cs []dwPlaneCase) {
	t.Helper()
	d, c0 := cs[0].d, cs[0]
	inCS := d.height*d.ldin + 5
	outCS := (d.outH-1)*c0.ldout + d.n + 3
	in := make([]float32, len(cs)*inCS)
	fill(in, float32(math.NaN()))
	out := make([]float32, len(cs)*outCS+dwGuard)
	fill(out, sentinel)
	var w []float32
	for c := range cs {
		copy(in[c*inCS:], cs[c].in[:d.height*d.ldin])
		w = append(w, cs[c].w...)
	}
	d.planes(out, c0.ldout, outCS, in, inCS, w, c0.buf, len(cs))
	eps := float64(math.Nextafter32(1, 2) - 1)
	for c := range cs {
		ref, mag := cs[c].ref()
		for i, r := range ref {
			got := out[c*outCS+i/d.n*c0.ldout+i%d.n]
			if diff := math.Abs(float64(got) - r); !(diff <= float64(d.ky*d.k)*eps*mag[i]) {
				t.Fatalf("%s: channel %d output (%d, %d) = %v, want %v", c0.name, c, i/d.n, i%d.n, got, r)
			}
			out[c*outCS+i/d.n*c0.ldout+i%d.n] = sentinel
		}
	}
	for i, v := range out {
		if v != sentinel {
			t.Fatalf("%s: element %d outside the outputs overwritten: %v", c0.name, i, v)
		}
	}
}

// dwPlaneAllKernels checks one problem on every kernel: the same data (the
// cases are built from one seed) against the reference, and each kernel
// against the Go kernel's result; then new data through the same buffer,
// as the next channel would.
func dwPlaneAllKernels(t *testing.T, rng *rand.Rand, kernels []dwKernel, k, s, width, pad, padHi, h, sy, dy int) {
	t.Helper()
	seed := rng.Uint64()
	var goOut [2][]float32
	for _, kern := range kernels {
		r := rand.New(rand.NewPCG(seed, 1))
		c, ok := newDWPlaneCase(r, kern, k, s, width, pad, padHi, h, sy, dy)
		if !ok {
			return
		}
		if kern != dwGo && c.d.asm == nil {
			t.Fatalf("%s: no assembly kernel", c.name)
		}
		for i := range goOut {
			if i > 0 {
				c.randomize(r)
			}
			got := c.run(t)
			c.check(t, got, nil, 1)
			if kern == dwGo {
				goOut[i] = got
			} else {
				c.check(t, got, goOut[i], 2)
			}
		}
	}
}

// dwConvCases are depthwise convolutions on the plane path: 3×3 and
// 5×5 at strides 1 and 2 over odd and even widths (shorter than, equal to
// and longer than a vector), pads 0, 1, 2 and asymmetric, and a few shapes
// beside the common one (channel multiplier 2, row-padded and
// channels-last outputs, K_y ≠ K on the Go kernel, dilation and stride
// along y, enough channels that a task runs several in one kernel call,
// and MobileNet's 112×112 planes).
func dwConvCases() []convCase {
	var cs []convCase
	for _, k := range []int{3, 5} {
		for _, s := range []int{1, 2} {
			for _, w := range []int{1, 2, 5, 7, 14, 16, 17, 28, 33, 56, 70, 112} {
				for _, pad := range [][2]int{{0, 0}, {1, 1}, {1, 0}, {k / 2, k / 2}} {
					h := 5 + w%2
					cs = append(cs, convCase{name: fmt.Sprintf("k%d-s%d-%dx%d-pad%d,%d", k, s, h, w, pad[0], pad[1]),
						batch: 1, cin: 2, cout: 2, group: 2, in: []int{h, w}, k: []int{k, k},
						strides: []int{s, s}, padLo: []int{pad[0], pad[0]}, padHi: []int{pad[1], pad[1]}, inL: "cf", outL: "cf"})
				}
			}
		}
	}
	return append(cs,
		convCase{name: "square-14-s1", batch: 1, cin: 3, cout: 3, group: 3, in: []int{14, 14}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
		convCase{name: "square-56-s2", batch: 1, cin: 2, cout: 2, group: 2, in: []int{56, 56}, k: []int{3, 3}, strides: []int{2, 2}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
		convCase{name: "mult2-batch2", batch: 2, cin: 3, cout: 6, group: 3, in: []int{9, 20}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
		convCase{name: "pad-rows", batch: 2, cin: 2, cout: 2, group: 2, in: []int{8, 19}, k: []int{3, 3}, strides: []int{1, 2}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "pad", outL: "pad"},
		convCase{name: "out-cl", batch: 1, cin: 3, cout: 3, group: 3, in: []int{7, 18}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cl"},
		convCase{name: "1x3", batch: 1, cin: 2, cout: 2, group: 2, in: []int{6, 21}, k: []int{1, 3}, padLo: []int{0, 1}, padHi: []int{0, 1}, inL: "cf", outL: "cf"},
		convCase{name: "3x5-s2", batch: 1, cin: 2, cout: 2, group: 2, in: []int{6, 37}, k: []int{3, 5}, strides: []int{1, 2}, padLo: []int{1, 2}, padHi: []int{1, 2}, inL: "cf", outL: "cf"},
		convCase{name: "5x3", batch: 1, cin: 2, cout: 2, group: 2, in: []int{9, 21}, k: []int{5, 3}, padLo: []int{2, 1}, padHi: []int{2, 1}, inL: "cf", outL: "cf"},
		convCase{name: "ydil2-ys3", batch: 1, cin: 2, cout: 2, group: 2, in: []int{13, 30}, k: []int{3, 3}, strides: []int{3, 1}, kdil: []int{2, 1}, padLo: []int{2, 1}, padHi: []int{2, 1}, inL: "cf", outL: "cf"},
		convCase{name: "s3", batch: 1, cin: 2, cout: 2, group: 2, in: []int{7, 40}, k: []int{3, 3}, strides: []int{1, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
		convCase{name: "many-channels", batch: 2, cin: 24, cout: 24, group: 24, in: []int{7, 9}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
		convCase{name: "many-channels-5x5-s2", batch: 1, cin: 20, cout: 20, group: 20, in: []int{11, 12}, k: []int{5, 5}, strides: []int{2, 2}, padLo: []int{2, 2}, padHi: []int{2, 2}, inL: "cf", outL: "pad"},
		convCase{name: "mobilenet-112-s1", batch: 1, cin: 8, cout: 8, group: 8, in: []int{112, 112}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
		convCase{name: "mobilenet-112-s2", batch: 1, cin: 8, cout: 8, group: 8, in: []int{112, 112}, k: []int{3, 3}, strides: []int{2, 2}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
		convCase{name: "all-pad-rows", batch: 1, cin: 2, cout: 2, group: 2, in: []int{3, 20}, k: []int{3, 3}, padLo: []int{4, 1}, padHi: []int{4, 1}, inL: "cf", outL: "cf"},
	)
}

// TestDepthwiseKernels runs dwConvCases through Float32 and Float32Packed on
// every row kernel in turn (forced through dwActive), on 1 and 2 threads,
// against the float64 reference.
func TestDepthwiseKernels(t *testing.T) {
	defer func(k dwKernel) { dwActive = k }(dwActive)
	rng := rand.New(rand.NewPCG(13, 14))
	for _, c := range dwConvCases() {
		p, lens := c.params("oi")
		in, ker := randSlice(rng, lens[0]), randSlice(rng, lens[1])
		ref, mag := refConv(p, in, ker)
		pk, err := PackKernel(p, ker)
		if err != nil {
			t.Fatal(err)
		}
		for _, kern := range dwKernels() {
			dwActive = kern
			q := p.normalized()
			f := newDWPlanes(q, newGeometry(q), kernelLayout{ker, q.KerOutStride, q.KerInStride, q.KerSpatialStrides}, kern)
			ky, kx := q.KernelSpatial[0], q.KernelSpatial[1]
			if f == nil || (kern != dwGo && ky == kx && (kx == 3 || kx == 5) && q.Strides[1] <= 2 && f.shape.asm == nil) {
				t.Fatalf("%s: %v does not take the plane path it should", c.name, kern)
			}
			for _, packed := range []bool{false, true} {
				for _, threads := range []int{1, 2} {
					out := make([]float32, lens[2])
					fill(out, sentinel)
					if packed {
						err = Float32Packed(p, pk, in, out, threads)
					} else {
						err = Float32(p, in, ker, out, threads)
					}
					if err != nil {
						t.Fatal(err)
					}
					t.Run(fmt.Sprintf("%s/%v/packed=%v/threads=%d", c.name, kern, packed, threads), func(t *testing.T) {
						checkConv(t, p, out, ref, mag)
					})
				}
			}
		}
	}
}
