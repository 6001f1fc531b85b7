package main

import (
	"context"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Helpers to write ONNX graphs by hand.

func vinfo(name string, dims ...any) onnxpb.ValueInfo {
	sh := &onnxpb.TensorShape{}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			sh.Dim = append(sh.Dim, onnxpb.Dimension{DimValue: int64(v), HasDimValue: true})
		case string:
			sh.Dim = append(sh.Dim, onnxpb.Dimension{DimParam: v})
		}
	}
	return onnxpb.ValueInfo{Name: name, Type: &onnxpb.TypeProto{TensorType: &onnxpb.TypeTensor{ElemType: onnxpb.Float, Shape: sh}}}
}

func zerosInit(name string, dims ...int64) onnxpb.Tensor {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return onnxpb.Tensor{Name: name, Dims: dims, DataType: onnxpb.Float, FloatData: make([]float32, n)}
}

func int64Init(name string, vals ...int64) onnxpb.Tensor {
	return onnxpb.Tensor{Name: name, Dims: []int64{int64(len(vals))}, DataType: onnxpb.Int64, Int64Data: vals}
}

func node(op string, in, out []string, attrs ...onnxpb.Attribute) onnxpb.Node {
	return onnxpb.Node{OpType: op, Name: op + "_" + out[0], Input: in, Output: out, Attribute: attrs}
}

func ints(name string, v ...int64) onnxpb.Attribute {
	return onnxpb.Attribute{Name: name, Type: onnxpb.AttrInts, Ints: v}
}

func intAttr(name string, v int64) onnxpb.Attribute {
	return onnxpb.Attribute{Name: name, Type: onnxpb.AttrInt, I: v}
}

// flopTestModel is a small graph with every counted op in its variants:
//
//	x [N,3,8,8]
//	Conv 3x3, 3->4 channels, pad 1          -> c1 [N,4,8,8]
//	Conv 3x3 depthwise (group 4), stride 2  -> c2 [N,4,4,4]
//	ConvTranspose 2x2, 4->2, stride 2       -> c3 [N,2,8,8]
//	Flatten                                 -> f  [N,128]
//	Gemm with W [10,128], transB            -> g  [N,10]
//	Transpose                               -> gt [10,N]
//	Gemm with A = gt, transA, W [10,6]      -> h  [N,6]
//	Reshape                                 -> r  [N,2,3]
//	MatMul with W [3,5] (batched, broadcast) -> y  [N,2,5]
//	MatMul r x r^T (both operands computed) -> z  [N,2,2]
//	Relu (not counted)                      -> out [N,2,2]
func flopTestModel() *onnxpb.Model {
	return &onnxpb.Model{
		IRVersion:   8,
		OpsetImport: []onnxpb.OperatorSetID{{Domain: "", Version: 13}},
		Graph: &onnxpb.Graph{
			Name:  "flops",
			Input: []onnxpb.ValueInfo{vinfo("x", "N", 3, 8, 8)},
			Output: []onnxpb.ValueInfo{
				vinfo("y", "N", 2, 5),
				vinfo("out", "N", 2, 2),
			},
			Initializer: []onnxpb.Tensor{
				zerosInit("w1", 4, 3, 3, 3),
				zerosInit("w2", 4, 1, 3, 3),
				zerosInit("w3", 4, 2, 2, 2),
				zerosInit("w4", 10, 128),
				zerosInit("w5", 10, 6),
				zerosInit("w6", 3, 5),
				int64Init("shape", 0, 2, 3),
			},
			Node: []onnxpb.Node{
				node("Conv", []string{"x", "w1"}, []string{"c1"}, ints("pads", 1, 1, 1, 1)),
				node("Conv", []string{"c1", "w2"}, []string{"c2"}, ints("pads", 1, 1, 1, 1), ints("strides", 2, 2), intAttr("group", 4)),
				node("ConvTranspose", []string{"c2", "w3"}, []string{"c3"}, ints("strides", 2, 2)),
				node("Flatten", []string{"c3"}, []string{"f"}),
				node("Gemm", []string{"f", "w4"}, []string{"g"}, intAttr("transB", 1)),
				node("Transpose", []string{"g"}, []string{"gt"}, ints("perm", 1, 0)),
				node("Gemm", []string{"gt", "w5"}, []string{"h"}, intAttr("transA", 1)),
				node("Reshape", []string{"h", "shape"}, []string{"r"}),
				node("MatMul", []string{"r", "w6"}, []string{"y"}),
				node("Transpose", []string{"r"}, []string{"rt"}, ints("perm", 0, 2, 1)),
				node("MatMul", []string{"r", "rt"}, []string{"z"}),
				node("Relu", []string{"z"}, []string{"out"}),
			},
		},
	}
}

func cpuEngineBackend(t *testing.T) *tensorbridge.Backend {
	t.Helper()
	b, err := tensorbridge.Open(context.Background(), "cpu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// The expected counts are worked out by hand from the op definitions
// (2 FLOPs per multiply-accumulate), independently of the counter.
func TestCountFLOPsHandBuilt(t *testing.T) {
	b := cpuEngineBackend(t)
	// Per sample (N = 1):
	conv1 := 2.0 * (4 * 8 * 8) * (3 * 3 * 3) // each of 256 outputs sums 3 channels x 3x3: 13824
	conv2 := 2.0 * (4 * 4 * 4) * (1 * 3 * 3) // depthwise: 64 outputs, 1 channel x 3x3 each: 1152
	convT := 2.0 * (4 * 4 * 4) * (2 * 2 * 2) // 64 inputs each scattered to 2 channels x 2x2: 1024
	gemm1 := 2.0 * 10 * 128                  // 2560
	gemm2 := 2.0 * 6 * 10                    // 120 (K = 10, rows of the transposed A)
	mm1 := 2.0 * (2 * 5) * 3                 // 60
	mm2 := 2.0 * (2 * 2) * 3                 // 24
	for _, n := range []int{1, 3, 8} {
		fc, err := countFLOPs(b.Engine(), flopTestModel(), map[string][]int{"x": {n, 3, 8, 8}}, nil)
		if err != nil {
			t.Fatalf("N=%d: %v", n, err)
		}
		N := float64(n)
		want := map[string]float64{
			"Conv":          N * (conv1 + conv2),
			"ConvTranspose": N * convT,
			"Gemm":          N * (gemm1 + gemm2),
			"MatMul":        N * (mm1 + mm2),
		}
		total := 0.0
		for op, w := range want {
			total += w
			if fc.ByOp[op] != w {
				t.Errorf("N=%d: %s FLOPs %v, want %v", n, op, fc.ByOp[op], w)
			}
		}
		if fc.Total != total || total != N*18764 {
			t.Errorf("N=%d: total %v, want %v (= %d x 18764)", n, fc.Total, total, n)
		}
		if fc.Nodes != 7 {
			t.Errorf("N=%d: counted %d nodes, want 7", n, fc.Nodes)
		}
		if got := fc.sortedOps(); got[0] != "Conv" {
			t.Errorf("largest op %v, want Conv first", got)
		}
	}
}

// The committed reference MLP is 64-128-64-10 (testdata/models/README.md):
// 2 x (64*128 + 128*64 + 64*10) = 34048 FLOPs per sample.
func TestCountFLOPsReferenceMLP(t *testing.T) {
	b := cpuEngineBackend(t)
	pb, err := onnxpb.ReadModel("../../testdata/models/mlp.onnx")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 5} {
		fc, err := countFLOPs(b.Engine(), pb, map[string][]int{"x": {n, 64}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(n) * 2 * (64*128 + 128*64 + 64*10); fc.Total != want {
			t.Errorf("batch %d: %v FLOPs, want %v", n, fc.Total, want)
		}
	}
}

func TestCountFLOPsErrors(t *testing.T) {
	b := cpuEngineBackend(t)
	if _, err := countFLOPs(b.Engine(), &onnxpb.Model{}, nil, nil); err == nil || !strings.Contains(err.Error(), "no graph") {
		t.Errorf("model without graph: %v", err)
	}
	// A symbolic dimension with no size cannot be specialised.
	if _, err := countFLOPs(b.Engine(), flopTestModel(), nil, nil); err == nil || !strings.Contains(err.Error(), "N") {
		t.Errorf("no shapes: %v, want an error naming dimension N", err)
	}
	// A wrong static dimension is refused, naming the input.
	if _, err := countFLOPs(b.Engine(), flopTestModel(), map[string][]int{"x": {1, 4, 8, 8}}, nil); err == nil || !strings.Contains(err.Error(), "x") {
		t.Errorf("bad shape: %v, want an error naming input x", err)
	}
	// A MatMul with one input is malformed.
	bad := flopTestModel()
	bad.Graph.Node[8].Input = bad.Graph.Node[8].Input[:1]
	if _, err := countFLOPs(b.Engine(), bad, map[string][]int{"x": {1, 3, 8, 8}}, nil); err == nil || !strings.Contains(err.Error(), "MatMul") {
		t.Errorf("one-input MatMul: %v", err)
	}
	// A graph without counted ops counts zero.
	none := &onnxpb.Model{OpsetImport: []onnxpb.OperatorSetID{{Version: 13}}, Graph: &onnxpb.Graph{
		Input: []onnxpb.ValueInfo{vinfo("a", 2)}, Output: []onnxpb.ValueInfo{vinfo("b", 2)},
		Node: []onnxpb.Node{node("Relu", []string{"a"}, []string{"b"})}}}
	fc, err := countFLOPs(b.Engine(), none, nil, nil)
	if err != nil || fc.Total != 0 || fc.Nodes != 0 {
		t.Errorf("no counted ops: %+v, %v", fc, err)
	}
}
