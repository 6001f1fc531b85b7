package onnx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Recurrent-op tests. The expected values are worked out by hand from the
// equations of the ONNX operator specification (docs/Operators.md: RNN,
// GRU, LSTM), choosing weights and piecewise-linear activations (Relu,
// Affine) that keep every intermediate exact in float32; the default
// (Sigmoid/Tanh) cases are checked against the same equations evaluated in
// float64 with the math package.

// rnnWant is one expected output of a multi-output case.
type rnnWant struct {
	dims []int
	vals []float64
	tol  float64
}

// rnnCase is a single-node model with several outputs to check.
type rnnCase struct {
	name    string
	opset   int64
	node    onnxpb.Node
	inputs  []onnxpb.ValueInfo
	outputs []onnxpb.ValueInfo
	inits   []onnxpb.Tensor
	feed    map[string]*ir.Tensor
	want    map[string]rnnWant
}

func runRNNCases(t *testing.T, cases []rnnCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opset := tc.opset
			if opset == 0 {
				opset = 14
			}
			m := mustModel(t, model(opset, tc.inputs, tc.outputs, tc.inits, tc.node))
			outs := run(t, m, tc.feed)
			for name, w := range tc.want {
				expect(t, fmt.Sprintf("%s output %s", tc.name, name), outs[name], ir.Float32, w.dims, w.vals, w.tol)
			}
		})
	}
}

func rnnStrings(name string, v ...string) onnxpb.Attribute {
	s := make([][]byte, len(v))
	for k, x := range v {
		s[k] = []byte(x)
	}
	return onnxpb.Attribute{Name: name, Type: onnxpb.AttrStrings, Strings: s}
}

func rnnFloats(name string, v ...float32) onnxpb.Attribute {
	return onnxpb.Attribute{Name: name, Type: onnxpb.AttrFloats, Floats: v}
}

func rnnI32(name string, dims []int64, v ...int32) onnxpb.Tensor {
	return onnxpb.Tensor{Name: name, Dims: dims, DataType: onnxpb.Int32, Int32Data: v}
}

func TestRNN(t *testing.T) {
	// One input and one hidden unit, Relu: h_t = relu(2·x_t + 0.5·h_{t-1} + 1).
	// Forward over x = 1, 2, 3: 3, 6.5, 10.25.
	// Reverse (t = 2, 1, 0): 7, 8.5, 7.25.
	w1 := tF32("W", []int64{1, 1, 1}, 2)
	r1 := tF32("R", []int64{1, 1, 1}, 0.5)
	b1 := tF32("B", []int64{1, 2}, 1, 0)
	x3 := f32(t, []int{3, 1, 1}, 1, 2, 3)
	xIn := []onnxpb.ValueInfo{vi("X", onnxpb.Float, 3, 1, 1)}
	relu := rnnStrings("activations", "Relu")
	cases := []rnnCase{
		{
			name:   "forward relu",
			node:   node("RNN", []string{"X", "W", "R", "B"}, []string{"Y", "Y_h"}, relu, aInt("hidden_size", 1)),
			inputs: xIn, inits: []onnxpb.Tensor{w1, r1, b1},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 3, 1, 1, 1), vi("Y_h", onnxpb.Float, 1, 1, 1)},
			feed:    map[string]*ir.Tensor{"X": x3},
			want: map[string]rnnWant{
				"Y":   {dims: []int{3, 1, 1, 1}, vals: floats(3, 6.5, 10.25)},
				"Y_h": {dims: []int{1, 1, 1}, vals: floats(10.25)},
			},
		},
		{
			name:   "reverse relu",
			node:   node("RNN", []string{"X", "W", "R", "B"}, []string{"Y", "Y_h"}, relu, aString("direction", "reverse")),
			inputs: xIn, inits: []onnxpb.Tensor{w1, r1, b1},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 3, 1, 1, 1), vi("Y_h", onnxpb.Float, 1, 1, 1)},
			feed:    map[string]*ir.Tensor{"X": x3},
			want: map[string]rnnWant{
				"Y":   {dims: []int{3, 1, 1, 1}, vals: floats(7.25, 8.5, 7)},
				"Y_h": {dims: []int{1, 1, 1}, vals: floats(7.25)},
			},
		},
		{
			name: "bidirectional relu",
			node: node("RNN", []string{"X", "W", "R", "B"}, []string{"Y", "Y_h"},
				rnnStrings("activations", "Relu", "Relu"), aString("direction", "bidirectional")),
			inputs: xIn,
			inits: []onnxpb.Tensor{tF32("W", []int64{2, 1, 1}, 2, 2), tF32("R", []int64{2, 1, 1}, 0.5, 0.5),
				tF32("B", []int64{2, 2}, 1, 0, 1, 0)},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 3, 2, 1, 1), vi("Y_h", onnxpb.Float, 2, 1, 1)},
			feed:    map[string]*ir.Tensor{"X": x3},
			want: map[string]rnnWant{
				"Y":   {dims: []int{3, 2, 1, 1}, vals: floats(3, 7.25, 6.5, 8.5, 10.25, 7)},
				"Y_h": {dims: []int{2, 1, 1}, vals: floats(10.25, 7.25)},
			},
		},
		{
			// Batch entry 1 has length 2: its third step (x = 100) is
			// ignored, Y is 0 there and Y_h is the state after step 2. In
			// reverse it starts at its own last element (t = 1):
			// relu(2·2 + 1) = 5, then relu(2·1 + 0.5·5 + 1) = 5.5.
			name: "sequence_lens forward and reverse",
			node: node("RNN", []string{"X", "W", "R", "B", "L"}, []string{"Y", "Y_h"},
				rnnStrings("activations", "Relu", "Relu"), aString("direction", "bidirectional")),
			inputs: []onnxpb.ValueInfo{vi("X", onnxpb.Float, 3, 2, 1)},
			inits: []onnxpb.Tensor{tF32("W", []int64{2, 1, 1}, 2, 2), tF32("R", []int64{2, 1, 1}, 0.5, 0.5),
				tF32("B", []int64{2, 2}, 1, 0, 1, 0), rnnI32("L", []int64{2}, 3, 2)},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 3, 2, 2, 1), vi("Y_h", onnxpb.Float, 2, 2, 1)},
			feed:    map[string]*ir.Tensor{"X": f32(t, []int{3, 2, 1}, 1, 1, 2, 2, 3, 100)},
			want: map[string]rnnWant{
				// [t][dir][batch]
				"Y":   {dims: []int{3, 2, 2, 1}, vals: floats(3, 3, 7.25, 5.5, 6.5, 6.5, 8.5, 5, 10.25, 0, 7, 0)},
				"Y_h": {dims: []int{2, 2, 1}, vals: floats(10.25, 6.5, 7.25, 5.5)},
			},
		},
		{
			name:    "sequence_lens as a runtime input",
			node:    node("RNN", []string{"X", "W", "R", "B", "L"}, []string{"Y", "Y_h"}, relu),
			inputs:  []onnxpb.ValueInfo{vi("X", onnxpb.Float, 3, 2, 1), vi("L", onnxpb.Int32, 2)},
			inits:   []onnxpb.Tensor{w1, r1, b1},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 3, 1, 2, 1), vi("Y_h", onnxpb.Float, 1, 2, 1)},
			feed: map[string]*ir.Tensor{"X": f32(t, []int{3, 2, 1}, 1, 1, 2, 2, 3, 100),
				"L": rnnTensor(t, []int{2}, []int32{3, 2})},
			want: map[string]rnnWant{
				"Y":   {dims: []int{3, 1, 2, 1}, vals: floats(3, 3, 6.5, 6.5, 10.25, 0)},
				"Y_h": {dims: []int{1, 2, 1}, vals: floats(10.25, 6.5)},
			},
		},
		{
			name:   "layout 1 (batch first)",
			node:   node("RNN", []string{"X", "W", "R", "B"}, []string{"Y", "Y_h"}, relu, aInt("layout", 1)),
			inputs: []onnxpb.ValueInfo{vi("X", onnxpb.Float, 2, 3, 1)}, inits: []onnxpb.Tensor{w1, r1, b1},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 2, 3, 1, 1), vi("Y_h", onnxpb.Float, 2, 1, 1)},
			// Batch 0 is 1, 2, 3; batch 1 is 3, 2, 1 (relu(7) = 7, relu(4 + 3.5 + 1) = 8.5, relu(2 + 4.25 + 1) = 7.25).
			feed: map[string]*ir.Tensor{"X": f32(t, []int{2, 3, 1}, 1, 2, 3, 3, 2, 1)},
			want: map[string]rnnWant{
				"Y":   {dims: []int{2, 3, 1, 1}, vals: floats(3, 6.5, 10.25, 7, 8.5, 7.25)},
				"Y_h": {dims: []int{2, 1, 1}, vals: floats(10.25, 7.25)},
			},
		},
		{
			// initial_h = 1, R = 2: h = relu(0 + 2·1) = 2; only Y_h is asked for.
			name:   "initial_h and omitted Y",
			node:   node("RNN", []string{"X", "W", "R", "", "", "H0"}, []string{"", "Y_h"}, relu),
			inputs: []onnxpb.ValueInfo{vi("X", onnxpb.Float, 1, 1, 1)},
			inits: []onnxpb.Tensor{tF32("W", []int64{1, 1, 1}, 1), tF32("R", []int64{1, 1, 1}, 2),
				tF32("H0", []int64{1, 1, 1}, 1)},
			outputs: []onnxpb.ValueInfo{vi("Y_h", onnxpb.Float, 1, 1, 1)},
			feed:    map[string]*ir.Tensor{"X": f32(t, []int{1, 1, 1}, 0)},
			want:    map[string]rnnWant{"Y_h": {dims: []int{1, 1, 1}, vals: floats(2)}},
		},
		{
			// LeakyRelu with activation_alpha 0.5: -2 -> -1, then 4 + 0·h = 4.
			name: "LeakyRelu alpha",
			node: node("RNN", []string{"X", "W", "R"}, []string{"Y"},
				rnnStrings("activations", "LeakyRelu"), rnnFloats("activation_alpha", 0.5)),
			inputs:  []onnxpb.ValueInfo{vi("X", onnxpb.Float, 2, 1, 1)},
			inits:   []onnxpb.Tensor{tF32("W", []int64{1, 1, 1}, 1), tF32("R", []int64{1, 1, 1}, 0)},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 2, 1, 1, 1)},
			feed:    map[string]*ir.Tensor{"X": f32(t, []int{2, 1, 1}, -2, 4)},
			want:    map[string]rnnWant{"Y": {dims: []int{2, 1, 1, 1}, vals: floats(-1, 4)}},
		},
		{
			// clip 1 bounds the activation input: relu(min(5, 1)) = 1.
			name:    "clip",
			node:    node("RNN", []string{"X", "W", "R"}, []string{"Y"}, relu, aFloat("clip", 1)),
			inputs:  []onnxpb.ValueInfo{vi("X", onnxpb.Float, 1, 1, 1)},
			inits:   []onnxpb.Tensor{tF32("W", []int64{1, 1, 1}, 1), tF32("R", []int64{1, 1, 1}, 0)},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 1, 1, 1, 1)},
			feed:    map[string]*ir.Tensor{"X": f32(t, []int{1, 1, 1}, 5)},
			want:    map[string]rnnWant{"Y": {dims: []int{1, 1, 1, 1}, vals: floats(1)}},
		},
		{
			// Default Tanh: h1 = tanh(0.5), h2 = tanh(-1 + 0.5·h1).
			name:    "default tanh",
			node:    node("RNN", []string{"X", "W", "R"}, []string{"Y"}),
			inputs:  []onnxpb.ValueInfo{vi("X", onnxpb.Float, 2, 1, 1)},
			inits:   []onnxpb.Tensor{tF32("W", []int64{1, 1, 1}, 1), tF32("R", []int64{1, 1, 1}, 0.5)},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 2, 1, 1, 1)},
			feed:    map[string]*ir.Tensor{"X": f32(t, []int{2, 1, 1}, 0.5, -1)},
			want: map[string]rnnWant{"Y": {dims: []int{2, 1, 1, 1},
				vals: floats(math.Tanh(0.5), math.Tanh(-1+0.5*math.Tanh(0.5))), tol: 1e-6}},
		},
		{
			// An empty sequence leaves the state at initial_h.
			name:   "zero steps",
			node:   node("RNN", []string{"X", "W", "R", "", "", "H0"}, []string{"Y", "Y_h"}),
			inputs: []onnxpb.ValueInfo{vi("X", onnxpb.Float, 0, 1, 1)},
			inits: []onnxpb.Tensor{tF32("W", []int64{1, 1, 1}, 1), tF32("R", []int64{1, 1, 1}, 1),
				tF32("H0", []int64{1, 1, 1}, 3)},
			outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 0, 1, 1, 1), vi("Y_h", onnxpb.Float, 1, 1, 1)},
			feed:    map[string]*ir.Tensor{"X": f32(t, []int{0, 1, 1})},
			want: map[string]rnnWant{
				"Y":   {dims: []int{0, 1, 1, 1}},
				"Y_h": {dims: []int{1, 1, 1}, vals: floats(3)},
			},
		},
	}
	runRNNCases(t, cases)
}

func TestGRU(t *testing.T) {
	// One input and one hidden unit; W = [Wz Wr Wh] = [0 0 1],
	// R = [0 0 1], B = [Wb | Rb] = [0 0 0 | 0 0 2], initial_h = 2,
	// f = Affine(0.25, 0.5), g = Relu. Then z = r = 0.5 at every step.
	// linear_before_reset 0: h~ = relu(x + (r·h)·1 + 2); H = 0.5·h~ + 0.5·h.
	//   x = 1, h = 2: h~ = 4, H = 3; x = 1, h = 3: h~ = 4.5, H = 3.75.
	// linear_before_reset 1: h~ = relu(x + r·(h·1 + 2)).
	//   h = 2: h~ = 3, H = 2.5; h = 2.5: h~ = 3.25, H = 2.875.
	inits := []onnxpb.Tensor{
		tF32("W", []int64{1, 3, 1}, 0, 0, 1), tF32("R", []int64{1, 3, 1}, 0, 0, 1),
		tF32("B", []int64{1, 6}, 0, 0, 0, 0, 0, 2), tF32("H0", []int64{1, 1, 1}, 2),
	}
	acts := []onnxpb.Attribute{rnnStrings("activations", "Affine", "Relu"),
		rnnFloats("activation_alpha", 0.25), rnnFloats("activation_beta", 0.5)}
	in := []onnxpb.ValueInfo{vi("X", onnxpb.Float, 2, 1, 1)}
	out := []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 2, 1, 1, 1), vi("Y_h", onnxpb.Float, 1, 1, 1)}
	x := f32(t, []int{2, 1, 1}, 1, 1)
	ins := []string{"X", "W", "R", "B", "", "H0"}

	// Default activations against the spec equations in float64.
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	// W = [0.5 -1 1], R = [1 0.5 -0.5], no bias, x = 1, 2, h0 = 0.
	hRef := 0.0
	var yRef []float64
	for _, xv := range []float64{1, 2} {
		z := sig(0.5*xv + 1*hRef)
		r := sig(-1*xv + 0.5*hRef)
		hh := math.Tanh(xv + (r*hRef)*-0.5)
		hRef = (1-z)*hh + z*hRef
		yRef = append(yRef, hRef)
	}

	runRNNCases(t, []rnnCase{
		{
			name: "linear_before_reset 0", node: node("GRU", ins, []string{"Y", "Y_h"}, acts...),
			inputs: in, outputs: out, inits: inits, feed: map[string]*ir.Tensor{"X": x},
			want: map[string]rnnWant{
				"Y":   {dims: []int{2, 1, 1, 1}, vals: floats(3, 3.75)},
				"Y_h": {dims: []int{1, 1, 1}, vals: floats(3.75)},
			},
		},
		{
			name:   "linear_before_reset 1",
			node:   node("GRU", ins, []string{"Y", "Y_h"}, append(acts, aInt("linear_before_reset", 1))...),
			inputs: in, outputs: out, inits: inits, feed: map[string]*ir.Tensor{"X": x},
			want: map[string]rnnWant{
				"Y":   {dims: []int{2, 1, 1, 1}, vals: floats(2.5, 2.875)},
				"Y_h": {dims: []int{1, 1, 1}, vals: floats(2.875)},
			},
		},
		{
			name:   "default sigmoid and tanh",
			node:   node("GRU", []string{"X", "W", "R"}, []string{"Y"}, aInt("hidden_size", 1)),
			inputs: in, outputs: out[:1],
			inits: []onnxpb.Tensor{tF32("W", []int64{1, 3, 1}, 0.5, -1, 1), tF32("R", []int64{1, 3, 1}, 1, 0.5, -0.5)},
			feed:  map[string]*ir.Tensor{"X": f32(t, []int{2, 1, 1}, 1, 2)},
			want:  map[string]rnnWant{"Y": {dims: []int{2, 1, 1, 1}, vals: yRef, tol: 1e-6}},
		},
	})
}

func TestLSTM(t *testing.T) {
	// One input and one hidden unit; gates in W/R/B order i, o, f, c;
	// peepholes P = [Pi Po Pf] = [0.5 0.25 0]. f = Affine(0.25, 0.5),
	// g = Relu, h = Affine(1, 0) (identity). x = 2, h0 = 1, c0 = 4.
	// W = [0 0 0 1], R = [0 0 0 1], Wb = [-2 0 2 0], Rb = 0.
	//   i = 0.25·(0.5·4 - 2) + 0.5 = 0.5
	//   f = 0.25·2 + 0.5 = 1            (input_forget: f = 1 - i = 0.5)
	//   c~ = relu(2 + 1) = 3
	//   C = f·4 + i·3 = 5.5              (input_forget: 3.5)
	//   o = 0.25·(0.25·C) + 0.5 = 0.84375 (0.71875)
	//   H = o·C = 4.640625               (2.515625)
	inits := []onnxpb.Tensor{
		tF32("W", []int64{1, 4, 1}, 0, 0, 0, 1), tF32("R", []int64{1, 4, 1}, 0, 0, 0, 1),
		tF32("B", []int64{1, 8}, -2, 0, 2, 0, 0, 0, 0, 0),
		tF32("H0", []int64{1, 1, 1}, 1), tF32("C0", []int64{1, 1, 1}, 4),
		tF32("P", []int64{1, 3}, 0.5, 0.25, 0),
	}
	acts := []onnxpb.Attribute{rnnStrings("activations", "Affine", "Relu", "Affine"),
		rnnFloats("activation_alpha", 0.25, 1), rnnFloats("activation_beta", 0.5, 0)}
	ins := []string{"X", "W", "R", "B", "", "H0", "C0", "P"}
	in := []onnxpb.ValueInfo{vi("X", onnxpb.Float, 1, 1, 1)}
	out := []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 1, 1, 1, 1), vi("Y_h", onnxpb.Float, 1, 1, 1), vi("Y_c", onnxpb.Float, 1, 1, 1)}
	feed := map[string]*ir.Tensor{"X": f32(t, []int{1, 1, 1}, 2)}

	// Default activations, two steps, against the spec equations in float64:
	// W = [1 -1 0.5 2], R = [0.5 0.5 -1 1], no bias or peepholes, x = 1, -1.
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	h, c := 0.0, 0.0
	var yRef []float64
	for _, xv := range []float64{1, -1} {
		i := sig(xv + 0.5*h)
		o := sig(-xv + 0.5*h)
		f := sig(0.5*xv - h)
		cc := math.Tanh(2*xv + h)
		c = f*c + i*cc
		h = o * math.Tanh(c)
		yRef = append(yRef, h)
	}

	runRNNCases(t, []rnnCase{
		{
			name: "peepholes", node: node("LSTM", ins, []string{"Y", "Y_h", "Y_c"}, acts...),
			inputs: in, outputs: out, inits: inits, feed: feed,
			want: map[string]rnnWant{
				"Y":   {dims: []int{1, 1, 1, 1}, vals: floats(4.640625)},
				"Y_h": {dims: []int{1, 1, 1}, vals: floats(4.640625)},
				"Y_c": {dims: []int{1, 1, 1}, vals: floats(5.5)},
			},
		},
		{
			name:   "input_forget",
			node:   node("LSTM", ins, []string{"Y", "Y_h", "Y_c"}, append(acts, aInt("input_forget", 1))...),
			inputs: in, outputs: out, inits: inits, feed: feed,
			want: map[string]rnnWant{
				"Y_h": {dims: []int{1, 1, 1}, vals: floats(2.515625)},
				"Y_c": {dims: []int{1, 1, 1}, vals: floats(3.5)},
			},
		},
		{
			name: "only Y_c, layout 1",
			node: node("LSTM", ins, []string{"", "", "Y_c"}, append(acts, aInt("layout", 1))...),
			// With layout 1, initial_h and initial_c are [batch, dirs, hidden]: still [1, 1, 1].
			inputs: in, outputs: out[2:], inits: inits, feed: feed,
			want: map[string]rnnWant{"Y_c": {dims: []int{1, 1, 1}, vals: floats(5.5)}},
		},
		{
			name:   "default activations",
			node:   node("LSTM", []string{"X", "W", "R"}, []string{"Y"}),
			inputs: []onnxpb.ValueInfo{vi("X", onnxpb.Float, 2, 1, 1)}, outputs: []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 2, 1, 1, 1)},
			inits: []onnxpb.Tensor{tF32("W", []int64{1, 4, 1}, 1, -1, 0.5, 2), tF32("R", []int64{1, 4, 1}, 0.5, 0.5, -1, 1)},
			feed:  map[string]*ir.Tensor{"X": f32(t, []int{2, 1, 1}, 1, -1)},
			want:  map[string]rnnWant{"Y": {dims: []int{2, 1, 1, 1}, vals: yRef, tol: 1e-6}},
		},
	})
}

func rnnTensor[T ir.Element](t testing.TB, dims []int, v []T) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorFromFlat(v, dims...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestRecurrentErrors checks that malformed recurrent nodes fail with a
// *NodeError naming the problem instead of panicking.
func TestRecurrentErrors(t *testing.T) {
	w := tF32("W", []int64{1, 1, 1}, 1)
	r := tF32("R", []int64{1, 1, 1}, 1)
	in := []onnxpb.ValueInfo{vi("X", onnxpb.Float, 1, 1, 1)}
	out := []onnxpb.ValueInfo{vi("Y", onnxpb.Float, 1, 1, 1, 1)}
	cases := []struct {
		name  string
		node  onnxpb.Node
		inits []onnxpb.Tensor
		want  string
	}{
		{"W of the wrong shape", node("RNN", []string{"X", "W", "R"}, []string{"Y"}), []onnxpb.Tensor{tF32("W", []int64{1, 2, 1}, 1, 1), r}, "input W"},
		{"hidden_size mismatch", node("RNN", []string{"X", "W", "R"}, []string{"Y"}, aInt("hidden_size", 3)), []onnxpb.Tensor{w, r}, "hidden_size"},
		{"unknown activation", node("RNN", []string{"X", "W", "R"}, []string{"Y"}, rnnStrings("activations", "Swish")), []onnxpb.Tensor{w, r}, "Swish"},
		{"bad direction", node("RNN", []string{"X", "W", "R"}, []string{"Y"}, aString("direction", "sideways")), []onnxpb.Tensor{w, r}, "sideways"},
		{"GRU with RNN weights", node("GRU", []string{"X", "W", "R"}, []string{"Y"}), []onnxpb.Tensor{w, r}, "input R"},
		{"bidirectional with one direction of weights", node("LSTM", []string{"X", "W", "R"}, []string{"Y"}, aString("direction", "bidirectional")),
			[]onnxpb.Tensor{tF32("W", []int64{1, 4, 1}, 1, 1, 1, 1), tF32("R", []int64{1, 4, 1}, 1, 1, 1, 1)}, "input R"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mustModel(t, model(14, in, out, tc.inits, tc.node))
			_, err := m.Run(context.Background(), engine(t), map[string]*ir.Tensor{"X": f32(t, []int{1, 1, 1}, 1)})
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

func rnnContainsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
