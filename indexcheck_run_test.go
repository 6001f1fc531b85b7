package tensorbridge_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
	"github.com/tensorbridge/tensorbridge/shard"
)

// Index check models: y = table[5 - ids] for ids of shape [n, 2], table
// 10..14 (5 rows). 5 - ids is computed in the graph (a Sub with the
// constant first is not followed to the input), so the in-graph check
// output guards it; a zero padding row gives index 5, out of range, so a
// padded run must not trust its check. The If variant gathers in its then
// branch only when c holds.
func idxModel(t *testing.T, withIf bool) *onnx.Model {
	t.Helper()
	ti := func(name string, dt onnxpb.DataType, dims ...any) onnxpb.ValueInfo {
		sh := &onnxpb.TensorShape{Dim: []onnxpb.Dimension{}}
		for _, d := range dims {
			switch v := d.(type) {
			case int:
				sh.Dim = append(sh.Dim, onnxpb.Dimension{DimValue: int64(v), HasDimValue: true})
			case string:
				sh.Dim = append(sh.Dim, onnxpb.Dimension{DimParam: v})
			}
		}
		return onnxpb.ValueInfo{Name: name, Type: &onnxpb.TypeProto{TensorType: &onnxpb.TypeTensor{ElemType: dt, Shape: sh}}}
	}
	inits := []onnxpb.Tensor{
		{Name: "table", DataType: onnxpb.Float, Dims: []int64{5}, FloatData: []float32{10, 11, 12, 13, 14}},
		{Name: "five", DataType: onnxpb.Int64, Dims: []int64{}, Int64Data: []int64{5}},
	}
	sub := onnxpb.Node{Name: "rev", OpType: "Sub", Input: []string{"five", "ids"}, Output: []string{"rev"}}
	gather := onnxpb.Node{Name: "rev_gather", OpType: "Gather", Input: []string{"table", "rev"}, Output: []string{"y"}}
	inputs := []onnxpb.ValueInfo{ti("ids", onnxpb.Int64, "n", 2)}
	nodes := []onnxpb.Node{sub, gather}
	if withIf {
		inputs = append(inputs, ti("c", onnxpb.Bool, 1))
		thenG := &onnxpb.Graph{Name: "then", Node: []onnxpb.Node{gather}, Output: []onnxpb.ValueInfo{ti("y", onnxpb.Float, "n", 2)}}
		elseG := &onnxpb.Graph{Name: "else", Node: []onnxpb.Node{{Name: "zeros", OpType: "Mul", Input: []string{"rf", "zero"}, Output: []string{"y"}}},
			Output: []onnxpb.ValueInfo{ti("y", onnxpb.Float, "n", 2)}}
		inits = append(inits, onnxpb.Tensor{Name: "zero", DataType: onnxpb.Float, Dims: []int64{}, FloatData: []float32{0}})
		nodes = []onnxpb.Node{sub, {Name: "rf", OpType: "Cast", Input: []string{"rev"}, Output: []string{"rf"},
			Attribute: []onnxpb.Attribute{{Name: "to", Type: onnxpb.AttrInt, I: int64(onnxpb.Float)}}},
			{Name: "branch", OpType: "If", Input: []string{"c"}, Output: []string{"out"}, Attribute: []onnxpb.Attribute{
				{Name: "then_branch", Type: onnxpb.AttrGraph, G: thenG}, {Name: "else_branch", Type: onnxpb.AttrGraph, G: elseG}}}}
	}
	out := "y"
	if withIf {
		out = "out"
	}
	pb := &onnxpb.Model{IRVersion: 8, OpsetImport: []onnxpb.OperatorSetID{{Version: 13}},
		Graph: &onnxpb.Graph{Name: "idx", Node: nodes, Initializer: inits, Input: inputs,
			Output: []onnxpb.ValueInfo{ti(out, onnxpb.Float, "n", 2)}}}
	m, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// loopIdxModel: a Loop of 2 iterations over rev = 5 - ids ([n, 2]) that
// gathers table[x] for the carried x and carries x - 1: iteration 1 reads
// index rev - 1. Its scan output y is [2, n, 2].
func loopIdxModel(t *testing.T) *onnx.Model {
	t.Helper()
	ti := func(name string, dt onnxpb.DataType, dims ...any) onnxpb.ValueInfo {
		sh := &onnxpb.TensorShape{Dim: []onnxpb.Dimension{}}
		for _, d := range dims {
			switch v := d.(type) {
			case int:
				sh.Dim = append(sh.Dim, onnxpb.Dimension{DimValue: int64(v), HasDimValue: true})
			case string:
				sh.Dim = append(sh.Dim, onnxpb.Dimension{DimParam: v})
			}
		}
		return onnxpb.ValueInfo{Name: name, Type: &onnxpb.TypeProto{TensorType: &onnxpb.TypeTensor{ElemType: dt, Shape: sh}}}
	}
	i64 := func(name string, v int64) onnxpb.Tensor {
		return onnxpb.Tensor{Name: name, DataType: onnxpb.Int64, Dims: []int64{}, Int64Data: []int64{v}}
	}
	body := &onnxpb.Graph{Name: "body",
		Input:       []onnxpb.ValueInfo{ti("i", onnxpb.Int64), ti("cin", onnxpb.Bool), ti("x", onnxpb.Int64, "n", 2)},
		Initializer: []onnxpb.Tensor{i64("one", 1)},
		Node: []onnxpb.Node{{Name: "cond", OpType: "Identity", Input: []string{"cin"}, Output: []string{"cout"}},
			{Name: "dec", OpType: "Sub", Input: []string{"x", "one"}, Output: []string{"xn"}},
			{Name: "loop_gather", OpType: "Gather", Input: []string{"table", "x"}, Output: []string{"g"}}},
		Output: []onnxpb.ValueInfo{ti("cout", onnxpb.Bool), ti("xn", onnxpb.Int64, "n", 2), ti("g", onnxpb.Float, "n", 2)}}
	pb := &onnxpb.Model{IRVersion: 8, OpsetImport: []onnxpb.OperatorSetID{{Version: 13}},
		Graph: &onnxpb.Graph{Name: "loop",
			Initializer: []onnxpb.Tensor{
				{Name: "table", DataType: onnxpb.Float, Dims: []int64{5}, FloatData: []float32{10, 11, 12, 13, 14}},
				i64("five", 5), i64("M", 2), {Name: "t", DataType: onnxpb.Bool, Dims: []int64{}, Int32Data: []int32{1}}},
			Node: []onnxpb.Node{{Name: "rev", OpType: "Sub", Input: []string{"five", "ids"}, Output: []string{"rev"}},
				{Name: "loop", OpType: "Loop", Input: []string{"M", "t", "rev"}, Output: []string{"last", "y"},
					Attribute: []onnxpb.Attribute{{Name: "body", Type: onnxpb.AttrGraph, G: body}}}},
			Input:  []onnxpb.ValueInfo{ti("ids", onnxpb.Int64, "n", 2)},
			Output: []onnxpb.ValueInfo{ti("last", onnxpb.Int64, "n", 2), ti("y", onnxpb.Float, 2, "n", 2)}}}
	m, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// maskedIdxModel: y = table[5 - mask] and p = Softmax over axis 0 of x
// with mask's additive bias, for x [s] float and mask [s] int64.
// The bias makes s padded with zeros in mask (the attention-mask rule of
// onnx/padsafe.go), so a padding row's index is 5, out of range, while a
// real row's (mask 1) is 4: the padded run's check fails on padding only.
func maskedIdxModel(t *testing.T) *onnx.Model {
	t.Helper()
	ti := func(name string, dt onnxpb.DataType) onnxpb.ValueInfo {
		sh := &onnxpb.TensorShape{Dim: []onnxpb.Dimension{{DimParam: "s"}}}
		return onnxpb.ValueInfo{Name: name, Type: &onnxpb.TypeProto{TensorType: &onnxpb.TypeTensor{ElemType: dt, Shape: sh}}}
	}
	nd := func(name, op string, in []string, attrs ...onnxpb.Attribute) onnxpb.Node {
		return onnxpb.Node{Name: name, OpType: op, Input: in, Output: []string{name}, Attribute: attrs}
	}
	f := func(name string, v float32) onnxpb.Tensor {
		return onnxpb.Tensor{Name: name, DataType: onnxpb.Float, Dims: []int64{}, FloatData: []float32{v}}
	}
	pb := &onnxpb.Model{IRVersion: 8, OpsetImport: []onnxpb.OperatorSetID{{Version: 13}},
		Graph: &onnxpb.Graph{Name: "masked",
			Initializer: []onnxpb.Tensor{
				{Name: "table", DataType: onnxpb.Float, Dims: []int64{5}, FloatData: []float32{10, 11, 12, 13, 14}},
				{Name: "five", DataType: onnxpb.Int64, Dims: []int64{}, Int64Data: []int64{5}},
				f("one", 1), f("big", -math.MaxFloat32)},
			Node: []onnxpb.Node{
				nd("mf", "Cast", []string{"mask"}, onnxpb.Attribute{Name: "to", Type: onnxpb.AttrInt, I: int64(onnxpb.Float)}),
				nd("m1", "Sub", []string{"one", "mf"}), nd("bias", "Mul", []string{"m1", "big"}),
				nd("sc", "Add", []string{"x", "bias"}), nd("p", "Softmax", []string{"sc"}, onnxpb.Attribute{Name: "axis", Type: onnxpb.AttrInt, I: -1}),
				nd("idx", "Sub", []string{"five", "mask"}), nd("y", "Gather", []string{"table", "idx"}),
			},
			Input:  []onnxpb.ValueInfo{ti("x", onnxpb.Float), ti("mask", onnxpb.Int64)},
			Output: []onnxpb.ValueInfo{ti("p", onnxpb.Float), ti("y", onnxpb.Float)}}}
	m, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestComputedIndexChecked: an out-of-range index computed in the graph is
// an ErrInvalidInput *onnx.NodeError naming the node and the index on
// plain, padded (bucketed), sharded (a mesh of 2 devices) and control-flow
// (If, Loop) runs; in range, the output is the table's rows exactly (bit for
// bit: a gather copies them). Padding rows never raise an error: where the
// padding analysis fills them with a copy of the last real row (idxModel)
// they form that row's indices; where it fills a mask with zeros
// (maskedIdxModel) their index 5 fails the padded run's check, and the run
// at the exact shapes decides. Faults injected once: with model_run.go's
// padded run returning the check's error instead of rerunning at the exact
// shapes, "padded/masked in range" failed naming index 5; with
// checkShardedIndices returning the check's error on padded runs too,
// "sharded/masked in range" failed the same way; with runSharded not
// reading the check output, the sharded "index 5" cases returned row 14.
func TestComputedIndexChecked(t *testing.T) {
	ctx := context.Background()
	ids := func(rows int, v ...int64) *ir.Tensor {
		for len(v) < 2*rows { // repeat the first row up to rows
			v = append(v, v[0], v[1])
		}
		return tensors.FromFlatDataAndDimensions(v, rows, 2)
	}
	cond := func(v bool) *ir.Tensor { return tensors.FromFlatDataAndDimensions([]bool{v}, 1) }
	col := func(v ...int64) *ir.Tensor { return tensors.FromFlatDataAndDimensions(v, len(v)) }
	xs := tensors.FromFlatDataAndDimensions([]float32{0, 1, 2}, 3)
	type setup struct {
		name    string
		backend string // "" for the backend under test
		opts    []tensorbridge.ModelOption
		rows    int // rows of ids: 3 pads to a bucket of 4 unless exact
	}
	setups := []setup{
		{"plain", "", []tensorbridge.ModelOption{tensorbridge.WithExactShapes()}, 3},
		{"padded", "", nil, 3},
	}
	if testBackend() == "xla-cpu" { // a mesh needs XLA (CI runs this package on xla-cpu)
		setups = append(setups, setup{"sharded", "xla-cpu:devices=2", []tensorbridge.ModelOption{tensorbridge.WithMesh(shard.Mesh{Data: 2, Model: 1}, shard.Options{})}, 4})
	}
	type model struct {
		name string
		m    func(*testing.T) *onnx.Model
	}
	models := []model{{"sub", func(t *testing.T) *onnx.Model { return idxModel(t, false) }},
		{"if", func(t *testing.T) *onnx.Model { return idxModel(t, true) }}, {"masked", maskedIdxModel}, {"loop", loopIdxModel}}
	cases := []struct {
		name, model string
		in          func(rows int) map[string]*ir.Tensor
		want        []float32 // per row of 2 (repeated as the input's first row); nil: an error
		out         string
		wantNode    string
		wantIdx     string
	}{
		{"in range", "sub", func(r int) map[string]*ir.Tensor { return map[string]*ir.Tensor{"ids": ids(r, 1, 2, 3, 4, 5, 1)} },
			[]float32{14, 13, 12, 11, 10, 14}, "y", "", ""},
		{"index 5", "sub", func(r int) map[string]*ir.Tensor { return map[string]*ir.Tensor{"ids": ids(r, 1, 2, 0, 4, 5, 1)} },
			nil, "", "rev_gather", "computed index 5 out of range [-5, 4]"},
		{"index -6", "sub", func(r int) map[string]*ir.Tensor { return map[string]*ir.Tensor{"ids": ids(r, 1, 2, 3, 11, 5, 1)} },
			nil, "", "rev_gather", "computed index -6 out of range [-5, 4]"},
		{"If taken, in range", "if", func(r int) map[string]*ir.Tensor {
			return map[string]*ir.Tensor{"ids": ids(r, 1, 2, 3, 4, 5, 1), "c": cond(true)}
		}, []float32{14, 13, 12, 11, 10, 14}, "out", "", ""},
		{"If taken, index 5", "if", func(r int) map[string]*ir.Tensor {
			return map[string]*ir.Tensor{"ids": ids(r, 1, 2, 0, 4, 5, 1), "c": cond(true)}
		}, nil, "", "rev_gather", "computed index 5 out of range"},
		{"If not taken, index 5", "if", func(r int) map[string]*ir.Tensor {
			return map[string]*ir.Tensor{"ids": ids(r, 1, 2, 0, 4, 5, 1), "c": cond(false)}
		}, []float32{0, 0, 0, 0, 0, 0}, "out", "", ""},
		{"Loop in range", "loop", func(r int) map[string]*ir.Tensor { return map[string]*ir.Tensor{"ids": ids(r, 1, 2, 3, 4, 5, 1)} },
			[]float32{14, 13, 12, 11, 10, 14, 13, 12, 11, 10, 14, 13}, "y", "", ""},
		{"Loop first iteration, index 5", "loop", func(r int) map[string]*ir.Tensor { return map[string]*ir.Tensor{"ids": ids(r, 1, 2, 0, 4, 5, 1)} },
			nil, "", "loop_gather", "computed index 5 out of range [-5, 4]"},
		{"Loop second iteration, index -6", "loop", func(r int) map[string]*ir.Tensor { return map[string]*ir.Tensor{"ids": ids(r, 1, 2, 10, 4, 5, 1)} },
			nil, "", "loop_gather", "computed index -6 out of range [-5, 4]"},
		{"masked in range", "masked", func(int) map[string]*ir.Tensor { return map[string]*ir.Tensor{"x": xs, "mask": col(1, 1, 1)} },
			[]float32{14, 14, 14}, "y", "", ""},
		{"masked index 5", "masked", func(int) map[string]*ir.Tensor { return map[string]*ir.Tensor{"x": xs, "mask": col(1, 0, 1)} },
			nil, "", "y", "computed index 5 out of range [-5, 4]"},
	}
	for _, su := range setups {
		be := openTestOr(t, su.backend)
		for _, md := range models {
			m, err := be.LoadONNX(ctx, md.m(t), md.name, su.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if su.name == "sharded" && md.name == "masked" {
				// Warmup runs a sharded model on zeros, whose mask forms
				// index 5: it compiles, and that is no warmup error. (Fault
				// injected once: without warmupSharded's ErrInvalidInput
				// case, Warmup failed naming node "y".)
				if n, err := m.Warmup(ctx, []map[string]int{{"s": 4}}, nil); err != nil || n != 1 {
					t.Fatalf("Warmup: %d compiled, %v; want 1, nil", n, err)
				}
			}
			if su.name == "padded" && md.name != "if" && md.name != "loop" { // the padded cases really pad (If and Loop are not padded)
				dim, fill := "n", "copy of the last real row"
				if md.name == "masked" {
					dim, fill = "s", "zeros; mask: 0"
				}
				if p := planFor(m.BucketPlan(), dim); !p.Padded || !strings.HasPrefix(p.Fill, fill) {
					t.Fatalf("%s: dimension %s: %+v, want padded with %q", md.name, dim, p, fill)
				}
			}
			for _, tc := range cases {
				if tc.model != md.name {
					continue
				}
				t.Run(su.name+"/"+tc.name, func(t *testing.T) {
					outs, err := m.Run(ctx, tc.in(su.rows))
					if tc.want != nil {
						if err != nil {
							t.Fatalf("Run: %v", err)
						}
						y := outs[tc.out]
						want := tc.want
						if md.name != "masked" { // repeat the first row (of each Loop iteration) up to the rows run
							blocks := len(tc.want) / 6
							want = nil
							for k := range blocks {
								blk := tc.want[6*k : 6*k+6]
								want = append(want, blk...)
								for r := 3; r < su.rows; r++ {
									want = append(want, blk[0], blk[1])
								}
							}
						}
						if got := tensors.MustCopyFlatData[float32](y); !slices.Equal(got, want) {
							t.Fatalf("output %s %v, want %v", y.Shape(), got, want)
						}
						return
					}
					var ne *onnx.NodeError
					if err == nil || !errors.As(err, &ne) || ne.Node != tc.wantNode || !errors.Is(err, errs.ErrInvalidInput) || !strings.Contains(err.Error(), tc.wantIdx) {
						t.Fatalf("Run error = %v (outputs %v), want an ErrInvalidInput NodeError naming %q with %q", err, outs, tc.wantNode, tc.wantIdx)
					}
				})
			}
		}
	}
}

// openTestOr opens backend (the backend under test when ""), closed when
// the test ends.
func openTestOr(t *testing.T, backend string) *tensorbridge.Backend {
	t.Helper()
	if backend == "" {
		return openTest(t)
	}
	b, err := tensorbridge.Open(context.Background(), backend)
	if err != nil {
		testreq.Skipf(t, "%s: %v", backend, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestIndexCheckKeepsAnswers: the check output changes no other output.
// bert_tiny with its token ids computed in the graph (input_ids * 1, so
// the in-graph check guards the embedding Gather) gives bit for bit the
// outputs of bert_tiny itself (checked on the host) on the reference
// inputs, and still refuses token id 1000 naming the Gather.
func TestIndexCheckKeepsAnswers(t *testing.T) {
	ctx := context.Background()
	b := openTest(t)
	md := filepath.Join("testdata", "models")
	bert, err := onnx.Load(filepath.Join(md, "bert_tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*ir.Tensor{"input_ids": readNPY(t, filepath.Join(md, "bert_tiny.input_0.npy")),
		"attention_mask": readNPY(t, filepath.Join(md, "bert_tiny.input_1.npy"))}
	var outs [2]map[string]*ir.Tensor
	for k, m := range []*onnx.Model{bert, rewireIDs(t, bert, "Mul", 1)} {
		lm, err := b.LoadONNX(ctx, m, fmt.Sprint("bert", k), tensorbridge.WithExactShapes())
		if err != nil {
			t.Fatal(err)
		}
		defer lm.Close()
		if outs[k], err = lm.Run(ctx, in); err != nil {
			t.Fatal(err)
		}
		if k == 1 {
			bad := tensors.MustCopyFlatData[int64](in["input_ids"])
			bad[0] = 1000
			_, err := lm.Run(ctx, map[string]*ir.Tensor{"input_ids": tensors.FromFlatDataAndDimensions(bad, in["input_ids"].Shape().Dimensions...), "attention_mask": in["attention_mask"]})
			var ne *onnx.NodeError
			if !errors.As(err, &ne) || ne.Node != "/tok/Gather" || !strings.Contains(err.Error(), "computed index 1000") {
				t.Fatalf("token id 1000: %v, want the computed-index error naming /tok/Gather", err)
			}
		}
	}
	for name, want := range outs[0] {
		bitsEqual(t, name, outs[1][name], want)
	}
}

// rewireIDs returns bert_tiny with op(input_ids, c) (an INT64 initializer
// holding c) feeding the token embedding's Gather in place of input_ids.
func rewireIDs(b testing.TB, m *onnx.Model, op string, c int64) *onnx.Model {
	pb := *m.Proto()
	g := *pb.Graph
	g.Node = append([]onnxpb.Node{{Name: "ids_" + op, OpType: op, Input: []string{"input_ids", "ids_const"}, Output: []string{"ids_computed"}}}, g.Node...)
	g.Initializer = append(append([]onnxpb.Tensor(nil), g.Initializer...), onnxpb.Tensor{Name: "ids_const", DataType: onnxpb.Int64, Dims: []int64{1}, Int64Data: []int64{c}})
	rewired := 0
	for k := range g.Node[1:] {
		n := &g.Node[k+1]
		if n.Name == "/tok/Gather" {
			n.Input = append([]string(nil), n.Input...)
			n.Input[1] = "ids_computed"
			rewired++
		}
	}
	if rewired != 1 {
		b.Fatalf("bert_tiny: found %d token Gather nodes, want 1", rewired)
	}
	pb.Graph = &g
	out, err := onnx.FromProto(&pb)
	if err != nil {
		b.Fatal(err)
	}
	return out
}
