package onnx

import (
	"context"
	"errors"
	"math"
	"slices"
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
	shifted := gather(node("Add", []string{"ids", "three"}, []string{"shifted"}))
	shifted.Graph.Initializer = append(shifted.Graph.Initializer, plus)
	computed := gather(node("Add", []string{"ids", "ids"}, []string{"doubled"}))
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
		{"Gather input+3 in range", shifted, map[string]*ir.Tensor{"ids": i64(t, []int{3}, 1, -8, 0)}, false, ""},
		{"Gather input+3 past the end", shifted, map[string]*ir.Tensor{"ids": i64(t, []int{3}, 0, 2, 1)}, true, "2 at flat position 1 (index 2+3 after"},
		{"Gather input+3 near MaxInt64", shifted, map[string]*ir.Tensor{"ids": i64(t, []int{3}, 0, math.MaxInt64-1, 1)}, true, "9223372036854775806 at flat position 1"},
		{"Gather computed in range", computed, map[string]*ir.Tensor{"ids": i64(t, []int{3}, 2, -2, 0)}, false, ""},
		{"Gather computed past the end", computed, map[string]*ir.Tensor{"ids": i64(t, []int{3}, 0, 2, 3)}, false, "computed index 6 out of range [-5, 4]"},
		{"Gather computed MinInt64", negated, map[string]*ir.Tensor{"ids": i64(t, []int{3}, 0, math.MinInt64, 1)}, false, "computed index -9223372036854775808 out of range"},
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

// TestIndexChecksControlFlow: indices computed inside control-flow bodies
// reach the check output. A run-time If counts only the branch it takes
// (both are computed and one selected, so an out-of-range index in the
// branch not taken is no error); every unrolled Loop iteration and Scan
// step counts. The error names the body's node. Faults injected once:
// without the idx field passed to the child builder (build.go), the "taken"
// cases ran and returned the clamped rows; with the gate left out of
// convIf, "If else taken, bad index in then" failed with the then branch's
// index (and "If else taken, bad index" named the then branch's node).
func TestIndexChecksControlFlow(t *testing.T) {
	table := tF32("table", []int64{5}, 10, 11, 12, 13, 14)
	twice := func(in, out string) onnxpb.Node { return node("Add", []string{in, in}, []string{out}) }
	gatherIn := func(name, idx, out string) onnxpb.Node {
		n := node("Gather", []string{"table", idx}, []string{out})
		n.Name = name
		return n
	}
	branch := func(name string, body ...onnxpb.Node) *onnxpb.Graph {
		return &onnxpb.Graph{Name: name, Node: body, Output: []onnxpb.ValueInfo{vi("out", onnxpb.Float, 2)}}
	}
	// If: then gathers at 2*ids, else at ids (both computed: ids*1 is not
	// followed to the input, Mul is no shift).
	ifModel := model(13, []onnxpb.ValueInfo{vi("c", onnxpb.Bool, 1), vi("ids", onnxpb.Int64, 2)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2)},
		[]onnxpb.Tensor{table, tI64("one", nil, 1)},
		node("Mul", []string{"ids", "one"}, []string{"idc"}),
		node("If", []string{"c"}, []string{"y"},
			onnxpb.Attribute{Name: "then_branch", Type: onnxpb.AttrGraph, G: branch("then", twice("idc", "d"), gatherIn("then_gather", "d", "out"))},
			onnxpb.Attribute{Name: "else_branch", Type: onnxpb.AttrGraph, G: branch("else", gatherIn("else_gather", "idc", "out"))}))
	// Loop of 2 iterations: gathers at the carried ids, carries ids+1.
	loopBody := &onnxpb.Graph{Name: "body",
		Input:       []onnxpb.ValueInfo{vi("i", onnxpb.Int64), vi("cin", onnxpb.Bool), vi("x", onnxpb.Int64, 2)},
		Initializer: []onnxpb.Tensor{tI64("inc", nil, 1)},
		Node: []onnxpb.Node{node("Identity", []string{"cin"}, []string{"cout"}), node("Add", []string{"x", "inc"}, []string{"xn"}),
			gatherIn("loop_gather", "x", "g")},
		Output: []onnxpb.ValueInfo{vi("cout", onnxpb.Bool), vi("xn", onnxpb.Int64, 2), vi("g", onnxpb.Float, 2)}}
	loopModel := model(13, []onnxpb.ValueInfo{vi("ids", onnxpb.Int64, 2)}, []onnxpb.ValueInfo{vi("xn", onnxpb.Int64, 2), vi("y", onnxpb.Float, 2, 2)},
		[]onnxpb.Tensor{table, tI64("M", nil, 2), {Name: "t", DataType: onnxpb.Bool, Int32Data: []int32{1}}},
		node("Loop", []string{"M", "t", "ids"}, []string{"xn", "y"}, onnxpb.Attribute{Name: "body", Type: onnxpb.AttrGraph, G: loopBody}))
	// Scan over the rows of ids: gathers each row.
	scanBody := &onnxpb.Graph{Name: "body",
		Input:  []onnxpb.ValueInfo{vi("s", onnxpb.Float), vi("r", onnxpb.Int64, 2)},
		Node:   []onnxpb.Node{gatherIn("scan_gather", "r", "g"), node("Identity", []string{"s"}, []string{"so"})},
		Output: []onnxpb.ValueInfo{vi("so", onnxpb.Float), vi("g", onnxpb.Float, 2)}}
	scanModel := model(13, []onnxpb.ValueInfo{vi("s0", onnxpb.Float), vi("ids", onnxpb.Int64, 3, 2)}, []onnxpb.ValueInfo{vi("s", onnxpb.Float), vi("y", onnxpb.Float, 3, 2)},
		[]onnxpb.Tensor{table},
		node("Scan", []string{"s0", "ids"}, []string{"s", "y"}, aInt("num_scan_inputs", 1), onnxpb.Attribute{Name: "body", Type: onnxpb.AttrGraph, G: scanBody}))
	boolT := func(v bool) *ir.Tensor { x, _ := ir.TensorFromFlat([]bool{v}, 1); return x }
	s0 := f32(t, nil, 0)
	cases := []struct {
		name     string
		pb       *onnxpb.Model
		feed     map[string]*ir.Tensor
		out      string
		want     []float64 // when no error
		wantNode string    // the node the error names; "" for success
		wantErr  string
	}{
		{"If then taken, in range", ifModel, map[string]*ir.Tensor{"c": boolT(true), "ids": i64(t, []int{2}, 1, 2)}, "y", floats(12, 14), "", ""},
		{"If then taken, bad index", ifModel, map[string]*ir.Tensor{"c": boolT(true), "ids": i64(t, []int{2}, 1, 3)}, "", nil, "then_gather", "computed index 6 out of range [-5, 4]"},
		{"If else taken, bad index in then", ifModel, map[string]*ir.Tensor{"c": boolT(false), "ids": i64(t, []int{2}, 1, 3)}, "y", floats(11, 13), "", ""},
		{"If else taken, bad index", ifModel, map[string]*ir.Tensor{"c": boolT(false), "ids": i64(t, []int{2}, -6, 0)}, "", nil, "else_gather", "computed index -6 out of range"},
		{"Loop in range", loopModel, map[string]*ir.Tensor{"ids": i64(t, []int{2}, 0, 3)}, "y", floats(10, 13, 11, 14), "", ""},
		{"Loop second iteration past the end", loopModel, map[string]*ir.Tensor{"ids": i64(t, []int{2}, 0, 4)}, "", nil, "loop_gather", "computed index 5 out of range [-5, 4]"},
		{"Scan in range", scanModel, map[string]*ir.Tensor{"s0": s0, "ids": i64(t, []int{3, 2}, 0, 1, 2, 3, 4, -5)}, "y", floats(10, 11, 12, 13, 14, 10), "", ""},
		{"Scan last step past the end", scanModel, map[string]*ir.Tensor{"s0": s0, "ids": i64(t, []int{3, 2}, 0, 1, 2, 3, 4, 7)}, "", nil, "scan_gather", "computed index 7 out of range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mustModel(t, tc.pb)
			outs, err := m.Run(context.Background(), engine(t), tc.feed)
			if tc.wantNode == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				got, _ := flat(t, outs[tc.out])
				if !slices.Equal(got, tc.want) {
					t.Fatalf("%s = %v, want %v", tc.out, got, tc.want)
				}
				return
			}
			var ne *NodeError
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &ne) || ne.Node != tc.wantNode || !errors.Is(err, errs.ErrInvalidInput) {
				t.Fatalf("Run error = %v, want an ErrInvalidInput NodeError naming %q containing %q", err, tc.wantNode, tc.wantErr)
			}
		})
	}
}

// TestIndexBoundsProven: indices the analysis bounds (ArgMax over an axis
// no longer than the table; Clip to the table's range) need no check and
// no check output; a bound that exceeds the table keeps the check. Faults
// injected once: with indexBounds returning the ArgMax bound one larger,
// "ArgMax over 5 into 5 rows" was no longer proven and failed; one
// smaller, "ArgMax over 6 into 5 rows" was proven and failed.
func TestIndexBoundsProven(t *testing.T) {
	table := tF32("table", []int64{5}, 10, 11, 12, 13, 14)
	argmax := func(cols int) *onnxpb.Model {
		return model(13, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2, cols)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2)},
			[]onnxpb.Tensor{table},
			node("ArgMax", []string{"x"}, []string{"am"}, aInt("axis", 1), aInt("keepdims", 0)),
			node("Gather", []string{"table", "am"}, []string{"y"}))
	}
	clip := model(13, []onnxpb.ValueInfo{vi("ids", onnxpb.Int64, 2)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2)},
		[]onnxpb.Tensor{table, tI64("lo", nil, 0), tI64("hi", nil, 4)},
		node("Mul", []string{"ids", "ids"}, []string{"sq"}),
		node("Clip", []string{"sq", "lo", "hi"}, []string{"c"}),
		node("Gather", []string{"table", "c"}, []string{"y"}))
	cases := []struct {
		name   string
		pb     *onnxpb.Model
		feed   map[string]*ir.Tensor
		proven bool
		want   []float64
	}{
		{"ArgMax over 5 into 5 rows", argmax(5), map[string]*ir.Tensor{"x": f32(t, []int{2, 5}, 0, 0, 0, 0, 9, 9, 0, 0, 0, 0)}, true, floats(14, 10)},
		{"ArgMax over 6 into 5 rows", argmax(6), map[string]*ir.Tensor{"x": f32(t, []int{2, 6}, 0, 0, 0, 0, 9, 0, 9, 0, 0, 0, 0, 0)}, false, floats(14, 10)},
		{"Clip to [0, 4]", clip, map[string]*ir.Tensor{"ids": i64(t, []int{2}, 1, 3)}, true, floats(11, 14)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mustModel(t, tc.pb)
			outs, p, err := m.runWith(context.Background(), engine(t), tc.feed, SpecializeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ic := p.IndexChecks()
			if got := len(ic.provenNodes()) == 1 && !ic.HasOutput(); got != tc.proven {
				t.Errorf("proven = %v (%s, proven %v), want %v", got, ic, ic.provenNodes(), tc.proven)
			}
			if got, _ := flat(t, outs["y"]); !slices.Equal(got, tc.want) {
				t.Errorf("y = %v, want %v", got, tc.want)
			}
		})
	}
}
