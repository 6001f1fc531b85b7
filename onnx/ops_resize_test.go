package onnx

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// resizeCase builds a one-node Resize/Upsample test: x (float32 unless xt
// is set) with dims, constant initializers, attributes, and the expected
// output. Expected values are computed by hand from the operator
// specification (the working is in the comments) or, where noted, are the
// outputs printed in the ONNX operator documentation (docs/Operators.md,
// Resize examples).
type resizeCase struct {
	name    string
	op      string // "Resize" when empty
	opset   int64
	inputs  []string // node inputs after "x" ("" for omitted)
	inits   []onnxpb.Tensor
	attrs   []onnxpb.Attribute
	dims    []int
	x       []float32
	xt      *ir.Tensor // overrides x for non-float inputs
	xType   onnxpb.DataType
	outDT   ir.DType
	outDims []int
	want    []float64
	tol     float64
}

func (rc resizeCase) opCase(t *testing.T) opCase {
	op := rc.op
	if op == "" {
		op = "Resize"
	}
	xType, outDT := rc.xType, rc.outDT
	if xType == 0 {
		xType, outDT = onnxpb.Float, ir.Float32
	}
	inDims := make([]any, len(rc.dims))
	for k, d := range rc.dims {
		inDims[k] = d
	}
	outDims := make([]any, len(rc.outDims))
	for k, d := range rc.outDims {
		outDims[k] = d
	}
	x := rc.xt
	if x == nil {
		x = f32(t, rc.dims, rc.x...)
	}
	return opCase{
		name: rc.name, opset: rc.opset,
		node:    node(op, append([]string{"x"}, rc.inputs...), []string{"y"}, rc.attrs...),
		inputs:  []onnxpb.ValueInfo{vi("x", xType, inDims...)},
		outputs: []onnxpb.ValueInfo{vi("y", xType, outDims...)},
		inits:   rc.inits, feed: map[string]*ir.Tensor{"x": x},
		outDT: outDT, outDims: rc.outDims, want: rc.want, tol: rc.tol,
	}
}

func scalesInit(v ...float32) onnxpb.Tensor { return tF32("scales", []int64{int64(len(v))}, v...) }
func sizesInit(v ...int64) onnxpb.Tensor    { return tI64("sizes", []int64{int64(len(v))}, v...) }

func TestResizeOps(t *testing.T) {
	x2x2 := []float32{1, 2, 3, 4}
	x2x4 := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	x4x4 := iotaF(16)
	for k := range x4x4 {
		x4x4[k]++ // 1..16
	}
	i32 := func(dims []int, v ...int32) *ir.Tensor {
		x, err := ir.TensorFromFlat(v, dims...)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	u8 := func(dims []int, v ...uint8) *ir.Tensor {
		x, err := ir.TensorFromFlat(v, dims...)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	cases := []resizeCase{
		{
			// Operators.md, Upsample example: each pixel repeated 2×3.
			name: "Upsample-9 nearest", op: "Upsample", opset: 9, inputs: []string{"scales"},
			inits: []onnxpb.Tensor{scalesInit(1, 1, 2, 3)}, attrs: []onnxpb.Attribute{aString("mode", "nearest")},
			dims: []int{1, 1, 2, 2}, x: x2x2, outDims: []int{1, 1, 4, 6},
			want: floats(1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4),
		},
		{
			// Asymmetric: rows/cols map to 0, 0.5, 1, 1.5 (the last clamps to
			// the edge): [r0, (r0+r1)/2, r1, r1] on both axes.
			name: "Upsample-7 linear scales attribute", op: "Upsample", opset: 7,
			attrs: []onnxpb.Attribute{aString("mode", "linear"), {Name: "scales", Type: onnxpb.AttrFloats, Floats: []float32{1, 1, 2, 2}}},
			dims:  []int{1, 1, 2, 2}, x: x2x2, outDims: []int{1, 1, 4, 4},
			want: floats(1, 1.5, 2, 2, 2, 2.5, 3, 3, 3, 3.5, 4, 4, 3, 3.5, 4, 4),
		},
		{
			// Resize-10 nearest truncates when upsampling: y/3 → 0,0,0,1,1,1.
			name: "Resize-10 nearest upsample truncates", opset: 10, inputs: []string{"scales"},
			inits: []onnxpb.Tensor{scalesInit(3)}, dims: []int{2}, x: []float32{10, 20}, outDims: []int{6},
			want: floats(10, 10, 10, 20, 20, 20),
		},
		{
			// Downsampling rounds up: cols y/0.6 → 0, 1.67 → 2; one row.
			name: "Resize-10 nearest downsample rounds up", opset: 10, inputs: []string{"scales"},
			inits: []onnxpb.Tensor{scalesInit(1, 1, 0.6, 0.6)}, dims: []int{1, 1, 2, 4}, x: x2x4, outDims: []int{1, 1, 1, 2},
			want: floats(1, 3),
		},
		{
			// half_pixel: x = (y+0.5)/2 - 0.5 = -0.25, 0.25, 0.75, 1.25 →
			// 1, 1.25, 1.75, 2 along a row (edges clamp).
			name: "linear half_pixel upsample", opset: 13, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(1, 1, 2, 2)}, attrs: []onnxpb.Attribute{aString("mode", "linear")},
			dims: []int{1, 1, 2, 2}, x: x2x2, outDims: []int{1, 1, 4, 4},
			want: floats(1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4),
		},
		{
			// tf_half_pixel_for_nn: x = (y+0.5)/scale; rows (scale 3/4)
			// 0.67, 2, 3.33 → 1, 2, 3; cols (scale 1/2) 1, 3.
			name: "Resize-11 tf_half_pixel_for_nn with empty roi and scales", opset: 11, inputs: []string{"roi", "scales", "sizes"},
			inits: []onnxpb.Tensor{tF32("roi", []int64{0}), tF32("scales", []int64{0}), sizesInit(1, 1, 3, 2)},
			attrs: []onnxpb.Attribute{aString("coordinate_transformation_mode", "tf_half_pixel_for_nn")},
			dims:  []int{1, 1, 4, 4}, x: x4x4, outDims: []int{1, 1, 3, 2},
			want: floats(6, 8, 10, 12, 14, 16),
		},
		{
			// asymmetric, x = y/2 = 0, .5, 1, ... 3.5; ties round up.
			name: "nearest round_prefer_ceil asymmetric", opset: 13, inputs: []string{"", "", "sizes"},
			inits: []onnxpb.Tensor{sizesInit(8)},
			attrs: []onnxpb.Attribute{aString("coordinate_transformation_mode", "asymmetric"), aString("nearest_mode", "round_prefer_ceil")},
			dims:  []int{4}, x: []float32{1, 2, 3, 4}, outDims: []int{8}, want: floats(1, 2, 2, 3, 3, 4, 4, 4),
		},
		{
			name: "nearest round_prefer_floor asymmetric", opset: 13, inputs: []string{"", "", "sizes"},
			inits: []onnxpb.Tensor{sizesInit(8)}, attrs: []onnxpb.Attribute{aString("coordinate_transformation_mode", "asymmetric")},
			dims: []int{4}, x: []float32{1, 2, 3, 4}, outDims: []int{8}, want: floats(1, 1, 2, 2, 3, 3, 4, 4),
		},
		{
			// half_pixel, x = y/2 - 0.25 = -0.25, 0.25, ..., 3.25.
			name: "nearest floor half_pixel", opset: 13, inputs: []string{"", "", "sizes"},
			inits: []onnxpb.Tensor{sizesInit(8)}, attrs: []onnxpb.Attribute{aString("nearest_mode", "floor")},
			dims: []int{4}, x: []float32{1, 2, 3, 4}, outDims: []int{8}, want: floats(1, 1, 1, 2, 2, 3, 3, 4),
		},
		{
			name: "nearest ceil half_pixel", opset: 13, inputs: []string{"", "", "sizes"},
			inits: []onnxpb.Tensor{sizesInit(8)}, attrs: []onnxpb.Attribute{aString("nearest_mode", "ceil")},
			dims: []int{4}, x: []float32{1, 2, 3, 4}, outDims: []int{8}, want: floats(1, 2, 2, 3, 3, 4, 4, 4),
		},
		{
			// Keys' kernel, a = -0.75, at x = 0.5: weights K(1.5), K(0.5),
			// K(0.5), K(1.5) = -0.09375, 0.59375, 0.59375, -0.09375 on
			// inputs 0,0,1,2 (clamped) → 1.40625; x = 3 is exact → 4; x =
			// 3.5 reads 3,4,4,4 → 4.09375.
			name: "cubic asymmetric", opset: 13, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(2)},
			attrs: []onnxpb.Attribute{aString("mode", "cubic"), aString("coordinate_transformation_mode", "asymmetric")},
			dims:  []int{4}, x: []float32{1, 2, 3, 4}, outDims: []int{8},
			want: floats(1, 1.40625, 2, 2.5, 3, 3.59375, 4, 4.09375), tol: 1e-6,
		},
		{
			// a = -0.5: K(0.25) = 111/128, K(0.75) = 29/128, K(1.25) =
			// -9/128, K(1.75) = -3/128. At y = 0, x = -0.25: taps -2..1, the
			// two outside dropped, 111 and -9 renormalised → 93/102. The
			// values are symmetric: out[k] + out[7-k] = 5.
			name: "cubic A=-0.5 exclude_outside", opset: 13, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(2)},
			attrs: []onnxpb.Attribute{aString("mode", "cubic"), aFloat("cubic_coeff_a", -0.5), aInt("exclude_outside", 1)},
			dims:  []int{4}, x: []float32{1, 2, 3, 4}, outDims: []int{8},
			want: floats(93.0/102, 160.0/137, 224.0/131, 2.25, 2.75, 431.0/131, 525.0/137, 417.0/102), tol: 1e-6,
		},
		{
			// align_corners uses the fractional output width 4·0.6 = 2.4:
			// col 1 maps to 3/1.4 = 2.142857; one row (width 1.2 ≠ 1) at 0.
			name: "linear align_corners downsample", opset: 13, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(1, 1, 0.6, 0.6)},
			attrs: []onnxpb.Attribute{aString("mode", "linear"), aString("coordinate_transformation_mode", "align_corners")},
			dims:  []int{1, 1, 2, 4}, x: x2x4, outDims: []int{1, 1, 1, 2}, want: floats(1, 1+3.0/1.4), tol: 1e-5,
		},
		{
			// x = y·0.8·3/2 + 0.4·3 = 1.2, 2.4, 3.6; 3.6 > 3 extrapolates.
			name: "tf_crop_and_resize extrapolation", opset: 13, inputs: []string{"roi", "", "sizes"},
			inits: []onnxpb.Tensor{tF32("roi", []int64{2}, 0.4, 1.2), sizesInit(3)},
			attrs: []onnxpb.Attribute{aString("mode", "linear"), aString("coordinate_transformation_mode", "tf_crop_and_resize"), aFloat("extrapolation_value", 10)},
			dims:  []int{4}, x: []float32{1, 2, 3, 4}, outDims: []int{3}, want: floats(2.2, 3.4, 10), tol: 1e-5,
		},
		{
			// Antialiased linear at scale 0.6: the triangle widened to
			// support 1/0.6. y=0: x = 1/3, taps -1..2 at distances
			// (-4/3, -1/3, 2/3, 5/3)·0.6 → weights .2,.8,.6,0 (/1.6) →
			// 0.625·1 + 0.375·2 = 1.375. y=1: x = 2, weights 0,.4,1,.4 on
			// 1..4 (/1.8) → 3.
			name: "linear antialias downsample", opset: 18, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(0.6)}, attrs: []onnxpb.Attribute{aString("mode", "linear"), aInt("antialias", 1)},
			dims: []int{4}, x: []float32{1, 2, 3, 4}, outDims: []int{2}, want: floats(1.375, 3), tol: 1e-5,
		},
		{
			// Operators.md, resize_downsample_scales_cubic_antialias.
			name: "cubic antialias downsample (published)", opset: 18, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(1, 1, 0.6, 0.6)}, attrs: []onnxpb.Attribute{aString("mode", "cubic"), aInt("antialias", 1)},
			dims: []int{1, 1, 4, 4}, x: x4x4, outDims: []int{1, 1, 2, 2},
			want: floats(2.5180721, 4.2858863, 9.589329, 11.357142), tol: 1e-5,
		},
		{
			// Operators.md, resize_upsample_scales_linear_half_pixel_symmetric.
			name: "linear half_pixel_symmetric (published)", opset: 19, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(1, 1, 2.3, 2.94)},
			attrs: []onnxpb.Attribute{aString("mode", "linear"), aString("coordinate_transformation_mode", "half_pixel_symmetric")},
			dims:  []int{1, 1, 2, 2}, x: x2x2, outDims: []int{1, 1, 4, 5},
			want: floats(1, 1.15986395, 1.5, 1.84013605, 2,
				1.56521738, 1.72508133, 2.06521738, 2.40535343, 2.56521738,
				2.43478262, 2.59464657, 2.93478262, 3.27491867, 3.43478262,
				3, 3.15986395, 3.5, 3.84013605, 4), tol: 1e-5,
		},
		{
			// sizes 1×3 on 2×4: scale min(1/2, 3/4) = 1/2 → 1×2; half_pixel
			// nearest: row x = 0.5 → 0, cols 0.5, 2.5 → 0, 2.
			name: "keep_aspect_ratio not_larger", opset: 18, inputs: []string{"", "", "sizes"},
			inits: []onnxpb.Tensor{sizesInit(1, 3)},
			attrs: []onnxpb.Attribute{aInts("axes", 2, 3), aString("keep_aspect_ratio_policy", "not_larger")},
			dims:  []int{1, 1, 2, 4}, x: x2x4, outDims: []int{1, 1, 1, 2}, want: floats(1, 3),
		},
		{
			// scale max(1/2, 3/4) = 3/4 → 2×3; rows 1/6, 1.5 → 0, 1; cols
			// 1/6, 1.5, 2.83 → 0, 1, 3.
			name: "keep_aspect_ratio not_smaller", opset: 18, inputs: []string{"", "", "sizes"},
			inits: []onnxpb.Tensor{sizesInit(1, 3)},
			attrs: []onnxpb.Attribute{aInts("axes", 2, 3), aString("keep_aspect_ratio_policy", "not_smaller")},
			dims:  []int{1, 1, 2, 4}, x: x2x4, outDims: []int{1, 1, 2, 3}, want: floats(1, 2, 4, 5, 6, 8),
		},
		{
			name: "axes subset with negative axis", opset: 18, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(2)}, attrs: []onnxpb.Attribute{aInts("axes", -1)},
			dims: []int{2, 2}, x: x2x2, outDims: []int{2, 4}, want: floats(1, 1, 2, 2, 3, 3, 4, 4),
		},
		{
			// asymmetric linear on int32: 0.5 and 1.5 round half to even.
			name: "linear int32 rounds half to even", opset: 13, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(2)},
			attrs: []onnxpb.Attribute{aString("mode", "linear"), aString("coordinate_transformation_mode", "asymmetric")},
			dims:  []int{3}, xt: i32([]int{3}, 0, 1, 2), xType: onnxpb.Int32, outDT: ir.Int32, outDims: []int{6},
			want: floats(0, 0, 1, 2, 2, 2),
		},
		{
			// Cubic overshoot saturates: x = 0.5 reads 0,0,0,255 → -23.9 → 0;
			// x = 1.5 → 127.5 → 128 (even); x = 2.5 reads 0,255,255,255 →
			// 278.9 → 255.
			name: "cubic uint8 saturates", opset: 13, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(2)},
			attrs: []onnxpb.Attribute{aString("mode", "cubic"), aString("coordinate_transformation_mode", "asymmetric")},
			dims:  []int{4}, xt: u8([]int{4}, 0, 0, 255, 255), xType: onnxpb.Uint8, outDT: ir.Uint8, outDims: []int{8},
			want: floats(0, 0, 0, 128, 255, 255, 255, 255),
		},
		{
			name: "nearest int32 is a gather", opset: 13, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(1, 2)},
			dims:  []int{2, 2}, xt: i32([]int{2, 2}, -7, 1<<30, 5, 6), xType: onnxpb.Int32, outDT: ir.Int32, outDims: []int{2, 4},
			want: floats(-7, -7, 1<<30, 1<<30, 5, 5, 6, 6),
		},
		{
			name: "scale rounding to an empty axis", opset: 13, inputs: []string{"", "scales"},
			inits: []onnxpb.Tensor{scalesInit(1, 0.3)}, attrs: []onnxpb.Attribute{aString("mode", "linear")},
			dims: []int{2, 2}, x: x2x2, outDims: []int{2, 0}, want: floats(),
		},
	}
	ocs := make([]opCase, len(cases))
	for k, rc := range cases {
		ocs[k] = rc.opCase(t)
	}
	runOpCases(t, ocs)
}

// TestResizeErrors checks that malformed Resize nodes fail with an error
// naming the problem instead of building something.
func TestResizeErrors(t *testing.T) {
	cases := []struct {
		name   string
		opset  int64
		inputs []string
		inits  []onnxpb.Tensor
		attrs  []onnxpb.Attribute
		want   string
	}{
		{"both scales and sizes", 13, []string{"", "scales", "sizes"}, []onnxpb.Tensor{scalesInit(1, 2), sizesInit(2, 4)}, nil, "exactly one"},
		{"neither scales nor sizes", 13, []string{"", "scales"}, []onnxpb.Tensor{tF32("scales", []int64{0})}, nil, "exactly one"},
		{"scales of the wrong length", 13, []string{"", "scales"}, []onnxpb.Tensor{scalesInit(2)}, nil, "expected 2"},
		{"zero scale", 13, []string{"", "scales"}, []onnxpb.Tensor{scalesInit(1, 0)}, nil, "positive"},
		{"unknown mode", 13, []string{"", "scales"}, []onnxpb.Tensor{scalesInit(1, 2)}, []onnxpb.Attribute{aString("mode", "area")}, "unknown mode"},
		{"unknown coordinate mode", 13, []string{"", "scales"}, []onnxpb.Tensor{scalesInit(1, 2)},
			[]onnxpb.Attribute{aString("coordinate_transformation_mode", "corner")}, "coordinate_transformation_mode"},
		{"unknown nearest mode", 13, []string{"", "scales"}, []onnxpb.Tensor{scalesInit(1, 2)},
			[]onnxpb.Attribute{aString("nearest_mode", "up")}, "nearest_mode"},
		{"aspect policy with scales", 18, []string{"", "scales"}, []onnxpb.Tensor{scalesInit(1, 2)},
			[]onnxpb.Attribute{aString("keep_aspect_ratio_policy", "not_larger")}, "keep_aspect_ratio_policy"},
		{"repeated axes", 18, []string{"", "scales"}, []onnxpb.Tensor{scalesInit(2, 2)}, []onnxpb.Attribute{aInts("axes", 1, -1)}, "repeats"},
		{"roi of the wrong length", 13, []string{"roi", "", "sizes"}, []onnxpb.Tensor{tF32("roi", []int64{2}, 0, 1), sizesInit(2, 4)},
			[]onnxpb.Attribute{aString("coordinate_transformation_mode", "tf_crop_and_resize")}, "roi"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mustModel(t, model(tc.opset, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 2)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float)},
				tc.inits, node("Resize", append([]string{"x"}, tc.inputs...), []string{"y"}, tc.attrs...)))
			_, err := m.Run(context.Background(), engine(t), map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, 1, 2, 3, 4)})
			if err == nil {
				t.Fatalf("no error, want one mentioning %q", tc.want)
			}
			var ne *NodeError
			if !errors.As(err, &ne) {
				t.Errorf("error %v is not a *NodeError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	t.Run("bool input with linear mode", func(t *testing.T) {
		m := mustModel(t, model(13, []onnxpb.ValueInfo{vi("x", onnxpb.Bool, 2)}, []onnxpb.ValueInfo{vi("y", onnxpb.Bool)},
			[]onnxpb.Tensor{scalesInit(2)}, node("Resize", []string{"x", "", "scales"}, []string{"y"}, aString("mode", "linear"))))
		x, _ := ir.TensorFromFlat([]bool{true, false}, 2)
		if _, err := m.Run(context.Background(), engine(t), map[string]*ir.Tensor{"x": x}); err == nil || !strings.Contains(err.Error(), "does not apply") {
			t.Errorf("got %v, want an error saying linear does not apply to bool", err)
		}
	})
}

// FuzzResizePlanAxis checks the host planner on arbitrary axis lengths,
// scales and settings: it must return an error or a plan whose indices
// lie inside the input and whose weights are finite and sum to 1 (0 where
// exclude_outside drops every tap).
func FuzzResizePlanAxis(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(0), 4, 8, 2.0, false, false, 0.0, 1.0)
	f.Add(uint8(1), uint8(2), uint8(1), 4, 2, 0.6, true, false, 0.0, 1.0)
	f.Add(uint8(2), uint8(5), uint8(3), 5, 3, 0.3, true, true, 0.2, 0.9)
	f.Add(uint8(2), uint8(4), uint8(0), 1, 7, 7.0, false, true, -0.5, 1.5)
	f.Add(uint8(206), uint8(95), uint8(87), 5, 49, -43.7, true, false, -25.08, -135.25) // negative scale
	f.Fuzz(func(t *testing.T, mode, coord, nearest uint8, in, out int, scale float64, aa, excl bool, r0, r1 float64) {
		modes := []string{"nearest", "linear", "cubic"}
		coords := []string{"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
			"tf_half_pixel_for_nn", "tf_crop_and_resize"}
		nearests := []string{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"}
		if in < 0 || out < 0 || in > 64 || out > 64 {
			return
		}
		p := &resizeParams{mode: modes[int(mode)%3], coord: coords[int(coord)%len(coords)], nearest: nearests[int(nearest)%5],
			cubicA: -0.75, excludeOutside: excl, antialias: aa}
		ax, err := resizePlanAxis(p, 0, in, out, scale, r0, r1)
		if err != nil {
			return
		}
		if len(ax.idx) != out*ax.taps || (ax.w != nil && len(ax.w) != len(ax.idx)) {
			t.Fatalf("plan sizes: %d indices, %d weights for %d outputs × %d taps", len(ax.idx), len(ax.w), out, ax.taps)
		}
		for y := range out {
			sum := 0.0
			for k := y * ax.taps; k < (y+1)*ax.taps; k++ {
				if ax.idx[k] < 0 || ax.idx[k] >= max(in, 1) {
					t.Fatalf("output %d reads index %d of %d", y, ax.idx[k], in)
				}
				if ax.w != nil {
					if math.IsNaN(ax.w[k]) || math.IsInf(ax.w[k], 0) {
						t.Fatalf("output %d has weight %v", y, ax.w[k])
					}
					sum += ax.w[k]
				}
			}
			extrap := ax.extrap != nil && ax.extrap[y]
			if ax.w != nil && !extrap && math.Abs(sum-1) > 1e-9 && !(excl && sum == 0) {
				t.Fatalf("output %d weights sum to %v", y, sum)
			}
		}
	})
}

// BenchmarkResize measures steady-state runs of compiled Resize graphs on
// a 1×3×224×224 image (the graph is built and compiled once per case).
func BenchmarkResize(b *testing.B) {
	xs := make([]float32, 3*224*224)
	for k := range xs {
		xs[k] = float32(k%251) / 7
	}
	x := f32(b, []int{1, 3, 224, 224}, xs...)
	for _, bc := range []struct {
		name   string
		scales []float32
		attrs  []onnxpb.Attribute
	}{
		{"nearest_x2", []float32{1, 1, 2, 2}, nil},
		{"linear_x2", []float32{1, 1, 2, 2}, []onnxpb.Attribute{aString("mode", "linear")}},
		{"cubic_x2", []float32{1, 1, 2, 2}, []onnxpb.Attribute{aString("mode", "cubic")}},
		{"linear_antialias_x0.25", []float32{1, 1, 0.25, 0.25}, []onnxpb.Attribute{aString("mode", "linear"), aInt("antialias", 1)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := mustModel(b, model(18, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 3, 224, 224)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float)},
				[]onnxpb.Tensor{scalesInit(bc.scales...)}, node("Resize", []string{"x", "", "scales"}, []string{"y"}, bc.attrs...)))
			g := ir.NewGraph(engine(b), "bench")
			outs, err := m.BuildGraph(g, map[string]*ir.Node{"x": ir.Parameter(g, "x", ir.MakeShape(ir.Float32, 1, 3, 224, 224))})
			if err != nil {
				b.Fatal(err)
			}
			g.Compile(outs["y"])
			g.Run(x)
			b.ResetTimer()
			for range b.N {
				g.Run(x)
			}
		})
	}
}

// TestResizeSizesFromShape covers the exporters' pattern where sizes is
// computed from the input's shape (Shape → Slice → Concat): it is folded
// at build time, so the Resize still sees constant sizes.
func TestResizeSizesFromShape(t *testing.T) {
	nodes := []onnxpb.Node{
		node("Shape", []string{"x"}, []string{"shape"}),
		node("Slice", []string{"shape", "zero", "two"}, []string{"nc"}),
		node("Concat", []string{"nc", "hw"}, []string{"sizes"}, aInt("axis", 0)),
		node("Resize", []string{"x", "", "", "sizes"}, []string{"y"}),
	}
	pb := model(13, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2, 2)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 4, 4)},
		[]onnxpb.Tensor{tI64("zero", []int64{1}, 0), tI64("two", []int64{1}, 2), tI64("hw", []int64{2}, 4, 4)}, nodes...)
	outs := run(t, mustModel(t, pb), map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 2, 2}, 1, 2, 3, 4)})
	// half_pixel ×2, round_prefer_floor: x = y/2 - 0.25 → 0, 0, 1, 1.
	expect(t, "y", outs["y"], ir.Float32, []int{1, 1, 4, 4}, floats(1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4), 0)
}
