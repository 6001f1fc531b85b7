package onnx

import (
	"math"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

func TestConvAndPoolOps(t *testing.T) {
	x33 := f32(t, []int{1, 1, 3, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	x44 := f32(t, []int{1, 1, 4, 4}, iotaF(16)...)
	in33 := []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 3, 3)}
	ones22 := tF32("w", []int64{1, 1, 2, 2}, 1, 1, 1, 1)
	runOpCases(t, []opCase{
		{
			name: "Conv 2x2 ones with bias", node: node("Conv", []string{"x", "w", "b"}, []string{"y"}), inputs: in33,
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 2, 2)}, inits: []onnxpb.Tensor{ones22, tF32("b", []int64{1}, 1)},
			feed: map[string]*ir.Tensor{"x": x33}, outDT: ir.Float32, outDims: []int{1, 1, 2, 2}, want: floats(13, 17, 25, 29),
		},
		{
			name: "Conv pads 1 stride 2", inputs: in33,
			node:    node("Conv", []string{"x", "w"}, []string{"y"}, aInts("pads", 1, 1, 1, 1), aInts("strides", 2, 2)),
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 2, 2)}, inits: []onnxpb.Tensor{ones22},
			feed: map[string]*ir.Tensor{"x": x33}, outDT: ir.Float32, outDims: []int{1, 1, 2, 2}, want: floats(1, 5, 11, 28),
		},
		{
			name: "Conv SAME_UPPER keeps the size", inputs: in33,
			node:    node("Conv", []string{"x", "w"}, []string{"y"}, aString("auto_pad", "SAME_UPPER")),
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 3, 3)}, inits: []onnxpb.Tensor{ones22},
			feed: map[string]*ir.Tensor{"x": x33}, outDT: ir.Float32, outDims: []int{1, 1, 3, 3},
			want: floats(12, 16, 9, 24, 28, 15, 15, 17, 9),
		},
		{
			name:    "Conv groups",
			node:    node("Conv", []string{"x", "w"}, []string{"y"}, aInt("group", 2)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 2, 1, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 2, 1, 1)}, inits: []onnxpb.Tensor{tF32("w", []int64{2, 1, 1, 1}, 3, 4)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{1, 2, 1, 1}, 1, 2)}, outDT: ir.Float32, outDims: []int{1, 2, 1, 1}, want: floats(3, 8),
		},
		{
			name:    "ConvTranspose 1-D stride 1",
			node:    node("ConvTranspose", []string{"x", "w"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 3)}, inits: []onnxpb.Tensor{tF32("w", []int64{1, 1, 2}, 1, 10)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 2}, 1, 2)}, outDT: ir.Float32, outDims: []int{1, 1, 3}, want: floats(1, 12, 20),
		},
		{
			name:    "ConvTranspose stride 2 with output_padding",
			node:    node("ConvTranspose", []string{"x", "w"}, []string{"y"}, aInts("strides", 2), aInts("output_padding", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 5)}, inits: []onnxpb.Tensor{tF32("w", []int64{1, 1, 2}, 1, 10)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 2}, 1, 2)}, outDT: ir.Float32, outDims: []int{1, 1, 5}, want: floats(1, 10, 2, 20, 0),
		},
		{
			name:    "ConvTranspose pads crop",
			node:    node("ConvTranspose", []string{"x", "w"}, []string{"y"}, aInts("pads", 1, 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 2)}, inits: []onnxpb.Tensor{tF32("w", []int64{1, 1, 2}, 1, 10)},
			feed: map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 2}, 1, 2)}, outDT: ir.Float32, outDims: []int{1, 1, 2}, want: floats(12, 20),
		},
		{
			name:    "MaxPool 2x2 stride 2",
			node:    node("MaxPool", []string{"x"}, []string{"y"}, aInts("kernel_shape", 2, 2), aInts("strides", 2, 2)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 4, 4)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 2, 2)},
			feed:    map[string]*ir.Tensor{"x": x44}, outDT: ir.Float32, outDims: []int{1, 1, 2, 2}, want: floats(5, 7, 13, 15),
		},
		{
			name:    "MaxPool ceil_mode",
			node:    node("MaxPool", []string{"x"}, []string{"y"}, aInts("kernel_shape", 2), aInts("strides", 2), aInt("ceil_mode", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 5)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 3)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 5}, 1, 2, 3, 4, 5)}, outDT: ir.Float32, outDims: []int{1, 1, 3}, want: floats(2, 4, 5),
		},
		{
			name:   "AveragePool excludes padding",
			node:   node("AveragePool", []string{"x"}, []string{"y"}, aInts("kernel_shape", 3, 3), aInts("pads", 1, 1, 1, 1)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 2, 2)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 2, 2}, 1, 2, 3, 4)},
			outDT: ir.Float32, outDims: []int{1, 1, 2, 2}, want: floats(2.5, 2.5, 2.5, 2.5),
		},
		{
			name:   "AveragePool count_include_pad",
			node:   node("AveragePool", []string{"x"}, []string{"y"}, aInts("kernel_shape", 3, 3), aInts("pads", 1, 1, 1, 1), aInt("count_include_pad", 1)),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 2, 2)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 2, 2}, 1, 2, 3, 4)},
			outDT: ir.Float32, outDims: []int{1, 1, 2, 2}, want: floats(10.0/9, 10.0/9, 10.0/9, 10.0/9), tol: 1e-6,
		},
		{
			name:   "GlobalAveragePool",
			node:   node("GlobalAveragePool", []string{"x"}, []string{"y"}),
			inputs: []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 2, 2)}, outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 1, 1)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 2, 2}, 1, 2, 3, 4)},
			outDT: ir.Float32, outDims: []int{1, 1, 1, 1}, want: floats(2.5),
		},
	})
}

func TestMaxPoolIndices(t *testing.T) {
	m := mustModel(t, model(12, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 4, 4)},
		[]onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 2, 2), vi("i", onnxpb.Int64, 1, 1, 2, 2)}, nil,
		node("MaxPool", []string{"x"}, []string{"y", "i"}, aInts("kernel_shape", 2, 2), aInts("strides", 2, 2))))
	// Put each window's maximum somewhere other than its last element.
	x := f32(t, []int{1, 1, 4, 4}, 9, 0, 0, 0, 0, 0, 0, 8, 0, 7, 0, 0, 0, 0, 6, 0)
	outs := run(t, m, map[string]*ir.Tensor{"x": x})
	expect(t, "y", outs["y"], ir.Float32, []int{1, 1, 2, 2}, floats(9, 8, 7, 6), 0)
	expect(t, "i", outs["i"], ir.Int64, []int{1, 1, 2, 2}, floats(0, 7, 9, 14), 0)
}

func TestNormalizationOps(t *testing.T) {
	ln := func(v []float64, eps float64) []float64 {
		mean, vr := 0.0, 0.0
		for _, x := range v {
			mean += x
		}
		mean /= float64(len(v))
		for _, x := range v {
			vr += (x - mean) * (x - mean)
		}
		vr /= float64(len(v))
		out := make([]float64, len(v))
		for k, x := range v {
			out[k] = (x - mean) / math.Sqrt(vr+eps)
		}
		return out
	}
	runOpCases(t, []opCase{
		{
			name:    "BatchNormalization inference",
			node:    node("BatchNormalization", []string{"x", "s", "b", "m", "v"}, []string{"y"}, aFloat("epsilon", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 2, 1, 1)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 2, 1, 1)},
			inits: []onnxpb.Tensor{tF32("s", []int64{2}, 2, 1), tF32("b", []int64{2}, 1, 0), tF32("m", []int64{2}, 1, 2),
				tF32("v", []int64{2}, 3, 15)},
			feed:  map[string]*ir.Tensor{"x": f32(t, []int{1, 2, 1, 1}, 1, 10)},
			outDT: ir.Float32, outDims: []int{1, 2, 1, 1}, want: floats(1, 2),
		},
		{
			name:    "LayerNormalization last axis",
			node:    node("LayerNormalization", []string{"x", "s"}, []string{"y"}, aFloat("epsilon", 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 4)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 4)},
			inits:   []onnxpb.Tensor{tF32("s", []int64{4}, 1, 1, 1, 1)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{1, 4}, 1, 2, 3, 4)},
			outDT:   ir.Float32, outDims: []int{1, 4}, want: ln(floats(1, 2, 3, 4), 0), tol: 1e-6,
		},
		{
			name:    "InstanceNormalization",
			node:    node("InstanceNormalization", []string{"x", "s", "b"}, []string{"y"}, aFloat("epsilon", 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 1, 4)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 1, 4)},
			inits:   []onnxpb.Tensor{tF32("s", []int64{1}, 1), tF32("b", []int64{1}, 0)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{1, 1, 4}, 2, 4, 6, 8)},
			outDT:   ir.Float32, outDims: []int{1, 1, 4}, want: ln(floats(2, 4, 6, 8), 0), tol: 1e-6,
		},
	})
}

func TestActivationOps(t *testing.T) {
	x := f32(t, []int{3}, -1, 0, 2)
	in := []onnxpb.ValueInfo{vi("x", onnxpb.Float, 3)}
	out := []onnxpb.ValueInfo{vi("y", onnxpb.Float, 3)}
	feed := map[string]*ir.Tensor{"x": x}
	gelu := func(v float64) float64 { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }
	geluTanh := func(v float64) float64 {
		return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
	}
	runOpCases(t, []opCase{
		{name: "Relu", node: node("Relu", []string{"x"}, []string{"y"}), inputs: in, outputs: out, feed: feed,
			outDT: ir.Float32, outDims: []int{3}, want: floats(0, 0, 2)},
		{name: "LeakyRelu", node: node("LeakyRelu", []string{"x"}, []string{"y"}, aFloat("alpha", 0.5)), inputs: in, outputs: out,
			feed: feed, outDT: ir.Float32, outDims: []int{3}, want: floats(-0.5, 0, 2)},
		{name: "HardSigmoid", node: node("HardSigmoid", []string{"x"}, []string{"y"}), inputs: in, outputs: out, feed: feed,
			outDT: ir.Float32, outDims: []int{3}, want: floats(0.3, 0.5, 0.9), tol: 1e-7},
		{name: "Elu", node: node("Elu", []string{"x"}, []string{"y"}), inputs: in, outputs: out, feed: feed,
			outDT: ir.Float32, outDims: []int{3}, want: floats(math.Exp(-1)-1, 0, 2), tol: 1e-7},
		{name: "Gelu", opset: 20, node: node("Gelu", []string{"x"}, []string{"y"}), inputs: in, outputs: out, feed: feed,
			outDT: ir.Float32, outDims: []int{3}, want: floats(gelu(-1), 0, gelu(2)), tol: 1e-6},
		{name: "Gelu tanh", opset: 20, node: node("Gelu", []string{"x"}, []string{"y"}, aString("approximate", "tanh")), inputs: in,
			outputs: out, feed: feed, outDT: ir.Float32, outDims: []int{3}, want: floats(geluTanh(-1), 0, geluTanh(2)), tol: 1e-6},
		{name: "Softplus", node: node("Softplus", []string{"x"}, []string{"y"}), inputs: in, outputs: out, feed: feed,
			outDT: ir.Float32, outDims: []int{3}, want: floats(math.Log1p(math.Exp(-1)), math.Ln2, math.Log1p(math.Exp(2))), tol: 1e-6},
		{
			name: "PRelu per-channel vector (not numpy-broadcastable)", opset: 9,
			node:    node("PRelu", []string{"x", "s"}, []string{"y"}),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 2, 3)},
			outputs: []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 2, 3)},
			inits:   []onnxpb.Tensor{tF32("s", []int64{2}, 0.5, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{1, 2, 3}, -2, 3, -4, -2, 3, -4)},
			outDT:   ir.Float32, outDims: []int{1, 2, 3}, want: floats(-1, 3, -2, -4, 3, -8),
		},
	})
}

// TestSoftmaxOpsetSemantics: before opset 13 Softmax flattens at axis;
// since 13 it normalises along that one axis.
func TestSoftmaxOpsetSemantics(t *testing.T) {
	l3 := float32(math.Log(3))
	x := f32(t, []int{1, 2, 2}, 0, l3, 0, l3)
	in := []onnxpb.ValueInfo{vi("x", onnxpb.Float, 1, 2, 2)}
	out := []onnxpb.ValueInfo{vi("y", onnxpb.Float, 1, 2, 2)}
	runOpCases(t, []opCase{
		{name: "opset 11 flattens from axis 1", opset: 11, node: node("Softmax", []string{"x"}, []string{"y"}), inputs: in, outputs: out,
			feed: map[string]*ir.Tensor{"x": x}, outDT: ir.Float32, outDims: []int{1, 2, 2}, want: floats(0.125, 0.375, 0.125, 0.375), tol: 1e-6},
		{name: "opset 13 single axis 1", opset: 13, node: node("Softmax", []string{"x"}, []string{"y"}, aInt("axis", 1)), inputs: in, outputs: out,
			feed: map[string]*ir.Tensor{"x": x}, outDT: ir.Float32, outDims: []int{1, 2, 2}, want: floats(0.5, 0.5, 0.5, 0.5), tol: 1e-6},
		{name: "LogSoftmax opset 13 last axis", opset: 13, node: node("LogSoftmax", []string{"x"}, []string{"y"}), inputs: in, outputs: out,
			feed: map[string]*ir.Tensor{"x": x}, outDT: ir.Float32, outDims: []int{1, 2, 2},
			want: floats(math.Log(0.25), math.Log(0.75), math.Log(0.25), math.Log(0.75)), tol: 1e-6},
		{name: "Hardmax", opset: 13, node: node("Hardmax", []string{"x"}, []string{"y"}), inputs: in, outputs: out,
			feed: map[string]*ir.Tensor{"x": x}, outDT: ir.Float32, outDims: []int{1, 2, 2}, want: floats(0, 1, 0, 1)},
	})
}
