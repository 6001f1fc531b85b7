package onnx

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Indexed gathers and scatters: GatherElements, GatherND, ScatterElements,
// ScatterND and the deprecated Scatter. All lower to the backend's Gather
// and ScatterSum/ScatterMax/ScatterMin with full index tuples, which the
// pure-Go backend implements.
//
// Index checking: indices known at build time are range-checked and an
// out-of-range index is an error, as ONNX requires. Indices given or
// computed at run time are checked by the plan's IndexChecks (indexcheck.go)
// before or after the run; inside the graph an out-of-range gather index
// is still clamped into range (the backend's Gather semantics) and an
// out-of-range scatter update ignored (its row is masked out, so the
// backend never writes outside the output), but the run then fails.
//
// Scatter reductions: "add", "max" and "min" map to the backend's scatter
// combiners; "none" applies, for duplicate indices, the update that comes
// last in row-major order (what a sequential loop gives); "mul" multiplies
// every update of a position into it, in rounds of distinct positions when
// the indices are known at build time and by a pairwise [U, U] grouping of
// the U updates otherwise (refused above gatherMulPairLimit elements).

func init() {
	register("GatherElements", 11, convGatherElements)
	register("GatherND", 11, convGatherND)
	register("Scatter", 9, convScatterElements)
	register("ScatterElements", 11, convScatterElements)
	register("ScatterND", 11, convScatterND)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND")
}

// gatherMulPairLimit bounds the [U, U, slice] tensor the run-time "mul"
// scatter reduction builds (16M elements).
const gatherMulPairLimit = 1 << 24

// gatherAxisIndices returns input k, integer indices along an axis of size
// dim, as an Int64 node with negative entries mapped to entry+dim. Indices
// known at build time are checked against [-dim, dim) and also returned on
// the host (normalised); otherwise host is nil.
func gatherAxisIndices(c *opCtx, k, dim int) (n *graph.Node, host []int64) {
	if !c.dtype(k).IsInt() {
		c.fail("input %d (indices) must be an integer tensor, got %s", k, c.dtype(k))
	}
	if c.isHost(k) {
		h := c.hostIn(k)
		vals, err := h.ints()
		if err != nil {
			panic(err)
		}
		norm := make([]int64, len(vals))
		for j, v := range vals {
			if v < 0 {
				v += int64(dim)
			}
			if v < 0 || v >= int64(dim) {
				c.fail("input %d (indices): index %d out of range for an axis of size %d", k, vals[j], dim)
			}
			norm[j] = v
		}
		return constNode(c.g, hostInt64s(norm, h.dims...)), norm
	}
	c.noteIndices(k, []int{dim}, false)
	idx := graph.ConvertDType(c.in(k), ir.Int64)
	return normalizeIndices(idx, dim), nil
}

// gatherTupleIndices is gatherAxisIndices for index tuples: input k has
// shape [..., m] and component j indexes an axis of size dims[j].
func gatherTupleIndices(c *opCtx, k int, dims []int) (n *graph.Node, host []int64) {
	if !c.dtype(k).IsInt() {
		c.fail("input %d (indices) must be an integer tensor, got %s", k, c.dtype(k))
	}
	m := len(dims)
	if c.isHost(k) {
		h := c.hostIn(k)
		vals, err := h.ints()
		if err != nil {
			panic(err)
		}
		norm := make([]int64, len(vals))
		for j, v := range vals {
			d := int64(dims[j%m])
			if v < 0 {
				v += d
			}
			if v < 0 || v >= d {
				c.fail("input %d (indices): index %d in component %d out of range for an axis of size %d", k, vals[j], j%m, d)
			}
			norm[j] = v
		}
		return constNode(c.g, hostInt64s(norm, h.dims...)), norm
	}
	c.noteIndices(k, dims, true)
	idx := graph.ConvertDType(c.in(k), ir.Int64)
	shape := idx.Shape().Dimensions
	d := make([]int64, m)
	for j, v := range dims {
		d[j] = int64(v)
	}
	dn := broadcastNodeTo(constNode(c.g, hostInt64s(d)), shape)
	zero := broadcastNodeTo(graph.Const(c.g, int64(0)), shape)
	return graph.Where(graph.LessThan(idx, zero), graph.Add(idx, dn), idx), nil
}

// gatherElementCoords turns element indices along axis (shape I, rank r,
// Int64) into full coordinates of shape I+[r]: the index itself on axis and
// the element's own position on every other axis.
func gatherElementCoords(idx *graph.Node, axis int) *graph.Node {
	dims := idx.Shape().Dimensions
	r := len(dims)
	col := append(append([]int{}, dims...), 1)
	parts := make([]*graph.Node, r)
	for a := range r {
		p := idx
		if a != axis {
			p = graph.Iota(idx.Graph(), ir.MakeShape(ir.Int64, dims...), a)
		}
		parts[a] = graph.Reshape(p, col...)
	}
	if r == 1 {
		return parts[0]
	}
	return graph.Concatenate(parts, r)
}

// gatherElementCoordsHost is gatherElementCoords on the host.
func gatherElementCoordsHost(idx []int64, dims []int, axis int) []int64 {
	r := len(dims)
	out := make([]int64, len(idx)*r)
	forEachIndex(dims, func(flat int, ix []int) {
		for a := range r {
			v := int64(ix[a])
			if a == axis {
				v = idx[flat]
			}
			out[flat*r+a] = v
		}
	})
	return out
}

// checkElementIndexShape checks that indices (rank r like data) fit data on
// every axis but axis, as GatherElements and ScatterElements require.
func checkElementIndexShape(c *opCtx, data, idx []int, axis int) {
	if len(idx) != len(data) {
		c.fail("indices have rank %d, data has rank %d: they must be equal", len(idx), len(data))
	}
	for a := range data {
		if a != axis && idx[a] > data[a] {
			c.fail("indices dimension %d is %d, larger than data's %d", a, idx[a], data[a])
		}
	}
}

func convGatherElements(c *opCtx) error {
	xd := c.dims(0)
	r := len(xd)
	if r < 1 {
		c.fail("data must have rank >= 1, got a scalar")
	}
	axis := c.normAxis(c.attrInt("axis", 0), r)
	id := c.dims(1)
	checkElementIndexShape(c, xd, id, axis)
	if numElems(id) == 0 {
		c.setHost(0, hostZeros(c.dtype(0), id))
		return nil
	}
	if xd[axis] == 0 {
		c.fail("cannot gather from axis %d of size 0", axis)
	}
	idx, _ := gatherAxisIndices(c, 1, xd[axis])
	c.set(0, gatherTuples(c.in(0), gatherElementCoords(idx, axis)))
	return nil
}

func convGatherND(c *opCtx) error {
	xd, id := c.dims(0), c.dims(1)
	r, q := len(xd), len(id)
	b := int(c.attrInt("batch_dims", 0))
	if r < 1 || q < 1 {
		c.fail("data and indices must have rank >= 1, got ranks %d and %d", r, q)
	}
	if b < 0 || b >= min(q, r) {
		c.fail("batch_dims %d must be in [0, %d)", b, min(q, r))
	}
	m := id[q-1]
	if m < 1 || m > r-b {
		c.fail("indices' last dimension is %d, must be in [1, %d] (data rank %d minus batch_dims %d)", m, r-b, r, b)
	}
	for a := range b {
		if id[a] != xd[a] {
			c.fail("batch dimension %d is %d in indices but %d in data", a, id[a], xd[a])
		}
	}
	outDims := append(append([]int{}, id[:q-1]...), xd[b+m:]...)
	if numElems(outDims) == 0 {
		c.setHost(0, hostZeros(c.dtype(0), outDims))
		return nil
	}
	idx, _ := gatherTupleIndices(c, 1, xd[b:b+m])
	if b > 0 {
		lead := id[:q-1]
		col := append(append([]int{}, lead...), 1)
		parts := make([]*graph.Node, 0, b+1)
		for a := range b {
			parts = append(parts, graph.Reshape(graph.Iota(c.g, ir.MakeShape(ir.Int64, lead...), a), col...))
		}
		idx = graph.Concatenate(append(parts, idx), q-1)
	}
	c.set(0, gatherTuples(c.in(0), idx))
	return nil
}

// gatherTuples is graph.Gather (index tuples along idx's last axis, m of
// them, select slices of x's first m axes) with idx's leading axes
// flattened to one: GoMLX v0.26.0's shape inference compares the index
// vector axis with the operand's rank, so a Gather whose indices have more
// leading axes than x has axes would be refused.
func gatherTuples(x, idx *graph.Node) *graph.Node {
	id := idx.Shape().Dimensions
	lead, m := id[:len(id)-1], id[len(id)-1]
	out := graph.Gather(x, graph.Reshape(idx, numElems(lead), m))
	return graph.Reshape(out, append(append([]int{}, lead...), x.Shape().Dimensions[m:]...)...)
}

// scatterReduction reads and checks the reduction attribute.
func scatterReduction(c *opCtx) string {
	red := c.attrString("reduction", "none")
	switch red {
	case "none", "add", "mul", "max", "min":
		return red
	}
	c.fail("reduction %q is not one of none, add, mul, max, min", red)
	return ""
}

func convScatterElements(c *opCtx) error {
	xd, id, ud := c.dims(0), c.dims(1), c.dims(2)
	r := len(xd)
	if r < 1 {
		c.fail("data must have rank >= 1, got a scalar")
	}
	axis := c.normAxis(c.attrInt("axis", 0), r)
	checkElementIndexShape(c, xd, id, axis)
	if !equalInts(id, ud) {
		c.fail("updates have shape %v, indices %v: they must be equal", ud, id)
	}
	red := scatterReduction(c)
	data := c.in(0)
	if numElems(id) == 0 {
		c.set(0, data)
		return nil
	}
	idx, host := gatherAxisIndices(c, 1, xd[axis])
	var coords *graph.Node
	var hostCoords []int64
	if host != nil {
		hostCoords = gatherElementCoordsHost(host, id, axis)
		coords = constNode(c.g, hostInt64s(hostCoords, append(append([]int{}, id...), r)...))
	} else {
		coords = gatherElementCoords(idx, axis)
	}
	c.set(0, scatterApply(data, coords, hostCoords, c.in(2), red))
	return nil
}

func convScatterND(c *opCtx) error {
	xd, id, ud := c.dims(0), c.dims(1), c.dims(2)
	r, q := len(xd), len(id)
	if r < 1 || q < 1 {
		c.fail("data and indices must have rank >= 1, got ranks %d and %d", r, q)
	}
	k := id[q-1]
	if k < 1 || k > r {
		c.fail("indices' last dimension is %d, must be in [1, %d] (data rank)", k, r)
	}
	want := append(append([]int{}, id[:q-1]...), xd[k:]...)
	if !equalInts(ud, want) {
		c.fail("updates have shape %v, expected %v (indices.shape[:-1] + data.shape[%d:])", ud, want, k)
	}
	red := scatterReduction(c)
	data := c.in(0)
	if numElems(id) == 0 {
		c.set(0, data)
		return nil
	}
	idx, host := gatherTupleIndices(c, 1, xd[:k])
	c.set(0, scatterApply(data, idx, host, c.in(2), red))
	return nil
}

// scatterApply returns data with updates combined in at index tuples:
// data has shape P+S where P has k axes, idx (Int64, negative entries
// already normalised) has shape U+[k] and upd has shape U+S. hostIdx, when
// not nil, is idx's value (already range-checked). Rows whose tuple is out
// of range are ignored. Bool data is computed as Int32 (add is then
// logical or, mul and min logical and, max logical or).
func scatterApply(data, idx *graph.Node, hostIdx []int64, upd *graph.Node, red string) *graph.Node {
	if data.DType() != upd.DType() {
		panic(fmt.Errorf("updates have dtype %s, data %s: they must be equal", upd.DType(), data.DType()))
	}
	if data.DType() == ir.Bool {
		out := scatterApply(graph.ConvertDType(data, ir.Int32), idx, hostIdx, graph.ConvertDType(upd, ir.Int32), red)
		return graph.NotEqual(out, graph.ZerosLike(out))
	}
	g := data.Graph()
	dd := data.Shape().Dimensions
	idd := idx.Shape().Dimensions
	k := idd[len(idd)-1]
	pDims, sDims := dd[:k], dd[k:]
	u := numElems(idd[:len(idd)-1])
	idx = graph.Reshape(idx, u, k)
	upd = graph.Reshape(upd, append([]int{u}, sDims...)...)
	updDims := upd.Shape().Dimensions

	// Valid rows: every component in [0, dim).
	var valid *graph.Node
	if hostIdx != nil {
		valid = broadcastNodeTo(graph.Const(g, true), []int{u})
	} else {
		lim := make([]int64, k)
		for j, d := range pDims {
			lim[j] = int64(d)
		}
		limN := broadcastNodeTo(constNode(g, hostInt64s(lim)), []int{u, k})
		inRange := graph.LogicalAnd(graph.GreaterOrEqual(idx, graph.ZerosLike(idx)), graph.LessThan(idx, limN))
		valid = graph.ReduceLogicalAnd(inRange, 1)
		idx = graph.Where(broadcastNodeTo(graph.Reshape(valid, u, 1), []int{u, k}), idx, graph.ZerosLike(idx))
	}
	rowMask := func(m *graph.Node) *graph.Node { // [U] -> U+S
		shape := append([]int{u}, make([]int, len(sDims))...)
		for j := range sDims {
			shape[1+j] = 1
		}
		return broadcastNodeTo(graph.Reshape(m, shape...), updDims)
	}
	fill := func(v any) *graph.Node { return broadcastNodeTo(graph.Const(g, v), updDims) }
	dt := data.DType()
	switch red {
	case "add":
		return graph.ScatterSum(data, idx, graph.Where(rowMask(valid), upd, graph.ZerosLike(upd)), false, false)
	case "max":
		return graph.ScatterMax(data, idx, graph.Where(rowMask(valid), upd, fill(dt.LowestValue())), false, false)
	case "min":
		return graph.ScatterMin(data, idx, graph.Where(rowMask(valid), upd, fill(dt.HighestValue())), false, false)
	case "mul":
		if hostIdx != nil {
			return scatterMulRounds(data, idx, hostIdx, upd, pDims)
		}
	}

	// "none" and run-time "mul": one representative row per target (the
	// last valid one), then a scatter of distinct positions.
	pos := graph.Iota(g, ir.MakeShape(ir.Int64, u), 0)
	minus1 := graph.Const(g, int64(-1))
	winner := graph.ScatterMax(broadcastNodeTo(minus1, pDims), idx, graph.Where(valid, pos, broadcastNodeTo(minus1, []int{u})), false, false)
	apply := graph.LogicalAnd(valid, graph.Equal(graph.Gather(winner, idx), pos))
	vals := upd
	if red == "mul" {
		vals = scatterGroupProduct(idx, valid, upd, pDims)
	}
	scattered := graph.ScatterSum(graph.ZerosLike(data), idx, graph.Where(rowMask(apply), vals, graph.ZerosLike(vals)), false, false)
	hit := scatterHitMask(idx, apply, pDims, dd)
	if red == "mul" {
		return graph.Where(hit, graph.Mul(data, scattered), data)
	}
	return graph.Where(hit, scattered, data)
}

// scatterHitMask returns a Bool mask of data's shape dd that is true at the
// positions (the first len(pDims) axes) that rows with apply set target.
func scatterHitMask(idx, apply *graph.Node, pDims, dd []int) *graph.Node {
	g := idx.Graph()
	count := graph.ScatterSum(graph.Zeros(g, ir.MakeShape(ir.Int32, pDims...)), idx, graph.ConvertDType(apply, ir.Int32), false, false)
	hit := graph.GreaterThan(count, graph.ZerosLike(count))
	shape := append(append([]int{}, pDims...), make([]int, len(dd)-len(pDims))...)
	for j := len(pDims); j < len(dd); j++ {
		shape[j] = 1
	}
	return broadcastNodeTo(graph.Reshape(hit, shape...), dd)
}

// scatterGroupProduct returns, for every row u, the product of the updates
// of all valid rows targeting the same position as u (shape U+S), by
// comparing every pair of rows.
func scatterGroupProduct(idx, valid, upd *graph.Node, pDims []int) *graph.Node {
	g := idx.Graph()
	ud := upd.Shape().Dimensions
	u := ud[0]
	if numElems(ud) > gatherMulPairLimit/max(u, 1) {
		panic(fmt.Errorf("reduction mul with %d run-time index rows of %d elements needs a [%d, %d, ...] pairwise tensor above %d elements; make the indices known at build time",
			u, numElems(ud[1:]), u, u, gatherMulPairLimit))
	}
	// Flat target of every row.
	st := strides(pDims)
	sv := make([]int64, len(st))
	for j, s := range st {
		sv[j] = int64(s)
	}
	flat := graph.ReduceSum(graph.Mul(idx, broadcastNodeTo(constNode(g, hostInt64s(sv)), idx.Shape().Dimensions)), 1)
	same := graph.Equal(graph.Reshape(flat, u, 1), graph.Reshape(flat, 1, u))
	same = graph.LogicalAnd(same, broadcastNodeTo(graph.Reshape(valid, 1, u), []int{u, u}))
	pair := append([]int{u}, ud...) // [U, U, S...]
	maskShape := append([]int{u, u}, make([]int, len(ud)-1)...)
	for j := 2; j < len(maskShape); j++ {
		maskShape[j] = 1
	}
	mask := broadcastNodeTo(graph.Reshape(same, maskShape...), pair)
	vals := broadcastNodeTo(graph.Reshape(upd, append([]int{1}, ud...)...), pair)
	return graph.ReduceMultiply(graph.Where(mask, vals, graph.OnesLike(vals)), 1)
}

// scatterMulRounds applies a "mul" scatter whose index tuples are known at
// build time: rows are split into rounds in which every position occurs at
// most once, and each round multiplies its scattered updates in.
func scatterMulRounds(data, idx *graph.Node, hostIdx []int64, upd *graph.Node, pDims []int) *graph.Node {
	g := data.Graph()
	dd := data.Shape().Dimensions
	k := len(pDims)
	u := len(hostIdx) / k
	st := strides(pDims)
	seen := map[int]int{}
	var rounds [][]int
	for row := range u {
		t := 0
		for j := range k {
			t += int(hostIdx[row*k+j]) * st[j]
		}
		r := seen[t]
		seen[t] = r + 1
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], row)
	}
	out := data
	for _, rows := range rounds {
		ri := make([]int64, 0, len(rows)*k)
		hit := make([]int64, numElems(pDims))
		for _, row := range rows {
			ri = append(ri, hostIdx[row*k:(row+1)*k]...)
			t := 0
			for j := range k {
				t += int(hostIdx[row*k+j]) * st[j]
			}
			hit[t] = 1
		}
		ru := gatherConst(upd, 0, rows)
		scattered := graph.ScatterSum(graph.ZerosLike(data), constNode(g, hostInt64s(ri, len(rows), k)), ru, false, true)
		shape := append(append([]int{}, pDims...), make([]int, len(dd)-k)...)
		for j := k; j < len(dd); j++ {
			shape[j] = 1
		}
		mask := broadcastNodeTo(constNode(g, newHostInts(ir.Bool, shape, hit)), dd)
		out = graph.Where(mask, graph.Mul(out, scattered), out)
	}
	return out
}
