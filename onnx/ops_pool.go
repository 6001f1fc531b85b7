package onnx

import (
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Pooling ops (MaxPool, AveragePool, LpPool, their Global forms, registered
// in ops_nn.go) and MaxUnpool.

// poolGeometry resolves a pooling op's window, strides, dilations and
// padding (ceil_mode included) for input x.
type poolGeometry struct {
	window, strides, dilations []int
	pads                       [][2]int // full-rank, ceil-mode extra included
	explicit                   [][2]int // full-rank, without the ceil-mode extra
}

func poolGeom(c *opCtx, x *graph.Node) poolGeometry {
	r := x.Rank()
	n := r - 2
	if n < 1 {
		c.fail("input must have rank >= 3, got %s", x.Shape())
	}
	in := x.Shape().Dimensions[2:]
	k := toInts(c.attrInts("kernel_shape", nil))
	if len(k) != n {
		c.fail("kernel_shape %v does not match %d spatial axes", k, n)
	}
	s := intsAttrOr(c, "strides", n, 1)
	d := intsAttrOr(c, "dilations", n, 1)
	before, after := spatialPads(c, in, k, s, d)
	ceil := c.attrInt("ceil_mode", 0) != 0
	g := poolGeometry{
		window: append([]int{1, 1}, k...), strides: append([]int{1, 1}, s...),
		dilations: append([]int{1, 1}, d...),
		pads:      make([][2]int, r), explicit: make([][2]int, r),
	}
	for a := range n {
		g.explicit[2+a] = [2]int{before[a], after[a]}
		extra := 0
		if ceil {
			span := (k[a]-1)*d[a] + 1
			total := in[a] + before[a] + after[a]
			out := (total-span+s[a]-1)/s[a] + 1
			// A window must start inside the input or the left padding.
			if (out-1)*s[a] >= in[a]+before[a] {
				out--
			}
			extra = max(0, (out-1)*s[a]+span-total)
		}
		g.pads[2+a] = [2]int{before[a], after[a] + extra}
	}
	return g
}

// dilateAxis puts s-1 zeros between consecutive elements of x along axis
// (XLA's input dilation), with ops every backend has and that reverse-mode
// autodiff can differentiate: x reshaped to [..., n, 1, ...] is
// concatenated with zeros [..., n, s-1, ...], flattened and the trailing
// zeros cut.
func dilateAxis(x *graph.Node, axis, s int) *graph.Node {
	dims := x.Shape().Dimensions
	n := dims[axis]
	if s <= 1 || n <= 1 {
		return x
	}
	split := append(append(append([]int{}, dims[:axis+1]...), 1), dims[axis+1:]...)
	zeros := append([]int{}, split...)
	zeros[axis+1] = s - 1
	y := graph.Concatenate([]*graph.Node{graph.Reshape(x, split...), graph.Zeros(x.Graph(), ir.MakeShape(x.DType(), zeros...))}, axis+1)
	flat := append([]int{}, dims...)
	flat[axis] = n * s
	return sliceAxis(graph.Reshape(y, flat...), axis, 0, n*s-(s-1), 1)
}

// windowDilations is the dilations argument of the pooling's ReduceWindow:
// nil when every dilation is 1, because GoMLX v0.26.0 has no gradient for
// a ReduceWindow given any window dilations, ones included
// (ops_pool.go, reduceWindowVJP).
func (g poolGeometry) windowDilations() []int {
	for _, d := range g.dilations {
		if d != 1 {
			return g.dilations
		}
	}
	return nil
}

func convPool(kind string) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		g := poolGeom(c, x)
		if kind == "max" && c.wantsOutput(1) {
			v, idx := maxPoolWithIndices(c, x, g)
			c.set(0, v)
			c.setDT(1, idx, ir.Int64)
			return nil
		}
		switch kind {
		case "max":
			c.set(0, graph.BackendReduceWindow(x, backends.ReduceOpMax, g.window, g.strides, nil, g.windowDilations(), g.pads))
		case "lp":
			p := c.attrFloat("p", 2)
			ax := graph.Abs(x)
			xp := graph.Pow(ax, scalarLikeB(ax, p))
			sum := graph.BackendReduceWindow(xp, backends.ReduceOpSum, g.window, g.strides, nil, g.windowDilations(), g.pads)
			c.set(0, graph.Pow(sum, scalarLikeB(sum, 1/p)))
		default: // avg
			sum := graph.BackendReduceWindow(x, backends.ReduceOpSum, g.window, g.strides, nil, g.windowDilations(), g.pads)
			// Count the elements each window averages: the real ones, plus
			// the explicit padding when count_include_pad is set (never the
			// ceil-mode extra).
			dims := x.Shape().Dimensions
			maskDims := []int{1, 1}
			maskPads := [][2]int{{0, 0}, {0, 0}}
			includePad := c.attrInt("count_include_pad", 0) != 0
			for a := 2; a < len(dims); a++ {
				if includePad {
					maskDims = append(maskDims, dims[a]+g.explicit[a][0]+g.explicit[a][1])
					maskPads = append(maskPads, [2]int{0, g.pads[a][1] - g.explicit[a][1]})
				} else {
					maskDims = append(maskDims, dims[a])
					maskPads = append(maskPads, g.pads[a])
				}
			}
			ones := filled(c.g, x.DType(), maskDims, 1)
			counts := graph.BackendReduceWindow(ones, backends.ReduceOpSum, g.window, g.strides, nil, g.windowDilations(), maskPads)
			c.set(0, graph.Div(sum, broadcastNodeTo(counts, sum.Shape().Dimensions)))
		}
		return nil
	}
}

func convGlobalPool(kind string) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		axes := make([]int, 0, x.Rank()-2)
		for a := 2; a < x.Rank(); a++ {
			axes = append(axes, a)
		}
		kd := keptDims(x.Shape().Dimensions, axes)
		if kind == "avg" { // ReduceMean over the spatial axes, undefined when they are empty
			if err := emptySetUndefined(c, "GlobalAveragePool", c.dtype(0), x.Shape().Dimensions, axes); err != nil {
				return err
			}
		}
		var y *graph.Node
		switch kind {
		case "max":
			y = graph.ReduceMax(x, axes...)
		case "lp":
			p := c.attrFloat("p", 2)
			ax := graph.Abs(x)
			s := graph.ReduceSum(graph.Pow(ax, scalarLikeB(ax, p)), axes...)
			y = graph.Pow(s, scalarLikeB(s, 1/p))
		default:
			y = reduceMean(x, axes)
		}
		c.set(0, graph.Reshape(y, kd...))
		return nil
	}
}

func init() {
	register("MaxUnpool", 9, convMaxUnpool).needs(2)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("MaxUnpool")
}

// convMaxUnpool scatters X's values to the flat positions I gives (as
// MaxPool's Indices output defines them) in a zero tensor.
func convMaxUnpool(c *opCtx) error {
	x, idx := c.in(0), c.in(1)
	dims := x.Shape().Dimensions
	n := len(dims) - 2
	if n < 1 {
		c.fail("input must have rank >= 3, got %v", dims)
	}
	// The indices are flat positions in the pooled op's input, whose shape
	// is the default output shape below.
	k := toInts(c.attrInts("kernel_shape", nil))
	if len(k) != n {
		c.fail("kernel_shape %v does not match %d spatial axes", k, n)
	}
	s := intsAttrOr(c, "strides", n, 1)
	pads := c.attrInts("pads", nil)
	def := append([]int{}, dims[:2]...)
	for a := range n {
		pb, pe := 0, 0
		if pads != nil {
			pb, pe = int(pads[a]), int(pads[a+n])
		}
		def = append(def, (dims[2+a]-1)*s[a]-pb-pe+k[a])
	}
	out := def
	if idx.DType() != ir.Int64 {
		idx = graph.ConvertDType(idx, ir.Int64)
	}
	if c.has(2) {
		out = toInts(c.constInts(2))
		if len(out) != len(dims) {
			c.fail("output_shape %v does not match rank %d", out, len(dims))
		}
		if !equalInts(out, def) {
			// Re-linearise each index from the default shape into out.
			ds, os := strides(def), strides(out)
			id := idx.Shape().Dimensions
			var acc *graph.Node
			for a := range def {
				coord := graph.Rem(graph.Div(idx, filled(c.g, ir.Int64, id, float64(ds[a]))), filled(c.g, ir.Int64, id, float64(def[a])))
				term := graph.Mul(coord, filled(c.g, ir.Int64, id, float64(os[a])))
				if acc == nil {
					acc = term
				} else {
					acc = graph.Add(acc, term)
				}
			}
			idx = acc
		}
	}
	total := numElems(out)
	flatIdx := graph.Reshape(idx, x.Shape().Size(), 1)
	flatX := graph.Reshape(x, x.Shape().Size())
	zeros := filled(c.g, x.DType(), []int{total}, 0)
	c.set(0, graph.Reshape(graph.ScatterSum(zeros, flatIdx, flatX, false, false), out...))
	return nil
}

// maxPoolWithIndices computes MaxPool and its Indices output by gathering
// every window into a trailing axis of size K (the window's element count):
// the value is the maximum over that axis and the index the input position
// of its first maximum, flattened over the whole input (row-major, or
// column-major over the spatial axes when storage_order is 1).
func maxPoolWithIndices(c *opCtx, x *graph.Node, g poolGeometry) (*graph.Node, *graph.Node) {
	dims := x.Shape().Dimensions
	n := len(dims) - 2
	in := dims[2:]
	before, after := make([]int, len(dims)), make([]int, len(dims))
	padded := make([]int, n)
	outDims := make([]int, n)
	for a := range n {
		before[2+a], after[2+a] = g.pads[2+a][0], g.pads[2+a][1]
		padded[a] = in[a] + before[2+a] + after[2+a]
		span := (g.window[2+a]-1)*g.dilations[2+a] + 1
		outDims[a] = (padded[a]-span)/g.strides[2+a] + 1
	}
	lowest := scalarLike(x, math.Inf(-1))
	if !x.DType().IsFloat() {
		lowest = graph.ReduceAllMin(x)
	}
	xp := padConstant(x, before, after, lowest)
	xp = graph.Reshape(xp, dims[0], dims[1], numElems(padded))
	win := g.window[2:]
	K := numElems(win)
	P := numElems(outDims)
	gatherIdx := make([]int64, 0, P*K)
	srcIdx := make([]int64, 0, P*K)
	colMajor := c.attrInt("storage_order", 0) != 0
	pst, ist := strides(padded), strides(in)
	forEachIndex(outDims, func(_ int, o []int) {
		forEachIndex(win, func(_ int, w []int) {
			gi, si, colStride := 0, 0, 1
			inside := true
			for a := range n {
				p := o[a]*g.strides[2+a] + w[a]*g.dilations[2+a]
				gi += p * pst[a]
				q := p - before[2+a]
				if q < 0 || q >= in[a] {
					inside = false
				}
				if colMajor {
					si += q * colStride
					colStride *= in[a]
				} else {
					si += q * ist[a]
				}
			}
			if !inside {
				si = 0
			}
			gatherIdx = append(gatherIdx, int64(gi))
			srcIdx = append(srcIdx, int64(si))
		})
	})
	patches := gatherAxis(xp, constNode(c.g, hostInt64s(gatherIdx, P, K)), 2) // [N, C, P, K]
	values := graph.ReduceMax(patches, 3)
	am := graph.ArgMax(patches, 3, ir.Int64)
	full := []int{dims[0], dims[1], P, K}
	amB := broadcastNodeTo(graph.Reshape(am, dims[0], dims[1], P, 1), full)
	kIota := graph.Iota(c.g, ir.MakeShape(ir.Int64, full...), 3)
	src := broadcastNodeTo(graph.Reshape(constNode(c.g, hostInt64s(srcIdx, P, K)), 1, 1, P, K), full)
	spatial := graph.ReduceSum(graph.Where(graph.Equal(amB, kIota), src, filled(c.g, ir.Int64, full, 0)), 3)
	nc := graph.Iota(c.g, ir.MakeShape(ir.Int64, dims[0], dims[1], P), 0)
	cc := graph.Iota(c.g, ir.MakeShape(ir.Int64, dims[0], dims[1], P), 1)
	plane := filled(c.g, ir.Int64, []int{dims[0], dims[1], P}, float64(numElems(in)))
	chans := filled(c.g, ir.Int64, []int{dims[0], dims[1], P}, float64(dims[1]))
	base := graph.Mul(graph.Add(graph.Mul(nc, chans), cc), plane)
	idx := graph.Add(base, spatial)
	shape := append([]int{dims[0], dims[1]}, outDims...)
	return graph.Reshape(values, shape...), graph.Reshape(idx, shape...)
}
