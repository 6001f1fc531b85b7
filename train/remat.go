package train

// Rematerialisation (gradient checkpointing): a block's intermediate
// values are not kept for the backward pass but computed again from the
// block's inputs when the backward pass reaches the block. Peak memory
// then holds the blocks' inputs plus one block's working set instead of
// every block's activations, for about one more forward pass of compute
// (Chen et al. 2016, https://arxiv.org/abs/1604.06174; torch's
// torch.utils.checkpoint does the same).
//
// GoMLX v0.26.0's autodiff has no hook for it, so Remat builds it from
// what the graph has:
//   - the forward computes fn on StopGradient copies of the inputs, so
//     the backward pass never reads fn's intermediate nodes;
//   - a "tie" node (an Identity of fn's output) stands for the block: its
//     gradient inputs are the block's inputs (GoMLX's unexported
//     Node.inputNodes, set once here) and its gradient rule (the
//     unexported Node.customVJP, GoMLX's own hook for
//     IdentityWithCustomGradient) recomputes fn on fresh copies of the
//     inputs and returns graph.Gradient of <fn(copies), v> with respect to
//     them;
//   - the recomputation reads the incoming gradient v (the first input
//     plus 0·v[0]), so no compiler can merge it with the forward copy
//     (common-subexpression elimination) or run it before the backward
//     pass needs it: XLA keeps 0·x for floating point (it would change a
//     NaN), and so does the cpu engine. A non-finite v[0] makes the
//     block's gradients NaN, which the trainer's non-finite check reports,
//     as it reports the non-finite gradient that caused it.

import (
	"reflect"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// RematFunc is a block computed under Remat: it takes the block's
// differentiable inputs (in Remat's order) and returns its output first,
// then any values that carry no gradient (a random-number state, say).
// It is called twice, for the forward pass and again inside the backward
// pass, and must build the same computation both times; every node it
// reads that needs a gradient must come through in, since nodes it
// captures from outside get none through the block.
type RematFunc func(in []*graph.Node) []*graph.Node

// Remat returns fn(in...) whose output's gradient with respect to in is
// computed by recomputing fn in the backward pass (see the file comment).
// The values are fn's exactly; the gradients are those of fn's graph,
// evaluated on the recomputed values. ok is false when this GoMLX's Node
// lacks the fields Remat sets; fn's plain value is returned then (the
// gradients stay right, only the memory is not saved).
func Remat(fn RematFunc, in ...*graph.Node) (out []*graph.Node, ok bool) {
	stopped := make([]*graph.Node, len(in))
	for i, x := range in {
		stopped[i] = graph.StopGradient(x)
	}
	out = fn(stopped)
	tie := graph.Identity(out[0])
	vjp := graph.VJP(func(_ *graph.Node, vs []*graph.Node, _ shapes.Shape) []*graph.Node {
		return append([]*graph.Node{nil}, rematGradients(fn, in, vs[0])...)
	})
	if !setNodeField(tie, "customVJP", vjp) || !setNodeField(tie, "inputNodes", append([]*graph.Node{out[0]}, in...)) {
		setNodeField(tie, "customVJP", graph.VJP(nil))
		return append([]*graph.Node(nil), fn(in)...), false
	}
	out = append([]*graph.Node{tie}, out[1:]...)
	return out, true
}

// rematGradients recomputes fn on copies of in that depend on v and
// returns the gradients of <fn(copies)[0], v> with respect to the copies.
func rematGradients(fn RematFunc, in []*graph.Node, v *graph.Node) []*graph.Node {
	v = graph.StopGradient(v) // a constant of the recomputation
	first := v
	if v.Rank() > 0 {
		axes := make([]graph.SliceAxisSpec, v.Rank())
		for i := range axes {
			axes[i] = graph.AxisRange(0, 1)
		}
		first = graph.Reshape(graph.Slice(v, axes...))
	}
	x := in[0]
	zero := graph.ConvertDType(graph.MulScalar(first, 0), x.DType())
	copies := make([]*graph.Node, len(in))
	copies[0] = graph.Add(x, graph.BroadcastToDims(zero, x.Shape().Dimensions...))
	for i := 1; i < len(in); i++ {
		copies[i] = graph.Identity(in[i])
	}
	y := fn(copies)[0]
	if y.DType() != v.DType() {
		y = graph.ConvertDType(y, v.DType())
	}
	return graph.Gradient(graph.ReduceAllSum(graph.Mul(y, v)), copies...)
}

// RematSupported says whether this GoMLX's Node has the fields Remat
// sets, so that Remat saves memory (without them it computes the plain
// graph): callers asked for remat refuse to run without it.
func RematSupported() bool {
	t := reflect.TypeOf(graph.Node{})
	v, okV := t.FieldByName("customVJP")
	in, okIn := t.FieldByName("inputNodes")
	return okV && okIn && v.Type == reflect.TypeOf(graph.VJP(nil)) && in.Type == reflect.TypeOf([]*graph.Node(nil))
}

// setNodeField sets GoMLX's unexported Node field name to val; false when
// the field is missing or of another type.
func setNodeField(n *graph.Node, name string, val any) bool {
	f := reflect.ValueOf(n).Elem().FieldByName(name)
	if !f.IsValid() || f.Type() != reflect.TypeOf(val) {
		return false
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(val))
	return true
}
