package onnx

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

func TestTopKOp(t *testing.T) {
	f := onnxpb.Float
	nan := math.NaN()
	topk := func(attrs ...onnxpb.Attribute) onnxpb.Node {
		return node("TopK", []string{"x", "k"}, []string{"v", "i"}, attrs...)
	}
	outs := func(dims ...int) []onnxpb.ValueInfo {
		d := make([]any, len(dims))
		for j, v := range dims {
			d[j] = v
		}
		return []onnxpb.ValueInfo{vi("v", f, d...), vi("i", onnxpb.Int64, d...)}
	}
	runGatherOpCases(t, []gatherOpCase{
		{
			// Ties: equal values come in increasing index order.
			name:    "largest with ties",
			node:    topk(),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 5)},
			outputs: outs(3),
			inits:   []onnxpb.Tensor{tI64("k", []int64{1}, 3)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{5}, 3, 1, 3, 2, 3)},
			want:    []gatherWant{{ir.Float32, []int{3}, floats(3, 3, 3)}, {ir.Int64, []int{3}, floats(0, 2, 4)}},
		},
		{
			name:    "smallest with ties",
			node:    topk(aInt("largest", 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 4)},
			outputs: outs(3),
			inits:   []onnxpb.Tensor{tI64("k", []int64{1}, 3)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{4}, 2, 1, 2, 1)},
			want:    []gatherWant{{ir.Float32, []int{3}, floats(1, 1, 2)}, {ir.Int64, []int{3}, floats(1, 3, 0)}},
		},
		{
			// Columns [1 4 2] and [5 0 5]: top 2 are (4,2),(2,1) and (5,5),(0,2).
			name:    "axis 0 of a matrix",
			node:    topk(aInt("axis", 0)),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3, 2)},
			outputs: outs(2, 2),
			inits:   []onnxpb.Tensor{tI64("k", []int64{1}, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{3, 2}, 1, 5, 4, 0, 2, 5)},
			want:    []gatherWant{{ir.Float32, []int{2, 2}, floats(4, 5, 2, 5)}, {ir.Int64, []int{2, 2}, floats(1, 0, 2, 2)}},
		},
		{
			name:    "opset 1 k attribute",
			opset:   9,
			node:    node("TopK", []string{"x"}, []string{"v", "i"}, aInt("k", 1)),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 2, 3)},
			outputs: outs(2, 1),
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{2, 3}, 1, 9, 2, 7, 3, 8)},
			want:    []gatherWant{{ir.Float32, []int{2, 1}, floats(9, 8)}, {ir.Int64, []int{2, 1}, floats(1, 2)}},
		},
		{
			name:    "int32 values",
			node:    topk(),
			inputs:  []onnxpb.ValueInfo{vi("x", onnxpb.Int32, 4)},
			outputs: []onnxpb.ValueInfo{vi("v", onnxpb.Int32, 2), vi("i", onnxpb.Int64, 2)},
			inits:   []onnxpb.Tensor{tI64("k", []int64{1}, 2)},
			feed:    map[string]*ir.Tensor{"x": i32(t, []int{4}, -5, 7, math.MinInt32, 7)},
			want:    []gatherWant{{ir.Int32, []int{2}, floats(7, 7)}, {ir.Int64, []int{2}, floats(1, 3)}},
		},
		{
			// NaN orders above every number.
			name:    "NaN first when largest",
			node:    topk(),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3)},
			outputs: outs(2),
			inits:   []onnxpb.Tensor{tI64("k", []int64{1}, 2)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, float32(nan), 3)},
			want:    []gatherWant{{ir.Float32, []int{2}, floats(nan, 3)}, {ir.Int64, []int{2}, floats(1, 2)}},
		},
		{
			// 40 elements, k = 2: the iterative lowering on a vector.
			// x[j] = floor(j/2), so the top two are the two 19s.
			name:    "iterative on a long vector",
			node:    topk(),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 40)},
			outputs: outs(2),
			inits:   []onnxpb.Tensor{tI64("k", []int64{1}, 2)},
			feed:    map[string]*ir.Tensor{"x": halves(t, 40)},
			want:    []gatherWant{{ir.Float32, []int{2}, floats(19, 19)}, {ir.Int64, []int{2}, floats(38, 39)}},
		},
		{
			name:    "k zero",
			node:    topk(),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3)},
			outputs: outs(0),
			inits:   []onnxpb.Tensor{tI64("k", []int64{1}, 0)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, 2, 3)},
			want:    []gatherWant{{ir.Float32, []int{0}, nil}, {ir.Int64, []int{0}, nil}},
		},
		{
			name:    "k above axis size",
			node:    topk(),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3)},
			outputs: outs(4),
			inits:   []onnxpb.Tensor{tI64("k", []int64{1}, 4)},
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, 2, 3)},
			wantErr: "k = 4 is out of range for axis 0 of size 3",
		},
		{
			name:    "k not known at build time",
			node:    topk(),
			inputs:  []onnxpb.ValueInfo{vi("x", f, 3), vi("k", onnxpb.Int64, 1)},
			outputs: outs(1),
			feed:    map[string]*ir.Tensor{"x": f32(t, []int{3}, 1, 2, 3), "k": i64(t, []int{1}, 1)},
			want:    []gatherWant{{ir.Float32, []int{1}, floats(3)}, {ir.Int64, []int{1}, floats(2)}},
		},
	})
}

// TestTopKLowerings runs both lowerings on the same rows, so each is
// checked whatever the size heuristic picks.
func TestTopKLowerings(t *testing.T) {
	nan := float32(math.NaN())
	// Row 0: 2 -inf 7 2 NaN 7 -> descending order with ties by index:
	// NaN(4) 7(2) 7(5) 2(0) 2(3) -inf(1).
	// Row 1: 0 -1 -1 5 0 3 -> 5(3) 3(5) 0(0) 0(4) -1(1) -1(2).
	x := []float32{2, float32(math.Inf(-1)), 7, 2, nan, 7, 0, -1, -1, 5, 0, 3}
	cases := []struct {
		name    string
		k       int
		largest bool
		vals    []float64
		idx     []float64
	}{
		{"largest k=4", 4, true, floats(math.NaN(), 7, 7, 2, 5, 3, 0, 0), floats(4, 2, 5, 0, 3, 5, 0, 4)},
		{"smallest k=3", 3, false, floats(math.Inf(-1), 2, 2, -1, -1, 0), floats(1, 0, 3, 1, 2, 0)},
		{"smallest all", 6, false, floats(math.Inf(-1), 2, 2, 7, 7, math.NaN(), -1, -1, 0, 0, 3, 5), floats(1, 0, 3, 2, 5, 4, 1, 2, 0, 4, 5, 3)},
	}
	lowerings := map[string]func(*graph.Node, int, bool) (*graph.Node, *graph.Node){
		"rank": topKByRank, "iterative": topKIterative,
	}
	for lname, lower := range lowerings {
		for _, tc := range cases {
			t.Run(lname+" "+tc.name, func(t *testing.T) {
				g := graph.NewGraph(engine(t), "topk_test")
				defer g.Finalize()
				xn := graph.ConstTensor(g, f32(t, []int{2, 6}, x...))
				v, i := lower(xn, tc.k, tc.largest)
				res, err := compileAndRun(g, []*graph.Node{v, i}, nil)
				if err != nil {
					t.Fatal(err)
				}
				expect(t, "values", res[0], ir.Float32, []int{2, tc.k}, tc.vals, 0)
				expect(t, "indices", res[1], ir.Int64, []int{2, tc.k}, tc.idx, 0)
			})
		}
	}
}

func TestNonMaxSuppressionOp(t *testing.T) {
	f := onnxpb.Float
	nms := func(attrs ...onnxpb.Attribute) onnxpb.Node {
		return node("NonMaxSuppression", []string{"b", "s", "m", "iou", "st"}, []string{"y"}, attrs...)
	}
	ins := func(n int) []onnxpb.ValueInfo {
		return []onnxpb.ValueInfo{vi("b", f, 1, n, 4), vi("s", f, 1, 1, n)}
	}
	th := func(maxOut int64, iou, score float32) []onnxpb.Tensor {
		return []onnxpb.Tensor{tI64("m", []int64{1}, maxOut), tF32("iou", []int64{1}, iou), tF32("st", []int64{1}, score)}
	}
	out := []onnxpb.ValueInfo{vi("y", onnxpb.Int64, "n", 3)}
	// Boxes as [y1, x1, y2, x2]: A = unit square at the origin, B = A
	// shifted by 0.5 in x (IoU(A,B) = 0.5/1.5 = 1/3), C far away.
	boxes := f32(t, []int{1, 3, 4}, 0, 0, 1, 1, 0, 0.5, 1, 1.5, 5, 5, 6, 6)
	scores := f32(t, []int{1, 1, 3}, 0.9, 0.8, 0.1)
	runGatherOpCases(t, []gatherOpCase{
		{
			name: "B suppressed at iou 0.3", node: nms(), inputs: ins(3), outputs: out, inits: th(3, 0.3, 0),
			feed: map[string]*ir.Tensor{"b": boxes, "s": scores},
			want: []gatherWant{{ir.Int64, []int{2, 3}, floats(0, 0, 0, 0, 0, 2)}},
		},
		{
			name: "B kept at iou 0.4, limited to 2", node: nms(), inputs: ins(3), outputs: out, inits: th(2, 0.4, 0),
			feed: map[string]*ir.Tensor{"b": boxes, "s": scores},
			want: []gatherWant{{ir.Int64, []int{2, 3}, floats(0, 0, 0, 0, 0, 1)}},
		},
		{
			name: "score threshold is strict", node: nms(), inputs: ins(3), outputs: out, inits: th(3, 0.3, 0.1),
			feed: map[string]*ir.Tensor{"b": boxes, "s": scores},
			want: []gatherWant{{ir.Int64, []int{1, 3}, floats(0, 0, 0)}},
		},
		{
			// A given by its other diagonal; B centred: same boxes as above.
			name: "flipped corners", node: nms(), inputs: ins(3), outputs: out, inits: th(3, 0.3, 0),
			feed: map[string]*ir.Tensor{"b": f32(t, []int{1, 3, 4}, 1, 1, 0, 0, 1, 0.5, 0, 1.5, 6, 6, 5, 5), "s": scores},
			want: []gatherWant{{ir.Int64, []int{2, 3}, floats(0, 0, 0, 0, 0, 2)}},
		},
		{
			name: "center point format", node: nms(aInt("center_point_box", 1)), inputs: ins(3), outputs: out, inits: th(3, 0.3, 0),
			feed: map[string]*ir.Tensor{"b": f32(t, []int{1, 3, 4}, 0.5, 0.5, 1, 1, 1, 0.5, 1, 1, 5.5, 5.5, 1, 1), "s": scores},
			want: []gatherWant{{ir.Int64, []int{2, 3}, floats(0, 0, 0, 0, 0, 2)}},
		},
		{
			// A = [0,3]x[0,1], B = [1,4]x[0,1]: IoU = 2/4 exactly, not above 0.5.
			// Equal scores: lower index first.
			name: "iou equal to threshold kept, ties by index", node: nms(), inputs: ins(2), outputs: out, inits: th(5, 0.5, 0),
			feed: map[string]*ir.Tensor{"b": f32(t, []int{1, 2, 4}, 0, 1, 1, 4, 0, 0, 1, 3), "s": f32(t, []int{1, 1, 2}, 0.5, 0.5)},
			want: []gatherWant{{ir.Int64, []int{2, 3}, floats(0, 0, 0, 0, 0, 1)}},
		},
		{
			name: "no max output means no boxes", node: node("NonMaxSuppression", []string{"b", "s"}, []string{"y"}),
			inputs: ins(3), outputs: out,
			feed: map[string]*ir.Tensor{"b": boxes, "s": scores},
			want: []gatherWant{{ir.Int64, []int{0, 3}, nil}},
		},
		{
			name: "bad scores shape", node: nms(), inputs: []onnxpb.ValueInfo{vi("b", f, 1, 3, 4), vi("s", f, 1, 1, 2)},
			outputs: out, inits: th(3, 0.3, 0),
			feed:    map[string]*ir.Tensor{"b": boxes, "s": f32(t, []int{1, 1, 2}, 1, 2)},
			wantErr: "scores must have shape [1, classes, 3]",
		},
	})
}

// TestNonMaxSuppressionTwoClasses checks the output order (batch, then
// class, then score) on two batches and two classes.
func TestNonMaxSuppressionTwoClasses(t *testing.T) {
	f := onnxpb.Float
	m := mustModel(t, model(13,
		[]onnxpb.ValueInfo{vi("b", f, 2, 2, 4), vi("s", f, 2, 2, 2)},
		[]onnxpb.ValueInfo{vi("y", onnxpb.Int64, "n", 3)},
		[]onnxpb.Tensor{tI64("m", nil, 1)},
		node("NonMaxSuppression", []string{"b", "s", "m"}, []string{"y"})))
	if got := m.ValueInputs(); len(got) != 2 {
		t.Errorf("ValueInputs = %v, want boxes and scores", got)
	}
	boxes := f32(t, []int{2, 2, 4}, 0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3)
	// Batch 0: class 0 prefers box 1, class 1 box 0; batch 1: both prefer box 0.
	scores := f32(t, []int{2, 2, 2}, 0.1, 0.2, 0.7, 0.3, 0.9, 0.5, 0.6, 0.4)
	outs := run(t, m, map[string]*ir.Tensor{"b": boxes, "s": scores})
	expect(t, "y", outs["y"], ir.Int64, []int{4, 3}, floats(0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0), 0)
}

// halves returns the float vector x[j] = floor(j/2) of length n.
func halves(t testing.TB, n int) *ir.Tensor {
	v := make([]float32, n)
	for j := range v {
		v[j] = float32(j / 2)
	}
	return f32(t, []int{n}, v...)
}
