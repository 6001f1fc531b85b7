package tensorbridge_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// TestEmptyTypeOnlyInput: CastLike reads only its target_type's dtype
// (https://onnx.ai/onnx/operators/onnx__CastLike.html puts no constraint
// on its shape; the ONNX 1.23 test cases give an empty one), so an empty
// target_type is not an empty batch: Model.Run runs the request and
// returns x cast to float64, exact (every float32 is a float64). Before
// the change Run refused it with an InputError ("output \"y\" would have
// shape [2 3], values computed from no data"); fault injected: making
// hasEmptyInput ignore ReadsValues again fails this test with that error.
func TestEmptyTypeOnlyInput(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	like := valueInfo("like", 0)
	like.Type.TensorType.ElemType = onnxpb.Double
	y := valueInfo("y", 2, 3)
	y.Type.TensorType.ElemType = onnxpb.Double
	pb := &onnxpb.Model{IRVersion: 8, OpsetImport: []onnxpb.OperatorSetID{{Version: 15}},
		Graph: &onnxpb.Graph{Name: "castlike",
			Input:  []onnxpb.ValueInfo{valueInfo("x", 2, 3), like},
			Output: []onnxpb.ValueInfo{y},
			Node:   []onnxpb.Node{{OpType: "CastLike", Input: []string{"x", "like"}, Output: []string{"y"}}}}}
	om, err := onnx.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.LoadONNX(ctx, om, "castlike")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := []float32{1.5, -2.25, 0.1, 3e38, 1e-30, 7}
	x, _ := ir.TensorFromFlat(in, 2, 3)
	l, _ := ir.NewHostTensor(ir.Float64, 0)
	outs, err := m.Run(ctx, map[string]*ir.Tensor{"x": x, "like": l})
	if err != nil {
		t.Fatalf("Run on %s: %v", b.Name(), err)
	}
	got := outs["y"]
	if got == nil || got.DType() != ir.Float64 || !slices.Equal(got.Shape().Dimensions, []int{2, 3}) {
		t.Fatalf("y = %v, want Float64[2 3]", got)
	}
	vals := tensors.MustCopyFlatData[float64](got)
	for k, v := range in {
		if vals[k] != float64(v) {
			t.Errorf("y[%d] = %v, want %v", k, vals[k], float64(v))
		}
	}
}
