package onnx

import (
	"context"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// TestRoiAlignOps checks RoiAlign on a feature map whose value at (y, x) is
// 10y + x: bilinear interpolation reproduces a linear function exactly, so
// an averaged bin is the value at the mean of its (edge-clamped) sample
// positions, which is easy to work out by hand.
func TestRoiAlignOps(t *testing.T) {
	lin := make([]float32, 32)
	for k := range 16 {
		lin[k] = float32(10*(k/4) + k%4)
		lin[16+k] = lin[k] + 100 // second image: +100
	}
	x1 := f32(t, []int{1, 1, 4, 4}, lin[:16]...)
	x2 := f32(t, []int{2, 1, 4, 4}, lin...)
	in := func(n int) []onnxpb.ValueInfo {
		return []onnxpb.ValueInfo{vi("x", onnxpb.Float, n, 1, 4, 4), vi("rois", onnxpb.Float, "R", 4), vi("b", onnxpb.Int64, "R")}
	}
	out := func(r, h, w int) []onnxpb.ValueInfo { return []onnxpb.ValueInfo{vi("y", onnxpb.Float, r, 1, h, w)} }
	ra := func(attrs ...onnxpb.Attribute) onnxpb.Node {
		return node("RoiAlign", []string{"x", "rois", "b"}, []string{"y"}, attrs...)
	}
	roi0 := f32(t, []int{1, 4}, 0, 0, 4, 4)
	b0 := i64(t, []int{1}, 0)
	hw2 := []onnxpb.Attribute{aInt("output_height", 2), aInt("output_width", 2), aInt("sampling_ratio", 2)}
	runOpCases(t, []opCase{
		{
			// half_pixel: the roi spans [-0.5, 3.5], bins of 2, samples at
			// 0, 1 | 2, 3 on both axes: means 0.5 and 2.5.
			name: "avg half_pixel", opset: 16, node: ra(hw2...), inputs: in(1), outputs: out(1, 2, 2),
			feed:  map[string]*ir.Tensor{"x": x1, "rois": roi0, "b": b0},
			outDT: ir.Float32, outDims: []int{1, 1, 2, 2}, want: floats(5.5, 7.5, 25.5, 27.5), tol: 1e-5,
		},
		{
			// output_half_pixel: samples at 0.5, 1.5 | 2.5, 3.5, the last
			// clamped to 3: means 1 and 2.75.
			name: "avg output_half_pixel", opset: 16, inputs: in(1), outputs: out(1, 2, 2),
			node:  ra(append(hw2, aString("coordinate_transformation_mode", "output_half_pixel"))...),
			feed:  map[string]*ir.Tensor{"x": x1, "rois": roi0, "b": b0},
			outDT: ir.Float32, outDims: []int{1, 1, 2, 2}, want: floats(11, 12.75, 28.5, 30.25), tol: 1e-5,
		},
		{
			// Opset 10 has no coordinate_transformation_mode and does not
			// shift: as output_half_pixel.
			name: "opset 10 does not shift", opset: 10, node: ra(hw2...), inputs: in(1), outputs: out(1, 2, 2),
			feed:  map[string]*ir.Tensor{"x": x1, "rois": roi0, "b": b0},
			outDT: ir.Float32, outDims: []int{1, 1, 2, 2}, want: floats(11, 12.75, 28.5, 30.25), tol: 1e-5,
		},
		{
			// One sample at (1.5, 1.5); max mode takes the largest weighted
			// tap: 0.25·22.
			name: "max takes the largest weighted tap", opset: 16, inputs: in(1), outputs: out(1, 1, 1),
			node:  ra(aString("mode", "max"), aInt("sampling_ratio", 1)),
			feed:  map[string]*ir.Tensor{"x": x1, "rois": f32(t, []int{1, 4}, 1, 1, 3, 3), "b": b0},
			outDT: ir.Float32, outDims: []int{1, 1, 1, 1}, want: floats(5.5), tol: 1e-5,
		},
		{
			// Adaptive sampling with run-time rois: ceil(4/1) = 4 samples
			// per axis at 0.5..3.5 (3.5 clamps to 3): mean 1.875 → 20.625;
			// the second roi pools image 1 (+100) at spatial_scale 0.5 over
			// [0, 2]²: 2 samples at 0.5, 1.5 → 111.
			name: "adaptive sampling, run-time rois, batch index", opset: 16, inputs: in(2), outputs: out(2, 1, 1),
			node: ra(aString("coordinate_transformation_mode", "output_half_pixel"), aFloat("spatial_scale", 0.5)),
			feed: map[string]*ir.Tensor{"x": x2, "rois": f32(t, []int{2, 4}, 0, 0, 8, 8, 0, 0, 4, 4),
				"b": i64(t, []int{2}, 0, 1)},
			outDT: ir.Float32, outDims: []int{2, 1, 1, 1}, want: floats(20.625, 111), tol: 1e-5,
		},
		{
			// The same with rois known at build time.
			name: "adaptive sampling, constant rois", opset: 16, outputs: out(2, 1, 1),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 1, 4, 4), vi("b", onnxpb.Int64, 2)},
			inits:  []onnxpb.Tensor{tF32("rois", []int64{2, 4}, 0, 0, 8, 8, 0, 0, 4, 4)},
			node:   ra(aString("coordinate_transformation_mode", "output_half_pixel"), aFloat("spatial_scale", 0.5)),
			feed:   map[string]*ir.Tensor{"x": x2, "b": i64(t, []int{2}, 0, 1)},
			outDT:  ir.Float32, outDims: []int{2, 1, 1, 1}, want: floats(20.625, 111), tol: 1e-5,
		},
		{
			// The only sample, x = -3, lies left of -1: it contributes 0.
			name: "sample outside the map contributes zero", opset: 16, inputs: in(1), outputs: out(1, 1, 1),
			node:  ra(aString("coordinate_transformation_mode", "output_half_pixel"), aInt("sampling_ratio", 1)),
			feed:  map[string]*ir.Tensor{"x": x1, "rois": f32(t, []int{1, 4}, -4, 0, -2, 1), "b": b0},
			outDT: ir.Float32, outDims: []int{1, 1, 1, 1}, want: floats(0),
		},
	})
}

func TestRoiAlignErrors(t *testing.T) {
	cases := []struct {
		name  string
		rois  []int
		attrs []onnxpb.Attribute
		want  string
	}{
		{"rois with 5 columns", []int{1, 5}, nil, "rois must have shape"},
		{"unknown mode", []int{1, 4}, []onnxpb.Attribute{aString("mode", "sum")}, "unknown mode"},
		{"zero output height", []int{1, 4}, []onnxpb.Attribute{aInt("output_height", 0)}, "must be positive"},
		{"unknown coordinate mode", []int{1, 4}, []onnxpb.Attribute{aString("coordinate_transformation_mode", "align_corners")}, "coordinate_transformation_mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mustModel(t, model(16, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2, 2), vi("rois", onnxpb.Float, tc.rois[0], tc.rois[1]),
				vi("b", onnxpb.Int64, 1)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float)}, nil,
				node("RoiAlign", []string{"x", "rois", "b"}, []string{"y"}, tc.attrs...)))
			_, err := m.Run(context.Background(), engine(t), map[string]*ir.Tensor{
				"x": f32(t, []int{1, 1, 2, 2}, 1, 2, 3, 4), "rois": f32(t, tc.rois, make([]float32, numElems(tc.rois))...),
				"b": i64(t, []int{1}, 0)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
