package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// convCase is one ConvGeneral configuration, NCHW input and OIHW kernel
// unless nhwc (NHWC input and output, HWIO kernel).
type convCase struct {
	name              string
	n, c, h, w, o, k  int
	stride, pad, dil  int
	groups            int
	nhwc, constKernel bool
	inDil, padHigh    int // input dilation (transposed convolution; 0 means 1) and a different high padding (0: pad)
}

var convCases = []convCase{
	{"3x3 pad 1", 1, 8, 9, 9, 16, 3, 1, 1, 1, 1, false, true, 0, 0},
	{"3x3 stride 2 batch 2", 2, 4, 11, 10, 6, 3, 2, 1, 1, 1, false, false, 0, 0},
	{"7x7 stride 2 pad 3", 1, 3, 20, 20, 8, 7, 2, 3, 1, 1, false, true, 0, 0},
	{"1x1", 1, 32, 7, 7, 24, 1, 1, 0, 1, 1, false, true, 0, 0},
	{"3x3 eleven channels", 2, 11, 7, 9, 5, 3, 1, 1, 1, 1, false, false, 0, 0}, // channels-last copy: a block of 8 and 3 more
	{"dilated", 1, 4, 12, 12, 4, 3, 1, 2, 2, 1, false, false, 0, 0},
	{"grouped", 2, 8, 6, 6, 12, 3, 1, 1, 1, 4, false, true, 0, 0},
	{"depthwise", 1, 16, 10, 10, 16, 3, 1, 1, 1, 16, false, true, 0, 0},
	{"depthwise multiplier 2, stride 2", 1, 8, 9, 9, 16, 3, 2, 1, 1, 8, false, false, 0, 0},
	{"nhwc", 1, 5, 8, 8, 7, 3, 1, 1, 1, 1, true, true, 0, 0},
	{"input dilation (transposed)", 1, 3, 5, 5, 4, 3, 1, 2, 1, 1, false, true, 2, 0},
	{"asymmetric and negative padding", 1, 3, 9, 9, 4, 3, 2, 2, 1, 1, false, false, 0, -1},
}

// TestConvMatchesSimplego runs every case on both engines (fault injected
// once: treating positions between dilated inputs as inputs fails the
// input-dilation case).
func TestConvMatchesSimplego(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range convCases {
		t.Run(c.name, func(t *testing.T) {
			in := []int{c.n, c.c, c.h, c.w}
			ker := []int{c.o, c.c / c.groups, c.k, c.k}
			axes := backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 1, InputSpatial: []int{2, 3},
				KernelOutputChannels: 0, KernelInputChannels: 1, KernelSpatial: []int{2, 3},
				OutputBatch: 0, OutputChannels: 1, OutputSpatial: []int{2, 3}}
			if c.nhwc {
				in, ker = []int{c.n, c.h, c.w, c.c}, []int{c.k, c.k, c.c / c.groups, c.o}
				axes = backends.ConvolveAxesConfig{InputBatch: 0, InputChannels: 3, InputSpatial: []int{1, 2},
					KernelOutputChannels: 3, KernelInputChannels: 2, KernelSpatial: []int{0, 1},
					OutputBatch: 0, OutputChannels: 3, OutputSpatial: []int{1, 2}}
			}
			ins := []shapes.Shape{shapes.Make(dtypes.Float32, in...)}
			kv := randF32(rng, shapes.Make(dtypes.Float32, ker...).Size())
			vals := []any{randF32(rng, ins[0].Size())}
			if !c.constKernel {
				ins = append(ins, shapes.Make(dtypes.Float32, ker...))
				vals = append(vals, kv)
			}
			fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
				k := backends.Op(nil)
				if c.constKernel {
					var err error
					if k, err = b.Constant(kv, ker...); err != nil {
						return nil, err
					}
				} else {
					k = p[1]
				}
				hi := c.pad
				if c.padHigh != 0 {
					hi = c.padHigh
				}
				pads := [][2]int{{c.pad, hi}, {c.pad, hi}}
				var inDil []int
				if c.inDil > 1 {
					inDil = []int{c.inDil, c.inDil}
				}
				o, err := b.ConvGeneral(p[0], k, axes, []int{c.stride, c.stride}, pads, inDil, []int{c.dil, c.dil}, c.groups, 1)
				return []backends.Op{o}, err
			}
			steps := planOf(t, e, ins, fn)
			if len(steps) != 1 || steps[0].seg != nil {
				t.Fatalf("planned as %d steps, want one native convolution", len(steps))
			}
			got := runGraph(t, e, ins, vals, fn)
			want := runGraph(t, oracle, ins, vals, fn)
			terms := float64(c.c / c.groups * c.k * c.k)
			closeF32(t, fmt.Sprint(c.name), got[0].([]float32), want[0].([]float32), dotTol, math.Sqrt(terms))
		})
	}
}

// TestReduceWindowExact: max, min and sum pooling with strides, padding
// and window dilations equal simplego's bit for bit (same window order).
func TestReduceWindowExact(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(13, 14))
	s := shapes.Make(dtypes.Float32, 2, 3, 9, 8)
	v := randF32(rng, s.Size())
	v[5] = float32(math.NaN())
	for _, red := range []backends.ReduceOpType{backends.ReduceOpMax, backends.ReduceOpMin, backends.ReduceOpSum} {
		for _, c := range []struct {
			win, str, dil []int
			pad           [][2]int
		}{
			{[]int{1, 1, 3, 3}, []int{1, 1, 2, 2}, nil, [][2]int{{0, 0}, {0, 0}, {1, 1}, {1, 1}}},
			{[]int{1, 1, 2, 2}, []int{1, 1, 2, 2}, nil, nil},
			{[]int{1, 2, 3, 2}, []int{1, 1, 1, 3}, []int{1, 1, 2, 1}, [][2]int{{0, 0}, {0, 1}, {2, 0}, {0, 0}}},
		} {
			t.Run(fmt.Sprint(red, c.win, c.str), func(t *testing.T) {
				fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
					o, err := b.ReduceWindow(p[0], red, c.win, c.str, nil, c.dil, c.pad)
					return []backends.Op{o}, err
				}
				if steps := planOf(t, e, []shapes.Shape{s}, fn); len(steps) != 1 || steps[0].seg != nil {
					t.Fatal("ReduceWindow not native")
				}
				bitsEqual(t, runGraph(t, e, []shapes.Shape{s}, []any{v}, fn), runGraph(t, oracle, []shapes.Shape{s}, []any{v}, fn))
			})
		}
	}
}

// TestKernelMajorConvMatchesSimplego runs convolutions laid out as
// GoMLX's autodiff lays out a weight gradient (input batch and channel
// axes swapped, the output gradient as the kernel: more taps than output
// positions), which run on the kernel-major path of convgrad.go, on both
// engines. Fault injected once: a tap run shifted by one position fails
// every case.
func TestKernelMajorConvMatchesSimplego(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(13, 14))
	axes := backends.ConvolveAxesConfig{InputBatch: 1, InputChannels: 0, InputSpatial: []int{2, 3},
		KernelOutputChannels: 1, KernelInputChannels: 0, KernelSpatial: []int{2, 3},
		OutputBatch: 1, OutputChannels: 0, OutputSpatial: []int{2, 3}}
	cases := []struct {
		name          string
		in, ker       []int // [contracted, batch, h, w], [contracted, out, kh, kw]
		pads          [][2]int
		kdil, strides []int
	}{
		{"3x3 gradient, stride-1 layer", []int{4, 6, 10, 10}, []int{4, 5, 10, 10}, [][2]int{{1, 1}, {1, 1}}, []int{1, 1}, []int{1, 1}},
		{"3x3 gradient, stride-2 layer", []int{3, 4, 11, 11}, []int{3, 5, 6, 6}, [][2]int{{1, 0}, {1, 0}}, []int{2, 2}, []int{1, 1}},
		{"1x1 gradient, negative padding", []int{2, 3, 8, 8}, []int{2, 4, 4, 4}, [][2]int{{0, -1}, {0, -1}}, []int{2, 2}, []int{1, 1}},
		{"7x7 gradient, blocks of kernel rows", []int{2, 3, 36, 36}, []int{2, 4, 30, 30}, [][2]int{{3, 2}, {3, 2}}, []int{1, 1}, []int{1, 1}},
		{"strided output, channels over several blocks", []int{9, 2, 9, 9}, []int{9, 3, 4, 4}, [][2]int{{0, 0}, {1, 1}}, []int{1, 1}, []int{2, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ins := []shapes.Shape{shapes.Make(dtypes.Float32, c.in...), shapes.Make(dtypes.Float32, c.ker...)}
			vals := []any{randF32(rng, ins[0].Size()), randF32(rng, ins[1].Size())}
			fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
				o, err := b.ConvGeneral(p[0], p[1], axes, c.strides, c.pads, nil, c.kdil, 1, 1)
				return []backends.Op{o}, err
			}
			steps := planOf(t, e, ins, fn)
			if len(steps) != 1 || steps[0].seg != nil {
				t.Fatalf("planned as %d steps, want one native convolution", len(steps))
			}
			got := runGraph(t, e, ins, vals, fn)
			want := runGraph(t, oracle, ins, vals, fn)
			terms := float64(c.ker[0] * c.ker[2] * c.ker[3])
			// The reference sums up to 1,800 products in float32 in its own
			// order: the two orders differ by up to 1.78e-6 here with the
			// assembly kernels and 2.02e-6 with the pure-Go ones (-tags
			// purego), so twice dotTol.
			closeF32(t, c.name, got[0].([]float32), want[0].([]float32), 2*dotTol, math.Sqrt(terms))
		})
	}
}
