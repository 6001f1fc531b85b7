package onnx

import (
	"context"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// TestGridSampleOps checks GridSample against values worked out by hand
// from the operator specification: without align_corners a normalised
// coordinate n maps to ((n+1)·D - 1)/2, with it to (n+1)/2·(D-1).
func TestGridSampleOps(t *testing.T) {
	x22 := f32(t, []int{1, 1, 2, 2}, 1, 2, 3, 4)
	in22 := func(grid int) []onnxpb.ValueInfo {
		return []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2, 2), vi("g", onnxpb.Float, 1, 1, grid, 2)}
	}
	gs := func(attrs ...onnxpb.Attribute) onnxpb.Node {
		return node("GridSample", []string{"x", "g"}, []string{"y"}, attrs...)
	}
	i32, err := ir.TensorFromFlat([]int32{-3, 3}, 1, 1, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	runOpCases(t, []opCase{
		{
			// (0,0) → pixel (0.5, 0.5): the mean 2.5. (-1,-1) → (-0.5,-0.5):
			// only tap (0,0) is inside, weight 1/4. (1,-1) → (1.5,-0.5):
			// only (row 0, col 1), weight 1/4.
			name: "bilinear zeros", opset: 16, node: gs(), inputs: in22(3),
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 1, 3)},
			feed:    map[string]*ir.Tensor{"x": x22, "g": f32(t, []int{1, 1, 3, 2}, 0, 0, -1, -1, 1, -1)},
			outDT:   ir.Float32, outDims: []int{1, 1, 1, 3}, want: floats(2.5, 0.25, 0.5),
		},
		{
			// Border: taps outside read the edge; (3,0) → x = 3.5 is outside
			// [-0.5, 1.5] and clamps to 1, rows 0.5 → (2+4)/2.
			name: "bilinear border", opset: 16, node: gs(aString("padding_mode", "border")), inputs: in22(4),
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 1, 4)},
			feed:    map[string]*ir.Tensor{"x": x22, "g": f32(t, []int{1, 1, 4, 2}, 0, 0, -1, -1, 1, -1, 3, 0)},
			outDT:   ir.Float32, outDims: []int{1, 1, 1, 4}, want: floats(2.5, 1, 2, 3),
		},
		{
			// align_corners on width 3: x = n+1. -1.5 → -0.5 reflects to 0.5
			// (15); 1.25 → 2.25 reflects to 1.75 (27.5); 0 → 1 (20).
			name: "bilinear reflection align_corners", opset: 16,
			node:    gs(aString("padding_mode", "reflection"), aInt("align_corners", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 1, 3), vi("g", onnxpb.Float, 1, 1, 3, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 1, 3)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 1, 3}, 10, 20, 30),
				"g": f32(t, []int{1, 1, 3, 2}, -1.5, 0, 1.25, 0, 0, 0)},
			outDT: ir.Float32, outDims: []int{1, 1, 1, 3}, want: floats(15, 27.5, 20), tol: 1e-5,
		},
		{
			// (-0.5,0.5) → (0,1): 3. (0,0) → (0.5,0.5) rounds half to even
			// → (0,0): 1. (0.5,0) → (1,0.5→0): 2. (1,1) → 1.5 → 2: outside, 0.
			name: "nearest zeros rounds half to even", opset: 16, node: gs(aString("mode", "nearest")), inputs: in22(4),
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 1, 4)},
			feed:    map[string]*ir.Tensor{"x": x22, "g": f32(t, []int{1, 1, 4, 2}, -0.5, 0.5, 0, 0, 0.5, 0, 1, 1)},
			outDT:   ir.Float32, outDims: []int{1, 1, 1, 4}, want: floats(3, 1, 2, 0),
		},
		{
			// One spatial dimension (opset 20), align_corners: x = 1.5(n+1).
			// n = -1/3 → 1 exactly: 2. n = 0 → 1.5: Keys weights
			// -0.09375, 0.59375, 0.59375, -0.09375 on 1..4 → 2.5. n = -1 →
			// 0: 1. n = -5/6 → 0.25: weights K(1.25), K(.25), K(.75),
			// K(1.75) = -0.10546875, 0.87890625, 0.26171875, -0.03515625
			// on taps -1 (zero padding), 0, 1, 2 → 1.296875.
			name: "cubic 1-D zeros align_corners", opset: 20, node: gs(aString("mode", "cubic"), aInt("align_corners", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 4), vi("g", onnxpb.Float, 1, 4, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 4)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 4}, 1, 2, 3, 4),
				"g": f32(t, []int{1, 4, 1}, -1.0/3, 0, -1, -5.0/6)},
			outDT: ir.Float32, outDims: []int{1, 1, 4}, want: floats(2, 2.5, 1, 1.296875), tol: 1e-5,
		},
		{
			// int32 is interpolated in floating point and truncated:
			// x = 0.5, 0.75, 0.25 on [-3, 3] → 0, 1.5 → 1, -1.5 → -1.
			name: "bilinear int32 truncates", opset: 16, node: gs(),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Int32, 1, 1, 1, 2), vi("g", onnxpb.Float, 1, 1, 3, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int32, 1, 1, 1, 3)},
			feed:    map[string]*ir.Tensor{"x": i32, "g": f32(t, []int{1, 1, 3, 2}, 0, 0, 0.25, 0, -0.25, 0)},
			outDT:   ir.Int32, outDims: []int{1, 1, 1, 3}, want: floats(0, 1, -1),
		},
	})
}

func TestGridSampleErrors(t *testing.T) {
	cases := []struct {
		name  string
		grid  []int
		attrs []onnxpb.Attribute
		want  string
	}{
		{"grid of the wrong rank", []int{1, 2, 2}, nil, "grid shape"},
		{"grid with 3 coordinates for 2-D input", []int{1, 2, 2, 3}, nil, "grid shape"},
		{"unknown mode", []int{1, 2, 2, 2}, []onnxpb.Attribute{aString("mode", "area")}, "unknown mode"},
		{"unknown padding", []int{1, 2, 2, 2}, []onnxpb.Attribute{aString("padding_mode", "wrap")}, "padding_mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gd := make([]any, len(tc.grid))
			for k, d := range tc.grid {
				gd[k] = d
			}
			m := mustModel(t, model(16, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2, 2), vi("g", onnxpb.Float, gd...)},
				[]onnxpb.ValueInfo{vi("y", onnxpb.Float)}, nil, node("GridSample", []string{"x", "g"}, []string{"y"}, tc.attrs...)))
			g := f32(t, tc.grid, make([]float32, numElems(tc.grid))...)
			_, err := m.Run(context.Background(), engine(t), map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 2, 2}, 1, 2, 3, 4), "g": g})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
