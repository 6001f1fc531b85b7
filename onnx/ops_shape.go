package onnx

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Shape and data-movement ops: Shape, Size, Reshape, Flatten, Squeeze,
// Unsqueeze, Concat, Split, Slice, Gather, Expand, Tile, Transpose, Pad,
// Identity, DepthToSpace, SpaceToDepth. Each has a host evaluator so shape
// computations fold into constants.

func init() {
	register("Shape", 1, convShape).withHost(convShape).onlyShapes()
	register("Size", 1, convSize).withHost(convSize).onlyShapes()
	register("Identity", 1, convIdentity).withHost(convIdentity)
	registerReshape("Reshape", 5, reshapeTarget).needs(1)
	registerReshape("Flatten", 1, flattenDims)
	registerReshape("Squeeze", 1, squeezeDims)
	registerReshape("Squeeze", 13, squeezeDims).needs(1)
	registerReshape("Unsqueeze", 1, unsqueezeDims)
	registerReshape("Unsqueeze", 13, unsqueezeDims).needs(1)
	register("Concat", 4, convConcat).withHost(hostConcatOp)
	register("Split", 2, convSplit).withHost(hostSplit)
	register("Split", 13, convSplit).withHost(hostSplit).needs(1)
	register("Slice", 1, convSlice).withHost(hostSlice)
	register("Slice", 10, convSlice).withHost(hostSlice).needs(1, 2, 3, 4)
	register("Gather", 1, convGather).withHost(hostGather)
	register("Expand", 8, convExpand).withHost(hostExpand).needs(1)
	register("Tile", 6, convTile).withHost(hostTile).needs(1)
	register("Transpose", 1, convTranspose).withHost(hostTranspose)
	register("Pad", 2, convPad).withHost(hostPad)
	register("Pad", 11, convPad).withHost(hostPad).needs(1, 3)
	register("DepthToSpace", 1, convDepthToSpace)
	register("SpaceToDepth", 1, convSpaceToDepth)
	register("SpaceToDepth", 28, convSpaceToDepth) // adds mode (DCR, CRD)
}

// shapeHost is the Shape op's result for dims, honouring opset-15 start/end.
func convShape(c *opCtx) error {
	dims := c.dims(0)
	r := len(dims)
	start, end := int(c.attrInt("start", 0)), int(c.attrInt("end", int64(r)))
	if start < 0 {
		start += r
	}
	if end < 0 {
		end += r
	}
	start, end = min(max(start, 0), r), min(max(end, 0), r)
	out := []int64{}
	for k := start; k < end; k++ {
		out = append(out, int64(dims[k]))
	}
	c.setHost(0, hostInt64s(out))
	return nil
}

func convSize(c *opCtx) error {
	c.setHost(0, hostInt64s([]int64{int64(numElems(c.dims(0)))}, []int{}...))
	return nil
}

func convIdentity(c *opCtx) error {
	v := c.input(0)
	if v.seq != nil || v.none { // sequences and optionals (values.go)
		c.copyValue(0, v)
		return nil
	}
	if v.host != nil {
		c.setHost(0, v.host)
		return nil
	}
	c.setDT(0, v.node, v.dt)
	return nil
}

// reshapeDims resolves ONNX Reshape's target: 0 copies the input dimension
// (unless allowzero), -1 is inferred.
func reshapeDims(c *opCtx, in []int, shape []int64, allowZero bool) []int {
	out := make([]int, len(shape))
	infer := -1
	known := 1
	for k, s := range shape {
		switch {
		case s == 0 && !allowZero:
			if k >= len(in) {
				c.fail("shape %v copies dimension %d, but the input has rank %d", shape, k, len(in))
			}
			out[k] = in[k]
		case s == -1:
			if infer >= 0 {
				c.fail("shape %v has more than one -1", shape)
			}
			infer = k
			continue
		case s < 0:
			c.fail("invalid shape %v", shape)
		default:
			out[k] = int(s)
		}
		known *= out[k]
	}
	total := numElems(in)
	if infer >= 0 {
		if known == 0 || total%known != 0 {
			c.fail("cannot reshape %v to %v", in, shape)
		}
		out[infer] = total / known
	}
	if numElems(out) != total {
		c.fail("cannot reshape %v (%d elements) to %v", in, total, shape)
	}
	return out
}

// registerReshape registers an op that only reshapes its first input, to
// the dims target computes, in the graph and on the host alike.
func registerReshape(op string, since int, target func(*opCtx) []int) *opDef {
	conv := func(c *opCtx) error {
		c.set(0, graph.Reshape(c.in(0), target(c)...))
		return nil
	}
	host := func(c *opCtx) error {
		h, err := c.hostIn(0).reshaped(target(c))
		if err != nil {
			return err
		}
		c.setHost(0, h)
		return nil
	}
	return register(op, since, conv).withHost(host)
}

func reshapeTarget(c *opCtx) []int {
	if c.opset < 5 {
		return reshapeDims(c, c.dims(0), c.attrInts("shape", nil), false)
	}
	return reshapeDims(c, c.dims(0), c.constInts(1), c.attrInt("allowzero", 0) != 0)
}

func flattenDims(c *opCtx) []int {
	dims := c.dims(0)
	axis := int(c.attrInt("axis", 1))
	if axis < 0 {
		axis += len(dims)
	}
	if axis < 0 || axis > len(dims) {
		c.fail("axis %d out of range for rank %d", c.attrInt("axis", 1), len(dims))
	}
	return []int{numElems(dims[:axis]), numElems(dims[axis:])}
}

// axesArg reads the axes of Squeeze/Unsqueeze/Reduce*: an attribute in
// older opsets, optional input k in newer ones.
func (c *opCtx) axesArg(inputIdx int, fromInput bool) ([]int64, bool) {
	if fromInput {
		if !c.has(inputIdx) {
			return nil, false
		}
		return c.constInts(inputIdx), true
	}
	if !c.hasAttr("axes") {
		return nil, false
	}
	return c.attrInts("axes", nil), true
}

func squeezeDims(c *opCtx) []int {
	dims := c.dims(0)
	axes, ok := c.axesArg(1, c.opset >= 13)
	drop := make([]bool, len(dims))
	if !ok {
		for k, d := range dims {
			drop[k] = d == 1
		}
	} else {
		for _, a := range c.normAxes(axes, len(dims)) {
			if dims[a] != 1 {
				c.fail("cannot squeeze axis %d of size %d", a, dims[a])
			}
			drop[a] = true
		}
	}
	out := []int{}
	for k, d := range dims {
		if !drop[k] {
			out = append(out, d)
		}
	}
	return out
}

func unsqueezeDims(c *opCtx) []int {
	dims := c.dims(0)
	axes, ok := c.axesArg(1, c.opset >= 13)
	if !ok {
		c.fail("missing axes")
	}
	r := len(dims) + len(axes)
	ins := make([]bool, r)
	for _, a := range c.normAxes(axes, r) {
		if ins[a] {
			c.fail("axis %d repeated", a)
		}
		ins[a] = true
	}
	out := make([]int, 0, r)
	j := 0
	for k := range r {
		if ins[k] {
			out = append(out, 1)
		} else {
			out = append(out, dims[j])
			j++
		}
	}
	return out
}

func convConcat(c *opCtx) error {
	var parts []*graph.Node
	rank := -1
	for k := range c.inputs {
		if !c.has(k) {
			continue
		}
		rank = c.rank(k)
		if numElems(c.dims(k)) == 0 {
			continue // empty operands contribute nothing
		}
		parts = append(parts, c.in(k))
	}
	if rank < 0 {
		c.fail("needs at least one input")
	}
	axis := c.normAxis(c.attrInt("axis", 0), rank)
	if len(parts) == 0 {
		// Every operand is empty: the result is too.
		var dims []int
		total := 0
		for k := range c.inputs {
			if c.has(k) {
				dims = append([]int{}, c.dims(k)...)
				total += c.dims(k)[axis]
			}
		}
		dims[axis] = total
		c.setHost(0, hostZeros(c.dtype(0), dims))
		return nil
	}
	if len(parts) == 1 {
		c.set(0, parts[0])
		return nil
	}
	c.set(0, graph.Concatenate(parts, axis))
	return nil
}

// hostConcat concatenates host tensors along axis.
func hostConcat(parts []*hostTensor, axis int) (*hostTensor, error) {
	first := parts[0]
	dims := append([]int{}, first.dims...)
	dims[axis] = 0
	for _, p := range parts {
		if len(p.dims) != len(dims) {
			return nil, fmt.Errorf("concat of ranks %d and %d", len(p.dims), len(dims))
		}
		for k := range dims {
			if k != axis && p.dims[k] != dims[k] {
				return nil, fmt.Errorf("concat along axis %d of shapes %v and %v", axis, first.dims, p.dims)
			}
		}
		dims[axis] += p.dims[axis]
		if err := p.decode(); err != nil {
			return nil, err
		}
	}
	outer := numElems(dims[:axis])
	inner := numElems(dims[axis+1:])
	out := &hostTensor{dt: first.dt, dims: dims}
	for o := range outer {
		for _, p := range parts {
			chunk := p.dims[axis] * inner
			if first.isFloat() {
				out.f = append(out.f, p.f[o*chunk:(o+1)*chunk]...)
			} else {
				out.i = append(out.i, p.i[o*chunk:(o+1)*chunk]...)
			}
		}
	}
	if out.f == nil && out.i == nil {
		if first.isFloat() {
			out.f = []float64{}
		} else {
			out.i = []int64{}
		}
	}
	return out, nil
}

func hostConcatOp(c *opCtx) error {
	var parts []*hostTensor
	for k := range c.inputs {
		if c.has(k) {
			parts = append(parts, c.hostIn(k))
		}
	}
	if len(parts) == 0 {
		return fmt.Errorf("needs at least one input")
	}
	axis := c.normAxis(c.attrInt("axis", 0), parts[0].rank())
	out, err := hostConcat(parts, axis)
	if err != nil {
		return err
	}
	c.setHost(0, out)
	return nil
}

// splitSizes returns the size of each Split output along axis.
func splitSizes(c *opCtx, dim int) []int {
	var sizes []int64
	switch {
	case c.opset >= 13 && c.has(1):
		sizes = c.constInts(1)
	case c.opset < 13 && c.hasAttr("split"):
		sizes = c.attrInts("split", nil)
	}
	if sizes != nil {
		total := 0
		for _, s := range sizes {
			total += int(s)
		}
		if total != dim || len(sizes) != c.numOutputs() {
			c.fail("split sizes %v do not fit dimension %d into %d outputs", sizes, dim, c.numOutputs())
		}
		return toInts(sizes)
	}
	n := c.numOutputs()
	if c.hasAttr("num_outputs") {
		n = int(c.attrInt("num_outputs", 0))
	}
	if n <= 0 {
		c.fail("no outputs")
	}
	// Opset 18: the last chunk may be smaller.
	chunk := (dim + n - 1) / n
	out := make([]int, n)
	left := dim
	for k := range out {
		out[k] = min(chunk, left)
		left -= out[k]
	}
	return out
}

func convSplit(c *opCtx) error {
	x := c.in(0)
	axis := c.normAxis(c.attrInt("axis", 0), x.Rank())
	start := 0
	for k, s := range splitSizes(c, x.Shape().Dimensions[axis]) {
		if s == 0 {
			dims := append([]int{}, x.Shape().Dimensions...)
			dims[axis] = 0
			c.setHost(k, hostZeros(c.dtype(0), dims))
			continue
		}
		c.set(k, sliceAxis(x, axis, start, start+s, 1))
		start += s
	}
	return nil
}

func hostSplit(c *opCtx) error {
	x := c.hostIn(0)
	axis := c.normAxis(c.attrInt("axis", 0), x.rank())
	start := 0
	for k, s := range splitSizes(c, x.dims[axis]) {
		sel := fullSelection(x.dims)
		sel[axis] = rangeInts(start, start+s, 1)
		h, err := hostSelect(x, sel)
		if err != nil {
			return err
		}
		c.setHost(k, h)
		start += s
	}
	return nil
}

// fullSelection selects every index of every axis.
func fullSelection(dims []int) [][]int {
	sel := make([][]int, len(dims))
	for k, d := range dims {
		sel[k] = rangeInts(0, d, 1)
	}
	return sel
}

func rangeInts(start, end, step int) []int {
	out := []int{}
	if step > 0 {
		for k := start; k < end; k += step {
			out = append(out, k)
		}
	} else {
		for k := start; k > end; k += step {
			out = append(out, k)
		}
	}
	return out
}

// hostSelect returns the sub-tensor taking, on each axis, the listed
// indices (in that order, repeats allowed).
func hostSelect(h *hostTensor, sel [][]int) (*hostTensor, error) {
	dims := make([]int, len(sel))
	for k, s := range sel {
		dims[k] = len(s)
	}
	if err := checkHostSize(dims); err != nil {
		return nil, err
	}
	st := strides(h.dims)
	idx := make([]int, numElems(dims))
	forEachIndex(dims, func(flat int, ix []int) {
		j := 0
		for a, i := range ix {
			j += sel[a][i] * st[a]
		}
		idx[flat] = j
	})
	return h.gatherFlat(dims, idx)
}

// sliceSpec resolves ONNX Slice's per-axis (start, end, step) into the list
// of selected indices of every axis.
func sliceSpec(c *opCtx, dims []int) [][]int {
	var starts, ends, axes, steps []int64
	if c.opset < 10 {
		starts, ends, axes = c.attrInts("starts", nil), c.attrInts("ends", nil), c.attrInts("axes", nil)
	} else {
		starts, ends = c.constInts(1), c.constInts(2)
		axes, steps = c.constInts(3), c.constInts(4)
	}
	if len(starts) != len(ends) {
		c.fail("starts %v and ends %v differ in length", starts, ends)
	}
	if axes == nil {
		for k := range starts {
			axes = append(axes, int64(k))
		}
	}
	if steps == nil {
		steps = make([]int64, len(starts))
		for k := range steps {
			steps[k] = 1
		}
	}
	if len(axes) != len(starts) || len(steps) != len(starts) {
		c.fail("starts, ends, axes and steps differ in length")
	}
	sel := fullSelection(dims)
	for k, a := range c.normAxes(axes, len(dims)) {
		d := int64(dims[a])
		s, e, st := starts[k], ends[k], steps[k]
		if st == 0 {
			c.fail("slice step is 0")
		}
		if s < 0 {
			s += d
		}
		if e < 0 {
			e += d
		}
		if st > 0 {
			s, e = min(max(s, 0), d), min(max(e, 0), d)
		} else {
			s, e = min(max(s, 0), d-1), min(max(e, -1), d-1)
		}
		sel[a] = rangeInts(int(s), int(e), int(st))
	}
	return sel
}

func convSlice(c *opCtx) error {
	x := c.in(0)
	dims := x.Shape().Dimensions
	sel := sliceSpec(c, dims)
	for a, s := range sel {
		if len(s) == dims[a] && isIdentity(s) {
			continue
		}
		if len(s) == 0 {
			out := append([]int{}, x.Shape().Dimensions...)
			out[a] = 0
			for b := range sel {
				out[b] = len(sel[b])
			}
			c.setHost(0, hostZeros(c.dtype(0), out))
			return nil
		}
		step := 1
		if len(s) > 1 {
			step = s[1] - s[0]
		}
		if step > 0 {
			x = sliceAxis(x, a, s[0], s[len(s)-1]+1, step)
		} else {
			x = gatherConst(x, a, s)
		}
	}
	c.set(0, x)
	return nil
}

func isIdentity(s []int) bool {
	for k, v := range s {
		if k != v {
			return false
		}
	}
	return true
}

func hostSlice(c *opCtx) error {
	x := c.hostIn(0)
	h, err := hostSelect(x, sliceSpec(c, x.dims))
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func convGather(c *opCtx) error {
	x := c.in(0)
	axis := c.normAxis(c.attrInt("axis", 0), x.Rank())
	dim := x.Shape().Dimensions[axis]
	if c.isHost(1) {
		idx := c.hostIn(1)
		vals, err := idx.ints()
		if err != nil {
			return err
		}
		norm := make([]int64, len(vals))
		for k, v := range vals {
			if v < 0 {
				v += int64(dim)
			}
			if v < 0 || v >= int64(dim) {
				c.fail("index %d out of range for axis %d of size %d", vals[k], axis, dim)
			}
			norm[k] = v
		}
		c.set(0, gatherAxis(x, constNode(c.g, hostInt64s(norm, idx.dims...)), axis))
		return nil
	}
	c.noteIndices(1, []int{dim}, false)
	idx := normalizeIndices(c.in(1), dim)
	c.set(0, gatherAxis(x, idx, axis))
	return nil
}

func hostGather(c *opCtx) error {
	x, idx := c.hostIn(0), c.hostIn(1)
	axis := c.normAxis(c.attrInt("axis", 0), x.rank())
	vals, err := idx.ints()
	if err != nil {
		return err
	}
	dim := x.dims[axis]
	sel := fullSelection(x.dims)
	sel[axis] = make([]int, len(vals))
	for k, v := range vals {
		if v < 0 {
			v += int64(dim)
		}
		if v < 0 || v >= int64(dim) {
			return fmt.Errorf("index %d out of range for axis %d of size %d", vals[k], axis, dim)
		}
		sel[axis][k] = int(v)
	}
	h, err := hostSelect(x, sel)
	if err != nil {
		return err
	}
	out := append(append(append([]int{}, x.dims[:axis]...), idx.dims...), x.dims[axis+1:]...)
	if h, err = h.reshaped(out); err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func expandDims(c *opCtx) []int {
	shape := c.constInts(1)
	dims, err := broadcastDims(c.dims(0), toInts(shape))
	if err != nil {
		c.fail("%v", err)
	}
	return dims
}

func convExpand(c *opCtx) error {
	c.set(0, broadcastNodeTo(c.in(0), expandDims(c)))
	return nil
}

func hostExpand(c *opCtx) error {
	h, err := c.hostIn(0).broadcastTo(expandDims(c))
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func tileRepeats(c *opCtx) []int {
	reps := toInts(c.constInts(1))
	if len(reps) != c.rank(0) {
		c.fail("repeats %v do not match rank %d", reps, c.rank(0))
	}
	return reps
}

// convTile tiles by broadcasting: x [d0, d1] becomes [1, d0, 1, d1],
// broadcast to [r0, d0, r1, d1], then reshaped to [r0*d0, r1*d1].
func convTile(c *opCtx) error {
	x := c.in(0)
	reps := tileRepeats(c)
	dims := x.Shape().Dimensions
	inter := make([]int, 0, 2*len(dims))
	big := make([]int, 0, 2*len(dims))
	out := make([]int, len(dims))
	for k, d := range dims {
		inter = append(inter, 1, d)
		big = append(big, reps[k], d)
		out[k] = reps[k] * d
	}
	if numElems(out) == 0 {
		c.setHost(0, hostZeros(c.dtype(0), out))
		return nil
	}
	y := graph.Reshape(x, inter...)
	y = broadcastNodeTo(y, big)
	c.set(0, graph.Reshape(y, out...))
	return nil
}

func hostTile(c *opCtx) error {
	x := c.hostIn(0)
	reps := tileRepeats(c)
	out := make([]int, len(reps))
	for a, r := range reps {
		if r < 0 {
			return fmt.Errorf("negative repeat %d", r)
		}
		out[a] = r * x.dims[a]
	}
	if err := checkHostSize(out); err != nil {
		return err
	}
	sel := make([][]int, x.rank())
	for a, d := range x.dims {
		for r := 0; r < reps[a]; r++ {
			for k := range d {
				sel[a] = append(sel[a], k)
			}
		}
		if sel[a] == nil {
			sel[a] = []int{}
		}
	}
	h, err := hostSelect(x, sel)
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func transposePerm(c *opCtx) []int {
	r := c.rank(0)
	perm := c.attrInts("perm", nil)
	if perm == nil {
		out := make([]int, r)
		for k := range out {
			out[k] = r - 1 - k
		}
		return out
	}
	if len(perm) != r {
		c.fail("perm %v does not match rank %d", perm, r)
	}
	return c.normAxes(perm, r)
}

func convTranspose(c *opCtx) error {
	c.set(0, graph.TransposeAllAxes(c.in(0), transposePerm(c)...))
	return nil
}

func hostTranspose(c *opCtx) error {
	h, err := c.hostIn(0).transposed(transposePerm(c))
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

// padArgs returns Pad's mode and per-axis amounts.
func padArgs(c *opCtx, rank int) (mode string, before, after []int) {
	mode = c.attrString("mode", "constant")
	var pads []int64
	if c.opset < 11 {
		pads = c.attrInts("pads", nil)
		if pads == nil {
			pads = c.attrInts("paddings", nil)
		}
	} else {
		pads = c.constInts(1)
	}
	axes := make([]int, rank)
	for k := range axes {
		axes[k] = k
	}
	if c.opset >= 18 && c.has(3) {
		axes = c.normAxes(c.constInts(3), rank)
	}
	if len(pads) != 2*len(axes) {
		c.fail("pads %v do not match %d axes", pads, len(axes))
	}
	before, after = make([]int, rank), make([]int, rank)
	for k, a := range axes {
		before[a] = int(pads[k])
		after[a] = int(pads[k+len(axes)])
	}
	return mode, before, after
}

func convPad(c *opCtx) error {
	x := c.in(0)
	mode, before, after := padArgs(c, x.Rank())
	switch mode {
	case "constant":
		var v *graph.Node
		if c.opset < 11 {
			v = scalarLike(x, c.attrFloat("value", 0))
		} else if c.has(2) {
			v = graph.Reshape(c.in(2))
		} else {
			v = scalarLike(x, 0)
		}
		c.set(0, padConstant(x, before, after, v))
	case "edge", "reflect", "wrap":
		for k := range before {
			if before[k] < 0 || after[k] < 0 {
				c.fail("negative pads are only supported in constant mode")
			}
		}
		c.set(0, padIndexed(x, before, after, mode))
	default:
		c.fail("unknown pad mode %q", mode)
	}
	return nil
}

func hostPad(c *opCtx) error {
	x := c.hostIn(0)
	mode, before, after := padArgs(c, x.rank())
	if mode != "constant" {
		// Edge, reflect and wrap only reorder elements.
		sel := make([][]int, x.rank())
		for a, n := range x.dims {
			for k := -before[a]; k < n+after[a]; k++ {
				sel[a] = append(sel[a], padSource(k, n, mode))
			}
		}
		h, err := hostSelect(x, sel)
		if err != nil {
			return err
		}
		c.setHost(0, h)
		return nil
	}
	value := 0.0
	if c.opset < 11 {
		value = c.attrFloat("value", 0)
	} else if c.has(2) {
		v, err := c.hostIn(2).scalarFloat()
		if err != nil {
			return err
		}
		value = v
	}
	// Gather from x extended with one trailing element holding value.
	if err := x.decode(); err != nil {
		return err
	}
	ext := &hostTensor{dt: x.dt, dims: []int{x.size() + 1}}
	if x.isFloat() {
		ext.f = append(append([]float64{}, x.f...), value)
	} else {
		ext.i = append(append([]int64{}, x.i...), int64(value))
	}
	dims := make([]int, x.rank())
	for a, n := range x.dims {
		dims[a] = n + before[a] + after[a]
		if dims[a] < 0 {
			return fmt.Errorf("pads remove more than axis %d holds", a)
		}
	}
	if err := checkHostSize(dims); err != nil {
		return err
	}
	st := strides(x.dims)
	idx := make([]int, numElems(dims))
	forEachIndex(dims, func(flat int, ix []int) {
		j := 0
		for a, i := range ix {
			src := i - before[a]
			if src < 0 || src >= x.dims[a] {
				j = -1
				break
			}
			j += src * st[a]
		}
		if j < 0 {
			j = x.size()
		}
		idx[flat] = j
	})
	h, err := ext.gatherFlat(dims, idx)
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func convDepthToSpace(c *opCtx) error {
	x := c.in(0)
	if x.Rank() != 4 {
		c.fail("expects a rank-4 input, got %s", x.Shape())
	}
	b := int(c.attrInt("blocksize", 0))
	d := x.Shape().Dimensions
	n, ch, h, w := d[0], d[1], d[2], d[3]
	if b <= 0 || ch%(b*b) != 0 {
		c.fail("blocksize %d does not divide channels %d", b, ch)
	}
	var y *graph.Node
	if c.attrString("mode", "DCR") == "CRD" {
		y = graph.Reshape(x, n, ch/(b*b), b, b, h, w)
		y = graph.TransposeAllAxes(y, 0, 1, 4, 2, 5, 3)
	} else {
		y = graph.Reshape(x, n, b, b, ch/(b*b), h, w)
		y = graph.TransposeAllAxes(y, 0, 3, 4, 1, 5, 2)
	}
	c.set(0, graph.Reshape(y, n, ch/(b*b), h*b, w*b))
	return nil
}

func convSpaceToDepth(c *opCtx) error {
	x := c.in(0)
	if x.Rank() != 4 {
		c.fail("expects a rank-4 input, got %s", x.Shape())
	}
	b := int(c.attrInt("blocksize", 0))
	d := x.Shape().Dimensions
	n, ch, h, w := d[0], d[1], d[2], d[3]
	if b <= 0 || h%b != 0 || w%b != 0 {
		c.fail("blocksize %d does not divide spatial dims %dx%d", b, h, w)
	}
	y := graph.Reshape(x, n, ch, h/b, b, w/b, b)
	mode := "DCR"
	if c.opset >= 28 {
		mode = c.attrString("mode", "DCR")
	}
	switch mode {
	case "DCR": // output channel (row·b + column)·C + channel
		y = graph.TransposeAllAxes(y, 0, 3, 5, 1, 2, 4)
	case "CRD": // output channel channel·b² + row·b + column
		y = graph.TransposeAllAxes(y, 0, 1, 3, 5, 2, 4)
	default:
		c.fail("mode %q: expected DCR or CRD", mode)
	}
	c.set(0, graph.Reshape(y, n, ch*b*b, h/b, w/b))
	return nil
}

func init() {
	register("ReverseSequence", 10, convReverseSequence)
}

// convReverseSequence reverses the first seq_lens[b] elements along the
// time axis of each batch entry b, with a gather whose indices are
// (b, t < len[b] ? len[b]-1-t : t).
func convReverseSequence(c *opCtx) error {
	x := c.in(0)
	lens := c.in(1)
	r := x.Rank()
	bAxis := c.normAxis(c.attrInt("batch_axis", 1), r)
	tAxis := c.normAxis(c.attrInt("time_axis", 0), r)
	if bAxis == tAxis {
		c.fail("batch_axis and time_axis are both %d", bAxis)
	}
	// Bring batch and time to the front.
	perm := []int{bAxis, tAxis}
	for a := range r {
		if a != bAxis && a != tAxis {
			perm = append(perm, a)
		}
	}
	xt := graph.TransposeAllAxes(x, perm...)
	d := xt.Shape().Dimensions
	B, T := d[0], d[1]
	if lens.DType() != ir.Int64 {
		lens = graph.ConvertDType(lens, ir.Int64)
	}
	l := broadcastNodeTo(graph.Reshape(lens, B, 1), []int{B, T})
	t := graph.Iota(c.g, ir.MakeShape(ir.Int64, B, T), 1)
	b := graph.Iota(c.g, ir.MakeShape(ir.Int64, B, T), 0)
	src := graph.Where(graph.LessThan(t, l), graph.Sub(graph.Sub(l, t), filled(c.g, ir.Int64, []int{B, T}, 1)), t)
	indices := graph.Concatenate([]*graph.Node{graph.Reshape(b, B, T, 1), graph.Reshape(src, B, T, 1)}, 2)
	offset := []int{}
	for a := 2; a < len(d); a++ {
		offset = append(offset, a)
	}
	sizes := append([]int{1, 1}, d[2:]...)
	y := graph.BackendGather(xt, indices, 2, offset, []int{0, 1}, []int{0, 1}, sizes, false)
	inv := make([]int, r)
	for k, p := range perm {
		inv[p] = k
	}
	c.set(0, graph.TransposeAllAxes(y, inv...))
	return nil
}
