package onnx

import (
	"fmt"
	"sort"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Ops whose output shape depends on input values: NonZero, Compress,
// Unique. A static graph cannot express them, so their value-determining
// inputs must be known at build time (constants, or value inputs the model
// is specialised on) and they are evaluated on the host; Compress only
// needs its condition.

func init() {
	register("NonZero", 9, nil).withHost(hostNonZero).needsAll()
	register("Compress", 9, convCompress).withHost(hostCompress).needs(1)
	register("Unique", 11, nil).withHost(hostUnique).needsAll()
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("Compress", "NonZero", "Unique")
}

func hostNonZero(c *opCtx) error {
	x := c.hostIn(0)
	f, err := x.floats()
	if err != nil {
		return err
	}
	var coords [][]int
	forEachIndex(x.dims, func(flat int, ix []int) {
		if f[flat] != 0 {
			coords = append(coords, append([]int{}, ix...))
		}
	})
	r, n := x.rank(), len(coords)
	out := make([]int64, r*n)
	for j, ix := range coords {
		for a := range r {
			out[a*n+j] = int64(ix[a])
		}
	}
	c.setHost(0, hostInt64s(out, r, n))
	return nil
}

// compressSelection returns the axis Compress works on (-1: flattened
// input) and the selected indices.
func compressSelection(c *opCtx, dims []int) (int, []int) {
	cond := c.constInts(1)
	axis := -1
	n := numElems(dims)
	if c.hasAttr("axis") {
		axis = c.normAxis(c.attrInt("axis", 0), len(dims))
		n = dims[axis]
	}
	if len(cond) > n {
		c.fail("condition has %d entries for %d elements", len(cond), n)
	}
	sel := []int{}
	for k, v := range cond {
		if v != 0 {
			sel = append(sel, k)
		}
	}
	return axis, sel
}

func convCompress(c *opCtx) error {
	x := c.in(0)
	axis, sel := compressSelection(c, x.Shape().Dimensions)
	if axis < 0 {
		x = graph.Reshape(x, x.Shape().Size())
		axis = 0
	}
	if len(sel) == 0 {
		dims := append([]int{}, x.Shape().Dimensions...)
		dims[axis] = 0
		c.setHost(0, hostZeros(c.dtype(0), dims))
		return nil
	}
	c.set(0, gatherConst(x, axis, sel))
	return nil
}

func hostCompress(c *opCtx) error {
	x := c.hostIn(0)
	axis, sel := compressSelection(c, x.dims)
	if axis < 0 {
		var err error
		if x, err = x.reshaped([]int{x.size()}); err != nil {
			return err
		}
		axis = 0
	}
	s := fullSelection(x.dims)
	s[axis] = sel
	h, err := hostSelect(x, s)
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

// hostUnique finds the unique elements (or slices along axis), sorted or
// in order of first occurrence, with first indices, inverse indices and
// counts.
func hostUnique(c *opCtx) error {
	x := c.hostIn(0)
	if err := x.decode(); err != nil {
		return err
	}
	axis := -1
	if c.hasAttr("axis") {
		axis = c.normAxis(c.attrInt("axis", 0), x.rank())
	}
	work := x
	if axis < 0 {
		var err error
		if work, err = x.reshaped([]int{x.size()}); err != nil {
			return err
		}
		axis = 0
	}
	// Move axis first so each slice is a contiguous run.
	perm := []int{axis}
	for a := range work.rank() {
		if a != axis {
			perm = append(perm, a)
		}
	}
	t, err := work.transposed(perm)
	if err != nil {
		return err
	}
	f, err := t.floats()
	if err != nil {
		return err
	}
	n := t.dims[0]
	width := 1
	if n > 0 {
		width = t.size() / n
	}
	slice := func(k int) []float64 { return f[k*width : (k+1)*width] }
	key := func(k int) string { return fmt.Sprint(slice(k)) }
	first := map[string]int{}
	var order []int // first occurrence of each unique slice
	counts := map[string]int{}
	for k := range n {
		s := key(k)
		if _, ok := first[s]; !ok {
			first[s] = k
			order = append(order, k)
		}
		counts[s]++
	}
	if c.attrInt("sorted", 1) != 0 {
		sort.SliceStable(order, func(a, b int) bool {
			sa, sb := slice(order[a]), slice(order[b])
			for i := range sa {
				if sa[i] != sb[i] {
					return sa[i] < sb[i]
				}
			}
			return false
		})
	}
	pos := map[string]int{}
	for j, k := range order {
		pos[key(k)] = j
	}
	sel := fullSelection(t.dims)
	sel[0] = order
	y, err := hostSelect(t, sel)
	if err != nil {
		return err
	}
	inv := make([]int, len(perm))
	for k, p := range perm {
		inv[p] = k
	}
	if y, err = y.transposed(inv); err != nil {
		return err
	}
	idx := make([]int64, len(order))
	cnt := make([]int64, len(order))
	for j, k := range order {
		idx[j] = int64(k)
		cnt[j] = int64(counts[key(k)])
	}
	inverse := make([]int64, n)
	for k := range n {
		inverse[k] = int64(pos[key(k)])
	}
	c.setHost(0, y)
	c.setHost(1, hostInt64s(idx))
	c.setHost(2, hostInt64s(inverse))
	c.setHost(3, hostInt64s(cnt))
	return nil
}
