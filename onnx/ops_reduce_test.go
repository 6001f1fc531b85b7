package onnx

import (
	"math"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

func TestReduceOps(t *testing.T) {
	x := f32(t, []int{2, 3}, 1, 2, 3, 4, 5, 6)
	in := []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3)}
	feed := map[string]*ir.Tensor{"x": x}
	runOpCases(t, []opCase{
		{
			name: "ReduceSum axes input, keepdims 0", opset: 13,
			node: node("ReduceSum", []string{"x", "a"}, []string{"y"}, aInt("keepdims", 0)), inputs: in,
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)}, inits: []onnxpb.Tensor{tI64("a", []int64{1}, 0)},
			feed: feed, outDT: ir.Float32, outDims: []int{3}, want: floats(5, 7, 9),
		},
		{
			name: "ReduceSum no axes reduces all", opset: 13,
			node: node("ReduceSum", []string{"x"}, []string{"y"}), inputs: in,
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1)},
			feed:    feed, outDT: ir.Float32, outDims: []int{1, 1}, want: floats(21),
		},
		{
			name: "ReduceSum noop_with_empty_axes", opset: 13,
			node: node("ReduceSum", []string{"x"}, []string{"y"}, aInt("noop_with_empty_axes", 1)), inputs: in,
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 3)},
			feed:    feed, outDT: ir.Float32, outDims: []int{2, 3}, want: floats(1, 2, 3, 4, 5, 6),
		},
		{
			name: "ReduceMean opset 13 axes attribute", opset: 13,
			node: node("ReduceMean", []string{"x"}, []string{"y"}, aInts("axes", -1)), inputs: in,
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 1)},
			feed:    feed, outDT: ir.Float32, outDims: []int{2, 1}, want: floats(2, 5),
		},
		{
			name: "ReduceMax opset 18 axes input", opset: 18,
			node: node("ReduceMax", []string{"x", "a"}, []string{"y"}, aInt("keepdims", 0)), inputs: in,
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2)}, inits: []onnxpb.Tensor{tI64("a", []int64{1}, 1)},
			feed: feed, outDT: ir.Float32, outDims: []int{2}, want: floats(3, 6),
		},
		{
			name: "ReduceProd", opset: 13,
			node: node("ReduceProd", []string{"x"}, []string{"y"}, aInts("axes", 0), aInt("keepdims", 0)), inputs: in,
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)},
			feed:    feed, outDT: ir.Float32, outDims: []int{3}, want: floats(4, 10, 18),
		},
		{
			name: "ReduceL2 of a 3-4-5 triangle", opset: 13,
			node:    node("ReduceL2", []string{"x"}, []string{"y"}, aInt("keepdims", 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2}, 3, -4)}, outDT: ir.Float32, outDims: []int{}, want: floats(5),
		},
		{
			name: "ReduceL1", opset: 13,
			node:    node("ReduceL1", []string{"x"}, []string{"y"}, aInt("keepdims", 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2}, 3, -4)}, outDT: ir.Float32, outDims: []int{}, want: floats(7),
		},
		{
			name: "ReduceLogSumExp", opset: 13,
			node:    node("ReduceLogSumExp", []string{"x"}, []string{"y"}, aInt("keepdims", 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2}, 100, 100)}, outDT: ir.Float32, outDims: []int{},
			want: floats(100 + math.Ln2), tol: 1e-4,
		},
		{
			name: "ArgMax select_last_index", opset: 13,
			node:    node("ArgMax", []string{"x"}, []string{"y"}, aInt("axis", 1), aInt("select_last_index", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int64, 2, 1)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 3}, 5, 1, 5, 0, 7, 7)}, outDT: ir.Int64, outDims: []int{2, 1},
			want: floats(2, 2),
		},
		{
			name: "ArgMin first index, keepdims 0", opset: 13,
			node:    node("ArgMin", []string{"x"}, []string{"y"}, aInt("axis", 0), aInt("keepdims", 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int64, 3)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 3}, 5, 1, 5, 0, 7, 5)}, outDT: ir.Int64, outDims: []int{3},
			want: floats(1, 0, 0),
		},
	})
}
