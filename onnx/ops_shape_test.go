package onnx

import (
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// iotaF returns 0, 1, ..., n-1 as float32.
func iotaF(n int) []float32 {
	out := make([]float32, n)
	for k := range out {
		out[k] = float32(k)
	}
	return out
}

func iota64(n int) []float64 {
	out := make([]float64, n)
	for k := range out {
		out[k] = float64(k)
	}
	return out
}

func TestShapeOps(t *testing.T) {
	x234 := f32(t, []int{2, 3, 4}, iotaF(24)...)
	x10 := f32(t, []int{10}, iotaF(10)...)
	runOpCases(t, []opCase{
		{
			name:   "Reshape with 0 and -1",
			node:   node("Reshape", []string{"x", "s"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3, 4)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 12)},
			inits: []onnxpb.Tensor{tI64("s", []int64{2}, 0, -1)},
			feed:  map[string]*ir.Tensor{"x": x234}, outDT: ir.Float32, outDims: []int{2, 12}, want: iota64(24),
		},
		{
			name:   "Transpose default reverses axes",
			node:   node("Transpose", []string{"x"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3, 2)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2, 3}, 1, 2, 3, 4, 5, 6)},
			outDT: ir.Float32, outDims: []int{3, 2}, want: floats(1, 4, 2, 5, 3, 6),
		},
		{
			name:   "Slice negative step",
			node:   node("Slice", []string{"x", "st", "en", "ax", "sp"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 10)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)},
			inits: []onnxpb.Tensor{tI64("st", []int64{1}, 8), tI64("en", []int64{1}, 1), tI64("ax", []int64{1}, 0), tI64("sp", []int64{1}, -3)},
			feed:  map[string]*ir.Tensor{"x": x10}, outDT: ir.Float32, outDims: []int{3}, want: floats(8, 5, 2),
		},
		{
			name:   "Slice clamps huge ends and negative starts",
			node:   node("Slice", []string{"x", "st", "en"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 10)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)},
			inits: []onnxpb.Tensor{tI64("st", []int64{1}, -3), tI64("en", []int64{1}, 1<<62)},
			feed:  map[string]*ir.Tensor{"x": x10}, outDT: ir.Float32, outDims: []int{3}, want: floats(7, 8, 9),
		},
		{
			name: "Slice opset 9 attributes", opset: 9,
			node:   node("Slice", []string{"x"}, []string{"y"}, aInts("starts", 1, 0), aInts("ends", 2, 3), aInts("axes", 0, 2)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3, 4)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 3, 3)},
			feed: map[string]*ir.Tensor{"x": x234}, outDT: ir.Float32, outDims: []int{1, 3, 3},
			want: floats(12, 13, 14, 16, 17, 18, 20, 21, 22),
		},
		{
			name:   "Gather negative constant indices",
			node:   node("Gather", []string{"x", "i"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 2, 2)},
			inits: []onnxpb.Tensor{tI64("i", []int64{1, 2}, -1, 0)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{3, 2}, 1, 2, 3, 4, 5, 6)},
			outDT: ir.Float32, outDims: []int{1, 2, 2}, want: floats(5, 6, 1, 2),
		},
		{
			name:   "Gather run-time indices on axis 1",
			node:   node("Gather", []string{"x", "i"}, []string{"y"}, aInt("axis", 1)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3), vi("i", onnxpb.Int64, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 2)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2, 3}, 1, 2, 3, 4, 5, 6), "i": i64(t, []int{2}, -1, 0)},
			outDT: ir.Float32, outDims: []int{2, 2}, want: floats(3, 1, 6, 4),
		},
		{
			name:   "Concat axis 1",
			node:   node("Concat", []string{"a", "b"}, []string{"y"}, aInt("axis", 1)),
			inputs: []onnxpb.ValueInfo{vi("a", onnxpb.Float, 2, 1), vi("b", onnxpb.Float, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 3)},
			feed:  map[string]*ir.Tensor{"a": f32(t, []int{2, 1}, 1, 2), "b": f32(t, []int{2, 2}, 3, 4, 5, 6)},
			outDT: ir.Float32, outDims: []int{2, 3}, want: floats(1, 3, 4, 2, 5, 6),
		},
		{
			name:   "Unsqueeze opset 13 axes input",
			node:   node("Unsqueeze", []string{"x", "ax"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 3, 1)},
			inits: []onnxpb.Tensor{tI64("ax", []int64{2}, 0, -1)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, 2, 3)}, outDT: ir.Float32, outDims: []int{1, 3, 1}, want: floats(1, 2, 3),
		},
		{
			name: "Squeeze opset 11 all unit axes", opset: 11,
			node:   node("Squeeze", []string{"x"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 3, 1)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{1, 3, 1}, 1, 2, 3)}, outDT: ir.Float32, outDims: []int{3}, want: floats(1, 2, 3),
		},
		{
			name:   "Expand bidirectional",
			node:   node("Expand", []string{"x", "s"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3, 1)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 3, 2)},
			inits: []onnxpb.Tensor{tI64("s", []int64{3}, 2, 1, 2)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{3, 1}, 1, 2, 3)}, outDT: ir.Float32, outDims: []int{2, 3, 2},
			want: floats(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3),
		},
		{
			name:   "Tile",
			node:   node("Tile", []string{"x", "r"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 4)},
			inits: []onnxpb.Tensor{tI64("r", []int64{2}, 1, 2)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, 1, 2, 3, 4)}, outDT: ir.Float32, outDims: []int{2, 4},
			want: floats(1, 2, 1, 2, 3, 4, 3, 4),
		},
		{
			name:   "Pad constant with negative (cropping) end",
			node:   node("Pad", []string{"x", "p", "v"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3, 3)},
			inits: []onnxpb.Tensor{tI64("p", []int64{4}, 1, 1, 0, -1), tF32("v", nil, 9)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2, 3}, 1, 2, 3, 4, 5, 6)}, outDT: ir.Float32, outDims: []int{3, 3},
			want: floats(9, 9, 9, 9, 1, 2, 9, 4, 5),
		},
		{
			name:   "Pad reflect",
			node:   node("Pad", []string{"x", "p"}, []string{"y"}, aString("mode", "reflect")),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 7)},
			inits: []onnxpb.Tensor{tI64("p", []int64{2}, 2, 2)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, 2, 3)}, outDT: ir.Float32, outDims: []int{7},
			want: floats(3, 2, 1, 2, 3, 2, 1),
		},
		{
			name:   "Pad edge",
			node:   node("Pad", []string{"x", "p"}, []string{"y"}, aString("mode", "edge")),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 6)},
			inits: []onnxpb.Tensor{tI64("p", []int64{2}, 2, 1)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, 2, 3)}, outDT: ir.Float32, outDims: []int{6},
			want: floats(1, 1, 1, 2, 3, 3),
		},
		{
			name:   "Split with sizes input",
			node:   node("Split", []string{"x", "s"}, []string{"a", "b"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 5)}, outputs: []onnxpb.ValueInfo{vi("b", onnxpb.Float, 3)},
			inits: []onnxpb.Tensor{tI64("s", []int64{2}, 2, 3)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{5}, iotaF(5)...)}, outDT: ir.Float32, outDims: []int{3}, want: floats(2, 3, 4),
		},
		{
			name:   "Flatten axis 2",
			node:   node("Flatten", []string{"x"}, []string{"y"}, aInt("axis", 2)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3, 4)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 6, 4)},
			feed: map[string]*ir.Tensor{"x": x234}, outDT: ir.Float32, outDims: []int{6, 4}, want: iota64(24),
		},
		{
			name:   "DepthToSpace DCR",
			node:   node("DepthToSpace", []string{"x"}, []string{"y"}, aInt("blocksize", 2)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 4, 1, 1)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 2, 2)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{1, 4, 1, 1}, 1, 2, 3, 4)}, outDT: ir.Float32, outDims: []int{1, 1, 2, 2},
			want: floats(1, 2, 3, 4),
		},
		{
			name:   "SpaceToDepth",
			node:   node("SpaceToDepth", []string{"x"}, []string{"y"}, aInt("blocksize", 2)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 4, 1, 1)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 2, 2}, 1, 2, 3, 4)}, outDT: ir.Float32, outDims: []int{1, 4, 1, 1},
			want: floats(1, 2, 3, 4),
		},
		{
			name: "ReverseSequence", opset: 10,
			node:   node("ReverseSequence", []string{"x", "l"}, []string{"y"}, aInt("batch_axis", 0), aInt("time_axis", 1)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 4), vi("l", onnxpb.Int64, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 4)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2, 4}, iotaF(8)...), "l": i64(t, []int{2}, 3, 1)},
			outDT: ir.Float32, outDims: []int{2, 4}, want: floats(2, 1, 0, 3, 4, 5, 6, 7),
		},
	})
}

// TestShapeFolding builds a Reshape whose target comes from a shape
// computation on a symbolic batch: Shape → Gather → Unsqueeze → Concat.
// It must fold to a constant for every batch size, leaving no value inputs.
func TestShapeFolding(t *testing.T) {
	pb := model(13,
		[]onnxpb.ValueInfo{vi("x", onnxpb.Float, "N", 3, 4)},
		[]onnxpb.ValueInfo{vi("y", onnxpb.Float, "N", 12)},
		[]onnxpb.Tensor{tI64("zero", nil, 0), tI64("ax", []int64{1}, 0), tI64("rest", []int64{1}, -1)},
		node("Shape", []string{"x"}, []string{"shape"}),
		node("Gather", []string{"shape", "zero"}, []string{"n"}),
		node("Unsqueeze", []string{"n", "ax"}, []string{"n1"}),
		node("Concat", []string{"n1", "rest"}, []string{"target"}, aInt("axis", 0)),
		node("Reshape", []string{"x", "target"}, []string{"y"}),
	)
	m := mustModel(t, pb)
	if v := m.ValueInputs(); len(v) != 0 {
		t.Fatalf("ValueInputs = %v, want none", v)
	}
	for _, n := range []int{1, 3} {
		outs := run(t, m, map[string]*ir.Tensor{"x": f32(t, []int{n, 3, 4}, iotaF(n*12)...)})
		expect(t, "y", outs["y"], ir.Float32, []int{n, 12}, iota64(n*12), 0)
	}
	p, err := m.Specialize(map[string][]int{"x": {5, 3, 4}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Dims(); d["N"] != 5 {
		t.Errorf("Dims = %v, want N=5", d)
	}
}
