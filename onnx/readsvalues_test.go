package onnx

import (
	"testing"

	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// ReadsValues is false only for an input every reader of which takes it
// for its dtype: CastLike's target_type. Any other reader (an op reading
// it as data, a subgraph, the input being an output) reads its values.
// Fault injected: dropping the subgraph check made the "read in an If
// branch" case report false; dropping onlyTypeOf(1) from CastLike's
// registration made the first case report true.
func TestReadsValues(t *testing.T) {
	x, like := vi("x", onnxpb.Float, 2, 3), vi("like", onnxpb.Double, 0)
	y := vi("y", onnxpb.Double, 2, 3)
	castLike := node("CastLike", []string{"x", "like"}, []string{"y"})
	branch := func(out string) *onnxpb.Graph {
		return &onnxpb.Graph{Name: "b", Node: []onnxpb.Node{node("Identity", []string{"like"}, []string{out})},
			Output: []onnxpb.ValueInfo{vi(out, onnxpb.Double, 0)}}
	}
	cond := onnxpb.Tensor{Name: "c", Dims: []int64{}, DataType: onnxpb.Bool, Int32Data: []int32{1}}
	ifNode := node("If", []string{"c"}, []string{"z"},
		onnxpb.Attribute{Name: "then_branch", Type: onnxpb.AttrGraph, G: branch("t")},
		onnxpb.Attribute{Name: "else_branch", Type: onnxpb.AttrGraph, G: branch("e")})
	cases := []struct {
		name string
		pb   *onnxpb.Model
		want bool
	}{
		{"CastLike's target_type only", model(15, []onnxpb.ValueInfo{x, like}, []onnxpb.ValueInfo{y}, nil, castLike), false},
		{"also added to", model(15, []onnxpb.ValueInfo{x, like}, []onnxpb.ValueInfo{y, vi("s", onnxpb.Double, 0)}, nil,
			castLike, node("Add", []string{"like", "like"}, []string{"s"})), true},
		{"CastLike's input", model(15, []onnxpb.ValueInfo{like, x}, []onnxpb.ValueInfo{vi("w", onnxpb.Float, 0)}, nil,
			node("CastLike", []string{"like", "x"}, []string{"w"})), true},
		{"an output itself", model(15, []onnxpb.ValueInfo{x, like}, []onnxpb.ValueInfo{y, like}, nil, castLike), true},
		{"read in an If branch", model(15, []onnxpb.ValueInfo{x, like}, []onnxpb.ValueInfo{y, vi("z", onnxpb.Double, 0)},
			[]onnxpb.Tensor{cond}, castLike, ifNode), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustModel(t, tc.pb).ReadsValues("like"); got != tc.want {
				t.Errorf("ReadsValues(like) = %v, want %v", got, tc.want)
			}
		})
	}
}
