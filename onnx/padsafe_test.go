package onnx

import (
	"math"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// The padding analysis, op class by op class: each case is a small graph,
// the dimension asked about, and the verdict with a phrase of its reason.
func TestPadSafetyRules(t *testing.T) {
	F, I, B := onnxpb.Float, onnxpb.Int64, onnxpb.Bool
	x2 := []onnxpb.ValueInfo{vi("x", F, "batch", 4)}
	y2 := []onnxpb.ValueInfo{vi("y", F, "batch", 4)}
	w44 := tF32("w", []int64{4, 4}, make([]float32, 16)...)
	i64s := func(name string, v ...int64) onnxpb.Tensor { return tI64(name, []int64{int64(len(v))}, v...) }
	i64 := func(name string, v int64) onnxpb.Tensor { return tI64(name, nil, v) }
	f32s := func(name string, v float32) onnxpb.Tensor { return tF32(name, nil, v) }
	named := func(n onnxpb.Node, name string) onnxpb.Node { n.Name = name; return n }
	// attention builds scores (x) + bias, Softmax over the last axis, then a
	// contraction with values v over that axis: the masked-attention shape.
	attention := func(bias ...onnxpb.Node) []onnxpb.Node {
		return append(bias,
			named(node("Add", []string{"x", "bias"}, []string{"s"}), "scores"),
			named(node("Softmax", []string{"s"}, []string{"p"}, aInt("axis", -1)), "attn"),
			named(node("MatMul", []string{"p", "v"}, []string{"y"}), "ctx"))
	}
	attIn := func(maskDT onnxpb.DataType) []onnxpb.ValueInfo {
		return []onnxpb.ValueInfo{vi("x", F, "batch", "seq", "seq"), vi("mask", maskDT, "batch", "seq"), vi("v", F, "batch", "seq", 4)}
	}
	attOut := []onnxpb.ValueInfo{vi("y", F, "batch", "seq", 4)}
	tests := []struct {
		name    string
		in, out []onnxpb.ValueInfo
		inits   []onnxpb.Tensor
		nodes   []onnxpb.Node
		dim     string
		safe    bool
		why     string
		fill    string // in FillString, when safe
	}{
		{"element-wise", x2, y2, nil, []onnxpb.Node{node("Relu", []string{"x"}, []string{"r"}), node("Add", []string{"r", "x"}, []string{"y"})},
			"batch", true, "independent through all 2 ops", "copy of the last real row"},
		{"broadcast against another dim", []onnxpb.ValueInfo{vi("x", F, "batch"), vi("z", F, "n")}, []onnxpb.ValueInfo{vi("y", F, "batch")}, nil,
			[]onnxpb.Node{node("Add", []string{"x", "z"}, []string{"y"})}, "batch", false, "broadcasts it against", ""},
		// An optional input left empty is no value: this panicked (nil
		// dereference in sizeDep) until the differential test
		// (onnx/conformance/paddiff_test.go) loaded ONNX's test_clip_default_max.
		{"InstanceNormalization along channels, static scale", []onnxpb.ValueInfo{vi("x", F, 1, "c", 4)}, []onnxpb.ValueInfo{vi("y", F, 1, "c", 4)},
			[]onnxpb.Tensor{tF32("s", []int64{3}, 1, 1, 1), tF32("b", []int64{3}, 0, 0, 0)},
			[]onnxpb.Node{node("InstanceNormalization", []string{"x", "s", "b"}, []string{"y"})}, "c", false, "scale or bias that does not carry it", ""},
		{"InstanceNormalization along channels, scale along them", []onnxpb.ValueInfo{vi("x", F, 1, "c", 4), vi("s", F, "c"), vi("b", F, "c")},
			[]onnxpb.ValueInfo{vi("y", F, 1, "c", 4)}, nil,
			[]onnxpb.Node{node("InstanceNormalization", []string{"x", "s", "b"}, []string{"y"})}, "c", true, "independent", ""},
		{"Clip without min", x2, y2, []onnxpb.Tensor{f32s("hi", 1)}, []onnxpb.Node{node("Clip", []string{"x", "", "hi"}, []string{"y"})},
			"batch", true, "independent", ""},
		{"MatMul over other axes", x2, y2, []onnxpb.Tensor{w44}, []onnxpb.Node{node("MatMul", []string{"x", "w"}, []string{"y"})},
			"batch", true, "independent", ""},
		{"MatMul contracting over it", []onnxpb.ValueInfo{vi("x", F, 4, "batch")}, []onnxpb.ValueInfo{vi("y", F, 4, 4)}, nil,
			[]onnxpb.Node{node("Transpose", []string{"x"}, []string{"xt"}), node("MatMul", []string{"x", "xt"}, []string{"y"})},
			"batch", false, "contracts over it", ""},
		{"Gemm contracting over it", []onnxpb.ValueInfo{vi("x", F, "batch", 4)}, []onnxpb.ValueInfo{vi("y", F, 4, 4)}, []onnxpb.Tensor{tF32("w", []int64{2, 4}, make([]float32, 8)...)},
			[]onnxpb.Node{node("Gemm", []string{"x", "x"}, []string{"y"}, aInt("transA", 1))}, "batch", false, "contracts over it", ""},
		{"Conv over batch", []onnxpb.ValueInfo{vi("x", F, "batch", 1, 5)}, []onnxpb.ValueInfo{vi("y", F, "batch", 1, 3)}, []onnxpb.Tensor{tF32("w", []int64{1, 1, 3}, 1, 1, 1)},
			[]onnxpb.Node{node("Conv", []string{"x", "w"}, []string{"y"})}, "batch", true, "independent", ""},
		{"Conv along it", []onnxpb.ValueInfo{vi("x", F, 1, 1, "len")}, []onnxpb.ValueInfo{vi("y", F, 1, 1, "len")}, []onnxpb.Tensor{tF32("w", []int64{1, 1, 3}, 1, 1, 1)},
			[]onnxpb.Node{node("Conv", []string{"x", "w"}, []string{"y"}, aInts("pads", 1, 1))}, "len", false, "mixes positions along it", ""},
		{"pooling over batch", []onnxpb.ValueInfo{vi("x", F, "batch", 2, 4, 4)}, []onnxpb.ValueInfo{vi("y", F, "batch", 2)}, nil,
			[]onnxpb.Node{node("MaxPool", []string{"x"}, []string{"p"}, aInts("kernel_shape", 2, 2)), node("GlobalAveragePool", []string{"p"}, []string{"g"}),
				node("Flatten", []string{"g"}, []string{"y"})}, "batch", true, "independent", ""},
		{"Flatten merging it", x2, []onnxpb.ValueInfo{vi("y", F, 1, "n")}, nil,
			[]onnxpb.Node{node("Flatten", []string{"x"}, []string{"y"}, aInt("axis", 0))}, "batch", false, "merges it", ""},
		{"Transpose, then a reduction over the moved axis", x2, []onnxpb.ValueInfo{vi("y", F, 4)}, nil,
			[]onnxpb.Node{node("Transpose", []string{"x"}, []string{"t"}), named(node("ReduceSum", []string{"t", "ax"}, []string{"y"}, aInt("keepdims", 0)), "r1")},
			"batch", false, `ReduceSum node "r1" reduces over it`, ""},
		{"reduction over another axis", x2, []onnxpb.ValueInfo{vi("y", F, "batch")}, nil,
			[]onnxpb.Node{node("ReduceMax", []string{"x"}, []string{"y"}, aInts("axes", 1), aInt("keepdims", 0))}, "batch", true, "independent", ""},
		{"Unsqueeze, then Softmax along it", x2, []onnxpb.ValueInfo{vi("y", F, 1, "batch", 4)}, []onnxpb.Tensor{i64s("a", 0)},
			[]onnxpb.Node{node("Unsqueeze", []string{"x", "a"}, []string{"u"}), node("Softmax", []string{"u"}, []string{"y"}, aInt("axis", 1))},
			"batch", false, "normalises over it", ""},
		{"Reshape keeping it apart", []onnxpb.ValueInfo{vi("x", F, "batch", 6)}, []onnxpb.ValueInfo{vi("y", F, "batch", 2, 3)}, []onnxpb.Tensor{i64s("z", 0), i64s("one", 1), i64s("rest", 2, 3)},
			[]onnxpb.Node{node("Shape", []string{"x"}, []string{"s"}), node("Slice", []string{"s", "z", "one"}, []string{"b"}),
				node("Concat", []string{"b", "rest"}, []string{"t"}, aInt("axis", 0)), node("Reshape", []string{"x", "t"}, []string{"y"})},
			"batch", true, "independent", ""},
		{"Reshape merging it", x2, []onnxpb.ValueInfo{vi("y", F, "n")}, []onnxpb.Tensor{i64s("t", -1)},
			[]onnxpb.Node{named(node("Reshape", []string{"x", "t"}, []string{"y"}), "flat")}, "batch", false, `output "y" carries it merged with other sizes`, ""},
		{"Reshape regrouping the axes before it", []onnxpb.ValueInfo{vi("x", F, 6, "batch")}, []onnxpb.ValueInfo{vi("y", F, 3, 2, "batch")}, []onnxpb.Tensor{i64s("t", 3, 2, -1)},
			[]onnxpb.Node{node("Reshape", []string{"x", "t"}, []string{"y"})}, "batch", true, "independent", ""},
		{"Reshape moving it", []onnxpb.ValueInfo{vi("x", F, 2, "batch")}, []onnxpb.ValueInfo{vi("y", F, "batch", 2)}, []onnxpb.Tensor{i64s("one", 1), i64s("two", 2), i64s("e", 2)},
			[]onnxpb.Node{node("Shape", []string{"x"}, []string{"s"}), node("Slice", []string{"s", "one", "e"}, []string{"b"}),
				node("Concat", []string{"b", "two"}, []string{"t"}, aInt("axis", 0)), node("Reshape", []string{"x", "t"}, []string{"y"})},
			"batch", false, "moves it across other axes", ""},
		{"Concat along another axis", x2, []onnxpb.ValueInfo{vi("y", F, "batch", 8)}, nil,
			[]onnxpb.Node{node("Concat", []string{"x", "x"}, []string{"y"}, aInt("axis", 1))}, "batch", true, "independent", ""},
		{"Concat along it", x2, []onnxpb.ValueInfo{vi("y", F, "n", 4)}, nil,
			[]onnxpb.Node{node("Concat", []string{"x", "x"}, []string{"y"}, aInt("axis", 0))}, "batch", false, "concatenates along it", ""},
		{"Split along it", x2, []onnxpb.ValueInfo{vi("y", F, "n", 4), vi("z", F, "m", 4)}, nil,
			[]onnxpb.Node{node("Split", []string{"x"}, []string{"y", "z"}, aInt("axis", 0), aInt("num_outputs", 2))}, "batch", false, "splits along it", ""},
		{"Slice along it", x2, []onnxpb.ValueInfo{vi("y", F, "n", 4)}, []onnxpb.Tensor{i64s("s", 1), i64s("e", 3)},
			[]onnxpb.Node{node("Slice", []string{"x", "s", "e"}, []string{"y"})}, "batch", false, "slices along it", ""},
		{"Gather of embeddings by ids", []onnxpb.ValueInfo{vi("ids", I, "batch", "seq")}, []onnxpb.ValueInfo{vi("y", F, "batch", "seq", 4)}, []onnxpb.Tensor{w44},
			[]onnxpb.Node{node("Gather", []string{"w", "ids"}, []string{"y"})}, "seq", true, "independent", ""},
		{"Gather of position 0 along it", x2, []onnxpb.ValueInfo{vi("y", F, 4)}, []onnxpb.Tensor{i64("i", 0)},
			[]onnxpb.Node{node("Gather", []string{"x", "i"}, []string{"y"})}, "batch", true, "independent", ""},
		{"Gather of position -1 along it", x2, []onnxpb.ValueInfo{vi("y", F, 4)}, []onnxpb.Tensor{i64("i", -1)},
			[]onnxpb.Node{node("Gather", []string{"x", "i"}, []string{"y"})}, "batch", false, "which may be padding", ""},
		{"LayerNorm over another axis", x2, y2, []onnxpb.Tensor{tF32("g", []int64{4}, 1, 1, 1, 1)},
			[]onnxpb.Node{node("LayerNormalization", []string{"x", "g"}, []string{"y"})}, "batch", true, "independent", ""},
		{"LayerNorm over it", []onnxpb.ValueInfo{vi("x", F, 4, "seq")}, []onnxpb.ValueInfo{vi("y", F, 4, "seq")}, []onnxpb.Tensor{tF32("g", []int64{1}, 1)},
			[]onnxpb.Node{node("LayerNormalization", []string{"x", "g"}, []string{"y"}, aInt("axis", 1))}, "seq", false, "normalises over it", ""},
		{"InstanceNorm along it", []onnxpb.ValueInfo{vi("x", F, 1, 1, "len")}, []onnxpb.ValueInfo{vi("y", F, 1, 1, "len")}, []onnxpb.Tensor{tF32("g", []int64{1}, 1), tF32("b", []int64{1}, 0)},
			[]onnxpb.Node{node("InstanceNormalization", []string{"x", "g", "b"}, []string{"y"})}, "len", false, "mixes positions", ""},
		{"forward CumSum along it", x2, y2, []onnxpb.Tensor{i64("a", 0)},
			[]onnxpb.Node{node("CumSum", []string{"x", "a"}, []string{"y"})}, "batch", true, "independent", ""},
		{"reverse CumSum along it", x2, y2, []onnxpb.Tensor{i64("a", 0)},
			[]onnxpb.Node{node("CumSum", []string{"x", "a"}, []string{"y"}, aInt("reverse", 1))}, "batch", false, "sums in reverse", ""},
		{"TopK along it", x2, []onnxpb.ValueInfo{vi("y", F, 1, 4), vi("i", I, 1, 4)}, []onnxpb.Tensor{i64s("k", 1)},
			[]onnxpb.Node{node("TopK", []string{"x", "k"}, []string{"y", "i"}, aInt("axis", 0))}, "batch", false, "sorts along it", ""},
		{"ArgMax along it", x2, []onnxpb.ValueInfo{vi("y", I, 4)}, nil,
			[]onnxpb.Node{node("ArgMax", []string{"x"}, []string{"y"}, aInt("keepdims", 0))}, "batch", false, "reduces over it", ""},
		{"its size as an output", x2, []onnxpb.ValueInfo{vi("y", I, 2)}, nil,
			[]onnxpb.Node{node("Shape", []string{"x"}, []string{"y"})}, "batch", false, "computed from its size", ""},
		{"its size as a value", x2, y2, []onnxpb.Tensor{i64("z", 0)},
			[]onnxpb.Node{node("Shape", []string{"x"}, []string{"s"}), node("Gather", []string{"s", "z"}, []string{"n"}),
				node("Cast", []string{"n"}, []string{"f"}, aInt("to", int64(F))), named(node("Div", []string{"x", "f"}, []string{"y"}), "div")},
			"batch", false, `Div node "div" uses its size as a value`, ""},
		{"Range of positions", []onnxpb.ValueInfo{vi("x", F, "seq")}, []onnxpb.ValueInfo{vi("y", F, "seq")}, []onnxpb.Tensor{i64("z", 0), i64("one", 1)},
			[]onnxpb.Node{node("Shape", []string{"x"}, []string{"s"}), node("Gather", []string{"s", "z"}, []string{"n"}),
				node("Range", []string{"z", "n", "one"}, []string{"r"}), node("Cast", []string{"r"}, []string{"f"}, aInt("to", int64(F))),
				node("Add", []string{"x", "f"}, []string{"y"})}, "seq", true, "independent", ""},
		{"op the analysis does not know", x2, y2, nil,
			[]onnxpb.Node{named(node("Einsum", []string{"x"}, []string{"y"}, aString("equation", "ij->ij")), "e")}, "batch", false, `Einsum node "e" is not known`, ""},
		{"output not declaring it", x2, []onnxpb.ValueInfo{vi("y", F, "n", 4)}, nil,
			[]onnxpb.Node{node("Relu", []string{"x"}, []string{"y"})}, "batch", false, "could not be sliced off", ""},
		{"input that sets shapes", []onnxpb.ValueInfo{vi("x", F, "batch", 4), vi("t", I, "r")}, []onnxpb.ValueInfo{vi("y", F)}, nil,
			[]onnxpb.Node{node("Reshape", []string{"x", "t"}, []string{"y"})}, "r", false, "sets shapes from its values", ""},

		// Masks.
		{"(1 - mask) * -10000 before Softmax", attIn(I), attOut, []onnxpb.Tensor{f32s("one", 1), f32s("big", -10000), i64s("ax", 1)},
			attention(node("Cast", []string{"mask"}, []string{"mf"}, aInt("to", int64(F))), node("Sub", []string{"one", "mf"}, []string{"inv"}),
				node("Unsqueeze", []string{"inv", "ax"}, []string{"u"}), node("Mul", []string{"u", "big"}, []string{"bias"})),
			"seq", true, `masked by input "mask" (padded with -1e+09) before Softmax node "attn"`, "zeros; mask: -1e+09 (masked out)"},
		{"(1 - mask) * finfo.min before Softmax", attIn(I), attOut, []onnxpb.Tensor{f32s("one", 1), f32s("big", -math.MaxFloat32), i64s("ax", 1)},
			attention(node("Cast", []string{"mask"}, []string{"mf"}, aInt("to", int64(F))), node("Sub", []string{"one", "mf"}, []string{"inv"}),
				node("Unsqueeze", []string{"inv", "ax"}, []string{"u"}), node("Mul", []string{"u", "big"}, []string{"bias"})),
			"seq", true, `masked by input "mask" (padded with 0)`, "zeros; mask: 0 (masked out)"},
		{"Where(mask, 0, -inf) before Softmax", attIn(B), attOut, []onnxpb.Tensor{f32s("zero", 0), f32s("ninf", float32(math.Inf(-1))), i64s("ax", 1)},
			attention(node("Unsqueeze", []string{"mask", "ax"}, []string{"u"}), node("Where", []string{"u", "zero", "ninf"}, []string{"bias"})),
			"seq", true, `masked by input "mask" (padded with 0)`, ""},
		{"bool mask times -10000 is no lower than a masked key", attIn(B), attOut, []onnxpb.Tensor{f32s("one", 1), f32s("big", -10000), i64s("ax", 1)},
			attention(node("Cast", []string{"mask"}, []string{"mf"}, aInt("to", int64(F))), node("Sub", []string{"one", "mf"}, []string{"inv"}),
				node("Unsqueeze", []string{"inv", "ax"}, []string{"u"}), node("Mul", []string{"u", "big"}, []string{"bias"})),
			"seq", false, `Softmax node "attn" normalises over it`, ""},
		{"a bias that does not mask", attIn(I), attOut, []onnxpb.Tensor{i64s("ax", 1)},
			attention(node("Cast", []string{"mask"}, []string{"mf"}, aInt("to", int64(F))), node("Unsqueeze", []string{"mf", "ax"}, []string{"bias"})),
			"seq", false, `Softmax node "attn" normalises over it`, ""},
		{"mask applied after the Softmax", attIn(I), attOut, []onnxpb.Tensor{i64s("ax", 1)},
			[]onnxpb.Node{node("Softmax", []string{"x"}, []string{"p0"}, aInt("axis", -1)), node("Cast", []string{"mask"}, []string{"mf"}, aInt("to", int64(F))),
				node("Unsqueeze", []string{"mf", "ax"}, []string{"u"}), node("Mul", []string{"p0", "u"}, []string{"p"}), node("MatMul", []string{"p", "v"}, []string{"y"})},
			"seq", false, "normalises over it", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inits := tc.inits
			if tc.name == "Transpose, then a reduction over the moved axis" {
				inits = append(inits, i64s("ax", 1))
			}
			m := mustModel(t, model(18, tc.in, tc.out, inits, tc.nodes...))
			var got *DimSafety
			for _, d := range m.PadSafety() {
				if d.Dim == tc.dim {
					got = &d
				}
			}
			if got == nil {
				t.Fatalf("no verdict for %s", tc.dim)
			}
			if got.Safe != tc.safe || !strings.Contains(got.Reason, tc.why) {
				t.Fatalf("%s: safe=%v %q; want safe=%v with %q", tc.dim, got.Safe, got.Reason, tc.safe, tc.why)
			}
			if tc.fill != "" && got.FillString() != tc.fill {
				t.Errorf("fill %q, want %q", got.FillString(), tc.fill)
			}
		})
	}
}

// The reference models: every batch axis is padded with a copy of a real
// row; bert_tiny's sequence axis is padded under its attention mask.
func TestPadSafetyReferenceModels(t *testing.T) {
	tests := []struct{ model, dim, why, fill string }{
		{"mlp", "batch", "independent", "copy of the last real row"},
		{"tiny_resnet", "batch", "independent", "copy of the last real row"},
		{"mobilenet_v2_w025", "batch", "independent", "copy of the last real row"},
		{"bert_tiny", "batch", "independent", "copy of the last real row"},
		{"bert_tiny", "sequence", `masked by input "attention_mask" (padded with -1e+09) before Softmax node "/Softmax", Softmax node "/Softmax_1"`,
			"zeros; attention_mask: -1e+09 (masked out)"},
	}
	for _, tc := range tests {
		m, err := Load("../testdata/models/" + tc.model + ".onnx")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, d := range m.PadSafety() {
			if d.Dim != tc.dim {
				continue
			}
			found = true
			if !d.Safe || !strings.Contains(d.Reason, tc.why) || d.FillString() != tc.fill {
				t.Errorf("%s %s: safe=%v %q fill %q", tc.model, tc.dim, d.Safe, d.Reason, d.FillString())
			}
		}
		if !found {
			t.Errorf("%s: no verdict for %s", tc.model, tc.dim)
		}
	}
}
