package conv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tensorbridge/tensorbridge/cpu/gemm"
)

// TestConvPost checks the epilogue (and the KernelCache of packed
// kernels) against the convolution without it
// followed by the three ops in plain Go (Go's +, max and min, which the
// separate passes compute): bit for bit, on every case of the table,
// packed and unpacked kernels, 1 and 3 threads, default and tiny tiles
// (so blocks of the product end mid-row), with NaN inputs in one variant.
func TestConvPost(t *testing.T) {
	t.Run("default-tiles", testConvPostTable)
	defer func(s, m int) { scratchFloats, minTile = s, m }(scratchFloats, minTile)
	scratchFloats, minTile = 256, 5
	t.Run("small-tiles", testConvPostTable)
}

func testConvPostTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	variants := []struct {
		name         string
		bias         bool
		lo, hi       float32
		hasLo, hasHi bool
		nan          bool
	}{
		{name: "bias-clip", bias: true, lo: -0.25, hi: 0.5, hasLo: true, hasHi: true},
		{name: "bias-relu", bias: true, hasLo: true},
		{name: "bias", bias: true},
		{name: "clip-nan", lo: 0, hi: 0.25, hasLo: true, hasHi: true, nan: true},
	}
	for _, c := range convCases {
		p0, lens := c.params("oi")
		for _, v := range variants {
			in, ker := randSlice(rng, lens[0]), randSlice(rng, lens[1])
			if v.nan && len(in) > 0 {
				in[len(in)/2] = float32(math.NaN())
			}
			post := &gemm.Post{Lo: v.lo, Hi: v.hi, HasLo: v.hasLo, HasHi: v.hasHi}
			if v.bias {
				post.Bias = randSlice(rng, c.cout)
			}
			plain := make([]float32, lens[2])
			fill(plain, sentinel)
			if err := Float32(p0, in, ker, plain, 1); err != nil {
				t.Fatal(err)
			}
			want := postReference(p0, plain, post)
			for _, packed := range []bool{false, true} {
				for _, threads := range []int{1, 3} {
					t.Run(fmt.Sprintf("%s/%s/packed=%v/threads=%d", c.name, v.name, packed, threads), func(t *testing.T) {
						p := *p0
						p.Post = post
						got := make([]float32, lens[2])
						fill(got, sentinel)
						var err error
						if packed {
							// With a KernelCache: the second call reads the
							// slivers the first one packed.
							p.Cache = new(KernelCache)
							var pk []float32
							if pk, err = PackKernel(&p, ker); err == nil {
								for range 2 {
									if err = Float32Packed(&p, pk, in, got, threads); err != nil {
										break
									}
								}
							}
						} else {
							err = Float32(&p, in, ker, got, threads)
						}
						if err != nil {
							t.Fatal(err)
						}
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("element %d: got %v (%#x), want %v (%#x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
							}
						}
					})
				}
			}
		}
	}
}

// postReference applies post to the outputs of out (a copy), in plain Go.
func postReference(p *ConvParams, out []float32, post *gemm.Post) []float32 {
	want := append([]float32(nil), out...)
	offs := outOffsets(p)
	per := 1
	for _, d := range p.OutSpatial {
		per *= d
	}
	for i, off := range offs {
		x := want[off]
		if post.Bias != nil {
			x += post.Bias[i/max(per, 1)%p.OutChannels]
		}
		if post.HasLo {
			x = max(x, post.Lo)
		}
		if post.HasHi {
			x = min(x, post.Hi)
		}
		want[off] = x
	}
	return want
}

func TestConvPostValidate(t *testing.T) {
	p, lens := convCases[0].params("oi")
	p.Post = &gemm.Post{Bias: make([]float32, p.OutChannels+1)}
	in, ker, out := make([]float32, lens[0]), make([]float32, lens[1]), make([]float32, lens[2])
	if err := Float32(p, in, ker, out, 1); err == nil {
		t.Fatal("a bias of the wrong length was accepted")
	}
}
