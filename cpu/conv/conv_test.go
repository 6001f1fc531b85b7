package conv

// Fault injection (done once by hand, then reverted), to check that these
// tests catch off-by-one errors in the padding logic:
//   - newGeometry, x taps: off := kx·dil − PadLow + 1 → 744 TestConv
//     subtests fail (every algorithm but the direct 1×1 view).
//   - geometry.inOffset, outer axes: pos := … − PadLow + 1 + … → 648 fail.
//   - depthwisePlan.taps border loop: i < size → i <= size → 48 fail
//     (wrong sums or recovered out-of-range panics).
//   - windowPlan.row2D: low padding read from Paddings[y][1] instead of
//     [0] → 24 TestReduceWindow subtests fail (the asymmetric ones).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// convCase is one convolution configuration of the table. Layouts:
// in/out "cf" = N C spatial… (NCHW), "cl" = N spatial… C (NHWC), "cn" =
// C N spatial…, "pad" = NCHW whose rows are padded by 3 unused elements
// (so spatial axes are not flat); kernels are run in every kerLayouts.
type convCase struct {
	name                    string
	batch, cin, cout, group int
	in, k                   []int
	strides, kdil, idil     []int // nil = 1s
	padLo, padHi            []int // nil = 0s
	inL, outL               string
}

// kerLayouts: "oi" = O I spatial… (OIHW), "io" = spatial… I O (HWIO),
// "oik" = O spatial… I (OHWI).
var kerLayouts = []string{"oi", "io", "oik"}

var convCases = []convCase{
	{name: "1d", batch: 1, cin: 3, cout: 4, group: 1, in: []int{10}, k: []int{3}, inL: "cf", outL: "cf"},
	{name: "1d-s2-p1-nwc", batch: 3, cin: 3, cout: 5, group: 1, in: []int{11}, k: []int{3}, strides: []int{2}, padLo: []int{1}, padHi: []int{1}, inL: "cl", outL: "cl"},
	{name: "1d-kdil2-p2", batch: 1, cin: 2, cout: 3, group: 1, in: []int{9}, k: []int{3}, kdil: []int{2}, padLo: []int{2}, padHi: []int{2}, inL: "cf", outL: "cl"},
	{name: "1d-negpad-s3", batch: 2, cin: 2, cout: 2, group: 1, in: []int{17}, k: []int{4}, strides: []int{3}, padLo: []int{-1}, padHi: []int{-2}, inL: "cf", outL: "cf"},
	{name: "1d-transposed", batch: 1, cin: 3, cout: 2, group: 1, in: []int{6}, k: []int{3}, idil: []int{2}, padLo: []int{2}, padHi: []int{2}, inL: "cf", outL: "cf"},
	{name: "1d-idil3-s2", batch: 1, cin: 2, cout: 2, group: 1, in: []int{7}, k: []int{4}, idil: []int{3}, strides: []int{2}, padLo: []int{1}, padHi: []int{3}, inL: "cl", outL: "cf"},
	{name: "2d-nchw-3x3", batch: 3, cin: 5, cout: 6, group: 1, in: []int{7, 9}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
	{name: "2d-nhwc-s2", batch: 1, cin: 4, cout: 7, group: 1, in: []int{9, 8}, k: []int{3, 3}, strides: []int{2, 2}, padLo: []int{1, 0}, padHi: []int{1, 1}, inL: "cl", outL: "cl"},
	{name: "2d-s3-kdil2", batch: 2, cin: 3, cout: 4, group: 1, in: []int{13, 11}, k: []int{3, 2}, strides: []int{3, 1}, kdil: []int{2, 2}, padLo: []int{2, 0}, padHi: []int{0, 2}, inL: "cf", outL: "cl"},
	{name: "2d-groups2", batch: 3, cin: 4, cout: 6, group: 2, in: []int{6, 7}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
	{name: "2d-groups2-nhwc", batch: 1, cin: 6, cout: 4, group: 2, in: []int{5, 6}, k: []int{2, 3}, strides: []int{1, 2}, inL: "cl", outL: "cl"},
	{name: "2d-groups3-pad", batch: 2, cin: 6, cout: 9, group: 3, in: []int{5, 5}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "pad", outL: "pad"},
	{name: "dw", batch: 1, cin: 4, cout: 4, group: 4, in: []int{6, 7}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
	{name: "dw-mult2-nhwc-s2", batch: 3, cin: 3, cout: 6, group: 3, in: []int{9, 8}, k: []int{3, 3}, strides: []int{2, 2}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cl", outL: "cl"},
	{name: "dw-kdil2-s3", batch: 3, cin: 2, cout: 4, group: 2, in: []int{12, 10}, k: []int{3, 3}, strides: []int{3, 3}, kdil: []int{2, 2}, padLo: []int{2, 2}, padHi: []int{2, 0}, inL: "cf", outL: "pad"},
	{name: "dw-transposed", batch: 1, cin: 3, cout: 3, group: 3, in: []int{4, 5}, k: []int{3, 3}, idil: []int{2, 2}, padLo: []int{2, 1}, padHi: []int{2, 1}, inL: "pad", outL: "cl"},
	{name: "dw-nhwc-kdil2-negpad", batch: 3, cin: 5, cout: 5, group: 5, in: []int{9, 10}, k: []int{3, 3}, kdil: []int{2, 1}, padLo: []int{2, -1}, padHi: []int{0, 2}, inL: "cl", outL: "cl"},
	{name: "dw-nhwc-transposed-mult3", batch: 1, cin: 2, cout: 6, group: 2, in: []int{4, 5}, k: []int{3, 2}, idil: []int{2, 2}, strides: []int{1, 2}, padLo: []int{1, 1}, padHi: []int{2, 1}, inL: "cl", outL: "cl"},
	{name: "3d-dw-ndhwc", batch: 2, cin: 3, cout: 3, group: 3, in: []int{4, 5, 4}, k: []int{2, 3, 3}, padLo: []int{0, 1, 1}, padHi: []int{1, 1, 1}, inL: "cl", outL: "cl"},
	{name: "dw-negpad", batch: 2, cin: 2, cout: 2, group: 2, in: []int{8, 8}, k: []int{3, 3}, padLo: []int{-1, 0}, padHi: []int{-1, -2}, inL: "cf", outL: "cf"},
	{name: "1x1-nchw", batch: 3, cin: 8, cout: 5, group: 1, in: []int{6, 7}, k: []int{1, 1}, inL: "cf", outL: "cf"},
	{name: "1x1-nhwc", batch: 2, cin: 5, cout: 8, group: 1, in: []int{4, 6}, k: []int{1, 1}, inL: "cl", outL: "cl"},
	{name: "1x1-pad", batch: 1, cin: 4, cout: 3, group: 1, in: []int{5, 6}, k: []int{1, 1}, inL: "pad", outL: "pad"},
	{name: "1x1-s2", batch: 2, cin: 4, cout: 3, group: 1, in: []int{7, 6}, k: []int{1, 1}, strides: []int{2, 2}, inL: "cf", outL: "cf"},
	{name: "1x1-groups2-cn", batch: 3, cin: 4, cout: 6, group: 2, in: []int{3, 5}, k: []int{1, 1}, inL: "cn", outL: "cn"},
	{name: "2d-cn", batch: 3, cin: 3, cout: 2, group: 1, in: []int{5, 5}, k: []int{2, 2}, padLo: []int{0, 1}, padHi: []int{1, 0}, inL: "cn", outL: "cl"},
	{name: "2d-transposed-s2", batch: 2, cin: 3, cout: 4, group: 1, in: []int{4, 5}, k: []int{3, 3}, idil: []int{2, 2}, strides: []int{2, 1}, padLo: []int{2, 2}, padHi: []int{2, 2}, inL: "cf", outL: "cf"},
	{name: "3d-ncdhw", batch: 1, cin: 2, cout: 3, group: 1, in: []int{4, 5, 6}, k: []int{3, 3, 3}, padLo: []int{1, 1, 1}, padHi: []int{1, 1, 1}, inL: "cf", outL: "cf"},
	{name: "3d-ndhwc-groups2", batch: 3, cin: 4, cout: 4, group: 2, in: []int{5, 6, 5}, k: []int{2, 3, 2}, strides: []int{2, 1, 2}, kdil: []int{1, 2, 1}, padLo: []int{0, 2, 1}, padHi: []int{1, 0, 0}, inL: "cl", outL: "cl"},
	{name: "3d-dw-mult2", batch: 1, cin: 2, cout: 4, group: 2, in: []int{4, 4, 5}, k: []int{3, 2, 3}, padLo: []int{1, 0, 1}, padHi: []int{1, 1, 1}, inL: "cf", outL: "pad"},
	{name: "3d-transposed", batch: 1, cin: 2, cout: 2, group: 1, in: []int{3, 3, 3}, k: []int{2, 2, 2}, idil: []int{2, 1, 2}, padLo: []int{1, 1, 1}, padHi: []int{1, 1, 1}, inL: "cf", outL: "cf"},
	{name: "ones", batch: 1, cin: 1, cout: 1, group: 1, in: []int{1, 5}, k: []int{1, 3}, inL: "cf", outL: "cf"},
	{name: "ones-dw", batch: 1, cin: 1, cout: 2, group: 1, in: []int{1, 1}, k: []int{1, 1}, inL: "cl", outL: "cl"},
	{name: "kernel-gt-input", batch: 2, cin: 2, cout: 3, group: 1, in: []int{2, 2}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
	{name: "all-padding-rows", batch: 1, cin: 2, cout: 2, group: 1, in: []int{3, 3}, k: []int{2, 2}, padLo: []int{3, 0}, padHi: []int{4, 3}, inL: "cf", outL: "cf"},
	{name: "0d-matmul", batch: 3, cin: 5, cout: 4, group: 1, in: []int{}, k: []int{}, inL: "cf", outL: "cl"},
	{name: "multi-tile", batch: 1, cin: 16, cout: 8, group: 1, in: []int{40, 40}, k: []int{3, 3}, padLo: []int{1, 1}, padHi: []int{1, 1}, inL: "cf", outL: "cf"},
	{name: "deep-k", batch: 2, cin: 300, cout: 3, group: 1, in: []int{12, 13}, k: []int{3, 3}, inL: "cf", outL: "pad"},
	{name: "empty-batch", batch: 0, cin: 2, cout: 2, group: 1, in: []int{3, 3}, k: []int{2, 2}, inL: "cf", outL: "cf"},
	{name: "empty-k", batch: 2, cin: 0, cout: 3, group: 1, in: []int{3, 3}, k: []int{2, 2}, inL: "cf", outL: "pad"},
	{name: "empty-out", batch: 2, cin: 2, cout: 3, group: 1, in: []int{2, 2}, k: []int{3, 3}, inL: "cf", outL: "cf"},
}

// layout returns element strides for logical axes (batch, channel,
// spatial…) of the given sizes, and the slice length they need.
func layout(name string, sizes []int) ([]int, int) {
	n := len(sizes)
	spatial := make([]int, n-2)
	for i := range spatial {
		spatial[i] = i + 2
	}
	var order []int // outermost first
	gap := 0
	switch name {
	case "cf", "oi":
		order = append([]int{0, 1}, spatial...)
	case "pad":
		order, gap = append([]int{0, 1}, spatial...), 3
	case "cl", "oik":
		order = append(append([]int{0}, spatial...), 1)
	case "cn":
		order = append([]int{1, 0}, spatial...)
	case "io":
		order = append(slices.Clone(spatial), 1, 0)
	default:
		panic(name)
	}
	strides := make([]int, n)
	acc := 1
	for i := n - 1; i >= 0; i-- {
		strides[order[i]] = acc
		acc *= sizes[order[i]]
		if i == n-1 && n > 2 {
			acc += gap
		}
	}
	return strides, acc
}

func defaults(v []int, n, d int) []int {
	if v != nil {
		return v
	}
	s := make([]int, n)
	for i := range s {
		s[i] = d
	}
	return s
}

// params builds the ConvParams of c with kernel layout kl, and the lengths
// of the in, kernel and out slices.
func (c convCase) params(kl string) (*ConvParams, [3]int) {
	n := len(c.in)
	p := &ConvParams{Batch: c.batch, InChannels: c.cin, OutChannels: c.cout, Groups: c.group,
		InSpatial: c.in, KernelSpatial: c.k, Strides: defaults(c.strides, n, 1),
		KernelDilations: defaults(c.kdil, n, 1), PadLow: defaults(c.padLo, n, 0), InputDilations: c.idil}
	idil, padHi := defaults(c.idil, n, 1), defaults(c.padHi, n, 0)
	for d := range n {
		span := (c.in[d]-1)*idil[d] + 1 + p.PadLow[d] + padHi[d] - ((c.k[d]-1)*p.KernelDilations[d] + 1)
		p.OutSpatial = append(p.OutSpatial, max(0, floorDiv(span, p.Strides[d])+1))
	}
	if p.OutSpatial == nil {
		p.OutSpatial = []int{}
	}
	var lens [3]int
	var s []int
	s, lens[0] = layout(c.inL, append([]int{c.batch, c.cin}, c.in...))
	p.InBatchStride, p.InChanStride, p.InSpatialStrides = s[0], s[1], s[2:]
	s, lens[1] = layout(kl, append([]int{c.cout, c.cin / c.group}, c.k...))
	p.KerOutStride, p.KerInStride, p.KerSpatialStrides = s[0], s[1], s[2:]
	s, lens[2] = layout(c.outL, append([]int{c.batch, c.cout}, p.OutSpatial...))
	p.OutBatchStride, p.OutChanStride, p.OutSpatialStrides = s[0], s[1], s[2:]
	return p, lens
}

// refConv is XLA's convolution evaluated literally in float64: every output,
// every channel of its group and every kernel tap, with padding and input
// dilation decided per coordinate. It returns the outputs in logical
// row-major order (batch, out channel, spatial…) and, for each, Σ|in·ker|.
func refConv(p *ConvParams, in, ker []float32) (ref, mag []float64) {
	n := len(p.InSpatial)
	idil := defaults(p.InputDilations, n, 1)
	cg, og := p.InChannels/p.Groups, p.OutChannels/p.Groups
	outPos, kPos := allCoords(p.OutSpatial), allCoords(p.KernelSpatial)
	for b := range p.Batch {
		for o := range p.OutChannels {
			for _, y := range outPos {
				var sum, abs float64
				for c := range cg {
					for _, k := range kPos {
						inOff, ok := b*p.InBatchStride+(o/og*cg+c)*p.InChanStride, true
						for d := range n {
							q := y[d]*p.Strides[d] - p.PadLow[d] + k[d]*p.KernelDilations[d]
							if q < 0 || q%idil[d] != 0 || q/idil[d] >= p.InSpatial[d] {
								ok = false
								break
							}
							inOff += q / idil[d] * p.InSpatialStrides[d]
						}
						if !ok {
							continue
						}
						kOff := o*p.KerOutStride + c*p.KerInStride
						for d := range n {
							kOff += k[d] * p.KerSpatialStrides[d]
						}
						v := float64(in[inOff]) * float64(ker[kOff])
						sum += v
						abs += math.Abs(v)
					}
				}
				ref, mag = append(ref, sum), append(mag, abs)
			}
		}
	}
	return ref, mag
}

// allCoords lists the row-major coordinates of every element of dims.
func allCoords(dims []int) [][]int {
	var out [][]int
	for t := range prod(dims) {
		c := make([]int, len(dims))
		unflatten(t, dims, c)
		out = append(out, c)
	}
	return out
}

// outOffsets lists the output's element offsets in logical row-major order.
func outOffsets(p *ConvParams) []int {
	dims, strides := p.outAxes()
	var offs []int
	for _, c := range allCoords(dims) {
		offs = append(offs, rowOffset(c, strides))
	}
	return offs
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = rng.Float32()*2 - 1
	}
	return s
}

// convTol is the accepted error in units of float32 eps × Σ|in·ker| per
// output. Measured worst over the whole table (TestConv logs it): 1.38
// with the naive gemm, 2.23 with the blocked FMA gemm (multi-tile, K =
// 144); 8 leaves room for gemm's summation order to change again while
// staying within 10× of the measurement.
const convTol = 8.0

var (
	errMu       sync.Mutex
	maxErrRatio float64
	maxErrCase  string
)

const sentinel = 777

// TestConv runs the table with the default tiling and with tiny tiles
// (a few positions, starting mid-row), every kernel layout, packed and
// unpacked kernels and 1 or 3 threads.
func TestConv(t *testing.T) {
	t.Run("default-tiles", testConvTable)
	defer func(s, m int) { scratchFloats, minTile = s, m }(scratchFloats, minTile)
	scratchFloats, minTile = 256, 5
	t.Run("small-tiles", testConvTable)
	t.Logf("max |got-ref| / (eps32·Σ|in·ker|) = %.3f in %s (tolerance %.1f)", maxErrRatio, maxErrCase, convTol)
}

func testConvTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range convCases {
		for _, kl := range kerLayouts {
			p, lens := c.params(kl)
			in, ker := randSlice(rng, lens[0]), randSlice(rng, lens[1])
			ref, mag := refConv(p, in, ker)
			for _, packed := range []bool{false, true} {
				for _, threads := range []int{1, 3} {
					name := fmt.Sprintf("%s/%s/packed=%v/threads=%d", c.name, kl, packed, threads)
					t.Run(name, func(t *testing.T) {
						out := make([]float32, lens[2])
						fill(out, sentinel)
						var err error
						if packed {
							var pk []float32
							if pk, err = PackKernel(p, ker); err == nil {
								err = Float32Packed(p, pk, in, out, threads)
							}
						} else {
							err = Float32(p, in, ker, out, threads)
						}
						if err != nil {
							t.Fatal(err)
						}
						checkConv(t, p, out, ref, mag)
					})
				}
			}
		}
	}
}

// checkConv compares out with the reference and checks that elements
// outside the output view keep the sentinel.
func checkConv(t *testing.T, p *ConvParams, out []float32, ref, mag []float64) {
	t.Helper()
	eps := float64(math.Nextafter32(1, 2) - 1)
	offs := outOffsets(p)
	if len(offs) != len(ref) {
		t.Fatalf("reference has %d outputs, view %d", len(ref), len(offs))
	}
	written := make([]bool, len(out))
	bad := 0
	for i, off := range offs {
		written[off] = true
		diff := math.Abs(float64(out[off]) - ref[i])
		if mag[i] > 0 {
			errMu.Lock()
			if r := diff / (eps * mag[i]); r > maxErrRatio {
				maxErrRatio, maxErrCase = r, t.Name()
			}
			errMu.Unlock()
		}
		if !(diff <= convTol*eps*mag[i]) {
			if bad++; bad <= 5 {
				t.Errorf("output #%d (offset %d): got %v, want %v (Σ|in·ker| %v)", i, off, out[off], ref[i], mag[i])
			}
		}
	}
	for i, w := range written {
		if !w && out[i] != sentinel {
			t.Fatalf("element %d outside the output view was overwritten: %v", i, out[i])
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d outputs wrong", bad, len(ref))
	}
}

func TestConvValidate(t *testing.T) {
	base := func() (*ConvParams, [3]int) {
		return convCase{batch: 2, cin: 4, cout: 6, group: 2, in: []int{5, 5}, k: []int{3, 3},
			inL: "cf", outL: "cf"}.params("oi")
	}
	p, lens := base()
	if err := p.Validate(lens[0], lens[1], lens[2]); err != nil {
		t.Fatalf("valid params rejected: %v", err)
	}
	tests := []struct {
		name, want string
		edit       func(p *ConvParams, l *[3]int)
	}{
		{"short in", "len(in) = 199, want ≥ 200", func(p *ConvParams, l *[3]int) { l[0]-- }},
		{"short kernel", "len(kernel)", func(p *ConvParams, l *[3]int) { l[1] = 3 }},
		{"short out", "len(out) = 0", func(p *ConvParams, l *[3]int) { l[2] = 0 }},
		{"strides rank", "len(Strides) = 1, want 2", func(p *ConvParams, l *[3]int) { p.Strides = []int{1} }},
		{"pad rank", "len(PadLow)", func(p *ConvParams, l *[3]int) { p.PadLow = nil }},
		{"idil rank", "len(InputDilations)", func(p *ConvParams, l *[3]int) { p.InputDilations = []int{2} }},
		{"out strides rank", "len(OutSpatialStrides)", func(p *ConvParams, l *[3]int) { p.OutSpatialStrides = []int{1, 1, 1} }},
		{"groups zero", "Groups = 0", func(p *ConvParams, l *[3]int) { p.Groups = 0 }},
		{"groups divide", "Groups = 4 must divide", func(p *ConvParams, l *[3]int) { p.Groups = 4 }},
		{"negative batch", "Batch = -1", func(p *ConvParams, l *[3]int) { p.Batch = -1 }},
		{"stride zero", "Strides[1] = 0, want ≥ 1", func(p *ConvParams, l *[3]int) { p.Strides = []int{1, 0} }},
		{"kdil zero", "KernelDilations[0] = 0", func(p *ConvParams, l *[3]int) { p.KernelDilations = []int{0, 1} }},
		{"idil zero", "InputDilations[1] = 0", func(p *ConvParams, l *[3]int) { p.InputDilations = []int{1, 0} }},
		{"negative in stride", "InChanStride = -25", func(p *ConvParams, l *[3]int) { p.InChanStride = -25 }},
		{"negative kernel dim", "KernelSpatial[1] = -1", func(p *ConvParams, l *[3]int) { p.KernelSpatial = []int{3, -1} }},
		{"overlapping out", "output strides", func(p *ConvParams, l *[3]int) { p.OutChanStride = 1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, lens := base()
			tc.edit(p, &lens)
			err := p.Validate(lens[0], lens[1], lens[2])
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate error = %v, want it to contain %q", err, tc.want)
			}
			in, ker, out := make([]float32, max(lens[0], 0)), make([]float32, lens[1]), make([]float32, lens[2])
			if err := Float32(p, in, ker, out, 1); err == nil {
				t.Fatalf("Float32 accepted invalid params")
			}
		})
	}
	t.Run("packed length", func(t *testing.T) {
		p, lens := base()
		err := Float32Packed(p, make([]float32, 5), make([]float32, lens[0]), make([]float32, lens[2]), 1)
		if err == nil || !strings.Contains(err.Error(), "len(packed) = 5, want 108") {
			t.Fatalf("error = %v", err)
		}
	})
}

// TestConvConcurrent runs calls from several goroutines at once, sharing
// the scratch pools (run it with -race), and checks every result after.
func TestConvConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	type call struct {
		p    *ConvParams
		out  []float32
		err  error
		ref  []float64
		mag  []float64
		in   []float32
		ker  []float32
		name string
	}
	var calls []*call
	for i, c := range []convCase{convCases[6], convCases[11], convCases[14], convCases[18]} {
		p, lens := c.params(kerLayouts[i%len(kerLayouts)])
		in, ker := randSlice(rng, lens[0]), randSlice(rng, lens[1])
		ref, mag := refConv(p, in, ker)
		for range 4 {
			out := make([]float32, lens[2])
			fill(out, sentinel)
			calls = append(calls, &call{p: p, out: out, ref: ref, mag: mag, in: in, ker: ker, name: c.name})
		}
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() { c.err = Float32(c.p, c.in, c.ker, c.out, 2) })
	}
	wg.Wait()
	for _, c := range calls {
		if c.err != nil {
			t.Fatalf("%s: %v", c.name, c.err)
		}
		checkConv(t, c.p, c.out, c.ref, c.mag)
	}
}

// fill sets every element of s to v (the tests' sentinel).
func fill(s []float32, v float32) {
	for i := range s {
		s[i] = v
	}
}
