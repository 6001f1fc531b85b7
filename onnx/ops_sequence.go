package onnx

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Sequence ops. A sequence is a list of tensor values fixed while the graph
// is built (positions must be known at build time); its elements may be
// host values or graph nodes. Sequences cannot be model inputs or outputs
// (Load refuses non-tensor types there).

func init() {
	register("SequenceEmpty", 11, convSequenceEmpty)
	register("SequenceConstruct", 11, convSequenceConstruct)
	register("SequenceInsert", 11, convSequenceInsert).needs(2)
	register("SequenceErase", 11, convSequenceErase).needs(1)
	register("SequenceAt", 11, convSequenceAt).needs(1)
	register("SequenceLength", 11, convSequenceLength)
	register("SplitToSequence", 11, convSplitToSequence).needs(1)
	register("ConcatFromSequence", 11, convConcatFromSequence)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("ConcatFromSequence", "SequenceAt", "SequenceConstruct",
		"SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SplitToSequence")
}

// seqIn returns input k, which must be a sequence.
func (c *opCtx) seqIn(k int) []*value {
	v := c.input(k)
	if v.seq == nil {
		c.fail("input %d (%q) is not a sequence", k, v.name)
	}
	return v.seq
}

// setSeq stores output k as a sequence.
func (c *opCtx) setSeq(k int, elems []*value) {
	if !c.wantsOutput(k) {
		return
	}
	if elems == nil {
		elems = []*value{}
	}
	c.outs[k].seq = elems
	if len(elems) > 0 {
		c.outs[k].dt = elems[0].dt
	}
}

// setValue stores output k as a copy of the tensor value v.
func (c *opCtx) setValue(k int, v *value) {
	if v.host != nil {
		c.setHost(k, v.host)
		return
	}
	c.setDT(k, v.node, v.dt)
}

// seqPos resolves a sequence position (negative counts from the end);
// insert allows position == n.
func (c *opCtx) seqPos(k, n int, def int, insert bool) int {
	if !c.has(k) {
		return def
	}
	p64, err := c.hostIn(k).scalarInt()
	if err != nil {
		panic(err)
	}
	p := int(p64)
	if p < 0 {
		p += n
	}
	limit := n
	if insert {
		limit = n + 1
	}
	if p < 0 || p >= limit {
		c.fail("position %d out of range for a sequence of %d", p64, n)
	}
	return p
}

func convSequenceEmpty(c *opCtx) error {
	c.setSeq(0, nil)
	if c.hasAttr("dtype") {
		dt, err := dtypeFromONNX(onnxpb.DataType(c.attrInt("dtype", 1)))
		if err != nil {
			return err
		}
		c.outs[0].dt = dt
	}
	return nil
}

func convSequenceConstruct(c *opCtx) error {
	elems := make([]*value, 0, len(c.inputs))
	for k := range c.inputs {
		elems = append(elems, c.input(k))
	}
	c.setSeq(0, elems)
	return nil
}

func convSequenceInsert(c *opCtx) error {
	s := c.seqIn(0)
	p := c.seqPos(2, len(s), len(s), true)
	out := append(append(append([]*value{}, s[:p]...), c.input(1)), s[p:]...)
	c.setSeq(0, out)
	return nil
}

func convSequenceErase(c *opCtx) error {
	s := c.seqIn(0)
	if len(s) == 0 {
		c.fail("erasing from an empty sequence")
	}
	p := c.seqPos(1, len(s), len(s)-1, false)
	c.setSeq(0, append(append([]*value{}, s[:p]...), s[p+1:]...))
	return nil
}

func convSequenceAt(c *opCtx) error {
	s := c.seqIn(0)
	if !c.has(1) {
		c.fail("missing position")
	}
	c.setValue(0, s[c.seqPos(1, len(s), 0, false)])
	return nil
}

func convSequenceLength(c *opCtx) error {
	c.setHost(0, hostInt64s([]int64{int64(len(c.seqIn(0)))}, []int{}...))
	return nil
}

// convSplitToSequence splits along axis into chunks of the given sizes,
// of a given size (scalar split), or of size 1 (no split; keepdims=0 then
// removes the axis).
func convSplitToSequence(c *opCtx) error {
	x := c.in(0)
	dims := x.Shape().Dimensions
	axis := c.normAxis(c.attrInt("axis", 0), len(dims))
	n := dims[axis]
	var sizes []int
	squeeze := false
	switch {
	case !c.has(1):
		for range n {
			sizes = append(sizes, 1)
		}
		squeeze = c.attrInt("keepdims", 1) == 0
	case c.rank(1) == 0:
		chunk := int(c.constInts(1)[0])
		if chunk <= 0 {
			c.fail("split size %d must be positive", chunk)
		}
		for left := n; left > 0; left -= chunk {
			sizes = append(sizes, min(chunk, left))
		}
	default:
		total := 0
		for _, s := range c.constInts(1) {
			sizes = append(sizes, int(s))
			total += int(s)
		}
		if total != n {
			c.fail("split sizes %v do not add up to %d", sizes, n)
		}
	}
	elems := make([]*value, 0, len(sizes))
	start := 0
	for _, s := range sizes {
		if s == 0 || numElems(dims) == 0 {
			d := append([]int{}, dims...)
			d[axis] = s
			if squeeze {
				d = append(d[:axis:axis], d[axis+1:]...)
			}
			elems = append(elems, &value{name: c.outs[0].name, dt: c.dtype(0), host: hostZeros(c.dtype(0), d)})
			start += s
			continue
		}
		part := sliceAxis(x, axis, start, start+s, 1)
		if squeeze {
			part = graph.Reshape(part, append(append([]int{}, dims[:axis]...), dims[axis+1:]...)...)
		}
		elems = append(elems, &value{name: c.outs[0].name, dt: c.dtype(0), node: part})
		start += s
	}
	c.setSeq(0, elems)
	return nil
}

// convConcatFromSequence concatenates the elements along axis, or stacks
// them along a new axis when new_axis=1.
func convConcatFromSequence(c *opCtx) error {
	s := c.seqIn(0)
	if len(s) == 0 {
		c.fail("cannot concatenate an empty sequence")
	}
	newAxis := c.attrInt("new_axis", 0) != 0
	parts := make([]*graph.Node, len(s))
	for k, v := range s {
		parts[k] = c.b.nodeOf(v)
	}
	r := parts[0].Rank()
	if newAxis {
		r++
	}
	axis := c.normAxis(c.attrInt("axis", 0), r)
	if newAxis {
		for k, p := range parts {
			d := p.Shape().Dimensions
			parts[k] = graph.Reshape(p, append(append(append([]int{}, d[:axis]...), 1), d[axis:]...)...)
		}
	}
	if len(parts) == 1 {
		c.setDT(0, parts[0], s[0].dt)
		return nil
	}
	c.setDT(0, graph.Concatenate(parts, axis), s[0].dt)
	return nil
}
