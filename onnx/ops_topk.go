package onnx

import (
	"fmt"
	"sort"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Selection ops: TopK and NonMaxSuppression.
//
// The backends have no sort, so TopK is lowered in one of two ways (k must
// be known at build time, it fixes the output shape):
//
//   - by rank: every element's position in the order is the number of
//     elements that sort before it, from an [n, n] comparison per row; the
//     k smallest positions are then picked with a one-hot match. Used when
//     the comparison tensor stays small (rows·n² <= topKRankLimit) and k is
//     not tiny next to n.
//   - iteratively: k rounds, each taking the best element not yet taken
//     (a reduction and a masked index minimum). Used otherwise.
//
// Both order elements by value, ties by lower index first (the ONNX rule);
// NaN is ordered above every number (so largest=1 returns NaNs first and
// largest=0 last), a total order where ONNX leaves NaN unspecified. Output
// is always sorted, which sorted=0 allows.
//
// NonMaxSuppression's output length depends on the box values, so it is
// evaluated on the host: boxes, scores and thresholds must be known at
// build time (constants, or value inputs the model is specialised on).

func init() {
	register("TopK", 1, convTopK)
	register("TopK", 10, convTopK).needs(1)
	registerPadRule("TopK", padTopK)
	register("NonMaxSuppression", 10, nil).withHost(hostNonMaxSuppression).needsAll()
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("NonMaxSuppression")
}

// topKRankLimit bounds the comparison tensor of the rank lowering.
const topKRankLimit = 1 << 22

// padTopK is TopK's padding rule (padsafe.go): it sorts along one axis, so
// padding is exact only along another; k must not be computed from the
// padded size. Both outputs have an unknown size along the sorted axis.
func padTopK(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, _ bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	a, ok := normAxis(attrI(attrs, "axis", -1), x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	if r.isD(x.dims[a]) {
		return fail("sorts along it")
	}
	if len(ins) > 1 && r.sizeDep(ins[1]) {
		return fail("takes k from its size")
	}
	o := &pval{rank: x.rank, dims: append([]sdim{}, x.dims...)}
	o.dims[a] = sdim{}
	return []*pval{o, o}
}

func convTopK(c *opCtx) error {
	xd := c.dims(0)
	r := len(xd)
	if r < 1 {
		c.fail("input 0 must have rank >= 1, got a scalar")
	}
	axis := c.normAxis(c.attrInt("axis", -1), r)
	var k int64
	if c.def.since < 10 {
		if !c.hasAttr("k") {
			c.fail("attribute k is required before opset 10")
		}
		k = c.attrInt("k", 0)
	} else {
		ks := c.constInts(1)
		if len(ks) != 1 {
			c.fail("input 1 (K) must hold exactly one value, got %d", len(ks))
		}
		k = ks[0]
	}
	n := xd[axis]
	if k < 0 || k > int64(n) {
		c.fail("k = %d is out of range for axis %d of size %d", k, axis, n)
	}
	largest := c.attrInt("largest", 1) != 0
	outDims := append([]int{}, xd...)
	outDims[axis] = int(k)
	if numElems(outDims) == 0 {
		c.setHost(0, hostZeros(c.dtype(0), outDims))
		c.setHost(1, hostZeros(ir.Int64, outDims))
		return nil
	}
	x := c.in(0)
	if x.DType() == ir.Bool {
		c.fail("TopK takes numeric tensors, got bool")
	}
	perm := make([]int, 0, r)
	for a := range r {
		if a != axis {
			perm = append(perm, a)
		}
	}
	perm = append(perm, axis)
	moved := axis != r-1
	if moved {
		x = graph.TransposeAllDims(x, perm...)
	}
	lead := numElems(x.Shape().Dimensions[:r-1])
	var vals, idx *graph.Node
	if lead*n <= topKRankLimit/n && int(k)*16 >= n {
		vals, idx = topKByRank(x, int(k), largest)
	} else {
		vals, idx = topKIterative(x, int(k), largest)
	}
	if moved {
		inv := make([]int, r)
		for j, p := range perm {
			inv[p] = j
		}
		vals = graph.TransposeAllDims(vals, inv...)
		idx = graph.TransposeAllDims(idx, inv...)
	}
	c.set(0, vals)
	c.setDT(1, idx, ir.Int64)
	return nil
}

// topKAfter says, elementwise, whether a sorts strictly after b in
// ascending order, NaN after every number.
func topKAfter(a, b *graph.Node) *graph.Node {
	gt := graph.GreaterThan(a, b)
	if !a.DType().IsFloat() {
		return gt
	}
	return graph.LogicalOr(gt, graph.LogicalAnd(graph.IsNaN(a), graph.LogicalNot(graph.IsNaN(b))))
}

// topKSame says, elementwise, whether a and b are equal in that order
// (NaN equals NaN).
func topKSame(a, b *graph.Node) *graph.Node {
	eq := graph.Equal(a, b)
	if !a.DType().IsFloat() {
		return eq
	}
	return graph.LogicalOr(eq, graph.LogicalAnd(graph.IsNaN(a), graph.IsNaN(b)))
}

// topKTakeLast gathers x's elements along its last axis at idx (Int64,
// shape x.dims[:-1]+[k]).
func topKTakeLast(x, idx *graph.Node) *graph.Node {
	return gatherTuples(x, gatherElementCoords(idx, idx.Rank()-1))
}

// topKByRank returns the k first elements of each row of x (along its last
// axis) and their indices, by ranking every element with an [n, n]
// comparison.
func topKByRank(x *graph.Node, k int, largest bool) (vals, idx *graph.Node) {
	g := x.Graph()
	d := x.Shape().Dimensions
	r := len(d)
	n := d[r-1]
	lead := d[:r-1]
	sq := append(append([]int{}, lead...), n, n)
	xi := broadcastNodeTo(graph.Reshape(x, append(append([]int{}, lead...), n, 1)...), sq) // element i on axis r-1
	xj := broadcastNodeTo(graph.Reshape(x, append(append([]int{}, lead...), 1, n)...), sq) // element j on axis r
	var before *graph.Node
	if largest {
		before = topKAfter(xj, xi)
	} else {
		before = topKAfter(xi, xj)
	}
	ii := graph.Iota(g, ir.MakeShape(ir.Int32, sq...), r-1)
	jj := graph.Iota(g, ir.MakeShape(ir.Int32, sq...), r)
	beats := graph.LogicalOr(before, graph.LogicalAnd(topKSame(xj, xi), graph.LessThan(jj, ii)))
	one := graph.OnesLike(ii)
	rank := graph.ReduceSum(graph.Where(beats, one, graph.ZerosLike(one)), r) // lead+[n]
	nk := append(append([]int{}, lead...), n, k)
	hit := graph.Equal(broadcastNodeTo(graph.Reshape(rank, append(append([]int{}, lead...), n, 1)...), nk),
		graph.Iota(g, ir.MakeShape(ir.Int32, nk...), r))
	pos := graph.Iota(g, ir.MakeShape(ir.Int64, nk...), r-1)
	idx = graph.ReduceSum(graph.Where(hit, pos, graph.ZerosLike(pos)), r-1) // lead+[k]
	return topKTakeLast(x, idx), idx
}

// topKIterative returns the k first elements of each row of x (along its
// last axis) and their indices, taking one per round.
func topKIterative(x *graph.Node, k int, largest bool) (vals, idx *graph.Node) {
	g := x.Graph()
	d := x.Shape().Dimensions
	r := len(d)
	n := d[r-1]
	lead := d[:r-1]
	col := append(append([]int{}, lead...), 1)
	spread := func(v *graph.Node) *graph.Node { return broadcastNodeTo(graph.Reshape(v, col...), d) }
	pos := graph.Iota(g, ir.MakeShape(ir.Int64, d...), r-1)
	none := broadcastNodeTo(graph.Const(g, int64(n)), d)
	isFloat := x.DType().IsFloat()
	var nan *graph.Node
	if isFloat {
		nan = graph.IsNaN(x)
	}
	extreme := x.DType().HighestValue()
	if largest {
		extreme = x.DType().LowestValue()
	}
	ext := broadcastNodeTo(graph.Const(g, extreme), d)
	taken := broadcastNodeTo(graph.Const(g, false), d)
	picks := make([]*graph.Node, k)
	for t := range k {
		avail := graph.LogicalNot(taken)
		num := avail
		if isFloat {
			num = graph.LogicalAnd(avail, graph.LogicalNot(nan))
		}
		var best *graph.Node
		if largest {
			best = graph.ReduceMax(graph.Where(num, x, ext), r-1)
		} else {
			best = graph.ReduceMin(graph.Where(num, x, ext), r-1)
		}
		cand := graph.LogicalAnd(num, graph.Equal(x, spread(best)))
		if isFloat {
			nanAvail := graph.LogicalAnd(avail, nan)
			var preferNaN *graph.Node
			if largest {
				preferNaN = graph.ReduceLogicalOr(nanAvail, r-1)
			} else {
				preferNaN = graph.LogicalNot(graph.ReduceLogicalOr(num, r-1))
			}
			cand = graph.Where(spread(preferNaN), nanAvail, cand)
		}
		pick := graph.ReduceMin(graph.Where(cand, pos, none), r-1) // lead
		taken = graph.LogicalOr(taken, graph.Equal(pos, spread(pick)))
		picks[t] = graph.Reshape(pick, col...)
	}
	idx = picks[0]
	if k > 1 {
		idx = graph.Concatenate(picks, r-1)
	}
	return topKTakeLast(x, idx), idx
}

// nmsBox is one box as its extent on each axis.
type nmsBox struct{ x0, x1, y0, y1 float32 }

// nmsCorners reads box j of a batch from the flat [N, 4] data.
func nmsCorners(v []float64, j int, centered bool) nmsBox {
	a, b, c, d := float32(v[4*j]), float32(v[4*j+1]), float32(v[4*j+2]), float32(v[4*j+3])
	if centered { // [x_center, y_center, width, height]
		hw, hh := c/2, d/2
		return nmsBox{x0: a - hw, x1: a + hw, y0: b - hh, y1: b + hh}
	}
	// [y1, x1, y2, x2], any pair of opposite corners.
	return nmsBox{x0: min(b, d), x1: max(b, d), y0: min(a, c), y1: max(a, c)}
}

// nmsOverlaps says whether the intersection over union of p and q is
// strictly above threshold; empty or degenerate boxes never overlap.
func nmsOverlaps(p, q nmsBox, threshold float32) bool {
	w := min(p.x1, q.x1) - max(p.x0, q.x0)
	h := min(p.y1, q.y1) - max(p.y0, q.y0)
	if w <= 0 || h <= 0 {
		return false
	}
	inter := w * h
	ap := (p.x1 - p.x0) * (p.y1 - p.y0)
	aq := (q.x1 - q.x0) * (q.y1 - q.y0)
	union := ap + aq - inter
	if inter <= 0 || ap <= 0 || aq <= 0 || union <= 0 {
		return false
	}
	return inter/union > threshold
}

// hostNonMaxSuppression selects, per batch and class, boxes in decreasing
// score order (ties: lower box index first), dropping those whose score is
// not above score_threshold and those overlapping an already selected box
// by an IoU above iou_threshold, up to max_output_boxes_per_class. Output
// rows are [batch, class, box].
func hostNonMaxSuppression(c *opCtx) error {
	boxes, scores := c.hostIn(0), c.hostIn(1)
	if boxes.rank() != 3 || boxes.dims[2] != 4 {
		return fmt.Errorf("boxes must have shape [batches, boxes, 4], got %v", boxes.dims)
	}
	nb, n := boxes.dims[0], boxes.dims[1]
	if scores.rank() != 3 || scores.dims[0] != nb || scores.dims[2] != n {
		return fmt.Errorf("scores must have shape [%d, classes, %d], got %v", nb, n, scores.dims)
	}
	nc := scores.dims[1]
	center := c.attrInt("center_point_box", 0)
	if center != 0 && center != 1 {
		return fmt.Errorf("center_point_box must be 0 or 1, got %d", center)
	}
	scalar := func(k int, what string) (*hostTensor, error) {
		if !c.has(k) || c.hostIn(k).size() == 0 {
			return nil, nil
		}
		h := c.hostIn(k)
		if h.size() != 1 {
			return nil, fmt.Errorf("input %d (%s) must hold one value, got shape %v", k, what, h.dims)
		}
		return h, nil
	}
	var maxOut int64
	var iouTh float32
	var scoreTh float32
	hasScoreTh := false
	if h, err := scalar(2, "max_output_boxes_per_class"); err != nil {
		return err
	} else if h != nil {
		if maxOut, err = h.scalarInt(); err != nil {
			return err
		}
	}
	if h, err := scalar(3, "iou_threshold"); err != nil {
		return err
	} else if h != nil {
		v, err := h.scalarFloat()
		if err != nil {
			return err
		}
		iouTh = float32(v)
	}
	if h, err := scalar(4, "score_threshold"); err != nil {
		return err
	} else if h != nil {
		v, err := h.scalarFloat()
		if err != nil {
			return err
		}
		scoreTh, hasScoreTh = float32(v), true
	}
	bv, err := boxes.floats()
	if err != nil {
		return err
	}
	sv, err := scores.floats()
	if err != nil {
		return err
	}
	limit := int(min(max(maxOut, 0), int64(n)))
	var out []int64
	for b := range nb {
		bb := bv[b*n*4 : (b+1)*n*4]
		corners := make([]nmsBox, n)
		for j := range n {
			corners[j] = nmsCorners(bb, j, center == 1)
		}
		for cl := range nc {
			if limit == 0 {
				break
			}
			s := sv[(b*nc+cl)*n : (b*nc+cl+1)*n]
			order := make([]int, 0, n)
			for j := range n {
				if !hasScoreTh || float32(s[j]) > scoreTh {
					order = append(order, j)
				}
			}
			sort.SliceStable(order, func(p, q int) bool { return float32(s[order[p]]) > float32(s[order[q]]) })
			var kept []int
			for _, j := range order {
				if len(kept) == limit {
					break
				}
				ok := true
				for _, q := range kept {
					if nmsOverlaps(corners[j], corners[q], iouTh) {
						ok = false
						break
					}
				}
				if ok {
					kept = append(kept, j)
					out = append(out, int64(b), int64(cl), int64(j))
				}
			}
		}
	}
	if out == nil {
		out = []int64{}
	}
	c.setHost(0, hostInt64s(out, len(out)/3, 3))
	return nil
}
