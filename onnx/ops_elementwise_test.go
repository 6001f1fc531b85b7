package onnx

import (
	"math"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Expected values are hand-computed (exact arithmetic) or, for
// transcendental functions, Go's math package as an independent reference.

func TestElementwiseOps(t *testing.T) {
	x23 := f32(t, []int{2, 3}, 1, 2, 3, 4, 5, 6)
	runOpCases(t, []opCase{
		{
			name:   "Add broadcast [2,3]+[3]",
			node:   node("Add", []string{"a", "b"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("a", onnxpb.Float, 2, 3), vi("b", onnxpb.Float, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 3)},
			feed:  map[string]*ir.Tensor{"a": x23, "b": f32(t, []int{3}, 10, 20, 30)},
			outDT: ir.Float32, outDims: []int{2, 3}, want: floats(11, 22, 33, 14, 25, 36),
		},
		{
			name:   "Div int64 truncates",
			node:   node("Div", []string{"a", "b"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("a", onnxpb.Int64, 2), vi("b", onnxpb.Int64, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int64, 2)},
			feed:  map[string]*ir.Tensor{"a": i64(t, []int{2}, 7, -7), "b": i64(t, []int{2}, 2, 2)},
			outDT: ir.Int64, outDims: []int{2}, want: floats(3, -3),
		},
		{
			name:   "Mod fmod=0 takes the divisor's sign",
			node:   node("Mod", []string{"a", "b"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("a", onnxpb.Int64, 4), vi("b", onnxpb.Int64, 4)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int64, 4)},
			feed:  map[string]*ir.Tensor{"a": i64(t, []int{4}, -7, 7, 5, 7), "b": i64(t, []int{4}, 3, -3, 5, 3)},
			outDT: ir.Int64, outDims: []int{4}, want: floats(2, -2, 0, 1),
		},
		{
			name:   "Mod fmod=1 takes the dividend's sign",
			node:   node("Mod", []string{"a", "b"}, []string{"y"}, aInt("fmod", 1)),
			inputs: []onnxpb.ValueInfo{vi("a", onnxpb.Float, 3), vi("b", onnxpb.Float, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)},
			feed:  map[string]*ir.Tensor{"a": f32(t, []int{3}, -7, 7, 5.5), "b": f32(t, []int{3}, 3, -3, 2)},
			outDT: ir.Float32, outDims: []int{3}, want: floats(-1, 1, 1.5),
		},
		{
			name:   "Pow int32 base, float exponent",
			node:   node("Pow", []string{"a", "b"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("a", onnxpb.Int32, 3), vi("b", onnxpb.Float, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int32, 3)},
			feed: map[string]*ir.Tensor{"a": func() *ir.Tensor {
				x, _ := ir.TensorFromFlat([]int32{2, 3, 5}, 3)
				return x
			}(), "b": f32(t, []int{3}, 3, 2, 0)},
			outDT: ir.Int32, outDims: []int{3}, want: floats(8, 9, 1),
		},
		{
			name:   "Round ties to even",
			node:   node("Round", []string{"x"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 7)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 7)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{7}, 0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6)},
			outDT: ir.Float32, outDims: []int{7}, want: floats(0, 2, 2, 0, -2, 2, -3),
		},
		{
			name:   "Where broadcasts all three",
			node:   node("Where", []string{"c", "a", "b"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("c", onnxpb.Bool, 2, 1), vi("a", onnxpb.Float, 3), vi("b", onnxpb.Float)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 3)},
			feed: map[string]*ir.Tensor{"c": func() *ir.Tensor {
				x, _ := ir.TensorFromFlat([]bool{true, false}, 2, 1)
				return x
			}(), "a": f32(t, []int{3}, 1, 2, 3), "b": f32(t, nil, -1)},
			outDT: ir.Float32, outDims: []int{2, 3}, want: floats(1, 2, 3, -1, -1, -1),
		},
		{
			name:    "Max of three with broadcasting",
			node:    node("Max", []string{"a", "b", "c"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("a", onnxpb.Float, 3), vi("b", onnxpb.Float, 1), vi("c", onnxpb.Float, 2, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 3)},
			feed:    map[string]*ir.Tensor{"a": f32(t, []int{3}, 1, 5, 3), "b": f32(t, []int{1}, 2), "c": f32(t, []int{2, 1}, 0, 4)},
			outDT:   ir.Float32, outDims: []int{2, 3}, want: floats(2, 5, 3, 4, 5, 4),
		},
		{
			name:   "Mean",
			node:   node("Mean", []string{"a", "b", "c"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("a", onnxpb.Float, 2), vi("b", onnxpb.Float, 2), vi("c", onnxpb.Float, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2)},
			feed:  map[string]*ir.Tensor{"a": f32(t, []int{2}, 1, 0), "b": f32(t, []int{2}, 2, 3), "c": f32(t, []int{2}, 6, 3)},
			outDT: ir.Float32, outDims: []int{2}, want: floats(3, 2),
		},
		{
			name: "Clip opset 11, min input only", opset: 11,
			node:   node("Clip", []string{"x", "lo"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3), vi("lo", onnxpb.Float)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{3}, -2, 0, 2), "lo": f32(t, nil, -1)},
			outDT: ir.Float32, outDims: []int{3}, want: floats(-1, 0, 2),
		},
		{
			name: "Clip opset 6 attributes", opset: 6,
			node:   node("Clip", []string{"x"}, []string{"y"}, aFloat("min", -1), aFloat("max", 1)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{3}, -2, 0.5, 2)},
			outDT: ir.Float32, outDims: []int{3}, want: floats(-1, 0.5, 1),
		},
		{
			name:   "Equal gives bool",
			node:   node("Equal", []string{"a", "b"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("a", onnxpb.Int64, 3), vi("b", onnxpb.Int64, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Bool, 3)},
			feed:  map[string]*ir.Tensor{"a": i64(t, []int{3}, 1, 2, 3), "b": i64(t, []int{3}, 1, 0, 3)},
			outDT: ir.Bool, outDims: []int{3}, want: floats(1, 0, 1),
		},
		{
			name:   "IsInf positive only",
			node:   node("IsInf", []string{"x"}, []string{"y"}, aInt("detect_negative", 0)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 4)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Bool, 4)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{4}, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1)},
			outDT: ir.Bool, outDims: []int{4}, want: floats(1, 0, 0, 0),
		},
		{
			name: "BitShift", opset: 11,
			node:   node("BitShift", []string{"x", "n"}, []string{"y"}, aString("direction", "RIGHT")),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Uint8, 3), vi("n", onnxpb.Uint8, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Uint8, 3)},
			feed: map[string]*ir.Tensor{"x": func() *ir.Tensor {
				x, _ := ir.TensorFromFlat([]uint8{16, 255, 7}, 3)
				return x
			}(), "n": func() *ir.Tensor {
				x, _ := ir.TensorFromFlat([]uint8{2, 4, 0}, 3)
				return x
			}()},
			outDT: ir.Uint8, outDims: []int{3}, want: floats(4, 15, 7),
		},
		{
			name:   "Sign",
			node:   node("Sign", []string{"x"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{3}, -3, 0, 0.5)},
			outDT: ir.Float32, outDims: []int{3}, want: floats(-1, 0, 1),
		},
	})
}

// TestInverseTrig checks the polynomial arctangent and the asin/acos built
// on it against Go's math package.
func TestInverseTrig(t *testing.T) {
	xs := []float32{-50, -2, -1, -0.7, -0.3, 0, 0.2, 0.414, 0.5, 0.99, 1, 3, 1e4}
	in := f32(t, []int{len(xs)}, xs...)
	for _, tc := range []struct {
		op  string
		ref func(float64) float64
		dom func(float64) bool
	}{
		{"Atan", math.Atan, func(float64) bool { return true }},
		{"Asin", math.Asin, func(x float64) bool { return math.Abs(x) < 1 }},
		{"Acos", math.Acos, func(x float64) bool { return math.Abs(x) < 1 }},
	} {
		m := mustModel(t, model(13, []onnxpb.ValueInfo{vi("x", onnxpb.Float, len(xs))}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, len(xs))}, nil,
			node(tc.op, []string{"x"}, []string{"y"})))
		got, _ := flat(t, run(t, m, map[string]*ir.Tensor{"x": in})["y"])
		for k, x := range xs {
			if !tc.dom(float64(x)) {
				continue
			}
			want := tc.ref(float64(x))
			if math.Abs(got[k]-want) > 2e-6 {
				t.Errorf("%s(%v) = %v, want %v", tc.op, x, got[k], want)
			}
		}
	}
}

// TestHostArithmetic checks the host evaluator on integer shape arithmetic:
// with constant inputs every node folds to a constant.
func TestHostArithmetic(t *testing.T) {
	a := tI64("a", []int64{3}, 7, -7, 9)
	b := tI64("b", []int64{3}, 2, 2, -4)
	m := mustModel(t, model(13, nil, []onnxpb.ValueInfo{vi("div", onnxpb.Int64, 3), vi("mod", onnxpb.Int64, 3), vi("lt", onnxpb.Bool, 3)},
		[]onnxpb.Tensor{a, b},
		node("Div", []string{"a", "b"}, []string{"div"}),
		node("Mod", []string{"a", "b"}, []string{"mod"}),
		node("Less", []string{"a", "b"}, []string{"lt"})))
	outs := run(t, m, nil)
	expect(t, "div", outs["div"], ir.Int64, []int{3}, floats(3, -3, -2), 0)
	expect(t, "mod", outs["mod"], ir.Int64, []int{3}, floats(1, 1, -3), 0)
	expect(t, "lt", outs["lt"], ir.Bool, []int{3}, floats(0, 1, 0), 0)
}
