package onnx

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// GridSample (opsets 16, 20, 22): samples X (N, C, D1..Dr) at the
// normalised positions of grid (N, O1..Or, r), whose last axis lists the
// coordinates innermost dimension first (x, y, z...). Opset 16 allowed
// only 4-D inputs and spelled the modes bilinear/bicubic; 20 generalised
// to r spatial dimensions with linear/cubic. Both spellings are accepted
// at every opset.
//
// Unlike Resize, the sampling positions are run-time data, so the
// interpolation is built in the graph: per spatial dimension the
// coordinate is denormalised, padded (border clamps, reflection folds it
// back into range) and split into taps with weights; the taps of all
// dimensions are combined into flat indices, gathered from X in one Gather
// and summed with the products of the per-dimension weights. The
// semantics follow the ONNX reference implementation (itself modelled on
// PyTorch's grid_sample): nearest rounds half to even before padding; a
// coordinate is clamped (border) or reflected (reflection) only when it
// lies outside [-0.5, D-0.5] (or [0, D-1] with align_corners), and every
// tap is then padded again; zeros padding reads 0 outside X; cubic uses
// Keys' kernel with a = -0.75. Integer inputs are interpolated in float64
// and converted back truncating toward zero, like Cast.

func init() {
	for _, v := range []int{16, 20, 22} {
		register("GridSample", v, convGridSample)
	}
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("GridSample")
}

// gridSampleAxis is one spatial dimension's taps: for every output point
// (N, P) the input indices idx and weights w along that dimension, and
// whether each tap lies inside X (zeros padding only, else nil).
type gridSampleAxis struct {
	idx, w, valid []*graph.Node // one (N, P) node per tap
}

// gridReflect folds coordinates x into [lo, hi] by repeated reflection at
// the borders; hi > lo.
func gridReflect(x *graph.Node, lo, hi float64) *graph.Node {
	rng := hi - lo
	s := func(v float64) *graph.Node { return scalarLikeB(x, v) }
	below := graph.LessThan(x, s(lo))
	// Distance past the nearer border, and how many whole spans it covers.
	dx := graph.Where(below, graph.Sub(s(lo), x), graph.Sub(x, s(hi)))
	n := graph.Floor(graph.Div(dx, s(rng)))
	r := graph.Sub(dx, graph.Mul(n, s(rng)))
	odd := graph.NotEqual(graph.Sub(n, graph.Mul(graph.Floor(graph.Div(n, s(2))), s(2))), s(0))
	fromLo := graph.Add(s(lo), r)
	fromHi := graph.Sub(s(hi), r)
	// Below: even spans end at lo + r, odd ones at hi - r; above, the reverse.
	return graph.Where(below, graph.Where(odd, fromHi, fromLo), graph.Where(odd, fromLo, fromHi))
}

// gridCubicWeights are Keys' cubic convolution weights (a = -0.75) of the
// four taps floor(x)-1 .. floor(x)+2 for t = x - floor(x).
func gridCubicWeights(t *graph.Node) []*graph.Node {
	const a = -0.75
	s := func(v float64) *graph.Node { return scalarLikeB(t, v) }
	near := func(d *graph.Node) *graph.Node { // |d| <= 1
		return graph.Add(graph.Mul(graph.Mul(graph.Sub(graph.Mul(s(a+2), d), s(a+3)), d), d), s(1))
	}
	far := func(d *graph.Node) *graph.Node { // 1 < |d| < 2
		return graph.Sub(graph.Mul(graph.Add(graph.Mul(graph.Sub(graph.Mul(s(a), d), s(5*a)), d), s(8*a)), d), s(4*a))
	}
	one := s(1)
	return []*graph.Node{
		far(graph.Add(t, one)),
		near(t),
		near(graph.Sub(one, t)),
		far(graph.Sub(s(2), t)),
	}
}

// gridSampleTaps computes one spatial dimension's taps from the
// normalised coordinates g (N, P), in g's float dtype.
func gridSampleTaps(g *graph.Node, length int, mode, padding string, alignCorners bool, idxDT ir.DType) *gridSampleAxis {
	s := func(v float64) *graph.Node { return scalarLikeB(g, v) }
	L := float64(length)
	var x *graph.Node
	lo, hi := -0.5, L-0.5
	if alignCorners {
		x = graph.Mul(graph.Div(graph.Add(g, s(1)), s(2)), s(L-1))
		lo, hi = 0, L-1
	} else {
		x = graph.Div(graph.Sub(graph.Mul(graph.Add(g, s(1)), s(L)), s(1)), s(2))
	}
	if mode == "nearest" {
		x = roundHalfEven(x)
	}
	outside := graph.LogicalOr(graph.LessThan(x, s(lo)), graph.GreaterThan(x, s(hi)))
	// pad maps a coordinate or tap position per padding_mode.
	pad := func(v *graph.Node) *graph.Node {
		switch padding {
		case "border":
			return graph.Min(graph.Max(v, s(0)), s(L-1))
		case "reflection":
			if hi == lo { // a single pixel with align_corners: everything folds onto it
				return graph.ZerosLike(v)
			}
			return gridReflect(v, lo, hi)
		}
		return v
	}
	if padding != "zeros" {
		x = graph.Where(outside, pad(x), x)
	}

	// toIndex converts a tap position (integer-valued float) to an index:
	// padded, then clamped into range for the gather (zeros padding keeps
	// the validity separately). NaN positions read index 0; their weights
	// are NaN, so the output is NaN.
	toIndex := func(p *graph.Node) (idx, valid *graph.Node) {
		if padding == "zeros" {
			valid = graph.LogicalAnd(graph.GreaterOrEqual(p, s(0)), graph.LessOrEqual(p, s(L-1)))
		} else {
			outsideTap := graph.LogicalOr(graph.LessThan(p, s(lo)), graph.GreaterThan(p, s(hi)))
			p = graph.Where(outsideTap, pad(p), p)
			if padding == "reflection" {
				p = graph.Where(graph.LessThan(p, s(0)), graph.Ceil(p), graph.Floor(p)) // truncate
			}
		}
		p = graph.Where(graph.IsNaN(p), s(0), p)
		p = graph.Min(graph.Max(p, s(0)), s(L-1))
		return graph.ConvertDType(p, idxDT), valid
	}

	ax := &gridSampleAxis{}
	add := func(p, w *graph.Node) {
		idx, valid := toIndex(p)
		ax.idx = append(ax.idx, idx)
		ax.w = append(ax.w, w)
		ax.valid = append(ax.valid, valid)
	}
	switch mode {
	case "nearest":
		add(x, nil)
	case "linear":
		x0 := graph.Floor(x)
		t := graph.Sub(x, x0)
		add(x0, graph.Sub(s(1), t))
		add(graph.Add(x0, s(1)), t)
	default: // cubic
		x0 := graph.Floor(x)
		t := graph.Sub(x, x0)
		for k, w := range gridCubicWeights(t) {
			add(graph.Add(x0, s(float64(k-1))), w)
		}
	}
	return ax
}

func convGridSample(c *opCtx) error {
	mode := c.attrString("mode", "linear")
	switch mode {
	case "bilinear":
		mode = "linear"
	case "bicubic":
		mode = "cubic"
	case "linear", "nearest", "cubic":
	default:
		return fmt.Errorf("unknown mode %q (expected linear, nearest or cubic)", mode)
	}
	padding := c.attrString("padding_mode", "zeros")
	switch padding {
	case "zeros", "border", "reflection":
	default:
		return fmt.Errorf("unknown padding_mode %q (expected zeros, border or reflection)", padding)
	}
	alignCorners := c.attrInt("align_corners", 0) != 0

	x, grid := c.in(0), c.in(1)
	xd, gd := x.Shape().Dimensions, grid.Shape().Dimensions
	if len(xd) < 3 {
		return fmt.Errorf("X must have rank 3 or more (N, C, spatial...), got shape %v", xd)
	}
	r := len(xd) - 2
	if len(gd) != r+2 || gd[0] != xd[0] || gd[r+1] != r {
		return fmt.Errorf("grid shape %v does not match X shape %v: expected (%d, out dims..., %d)", gd, xd, xd[0], r)
	}
	if !isFloatDT(c.dtype(1)) {
		return fmt.Errorf("grid must be a float tensor, got %s", c.dtype(1))
	}
	n, ch := xd[0], xd[1]
	spatial := xd[2:]
	outSpatial := gd[1 : r+1]
	outDims := append([]int{n, ch}, outSpatial...)
	dt := x.DType()
	if numElems(outDims) == 0 {
		c.set(0, filled(c.g, dt, outDims, 0))
		return nil
	}
	if numElems(spatial) == 0 {
		return fmt.Errorf("cannot sample an empty input of shape %v", xd)
	}

	computeDT := dt
	toInt := false
	if mode != "nearest" {
		switch dt {
		case ir.Float32, ir.Float64:
		case ir.Float16, ir.BFloat16:
			computeDT = ir.Float32
		default:
			if _, _, ok := resizeIntRange(dt); !ok {
				return fmt.Errorf("mode %q does not apply to %s inputs", mode, dt)
			}
			computeDT, toInt = ir.Float64, true
		}
	}
	gdt := grid.DType()
	if gdt != ir.Float32 && gdt != ir.Float64 {
		gdt = ir.Float32
		grid = graph.ConvertDType(grid, gdt)
	}
	idxDT := ir.Int32
	if n*numElems(spatial) >= 1<<31-1 {
		idxDT = ir.Int64
	}

	p := numElems(outSpatial)
	grid = graph.Reshape(grid, n, p, r)
	axes := make([]*gridSampleAxis, r)
	for i := range r {
		// Spatial dimension i is the grid's component r-1-i.
		gi := graph.Reshape(sliceAxis(grid, 2, r-1-i, r-i, 1), n, p)
		axes[i] = gridSampleTaps(gi, spatial[i], mode, padding, alignCorners, idxDT)
	}

	// Combine the taps of every dimension: flat spatial index, weight and
	// validity for each of the K = taps^r corners, shaped (N, P, K).
	strides := make([]int, r)
	stride := 1
	for i := r - 1; i >= 0; i-- {
		strides[i] = stride
		stride *= spatial[i]
	}
	var flatIdx, weight, valid []*graph.Node
	flatIdx = []*graph.Node{graph.Iota(c.g, ir.MakeShape(idxDT, n, p), 0)}
	flatIdx[0] = graph.Mul(flatIdx[0], scalarLikeB(flatIdx[0], float64(stride)))
	weight = []*graph.Node{nil}
	valid = []*graph.Node{nil}
	for i, ax := range axes {
		var ni, nw, nv []*graph.Node
		for k := range flatIdx {
			for t := range ax.idx {
				ni = append(ni, graph.Add(flatIdx[k], graph.Mul(ax.idx[t], scalarLikeB(ax.idx[t], float64(strides[i])))))
				w := ax.w[t]
				if weight[k] != nil && w != nil {
					w = graph.Mul(weight[k], w)
				} else if w == nil {
					w = weight[k]
				}
				nw = append(nw, w)
				v := ax.valid[t]
				if valid[k] != nil && v != nil {
					v = graph.LogicalAnd(valid[k], v)
				} else if v == nil {
					v = valid[k]
				}
				nv = append(nv, v)
			}
		}
		flatIdx, weight, valid = ni, nw, nv
	}
	k := len(flatIdx)
	idx := graph.Stack(flatIdx, 2) // (N, P, K)

	// X as rows of channels: (N·S, C); gather gives (N, P, K, C).
	xs := graph.Reshape(x, n, ch, numElems(spatial))
	xs = graph.Reshape(graph.TransposeAllDims(xs, 0, 2, 1), n*numElems(spatial), ch)
	if computeDT != dt {
		xs = graph.ConvertDType(xs, computeDT)
	}
	vals := gatherAxis(xs, idx, 0)
	full := []int{n, p, k, ch}
	if valid[0] != nil {
		m := graph.Reshape(graph.Stack(valid, 2), n, p, k, 1)
		vals = graph.Where(broadcastNodeTo(m, full), vals, filled(c.g, computeDT, full, 0))
	}
	var y *graph.Node
	if weight[0] == nil { // nearest: a single corner
		y = graph.Reshape(vals, n, p, ch)
	} else {
		w := graph.Reshape(graph.Stack(weight, 2), n, p, k, 1)
		if w.DType() != computeDT {
			w = graph.ConvertDType(w, computeDT)
		}
		y = graph.ReduceSum(graph.Mul(vals, broadcastNodeTo(w, full)), 2)
	}
	y = graph.Reshape(graph.TransposeAllDims(y, 0, 2, 1), outDims...)
	if toInt {
		lo, hi, _ := resizeIntRange(dt)
		y = graph.Max(graph.Min(y, scalarLikeB(y, hi)), scalarLikeB(y, lo))
		y = graph.Where(graph.LessThan(y, scalarLikeB(y, 0)), graph.Ceil(y), graph.Floor(y))
	}
	if y.DType() != dt {
		y = graph.ConvertDType(y, dt)
	}
	c.set(0, y)
	return nil
}
