package onnx

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Slice and Gather: selecting elements along axes, with their host
// evaluators and padding-analysis rules.

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

// padSlice: slicing other axes keeps positions apart; slicing the padded
// axis is refused. Slices of shape vectors are followed element by
// element.
func padSlice(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has an input of unknown rank")
	}
	var starts, ends, axes []int64
	var haveSE, haveAxes bool
	if s, ok := attrIs(attrs, "starts"); ok {
		starts, haveSE = s, true
		ends, _ = attrIs(attrs, "ends")
		axes, haveAxes = attrIs(attrs, "axes")
	} else {
		var ok1, ok2 bool
		starts, ok1 = r.constInts(n, 1)
		ends, ok2 = r.constInts(n, 2)
		haveSE = ok1 && ok2
		if len(n.Input) > 3 && n.Input[3] != "" {
			axes, haveAxes = r.constInts(n, 3)
			if !haveAxes {
				return fail("slices axes the analysis does not know")
			}
		}
		if len(n.Input) > 4 && n.Input[4] != "" {
			if _, ok := r.constInts(n, 4); !ok {
				return fail("slices with steps the analysis does not know")
			}
		}
		for i := 1; i < len(n.Input) && i < 3; i++ {
			if v := r.vals[n.Input[i]]; r.sizeDep(v) {
				return fail("slices at positions computed from its size")
			}
		}
	}
	if !haveAxes {
		if !haveSE {
			// Unknown bounds: any axis may be sliced.
			for i := 0; i < x.rank; i++ {
				axes = append(axes, int64(i))
			}
		} else {
			for i := range starts {
				axes = append(axes, int64(i))
			}
		}
	}
	out := &pval{rank: x.rank, dims: append([]sdim{}, x.dims...), mask: x.mask}
	steps, _ := r.constInts(n, 4)
	for k, a64 := range axes {
		a, ok := normAxis(a64, x.rank)
		if !ok {
			return fail("has an axis out of range")
		}
		if r.isD(x.dims[a]) {
			return fail("slices along it")
		}
		out.dims[a] = slicedDim(x.dims[a], starts, ends, steps, k, haveSE)
		if out.dims[a].k == sOpaque {
			out.dims[a] = r.slicedToSym(n, k)
		}
	}
	if x.rank == 1 && x.elems != nil && haveSE && len(starts) == 1 && len(ends) == 1 {
		l := int64(len(x.elems))
		s, e := starts[0], ends[0]
		if s < 0 {
			s += l
		}
		if e < 0 {
			e += l
		}
		s, e = max(0, min(s, l)), max(0, min(e, l))
		if e >= s {
			out.elems = append([]sdim{}, x.elems[s:e]...)
			out.dims = []sdim{cdim(e - s)}
			if x.fc != nil {
				out.fc = x.fc[s:e]
			}
		}
	} else if r.sizeDep(x) {
		return fail("slices a value computed from its size")
	}
	return []*pval{out}
}

// padGather: gathering along another axis keeps the padded axis; along the
// padded axis only at position 0 (certainly real). Gathers from shape
// vectors are followed element by element.
func padGather(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x, idx := ins[0], padIn(ins, 1)
	if x.rank < 0 || idx == nil || idx.rank < 0 {
		return fail("has an input of unknown rank")
	}
	a, ok := normAxis(attrI(attrs, "axis", 0), x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	if r.sizeDep(idx) {
		return fail("gathers at positions computed from its size")
	}
	if r.isD(x.dims[a]) {
		// Only position 0 is certainly real (when the axis is not empty);
		// any other constant index may be past the real size.
		if idx.fc == nil {
			return fail("gathers along it at positions the analysis does not know")
		}
		for _, f := range idx.fc {
			if f != 0 {
				return fail("gathers along it at position %v, which may be padding", f)
			}
		}
	}
	out := &pval{rank: x.rank - 1 + idx.rank, mask: x.mask}
	out.dims = append(out.dims, x.dims[:a]...)
	out.dims = append(out.dims, idx.dims...)
	out.dims = append(out.dims, x.dims[a+1:]...)
	if x.rank == 1 && x.elems != nil && idx.fc != nil {
		for _, f := range idx.fc {
			k := int(f)
			if k < 0 {
				k += len(x.elems)
			}
			if k < 0 || k >= len(x.elems) {
				out.elems = nil
				break
			}
			out.elems = append(out.elems, x.elems[k])
		}
		if out.elems != nil && x.fc != nil {
			for _, e := range out.elems {
				out.fc = append(out.fc, float64(e.c))
			}
		}
	} else if r.sizeDep(x) {
		return fail("gathers from a value computed from its size")
	}
	return []*pval{out}
}
