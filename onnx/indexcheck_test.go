package onnx

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// TestIndexChecks: an out-of-range index given or computed at run time is
// an error, as the ONNX spec of each op requires (indices in [-s, s-1];
// https://onnx.ai/onnx/operators/onnx__Gather.html, GatherElements,
// GatherND, ScatterElements, ScatterND) and as ONNX Runtime raises; an
// index at either end of the range is accepted. Indices that are a model
// input (possibly through Cast/Unsqueeze) are checked on the host
// (*errs.InputError naming the input); computed ones by the in-graph check
// output (an error naming the node). Fault injected once: with the
// noteIndices call in convGather removed, the "Gather input" cases got the
// clamped row instead of an error and failed.
func TestIndexChecks(t *testing.T) {
	table := tF32("table", []int64{5, 2}, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	gather := func(pre ...onnxpb.Node) *onnxpb.Model {
		idx := "ids"
		if len(pre) > 0 {
			idx = pre[len(pre)-1].Output[0]
		}
		nodes := append(pre, node("Gather", []string{"table", idx}, []string{"y"}))
		return model(18, []onnxpb.ValueInfo{vi("ids", onnxpb.Int64, 3)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float)},
			[]onnxpb.Tensor{table}, nodes...)
	}
	gather32 := model(18, []onnxpb.ValueInfo{vi("ids", onnxpb.Int32, 3)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float)},
		[]onnxpb.Tensor{table},
		node("Cast", []string{"ids"}, []string{"ids64"}, aInt("to", int64(onnxpb.Int64))),
		node("Unsqueeze", []string{"ids64", "ax"}, []string{"idsu"}),
		node("Gather", []string{"table", "idsu"}, []string{"y"}))
	gather32.Graph.Initializer = append(gather32.Graph.Initializer, tI64("ax", []int64{1}, 0))
	plus := tI64("three", []int64{1}, 3)
	computed := gather(node("Add", []string{"ids", "three"}, []string{"shifted"}))
	computed.Graph.Initializer = append(computed.Graph.Initializer, plus)
	negated := gather(node("Neg", []string{"ids"}, []string{"neg"}))
	gnd := model(18, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, 3), vi("i", onnxpb.Int64, 1, 2)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float)}, nil,
		node("GatherND", []string{"x", "i"}, []string{"y"}))
	scat := model(18, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 4), vi("i", onnxpb.Int64, 2), vi("u", onnxpb.Float, 2)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float)}, nil,
		node("ScatterElements", []string{"x", "i", "u"}, []string{"y"}))
	x23 := f32(t, []int{2, 3}, 0, 1, 2, 3, 4, 5)
	x4, u2 := f32(t, []int{4}, 0, 0, 0, 0), f32(t, []int{2}, 1, 2)

	cases := []struct {
		name    string
		pb      *onnxpb.Model
		feed    map[string]*ir.Tensor
		host    bool   // expect an *errs.InputError (host check)
		wantErr string // "" for success
	}{
		{"Gather input at both ends", gather(), map[string]*ir.Tensor{"ids": i64(t, []int{3}, 0, 4, -5)}, false, ""},
		{"Gather input past the end", gather(), map[string]*ir.Tensor{"ids": i64(t, []int{3}, 0, 5, 1)}, true, "5 at flat position 1"},
		{"Gather input below -s", gather(), map[string]*ir.Tensor{"ids": i64(t, []int{3}, -6, 0, 1)}, true, "-6 at flat position 0"},
		{"Gather input 10^12", gather(), map[string]*ir.Tensor{"ids": i64(t, []int{3}, 1e12, 0, 1)}, true, "1000000000000"},
		{"Gather int32 input through Cast and Unsqueeze", gather32, map[string]*ir.Tensor{"ids": i32(t, []int{3}, 1, 2, 5)}, true, "5 at flat position 2"},
		{"Gather int32 input in range", gather32, map[string]*ir.Tensor{"ids": i32(t, []int{3}, 1, 2, -1)}, false, ""},
		{"Gather computed in range", computed, map[string]*ir.Tensor{"ids": i64(t, []int{3}, 1, -8, 0)}, false, ""},
		{"Gather computed past the end", computed, map[string]*ir.Tensor{"ids": i64(t, []int{3}, 0, 2, 1)}, false, "computed index 5 out of range [-5, 4]"},
		{"Gather computed below -s", negated, map[string]*ir.Tensor{"ids": i64(t, []int{3}, 0, 6, 1)}, false, "computed index -6 out of range"},
		{"GatherND tuple in range", gnd, map[string]*ir.Tensor{"x": x23, "i": i64(t, []int{1, 2}, -2, 2)}, false, ""},
		{"GatherND tuple component 1", gnd, map[string]*ir.Tensor{"x": x23, "i": i64(t, []int{1, 2}, 1, 3)}, true, "component 1 is in [-3, 2]"},
		{"GatherND tuple component 0", gnd, map[string]*ir.Tensor{"x": x23, "i": i64(t, []int{1, 2}, 2, 0)}, true, "component 0 is in [-2, 1]"},
		{"ScatterElements input past the end", scat, map[string]*ir.Tensor{"x": x4, "i": i64(t, []int{2}, 0, 4), "u": u2}, true, "4 at flat position 1"},
		{"ScatterElements input in range", scat, map[string]*ir.Tensor{"x": x4, "i": i64(t, []int{2}, -4, 3), "u": u2}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mustModel(t, tc.pb)
			_, err := m.Run(context.Background(), engine(t), tc.feed)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Run error = %v, want one containing %q", err, tc.wantErr)
			}
			if !errors.Is(err, errs.ErrInvalidInput) {
				t.Errorf("error %v does not match ErrInvalidInput", err)
			}
			var ie *errs.InputError
			if got := errors.As(err, &ie); got != tc.host {
				t.Errorf("InputError: %v, want %v (%v)", got, tc.host, err)
			}
			var ne *NodeError
			if !tc.host && (!errors.As(err, &ne) || ne.Node != "Gather_node") {
				t.Errorf("error %v does not name the Gather node", err)
			}
			if tc.host && !strings.Contains(err.Error(), "_node") {
				t.Errorf("error %v does not name the node", err)
			}
		})
	}
}

// BenchmarkCheckInputs is the host check of one [2, 128] int64 token-id
// input (MiniLM's shape in the real-model set) against a 30522-row table:
// the whole run-time cost of the index checks for such a model.
func BenchmarkCheckInputs(b *testing.B) {
	ids := make([]int64, 2*128)
	for k := range ids {
		ids[k] = int64(k * 97 % 30522)
	}
	x, err := ir.TensorFromFlat(ids, 2, 128)
	if err != nil {
		b.Fatal(err)
	}
	ic := &IndexChecks{host: []hostIndexCheck{{input: "input_ids", node: "embedding", op: "Gather", sizes: []int{30522}}}}
	in := map[string]*ir.Tensor{"input_ids": x}
	b.ResetTimer()
	for range b.N {
		if err := ic.CheckInputs(in); err != nil {
			b.Fatal(err)
		}
	}
}
