package onnx

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Reshape, Flatten, Squeeze and Unsqueeze: ops that change a shape but not
// the data order, with their padding-analysis rules.

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

// padUnsqueeze: inserted axes of size 1 move the padded axis, which keeps
// its facts.
func padUnsqueeze(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	axes, ok := attrIs(attrs, "axes")
	if !ok {
		axes, ok = r.constInts(n, 1)
	}
	if !ok || x.rank < 0 {
		return fail("has axes or a rank the analysis does not know")
	}
	rank := x.rank + len(axes)
	added := map[int]bool{}
	for _, a := range axes {
		k, ok := normAxis(a, rank)
		if !ok {
			return fail("has an axis out of range")
		}
		added[k] = true
	}
	out := &pval{rank: rank, elems: x.elems, fc: x.fc, mask: x.mask, orig: x.orig, idiom: x.idiom}
	src := 0
	remap := map[int]int{}
	for i := 0; i < rank; i++ {
		if added[i] {
			out.dims = append(out.dims, cdim(1))
			continue
		}
		out.dims = append(out.dims, x.dims[src])
		remap[src] = i
		src++
	}
	out.padc, out.neg, out.zero = remapFacts(x, remap)
	return []*pval{out}
}

// padSqueeze: removing axes of size 1 moves the padded axis; squeezing
// the padded axis itself (size 1 only in an exact run) is refused.
func padSqueeze(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	axes, ok := attrIs(attrs, "axes")
	if !ok && len(n.Input) > 1 && n.Input[1] != "" {
		axes, ok = r.constInts(n, 1)
		if !ok {
			return fail("has axes the analysis does not know")
		}
	}
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	drop := map[int]bool{}
	if axes == nil {
		for i, d := range x.dims {
			if d.k != sConst {
				if anyInv {
					return fail("squeezes without axes a dimension of unknown size")
				}
				return []*pval{{rank: -1}}
			}
			if d.c == 1 {
				drop[i] = true
			}
		}
	}
	for _, a := range axes {
		k, ok := normAxis(a, x.rank)
		if !ok {
			return fail("has an axis out of range")
		}
		if r.isD(x.dims[k]) {
			return fail("squeezes it")
		}
		drop[k] = true
	}
	out := &pval{elems: x.elems, fc: x.fc, mask: x.mask, orig: x.orig, idiom: x.idiom}
	remap := map[int]int{}
	for i, d := range x.dims {
		if drop[i] {
			continue
		}
		remap[i] = len(out.dims)
		out.dims = append(out.dims, d)
	}
	out.rank = len(out.dims)
	out.padc, out.neg, out.zero = remapFacts(x, remap)
	return []*pval{out}
}

// padReshape: the padded axis survives a reshape when the sizes before it
// are the same before and after (a real position's flat index then maps
// to the same real position); merged with other axes it is followed as a
// merged size (padmerge.go).
func padReshape(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x, t := ins[0], padIn(ins, 1)
	if t == nil || t.elems == nil {
		return fail("takes a target shape the analysis does not know")
	}
	allowZero := attrI(attrs, "allowzero", 0) != 0
	if outs := r.mergeReshape(x, t, allowZero, fail); outs != nil {
		return outs
	}
	// Later sizes are known when a -1 before them is resolved.
	target := append([]sdim(nil), t.elems...)
	for i, e := range t.elems {
		target[i] = e
		if e.k == sConst && e.c == 0 && !allowZero {
			if x.rank < 0 || i >= x.rank {
				return fail("copies a dimension the analysis does not know")
			}
			target[i] = x.dims[i]
		}
		if e.k == sConst && e.c == -1 {
			target[i] = sdim{}
			if x.rank >= 0 {
				// -1 is the remaining size: known when every other size is.
				if d, ok := r.remaining(x.dims, target, i); ok {
					target[i] = d
				}
			}
		}
		if target[i].k == sTaint || target[i].k == sProd {
			return fail("reshapes to a size computed from it")
		}
	}
	xAxes := []int{}
	if x.rank >= 0 {
		xAxes = x.dAxes(r.dim)
	} else if anyInv {
		return fail("has an input of unknown rank")
	}
	var tAxes []int
	for i, d := range target {
		if d.k == sSym && d.s == r.dim {
			tAxes = append(tAxes, i)
		}
	}
	if len(xAxes) == 0 && len(tAxes) == 0 {
		out := &pval{rank: len(target), dims: target, mask: x.mask}
		if x.rank <= 1 && len(target) <= 1 {
			out.elems, out.fc = x.elems, x.fc
		}
		return []*pval{out}
	}
	if len(xAxes) != len(tAxes) {
		return fail("merges it with other axes")
	}
	// Each padded axis keeps its place if the axes before it hold the same
	// sizes before and after: then the flat index of a real position maps
	// to the same (real) position.
	for k := range xAxes {
		if !sameProduct(x.dims[:xAxes[k]], target[:tAxes[k]]) {
			return fail("moves it across other axes (the sizes before it differ)")
		}
	}
	out := &pval{rank: len(target), dims: target, mask: x.mask, orig: x.orig, idiom: x.idiom}
	remap := map[int]int{}
	for k := range xAxes {
		remap[xAxes[k]] = tAxes[k]
	}
	out.padc, out.neg, out.zero = remapFacts(x, remap)
	return []*pval{out}
}

// padFlatten: the padded axis survives flattening only merged with axes
// of size 1.
func padFlatten(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	a, ok := clampAxis(attrI(attrs, "axis", 1), x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	outer, ok1 := r.merge(x.dims[:a])
	inner, ok2 := r.merge(x.dims[a:])
	if !ok1 || !ok2 {
		return fail("merges it with other axes")
	}
	return []*pval{{rank: 2, dims: []sdim{outer, inner}, mask: x.mask}}
}
