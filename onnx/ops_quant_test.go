package onnx

import (
	"context"
	"errors"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Quantization tests. Expected values are worked out by hand from the
// formulas of the ONNX operator specification (docs/Operators.md):
// QuantizeLinear y = saturate(round_half_even(x / y_scale) + y_zero_point),
// DequantizeLinear y = (x - x_zero_point) · x_scale, and the integer
// kernels on (x - zero_point) accumulated exactly.

// quantT is an integer initializer of ONNX type dt (values as int32 bit
// patterns, as TensorProto stores them).
func quantT(name string, dt onnxpb.DataType, dims []int64, v ...int32) onnxpb.Tensor {
	return onnxpb.Tensor{Name: name, Dims: dims, DataType: dt, Int32Data: v}
}

func TestQuantizeLinear(t *testing.T) {
	ties := f32(t, []int{7}, 0.5, 1.5, 2.5, -0.5, -1.5, 300, -300)
	in7 := []onnxpb.ValueInfo{vi("x", onnxpb.Float, 7)}
	runOpCases(t, []opCase{
		{
			name: "uint8 ties to even, saturating", opset: 10,
			node:   node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}),
			inputs: in7, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Uint8, 7)},
			inits: []onnxpb.Tensor{tF32("s", nil, 1), quantT("z", onnxpb.Uint8, nil, 0)},
			feed:  map[string]*ir.Tensor{"x": ties}, outDT: ir.Uint8, outDims: []int{7}, want: floats(0, 2, 2, 0, 0, 255, 0),
		},
		{
			name: "int8 ties to even, saturating", opset: 13,
			node:   node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}),
			inputs: in7, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int8, 7)},
			inits: []onnxpb.Tensor{tF32("s", nil, 1), quantT("z", onnxpb.Int8, nil, 0)},
			feed:  map[string]*ir.Tensor{"x": ties}, outDT: ir.Int8, outDims: []int{7}, want: floats(0, 2, 2, 0, -2, 127, -128),
		},
		{
			// round(2.5) = 2, then + 1 = 3 (rounding after adding would give 4);
			// 7 / 2 = 3.5 -> 4, + 1 = 5. No zero point: uint8.
			name:   "rounds before adding the zero point",
			node:   node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Uint8, 2)},
			inits: []onnxpb.Tensor{tF32("s", []int64{1}, 2), quantT("z", onnxpb.Uint8, []int64{1}, 1)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2}, 5, 7)}, outDT: ir.Uint8, outDims: []int{2}, want: floats(3, 5),
		},
		{
			name:   "default zero point is uint8 0",
			node:   node("QuantizeLinear", []string{"x", "s"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Uint8, 2)},
			inits: []onnxpb.Tensor{tF32("s", nil, 0.5)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2}, -1, 3)}, outDT: ir.Uint8, outDims: []int{2}, want: floats(0, 6),
		},
		{
			// x / [1 2] = [[1 1] [3 2]], + [0 10].
			name: "per axis 1", opset: 13,
			node:   node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Uint8, 2, 2)},
			inits: []onnxpb.Tensor{tF32("s", []int64{2}, 1, 2), quantT("z", onnxpb.Uint8, []int64{2}, 0, 10)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, 1, 2, 3, 4)}, outDT: ir.Uint8, outDims: []int{2, 2}, want: floats(1, 11, 3, 12),
		},
		{
			name: "per axis 0", opset: 13,
			node:   node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}, aInt("axis", 0)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Uint8, 2, 2)},
			inits: []onnxpb.Tensor{tF32("s", []int64{2}, 1, 2), quantT("z", onnxpb.Uint8, []int64{2}, 0, 10)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2, 2}, 1, 2, 3, 4)}, outDT: ir.Uint8, outDims: []int{2, 2}, want: floats(1, 2, 12, 12),
		},
		{
			// Blocks of 2 along axis 1: scales 1, 1, 2, 2 -> 1, 2, 1.5 -> 2, 2;
			// the last block is partial (x has 5 columns, 3 blocks).
			name: "blocked", opset: 21,
			node:   node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}, aInt("axis", 1), aInt("block_size", 2)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 5)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int8, 1, 5)},
			inits: []onnxpb.Tensor{tF32("s", []int64{1, 3}, 1, 2, 4), quantT("z", onnxpb.Int8, []int64{1, 3}, 0, 0, -1)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{1, 5}, 1, 2, 3, 4, 10)}, outDT: ir.Int8, outDims: []int{1, 5}, want: floats(1, 2, 2, 2, 1),
		},
		{
			name: "int16 via output_dtype", opset: 21,
			node:   node("QuantizeLinear", []string{"x", "s"}, []string{"y"}, aInt("output_dtype", int64(onnxpb.Int16))),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int16, 3)},
			inits: []onnxpb.Tensor{tF32("s", nil, 0.5)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{3}, -20000, 1000.25, 20000)}, outDT: ir.Int16, outDims: []int{3}, want: floats(-32768, 2000, 32767),
		},
		{
			name: "uint16 zero point", opset: 21,
			node:   node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Uint16, 2)},
			inits: []onnxpb.Tensor{tF32("s", nil, 1), quantT("z", onnxpb.Uint16, nil, 40000)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{2}, -50000, 30000)}, outDT: ir.Uint16, outDims: []int{2}, want: floats(0, 65535),
		},
		{
			name:   "int32 input",
			node:   node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Int32, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int8, 3)},
			inits: []onnxpb.Tensor{tF32("s", nil, 4), quantT("z", onnxpb.Int8, nil, 1)},
			feed:  map[string]*ir.Tensor{"x": rnnTensor(t, []int{3}, []int32{10, -6, 1000})}, outDT: ir.Int8, outDims: []int{3}, want: floats(3, -1, 127),
		},
	})
}

func TestDequantizeLinear(t *testing.T) {
	runOpCases(t, []opCase{
		{
			// (x - (-1)) · 0.5
			name: "int8 per tensor", opset: 10,
			node:   node("DequantizeLinear", []string{"x", "s", "z"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Int8, 3)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)},
			inits: []onnxpb.Tensor{tF32("s", nil, 0.5), quantT("z", onnxpb.Int8, nil, -1)},
			feed:  map[string]*ir.Tensor{"x": rnnTensor(t, []int{3}, []int8{-128, 0, 127})}, outDT: ir.Float32, outDims: []int{3}, want: floats(-63.5, 0.5, 64),
		},
		{
			name: "uint8 per axis 0", opset: 13,
			node:   node("DequantizeLinear", []string{"x", "s", "z"}, []string{"y"}, aInt("axis", 0)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Uint8, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2, 2)},
			inits: []onnxpb.Tensor{tF32("s", []int64{2}, 1, 2), quantT("z", onnxpb.Uint8, []int64{2}, 10, 20)},
			feed:  map[string]*ir.Tensor{"x": rnnTensor(t, []int{2, 2}, []uint8{10, 20, 30, 40})}, outDT: ir.Float32, outDims: []int{2, 2}, want: floats(0, 10, 20, 40),
		},
		{
			name: "int32 without zero point", opset: 13,
			node:   node("DequantizeLinear", []string{"x", "s"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Int32, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2)},
			inits: []onnxpb.Tensor{tF32("s", nil, 0.5)},
			feed:  map[string]*ir.Tensor{"x": rnnTensor(t, []int{2}, []int32{100000, -3})}, outDT: ir.Float32, outDims: []int{2}, want: floats(50000, -1.5),
		},
		{
			// Rows 0-1 use block 0 (scale 1, zp 0), row 2 block 1 (scale 0.25, zp 2).
			name: "blocked along axis 0", opset: 21,
			node:   node("DequantizeLinear", []string{"x", "s", "z"}, []string{"y"}, aInt("axis", 0), aInt("block_size", 2)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Int16, 3, 1)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3, 1)},
			inits: []onnxpb.Tensor{tF32("s", []int64{2, 1}, 1, 0.25), quantT("z", onnxpb.Int16, []int64{2, 1}, 0, 2)},
			feed:  map[string]*ir.Tensor{"x": rnnTensor(t, []int{3, 1}, []int16{-300, 7, 10})}, outDT: ir.Float32, outDims: []int{3, 1}, want: floats(-300, 7, 2),
		},
		{
			// A Float16 scale makes a Float16 output.
			name: "float16 scale", opset: 19,
			node:   node("DequantizeLinear", []string{"x", "s"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Uint16, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float16, 2)},
			inits: []onnxpb.Tensor{{Name: "s", DataType: onnxpb.Float16, Int32Data: []int32{0x3800}}}, // 0.5
			feed:  map[string]*ir.Tensor{"x": rnnTensor(t, []int{2}, []uint16{3, 1000})}, outDT: ir.Float16, outDims: []int{2}, want: floats(1.5, 500),
		},
	})
}

func TestDynamicQuantizeLinear(t *testing.T) {
	// Range [-1, 2] (0 included): scale 3/255, zero point 0 - (-1)/scale
	// = 85; y = round(x/scale) + 85. All zeros: scale 1 as ONNX Runtime
	// 1.31.1 returns it (the ONNX reference's code gives 1/255; see the
	// converter), zero point 0. All positive: the range starts at 0.
	cases := []struct {
		name      string
		x         []float32
		y         []float64
		scale, zp float64
	}{
		{"mixed signs", []float32{0, 2, -1, 1}, floats(85, 255, 0, 170), float64(float32(3) / 255), 85},
		{"all zeros", []float32{0, 0}, floats(0, 0), 1, 0},
		{"all positive", []float32{2.55, 1.02}, floats(255, 102), float64(float32(2.55) / 255), 0},
		{"all negative", []float32{-2.55, -1.02}, floats(0, 153), float64(float32(2.55) / 255), 255},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.x)
			m := mustModel(t, model(11, []onnxpb.ValueInfo{vi("x", onnxpb.Float, n)},
				[]onnxpb.ValueInfo{vi("y", onnxpb.Uint8, n), vi("s", onnxpb.Float), vi("z", onnxpb.Uint8)}, nil,
				node("DynamicQuantizeLinear", []string{"x"}, []string{"y", "s", "z"})))
			outs := run(t, m, map[string]*ir.Tensor{"x": f32(t, []int{n}, tc.x...)})
			expect(t, "y", outs["y"], ir.Uint8, []int{n}, tc.y, 0)
			expect(t, "y_scale", outs["s"], ir.Float32, []int{}, floats(tc.scale), 0)
			expect(t, "y_zero_point", outs["z"], ir.Uint8, []int{}, floats(tc.zp), 0)
		})
	}
}

func TestIntegerKernels(t *testing.T) {
	x33 := rnnTensor(t, []int{1, 1, 3, 3}, []uint8{1, 2, 3, 4, 5, 6, 7, 8, 9})
	runOpCases(t, []opCase{
		{
			// A - [1 2] per row = [[0 1] [1 2]]; B - 5 = [[0 1] [2 3]].
			name:    "MatMulInteger per-row a zero point",
			node:    node("MatMulInteger", []string{"a", "b", "az", "bz"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("a", onnxpb.Uint8, 2, 2), vi("b", onnxpb.Uint8, 2, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int32, 2, 2)},
			inits:   []onnxpb.Tensor{quantT("az", onnxpb.Uint8, []int64{2}, 1, 2), quantT("bz", onnxpb.Uint8, nil, 5)},
			feed: map[string]*ir.Tensor{"a": rnnTensor(t, []int{2, 2}, []uint8{1, 2, 3, 4}),
				"b": rnnTensor(t, []int{2, 2}, []uint8{5, 6, 7, 8})},
			outDT: ir.Int32, outDims: []int{2, 2}, want: floats(2, 3, 4, 7),
		},
		{
			// int8 x uint8 with per-column b zero point [0 255]: no overflow
			// of 8 bits, exact int32 sums.
			name:    "MatMulInteger mixed signedness",
			node:    node("MatMulInteger", []string{"a", "b", "", "bz"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("a", onnxpb.Int8, 1, 2), vi("b", onnxpb.Uint8, 2, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int32, 1, 2)},
			inits:   []onnxpb.Tensor{quantT("bz", onnxpb.Uint8, []int64{2}, 0, 255)},
			feed: map[string]*ir.Tensor{"a": rnnTensor(t, []int{1, 2}, []int8{-128, 127}),
				"b": rnnTensor(t, []int{2, 2}, []uint8{255, 0, 255, 0})},
			outDT: ir.Int32, outDims: []int{1, 2}, want: floats(-255, 255),
		},
		{
			// x - 1 = 0..8; 2x2 kernel of ones with pads [1 1 0 0]: the
			// padding counts as the zero point, i.e. 0 after subtraction.
			name:    "ConvInteger pads use the zero point",
			node:    node("ConvInteger", []string{"x", "w", "xz"}, []string{"y"}, aInts("pads", 1, 1, 0, 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Uint8, 1, 1, 3, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int32, 1, 1, 3, 3)},
			inits:   []onnxpb.Tensor{quantT("w", onnxpb.Uint8, []int64{1, 1, 2, 2}, 1, 1, 1, 1), quantT("xz", onnxpb.Uint8, nil, 1)},
			feed:    map[string]*ir.Tensor{"x": x33},
			outDT:   ir.Int32, outDims: []int{1, 1, 3, 3}, want: floats(0, 1, 3, 3, 8, 12, 9, 20, 24),
		},
		{
			// Per-output-channel w zero point [0 2]: kernels 1 and 3-2 = 1.
			name:    "ConvInteger per-channel w zero point",
			node:    node("ConvInteger", []string{"x", "w", "", "wz"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Uint8, 1, 1, 3, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int32, 1, 2, 3, 3)},
			inits:   []onnxpb.Tensor{quantT("w", onnxpb.Int8, []int64{2, 1, 1, 1}, 1, 3), quantT("wz", onnxpb.Int8, []int64{2}, 0, 2)},
			feed:    map[string]*ir.Tensor{"x": x33},
			outDT:   ir.Int32, outDims: []int{1, 2, 3, 3}, want: floats(1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9),
		},
		{
			// a - 10 = [0 10]; b - 1 = [[2 254] [4 254]]; acc = [40 2540];
			// multiplier 0.5·0.25/2 = 0.0625: [2.5 158.75] -> [2 159] + 1.
			name:    "QLinearMatMul ties to even before the zero point",
			node:    node("QLinearMatMul", []string{"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("a", onnxpb.Uint8, 1, 2), vi("b", onnxpb.Uint8, 2, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Uint8, 1, 2)},
			inits: []onnxpb.Tensor{tF32("as", nil, 0.5), quantT("az", onnxpb.Uint8, nil, 10), tF32("bs", []int64{1}, 0.25),
				quantT("bz", onnxpb.Uint8, []int64{1}, 1), tF32("ys", nil, 2), quantT("yz", onnxpb.Uint8, nil, 1)},
			feed: map[string]*ir.Tensor{"a": rnnTensor(t, []int{1, 2}, []uint8{10, 20}),
				"b": rnnTensor(t, []int{2, 2}, []uint8{3, 255, 5, 255})},
			outDT: ir.Uint8, outDims: []int{1, 2}, want: floats(3, 160),
		},
		{
			// Per-column b scale [1 0.5]: [-128·127, 127·127]·[1 0.5] saturates to int8.
			name:    "QLinearMatMul int8 saturation and per-column scale",
			node:    node("QLinearMatMul", []string{"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("a", onnxpb.Int8, 2, 1), vi("b", onnxpb.Int8, 1, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Int8, 2, 2)},
			inits: []onnxpb.Tensor{tF32("as", nil, 1), quantT("az", onnxpb.Int8, nil, 0), tF32("bs", []int64{2}, 1, 0.5),
				quantT("bz", onnxpb.Int8, []int64{2}, 0, 0), tF32("ys", nil, 64), quantT("yz", onnxpb.Int8, nil, 0)},
			// a = [-128 1]ᵀ, b = [127 3]: acc = [[-16256 -384] [127 3]];
			// ·[1 0.5]/64 = [[-254 -3] [1.984375 0.0234375]] -> [[-128 -3] [2 0]].
			feed: map[string]*ir.Tensor{"a": rnnTensor(t, []int{2, 1}, []int8{-128, 1}),
				"b": rnnTensor(t, []int{1, 2}, []int8{127, 3})},
			outDT: ir.Int8, outDims: []int{2, 2}, want: floats(-128, -3, 2, 0),
		},
		{
			// x - 10 = [0 10 20 30]; w - [0 -1] = [1 -1] (1x1 kernels);
			// bias [4 0]; multipliers 0.5·[1 0.5]/1 = [0.5 0.25].
			// ch0: [4 14 24 34]·0.5 = [2 7 12 17] + 5; ch1: [0 -10 -20 -30]·0.25
			// = [0 -2.5 -5 -7.5] -> [0 -2 -5 -8] + 5 = [5 3 0 -3 -> 0].
			name:    "QLinearConv per-channel scale, zero point and bias",
			node:    node("QLinearConv", []string{"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Uint8, 1, 1, 2, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Uint8, 1, 2, 2, 2)},
			inits: []onnxpb.Tensor{tF32("xs", nil, 0.5), quantT("xz", onnxpb.Uint8, nil, 10),
				quantT("w", onnxpb.Int8, []int64{2, 1, 1, 1}, 1, -2), tF32("ws", []int64{2}, 1, 0.5),
				quantT("wz", onnxpb.Int8, []int64{2}, 0, -1), tF32("ys", nil, 1), quantT("yz", onnxpb.Uint8, nil, 5),
				rnnI32("b", []int64{2}, 4, 0)},
			feed:  map[string]*ir.Tensor{"x": rnnTensor(t, []int{1, 1, 2, 2}, []uint8{10, 20, 30, 40})},
			outDT: ir.Uint8, outDims: []int{1, 2, 2, 2}, want: floats(7, 12, 17, 22, 5, 3, 0, 0),
		},
	})
}

// TestQuantErrors checks that malformed quantization nodes fail with a
// *NodeError naming the problem.
func TestQuantErrors(t *testing.T) {
	cases := []struct {
		name   string
		opset  int64
		node   onnxpb.Node
		input  onnxpb.ValueInfo
		inits  []onnxpb.Tensor
		feed   *ir.Tensor
		output onnxpb.ValueInfo
		want   string
	}{
		{
			name: "per-axis scale of the wrong length", opset: 13,
			node: node("QuantizeLinear", []string{"x", "s"}, []string{"y"}), input: vi("x", onnxpb.Float, 2, 2),
			inits: []onnxpb.Tensor{tF32("s", []int64{3}, 1, 1, 1)}, feed: f32(t, []int{2, 2}, 1, 2, 3, 4),
			output: vi("y", onnxpb.Uint8, 2, 2), want: "y_scale",
		},
		{
			name: "blocked scale without block_size", opset: 21,
			node: node("DequantizeLinear", []string{"x", "s"}, []string{"y"}), input: vi("x", onnxpb.Int8, 2, 2),
			inits: []onnxpb.Tensor{tF32("s", []int64{2, 1}, 1, 1)}, feed: rnnTensor(t, []int{2, 2}, []int8{1, 2, 3, 4}),
			output: vi("y", onnxpb.Float, 2, 2), want: "block_size",
		},
		{
			name: "float zero point", opset: 13,
			node: node("QuantizeLinear", []string{"x", "s", "z"}, []string{"y"}), input: vi("x", onnxpb.Float, 2),
			inits: []onnxpb.Tensor{tF32("s", nil, 1), tF32("z", nil, 0)}, feed: f32(t, []int{2}, 1, 2),
			output: vi("y", onnxpb.Float, 2), want: "not supported",
		},
		{
			name: "MatMulInteger on floats", opset: 13,
			node: node("MatMulInteger", []string{"x", "x"}, []string{"y"}), input: vi("x", onnxpb.Float, 2, 2),
			feed: f32(t, []int{2, 2}, 1, 2, 3, 4), output: vi("y", onnxpb.Int32, 2, 2), want: "int8 or uint8",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mustModel(t, model(tc.opset, []onnxpb.ValueInfo{tc.input}, []onnxpb.ValueInfo{tc.output}, tc.inits, tc.node))
			_, err := m.Run(context.Background(), engine(t), map[string]*ir.Tensor{tc.input.Name: tc.feed})
			var ne *NodeError
			if !errors.As(err, &ne) {
				t.Fatalf("got %v, want a *NodeError", err)
			}
			if !rnnContainsFold(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
