package onnx

import (
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// TestPadSafetyMerges covers the merged-axis rules (padmerge.go) on the
// shape arithmetic PyTorch's MultiheadAttention exports: Shape, Gather,
// Mul by the head count, Unsqueeze, Concat, Reshape. Each unsafe case is the
// guard's injected fault: with the merge rule accepting it (e.g. CumSum
// without the batch-major check, or mergedOutput returning false) the case
// fails.
func TestPadSafetyMerges(t *testing.T) {
	F := onnxpb.Float
	i64s := func(name string, v ...int64) onnxpb.Tensor { return tI64(name, []int64{int64(len(v))}, v...) }
	i64 := func(name string, v int64) onnxpb.Tensor { return tI64(name, nil, v) }
	inits := []onnxpb.Tensor{i64("i0", 0), i64("i1", 1), i64("four", 4), i64s("ax0", 0), i64s("c2", 2), i64s("c4", 4), i64s("m1", -1), i64s("ax", 0)}
	// size builds "bs" = batch*4 from x's shape, the way torch writes
	// bsz * num_heads.
	size := []onnxpb.Node{
		node("Shape", []string{"x"}, []string{"sh"}),
		node("Gather", []string{"sh", "i0"}, []string{"b"}, aInt("axis", 0)),
		node("Mul", []string{"b", "four"}, []string{"b4"}),
		node("Unsqueeze", []string{"b4", "ax0"}, []string{"bs"}),
		node("Unsqueeze", []string{"b", "ax0"}, []string{"bu"}),
	}
	nodes := func(ns ...onnxpb.Node) []onnxpb.Node { return append(append([]onnxpb.Node{}, size...), ns...) }
	// merge: x [batch, 8] -> m [batch*4, 2] (batch-major: heads inner).
	merge := []onnxpb.Node{
		node("Concat", []string{"bs", "c2"}, []string{"mt"}, aInt("axis", 0)),
		node("Reshape", []string{"x", "mt"}, []string{"m"}),
	}
	// split: r [batch*4, 2] -> y [batch, 8].
	split := func(r string) []onnxpb.Node {
		return []onnxpb.Node{
			node("Concat", []string{"bu", "m1"}, []string{"st"}, aInt("axis", 0)),
			node("Reshape", []string{r, "st"}, []string{"y"}),
		}
	}
	x := []onnxpb.ValueInfo{vi("x", F, "batch", 8)}
	y := []onnxpb.ValueInfo{vi("y", F, "batch", 8)}
	cat := func(parts ...[]onnxpb.Node) []onnxpb.Node {
		var out []onnxpb.Node
		for _, p := range parts {
			out = append(out, p...)
		}
		return nodes(out...)
	}
	tests := []struct {
		name  string
		out   []onnxpb.ValueInfo
		nodes []onnxpb.Node
		safe  bool
		why   string
	}{
		{"merge, element-wise, split back", y, cat(merge, []onnxpb.Node{node("Relu", []string{"m"}, []string{"r"})}, split("r")), true, "independent"},
		{"merge, MatMul over the inner axis, split back", y,
			cat(merge, []onnxpb.Node{node("Transpose", []string{"m"}, []string{"mt2"}, aInts("perm", 1, 0)), node("Transpose", []string{"mt2"}, []string{"m2"}, aInts("perm", 1, 0)),
				node("MatMul", []string{"m2", "w"}, []string{"r"})}, split("r")), true, "independent"},
		{"merge, forward CumSum along the batch-major merge", y, cat(merge, []onnxpb.Node{node("CumSum", []string{"m", "ax"}, []string{"r"})}, split("r")), true, "independent"},
		{"Softmax over the merged axis", y, cat(merge, []onnxpb.Node{node("Softmax", []string{"m"}, []string{"r"}, aInt("axis", 0))}, split("r")), false, "normalises over it"},
		{"reduction over the merged axis", []onnxpb.ValueInfo{vi("y", F, 1, 2)}, cat(merge, []onnxpb.Node{node("ReduceSum", []string{"m", "ax"}, []string{"y"})}), false, "reduces over it"},
		{"merged axis reaching an output", []onnxpb.ValueInfo{vi("y", F, "n", 2)}, cat(merge, []onnxpb.Node{node("Relu", []string{"m"}, []string{"y"})}), false, "carries it merged"},
		{"split back in the other order", []onnxpb.ValueInfo{vi("y", F, 4, "batch", 2)},
			cat(merge, []onnxpb.Node{node("Concat", []string{"c4", "bu", "c2"}, []string{"st"}, aInt("axis", 0)), node("Reshape", []string{"m", "st"}, []string{"y"})}),
			false, "moves it across other axes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]onnxpb.Tensor{tF32("w", []int64{2, 2}, 1, 2, 3, 4)}, inits...)
			m := mustModel(t, model(13, x, tc.out, in, tc.nodes...))
			var got *DimSafety
			for _, d := range m.PadSafety() {
				if d.Dim == "batch" {
					got = &d
				}
			}
			if got == nil {
				t.Fatal("no verdict for batch")
			}
			if got.Safe != tc.safe || !strings.Contains(got.Reason, tc.why) {
				t.Fatalf("safe=%v %q; want safe=%v with %q", got.Safe, got.Reason, tc.safe, tc.why)
			}
		})
	}
}

// A merge with the batch as the inner factor ([4, batch] -> [4*batch]) is
// exact for position-wise ops, but a forward CumSum along it would read
// padded rows before real ones: refused (fault injected: without the
// batchMajor check in the CumSum rule this case is accepted).
func TestPadSafetyMergeBatchInner(t *testing.T) {
	F := onnxpb.Float
	i64s := func(name string, v ...int64) onnxpb.Tensor { return tI64(name, []int64{int64(len(v))}, v...) }
	for _, tc := range []struct {
		op   string
		safe bool
	}{{"Relu", true}, {"CumSum", false}} {
		t.Run(tc.op, func(t *testing.T) {
			var n onnxpb.Node
			if tc.op == "CumSum" {
				n = node("CumSum", []string{"m", "ax"}, []string{"r"})
			} else {
				n = node("Relu", []string{"m"}, []string{"r"})
			}
			nodes := []onnxpb.Node{
				node("Shape", []string{"x"}, []string{"sh"}),
				node("Reshape", []string{"x", "flat"}, []string{"m"}),
				n,
				node("Reshape", []string{"r", "sh"}, []string{"y"}),
			}
			m := mustModel(t, model(13, []onnxpb.ValueInfo{vi("x", F, 4, "batch")}, []onnxpb.ValueInfo{vi("y", F, 4, "batch")},
				[]onnxpb.Tensor{i64s("flat", -1), i64s("ax", 0)}, nodes...))
			d := m.PadSafety()[0]
			if d.Safe != tc.safe {
				t.Fatalf("safe=%v %q; want %v", d.Safe, d.Reason, tc.safe)
			}
			if !tc.safe && !strings.Contains(d.Reason, "merged behind other sizes") {
				t.Fatalf("reason %q", d.Reason)
			}
		})
	}
}

// Two axes merging the batch with the same total size but different layouts
// ((1, batch, 4) and (4, batch, 1)) hold different rows at the same index:
// concatenating them along another axis would mix them, so it is refused
// (fault injected: without the layout check in the Concat rule the graph is
// accepted as safe).
func TestPadSafetyMergeLayoutsDiffer(t *testing.T) {
	F := onnxpb.Float
	i64s := func(name string, v ...int64) onnxpb.Tensor { return tI64(name, []int64{int64(len(v))}, v...) }
	i64 := func(name string, v int64) onnxpb.Tensor { return tI64(name, nil, v) }
	nodes := []onnxpb.Node{
		node("Shape", []string{"x"}, []string{"sh"}),
		node("Gather", []string{"sh", "i0"}, []string{"b"}, aInt("axis", 0)),
		node("Mul", []string{"b", "four"}, []string{"b4"}),
		node("Unsqueeze", []string{"b4", "ax0"}, []string{"bs"}),
		node("Unsqueeze", []string{"b", "ax0"}, []string{"bu"}),
		node("Concat", []string{"bs", "c2"}, []string{"mt"}, aInt("axis", 0)),
		node("Reshape", []string{"x", "mt"}, []string{"m1"}),   // [batch*4, 2]: (1, batch, 4)
		node("Reshape", []string{"z", "flat"}, []string{"m2"}), // [4*batch, 2]: (4, batch, 1)
		node("Concat", []string{"m1", "m2"}, []string{"c"}, aInt("axis", 1)),
		node("Concat", []string{"bu", "m1c"}, []string{"st"}, aInt("axis", 0)),
		node("Reshape", []string{"c", "st"}, []string{"y"}),
	}
	in := []onnxpb.ValueInfo{vi("x", F, "batch", 8), vi("z", F, 4, "batch", 2)}
	m := mustModel(t, model(13, in, []onnxpb.ValueInfo{vi("y", F, "batch", 16)},
		[]onnxpb.Tensor{i64("i0", 0), i64("four", 4), i64s("ax0", 0), i64s("c2", 2), i64s("flat", -1, 2), i64s("m1c", -1)}, nodes...))
	d := m.PadSafety()[0]
	if d.Safe || !strings.Contains(d.Reason, "do not all carry it on the same axes") {
		t.Fatalf("safe=%v %q; want unsafe at the Concat", d.Safe, d.Reason)
	}
}
