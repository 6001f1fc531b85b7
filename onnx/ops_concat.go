package onnx

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Concat and Split, with their host evaluators and padding-analysis rules.

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

// padConcat: joining along another axis keeps positions apart; along the
// padded axis padded rows would land between real ones, refused.
func padConcat(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	rank := -1
	for _, v := range ins {
		if v == nil {
			continue
		}
		if v.rank < 0 {
			return fail("has an input of unknown rank")
		}
		rank = v.rank
	}
	if rank < 0 {
		return fail("has no inputs")
	}
	a, ok := normAxis(attrI(attrs, "axis", 0), rank)
	if !ok {
		return fail("has an axis out of range")
	}
	out := &pval{rank: rank, dims: make([]sdim, rank)}
	var elems []sdim
	trackElems := rank == 1
	sum, known := int64(0), true
	for k, v := range ins {
		if v == nil {
			continue
		}
		if v.rank != rank {
			return fail("joins inputs of different ranks")
		}
		if r.isD(v.dims[a]) {
			return fail("concatenates along it")
		}
		if v.dims[a].k == sConst {
			sum += v.dims[a].c
		} else {
			known = false
		}
		for i, d := range v.dims {
			if i == a {
				continue
			}
			if k == 0 {
				out.dims[i] = d
			} else if r.isD(d) != r.isD(out.dims[i]) || d.k == sMerge && d != out.dims[i] {
				return fail("joins inputs that do not all carry it on the same axes")
			}
		}
		if v.mask {
			out.mask = true
		}
		if v.elems == nil {
			trackElems = false
		}
		elems = append(elems, v.elems...)
	}
	out.dims[a] = sdim{}
	if known {
		out.dims[a] = cdim(sum)
	}
	if trackElems {
		out.elems = elems
		allC := true
		var fc []float64
		for _, e := range elems {
			if e.k != sConst {
				allC = false
			}
			fc = append(fc, float64(e.c))
		}
		if allC {
			out.fc = fc
		}
	} else {
		for _, v := range ins {
			if r.sizeDep(v) {
				return fail("concatenates a value computed from its size")
			}
		}
	}
	return []*pval{out}
}

// padSplit: splitting along another axis keeps positions apart; along
// the padded axis, refused.
func padSplit(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	a, ok := normAxis(attrI(attrs, "axis", 0), x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	if r.isD(x.dims[a]) {
		return fail("splits along it")
	}
	var outs []*pval
	for range n.Output {
		o := &pval{rank: x.rank, dims: append([]sdim{}, x.dims...), mask: x.mask}
		o.dims[a] = sdim{}
		outs = append(outs, o)
	}
	return outs
}
