package onnx

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Graph helpers shared by the op converters. They panic with errors on
// misuse, like the GoMLX ops they wrap; the builder recovers.

// broadcastNodes applies ONNX multidirectional (numpy) broadcasting to the
// nodes, returning them all with the common shape.
func broadcastNodes(nodes ...*graph.Node) []*graph.Node {
	shapes := make([][]int, len(nodes))
	for k, n := range nodes {
		shapes[k] = n.Shape().Dimensions
	}
	dims, err := broadcastDims(shapes...)
	if err != nil {
		panic(err)
	}
	out := make([]*graph.Node, len(nodes))
	for k, n := range nodes {
		out[k] = broadcastNodeTo(n, dims)
	}
	return out
}

// broadcastNodeTo broadcasts n (numpy rules) to dims.
func broadcastNodeTo(n *graph.Node, dims []int) *graph.Node {
	nd := n.Shape().Dimensions
	if equalInts(nd, dims) {
		return n
	}
	if len(nd) < len(dims) {
		padded := make([]int, len(dims))
		for k := range padded {
			padded[k] = 1
		}
		copy(padded[len(dims)-len(nd):], nd)
		n = graph.Reshape(n, padded...)
		nd = padded
	}
	if equalInts(nd, dims) {
		return n
	}
	// Drop the size-1 axes that grow and let BroadcastInDim re-create them.
	var keep []int
	var keptDims []int
	for k, d := range nd {
		if d == dims[k] {
			keep = append(keep, k)
			keptDims = append(keptDims, d)
		}
	}
	if keptDims == nil {
		keptDims = []int{}
	}
	src := graph.Reshape(n, keptDims...)
	return graph.ExpandAndBroadcast(src, dims, complement(keep, len(dims)))
}

// complement returns the axes in [0, rank) not in keep, in order.
func complement(keep []int, rank int) []int {
	in := make([]bool, rank)
	for _, k := range keep {
		in[k] = true
	}
	out := []int{}
	for k := range rank {
		if !in[k] {
			out = append(out, k)
		}
	}
	return out
}

// binaryBroadcast broadcasts two nodes and applies fn.
func binaryBroadcast(a, b *graph.Node, fn func(a, b *graph.Node) *graph.Node) *graph.Node {
	ab := broadcastNodes(a, b)
	return fn(ab[0], ab[1])
}

// scalarLike returns a scalar constant of n's dtype.
func scalarLike(n *graph.Node, v float64) *graph.Node {
	return scalarOf(n.Graph(), n.DType(), v)
}

// scalarOf returns a scalar constant of dtype dt.
func scalarOf(g *graph.Graph, dt ir.DType, v float64) *graph.Node {
	if dt == ir.Bool {
		return graph.Const(g, v != 0)
	}
	return graph.Scalar(g, dt, v)
}

// fullLike returns a tensor shaped like dims of dtype dt filled with v.
func filled(g *graph.Graph, dt ir.DType, dims []int, v float64) *graph.Node {
	s := scalarOf(g, dt, v)
	if len(dims) == 0 {
		return s
	}
	return graph.BroadcastToDims(s, dims...)
}

// sliceAxis takes elements [start, end) with step along axis (step > 0,
// start and end already clamped into range).
func sliceAxis(x *graph.Node, axis, start, end, step int) *graph.Node {
	specs := make([]graph.SliceAxisSpec, x.Rank())
	for k := range specs {
		specs[k] = graph.AxisRange()
	}
	specs[axis] = graph.AxisRange(start, end).Stride(step)
	return graph.Slice(x, specs...)
}

// gatherAxis is ONNX Gather: it takes x's slices along axis at indices
// (any integer dtype and shape, already non-negative), giving shape
// x.dims[:axis] + indices.dims + x.dims[axis+1:].
func gatherAxis(x, indices *graph.Node, axis int) *graph.Node {
	// The indices are flattened to one axis for the backend gather and the
	// result reshaped after: GoMLX v0.26.0 checks the index-vector axis
	// against the operand's rank, so indices of higher rank than the data
	// would be refused.
	xr := x.Rank()
	idxDims := indices.Shape().Dimensions
	n := numElems(idxDims)
	idx := graph.Reshape(indices, n, 1)
	var offsetAxes []int
	for k := 0; k < xr; k++ {
		if k != axis {
			offsetAxes = append(offsetAxes, k)
		}
	}
	sizes := append([]int{}, x.Shape().Dimensions...)
	sizes[axis] = 1
	out := graph.BackendGather(x, idx, 1, offsetAxes, []int{axis}, []int{axis}, sizes, false)
	xd := x.Shape().Dimensions
	final := append(append(append([]int{}, xd[:axis]...), idxDims...), xd[axis+1:]...)
	return graph.Reshape(out, final...)
}

// gatherConst is gatherAxis with indices known at build time.
func gatherConst(x *graph.Node, axis int, indices []int) *graph.Node {
	idx := make([]int64, len(indices))
	for k, v := range indices {
		idx[k] = int64(v)
	}
	t, err := hostInt64s(idx).toIR()
	if err != nil {
		panic(err)
	}
	return gatherAxis(x, graph.ConstTensor(x.Graph(), t), axis)
}

// normalizeIndices maps negative indices to index+dim.
func normalizeIndices(idx *graph.Node, dim int) *graph.Node {
	if idx.DType().IsUnsigned() {
		return idx
	}
	zero := scalarLike(idx, 0)
	return graph.Where(graph.LessThan(idx, broadcastNodeTo(zero, idx.Shape().Dimensions)),
		graph.Add(idx, broadcastNodeTo(scalarLike(idx, float64(dim)), idx.Shape().Dimensions)), idx)
}

// reverseAxis reverses x along axis with a gather (the pure-Go backend has
// no Reverse).
func reverseAxis(x *graph.Node, axis int) *graph.Node {
	n := x.Shape().Dimensions[axis]
	idx := make([]int, n)
	for k := range idx {
		idx[k] = n - 1 - k
	}
	return gatherConst(x, axis, idx)
}

// constNode returns a host tensor as a graph constant.
func constNode(g *graph.Graph, h *hostTensor) *graph.Node {
	t, err := h.toIR()
	if err != nil {
		panic(err)
	}
	return graph.ConstTensor(g, t)
}

// padConstant pads x with value (a scalar node of x's dtype) by before[k]
// and after[k] elements on each axis, by concatenation: the pure-Go backend
// has no Pad. Negative amounts crop.
func padConstant(x *graph.Node, before, after []int, value *graph.Node) *graph.Node {
	for axis := range before {
		b, a := before[axis], after[axis]
		dims := x.Shape().Dimensions
		if b < 0 || a < 0 {
			start, end := 0, dims[axis]
			if b < 0 {
				start = -b
				b = 0
			}
			if a < 0 {
				end += a
				a = 0
			}
			x = sliceAxis(x, axis, start, end, 1)
			dims = x.Shape().Dimensions
		}
		if b == 0 && a == 0 {
			continue
		}
		parts := make([]*graph.Node, 0, 3)
		if b > 0 {
			d := append([]int{}, dims...)
			d[axis] = b
			parts = append(parts, graph.BroadcastToDims(value, d...))
		}
		parts = append(parts, x)
		if a > 0 {
			d := append([]int{}, dims...)
			d[axis] = a
			parts = append(parts, graph.BroadcastToDims(value, d...))
		}
		x = graph.Concatenate(parts, axis)
	}
	return x
}

// padIndexed pads x by gathering along each axis with indices computed
// from the mode: "edge" repeats the border, "reflect" mirrors without
// repeating it, "wrap" wraps around.
func padIndexed(x *graph.Node, before, after []int, mode string) *graph.Node {
	for axis := range before {
		b, a := before[axis], after[axis]
		if b == 0 && a == 0 {
			continue
		}
		n := x.Shape().Dimensions[axis]
		idx := make([]int, 0, n+b+a)
		for k := -b; k < n+a; k++ {
			idx = append(idx, padSource(k, n, mode))
		}
		x = gatherConst(x, axis, idx)
	}
	return x
}

// padSource maps a padded position k (may be outside [0, n)) to its source.
func padSource(k, n int, mode string) int {
	switch mode {
	case "edge":
		return min(max(k, 0), n-1)
	case "wrap":
		return ((k % n) + n) % n
	default: // reflect
		if n == 1 {
			return 0
		}
		period := 2 * (n - 1)
		m := ((k % period) + period) % period
		if m >= n {
			m = period - m
		}
		return m
	}
}

// errorf is fmt.Errorf, for converters that panic with an error.
func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
