package engine

import "github.com/tensorbridge/tensorbridge/cpu/vec"

// Fused regions whose innermost axis is short (a bias and a clip over a
// 7 x 7 plane of each channel: 49 values a row) run several rows per
// tile. One row per tile would pay the tile's fixed cost (its index, each
// load's offset, one call per op) for every 49 values: about a fifth of
// MobileNetV2's time at batch 1 (`tensorbridge bench --cpuprofile`). A
// group of rows is contiguous in the region's output, so the ops run once
// over all its values; each load is read row by row into its register
// (or viewed in place when the rows lie back to back in it too). Every
// value goes through the same ops as before: the results are the same
// bits.

// groups computes row groups [lo, hi): group u is rows [u·group,
// (u+1)·group) of the innermost axis, the last one shorter.
func (t *fusedRun) groups(lo, hi int) {
	f := t.f
	w := f.workspace()
	defer f.spaces.Put(w)
	regs, scratch, idx := w.regs, w.scratch, w.idx
	inner := f.dims[len(f.dims)-1]
	for u := lo; u < hi; u++ {
		r0 := u * t.group
		rows := min(t.group, t.rows-r0)
		n := rows * inner
		rowIndex(idx, f.dims, r0)
		for i := range f.loads {
			w.hasFill[i] = false
			regs[i] = f.loads[i].readRows(t.srcs[i], idx, w.idx2, f.dims, rows, scratch[i*tile:i*tile+n])
		}
		out := offset(idx, f.outSt)
		t.ops(regs, scratch, out, n)
	}
}

// rowIndex sets idx to the start of row r of dims (row-major over all
// axes but the innermost, whose index is 0).
func rowIndex(idx, dims []int, r int) {
	idx[len(idx)-1] = 0
	for a := len(dims) - 2; a >= 0; a-- {
		idx[a], r = r%dims[a], r/dims[a]
	}
}

// nextRow advances idx to the next row of dims.
func nextRow(idx, dims []int) {
	for a := len(dims) - 2; a >= 0; a-- {
		if idx[a]++; idx[a] < dims[a] {
			return
		}
		idx[a] = 0
	}
}

// readRows returns the values of rows rows of the load from the row at
// idx: a view of src when they lie back to back in it, else buf (whose
// length is the rows' values) filled row by row. ri is scratch.
func (ld *fusedLoad) readRows(src any, idx, ri, dims []int, rows int, buf []float32) []float32 {
	inner := dims[len(dims)-1]
	s := ld.strides[len(ld.strides)-1]
	copy(ri, idx)
	o0 := offset(ri, ld.strides)
	if v, ok := src.([]float32); ok && s == 1 {
		back := true
		for r := 1; r < rows && back; r++ {
			nextRow(ri, dims)
			back = offset(ri, ld.strides) == o0+r*inner
		}
		if back {
			return v[o0 : o0+rows*inner]
		}
		copy(ri, idx)
	}
	for r := range rows {
		o, seg := offset(ri, ld.strides), buf[r*inner:(r+1)*inner]
		switch v := src.(type) {
		case []float32:
			switch s {
			case 0:
				vec.Fill(seg, v[o])
			case 1:
				copy(seg, v[o:o+inner])
			default:
				vec.Gather(seg, v[o:], s)
			}
		case []bool:
			if s == 1 {
				vec.BoolToF32(seg, v[o:o+inner])
				break
			}
			for i := range seg {
				seg[i] = 0
				if v[o+i*s] {
					seg[i] = 1
				}
			}
		}
		nextRow(ri, dims)
	}
	return buf
}
