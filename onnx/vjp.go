package onnx

// Gradients (VJPs) GoMLX v0.26.0 lacks for graph ops the importer emits,
// registered in graph.VJPRegistration, the table GoMLX documents as
// changeable ("for experimentation, one can dynamically change this",
// rev_autodiff.go). Registration happens once, in init, before any graph
// can be differentiated, so no Gradient call races with it.
//
// Without them reverse-mode autodiff fails on BatchNormalization,
// LayerNormalization, GroupNormalization and InstanceNormalization
// (Rsqrt), Elu, Selu and Celu (Expm1), Floor, Ceil, Round and Sign and
// every op built on them (GridSample, RoiAlign, DeformConv), Mod with
// fmod=1 (Rem), ReduceProd (ReduceProduct), and every Gather that is not
// one of GoMLX's two simple forms (ONNX Gather on an inner axis, Resize,
// Compress...). gradcheck_test.go checks each against finite differences.

import (
	"fmt"
	"reflect"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

func init() {
	single := func(f func(node, v *graph.Node) []*graph.Node) graph.VJP {
		return func(node *graph.Node, vjps []*graph.Node, _ shapes.Shape) []*graph.Node { return f(node, vjps[0]) }
	}
	zero := single(func(node, _ *graph.Node) []*graph.Node { return make([]*graph.Node, len(node.Inputs())) })
	r := graph.VJPRegistration
	r[graph.NodeTypeRsqrt] = single(rsqrtVJP)
	r[graph.NodeTypeExpm1] = single(expm1VJP)
	r[graph.NodeTypeRem] = single(remVJP)
	r[graph.NodeTypeReduceProduct] = single(reduceProductVJP)
	r[graph.NodeTypeGather] = single(gatherVJP)
	// Piecewise constant: the derivative is 0 wherever it exists (as in
	// PyTorch's autograd for floor, ceil, round and sign).
	for _, t := range []graph.NodeType{graph.NodeTypeFloor, graph.NodeTypeCeil, graph.NodeTypeRound, graph.NodeTypeSign} {
		r[t] = zero
	}
}

// rsqrtVJP: d/dx x^(-1/2) = -1/2 · y³.
func rsqrtVJP(node, v *graph.Node) []*graph.Node {
	y := node
	return []*graph.Node{graph.Mul(v, graph.MulScalar(graph.Mul(y, graph.Mul(y, y)), -0.5))}
}

// expm1VJP: d/dx (eˣ - 1) = y + 1.
func expm1VJP(node, v *graph.Node) []*graph.Node {
	return []*graph.Node{graph.Mul(v, graph.AddScalar(node, 1))}
}

// remVJP: a rem b = a - b·trunc(a/b), so the derivative is 1 for a and
// -trunc(a/b) for b (away from the jumps).
func remVJP(node, v *graph.Node) []*graph.Node {
	a, b := node.Inputs()[0], node.Inputs()[1]
	q := graph.Div(a, b)
	trunc := graph.Mul(graph.Sign(q), graph.Floor(graph.Abs(q)))
	return []*graph.Node{
		sumToShape(v, a.Shape()),
		sumToShape(graph.Neg(graph.Mul(v, trunc)), b.Shape()),
	}
}

// sumToShape sums v over the axes its operand was broadcast on.
func sumToShape(v *graph.Node, s shapes.Shape) *graph.Node {
	if v.Shape().Equal(s) {
		return v
	}
	if s.IsScalar() {
		return graph.ReduceAllSum(v)
	}
	var axes []int
	for a, d := range s.Dimensions {
		if d == 1 && v.Shape().Dimensions[a] != 1 {
			axes = append(axes, a)
		}
	}
	return graph.Reshape(graph.ReduceSum(v, axes...), s.Dimensions...)
}

// reduceProductVJP: the derivative of a product with respect to one factor
// is the product of the others: y/x where no factor is zero; the product
// of the non-zero factors at the one zero factor; zero everywhere when two
// or more factors are zero.
func reduceProductVJP(node, v *graph.Node) []*graph.Node {
	x := node.Inputs()[0]
	axes := nodeInts(node, "axes")
	dims := x.Shape().Dimensions
	expand := func(n *graph.Node) *graph.Node {
		keep := append([]int(nil), dims...)
		for _, a := range axes {
			keep[a] = 1
		}
		return graph.BroadcastToDims(graph.Reshape(n, keep...), dims...)
	}
	isZero := graph.Equal(x, graph.ZerosLike(x))
	nonZero := graph.Where(isZero, graph.OnesLike(x), x)
	prodNZ := expand(graph.ReduceMultiply(nonZero, axes...))
	zeros := expand(graph.ReduceSum(graph.ConvertDType(isZero, x.DType()), axes...))
	noZero := graph.Equal(zeros, graph.ZerosLike(zeros))
	oneZero := graph.LogicalAnd(graph.Equal(zeros, graph.OnesLike(zeros)), isZero)
	d := graph.Where(noZero, graph.Div(prodNZ, nonZero), graph.Where(oneZero, prodNZ, graph.ZerosLike(x)))
	return []*graph.Node{graph.Mul(expand(v), d)}
}

// gatherVJP is the transpose of a general XLA gather: a scatter-add of v
// into zeros with the same dimension numbers (update window axes = offset
// axes, inserted window axes = collapsed slice axes), as XLA and JAX
// transpose it (jax/_src/lax/slicing.py, _gather_transpose_rule). GoMLX's
// own gatherVJP handles only its Gather and GatherSlices forms.
func gatherVJP(node, v *graph.Node) []*graph.Node {
	operand, indices := node.Inputs()[0], node.Inputs()[1]
	g := graph.BackendScatterSum(graph.ZerosLike(operand), indices, v,
		nodeInt(node, "indexVectorAxis"), nodeInts(node, "offsetOutputAxes"),
		nodeInts(node, "collapsedSliceAxes"), nodeInts(node, "startIndexMap"),
		nodeBool(node, "indicesAreSorted"), false)
	return []*graph.Node{g, nil}
}

// nodeField reads a parameter of a graph node: GoMLX v0.26.0 keeps them in
// an unexported struct (gen_backend_ops.go, nodeInputs*) with no accessor.
// A missing field (another GoMLX version) panics, which CheckGradients
// reports as the op having no gradient.
func nodeField(n *graph.Node, name string) reflect.Value {
	v := reflect.ValueOf(n).Elem().FieldByName("inputs")
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		v = v.Elem()
	}
	if v.IsValid() && v.Kind() == reflect.Struct {
		if f := v.FieldByName(name); f.IsValid() {
			return f
		}
	}
	panic(fmt.Errorf("onnx: gradient of %s: GoMLX node has no parameter %q (GoMLX version other than v0.26.0?)", n.Type(), name))
}

func nodeInts(n *graph.Node, name string) []int {
	f := nodeField(n, name)
	out := make([]int, f.Len())
	for i := range out {
		out[i] = int(f.Index(i).Int())
	}
	return out
}

func nodeInt(n *graph.Node, name string) int { return int(nodeField(n, name).Int()) }

func nodeBool(n *graph.Node, name string) bool { return nodeField(n, name).Bool() }
