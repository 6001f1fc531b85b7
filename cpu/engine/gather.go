package engine

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Gather (XLA's, https://openxla.org/xla/operation_semantics#gather) of
// any whole-byte dtype, copying contiguous runs of the slices. Start
// indices are clamped so the slice stays inside the operand, as XLA does.

type gatherAttr struct {
	indexVectorAxis                                     int
	offsetOutputAxes, collapsedSliceAxes, startIndexMap []int
	sliceSizes                                          []int
}

type gatherPlan struct {
	size                 int   // element bytes
	opDims, opSt         []int // operand dimensions and strides
	sliceSizes           []int
	startMap             []int
	idxBatchDims         []int // dimensions of the indices' batch axes
	idxBatchSt           []int // their strides in the indices
	idxVecStride, idxLen int   // stride and length of the index vector
	outBatchSt           []int // output stride of each batch axis
	offAxes              []int // operand axes that are not collapsed
	offOutSt             []int // output stride of each
	idxDT                dtypes.DType
	outShape             struct{ s shapes.Shape }
}

// gatherKernel returns the native Gather of n, or nil.
func gatherKernel(n *node) kernel {
	op, idx, out := n.in[0].shape(), n.in[1].shape(), n.shapes[0]
	a, ok := n.attr.(gatherAttr)
	if !ok || !byteSized(op) || (idx.DType != dtypes.Int32 && idx.DType != dtypes.Int64) {
		return nil
	}
	p := &gatherPlan{size: op.DType.Size(), opDims: op.Dimensions, opSt: rowMajorStrides(op.Dimensions),
		sliceSizes: a.sliceSizes, startMap: a.startIndexMap, idxDT: idx.DType}
	p.outShape.s = out
	ist, ost := rowMajorStrides(idx.Dimensions), rowMajorStrides(out.Dimensions)
	p.idxLen, p.idxVecStride = 1, 0
	for ax, d := range idx.Dimensions {
		if ax == a.indexVectorAxis {
			p.idxLen, p.idxVecStride = d, ist[ax]
			continue
		}
		p.idxBatchDims, p.idxBatchSt = append(p.idxBatchDims, d), append(p.idxBatchSt, ist[ax])
	}
	if p.idxLen != len(a.startIndexMap) {
		return nil
	}
	for ax := range out.Rank() {
		if !slices.Contains(a.offsetOutputAxes, ax) {
			p.outBatchSt = append(p.outBatchSt, ost[ax])
		}
	}
	k := 0
	for ax := range op.Rank() {
		if slices.Contains(a.collapsedSliceAxes, ax) {
			continue
		}
		p.offAxes = append(p.offAxes, ax)
		p.offOutSt = append(p.offOutSt, ost[a.offsetOutputAxes[k]])
		k++
	}
	if len(p.outBatchSt) != len(p.idxBatchDims) {
		return nil
	}
	return p.run
}

func (p *gatherPlan) run(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
	src, err := r.data(ins[0])
	if err != nil {
		return nil, err
	}
	iflat, err := r.data(ins[1])
	if err != nil {
		return nil, err
	}
	ob, dst, err := r.alloc(p.outShape.s)
	if err != nil {
		return nil, err
	}
	if p.outShape.s.Size() == 0 {
		return r.one(ob), nil
	}
	sb, db := rawBytes(src, p.size), rawBytes(dst, p.size)
	read := indexReader(iflat)
	if read == nil {
		return nil, fmt.Errorf("gather: indices of type %T", iflat)
	}
	bidx := make([]int, len(p.idxBatchDims))
	start := make([]int, len(p.opDims))
	nb := 1
	for _, d := range p.idxBatchDims {
		nb *= d
	}
	for range nb {
		io, oo := 0, 0
		for i, v := range bidx {
			io += v * p.idxBatchSt[i]
			oo += v * p.outBatchSt[i]
		}
		clear(start)
		for i, ax := range p.startMap {
			s := read(io + i*p.idxVecStride)
			start[ax] = min(max(s, 0), p.opDims[ax]-p.sliceSizes[ax])
		}
		base := 0
		for ax, s := range start {
			base += s * p.opSt[ax]
		}
		p.copySlice(db, sb, base, oo)
		for i := len(bidx) - 1; i >= 0; i-- {
			if bidx[i]++; bidx[i] < p.idxBatchDims[i] {
				break
			}
			bidx[i] = 0
		}
	}
	return r.one(ob), nil
}

// copySlice copies the slice at operand offset base to output offset oo.
func (p *gatherPlan) copySlice(db, sb []byte, base, oo int) {
	n := len(p.offAxes)
	if n == 0 {
		copy(db[oo*p.size:(oo+1)*p.size], sb[base*p.size:(base+1)*p.size])
		return
	}
	last := p.offAxes[n-1]
	run := p.sliceSizes[last]
	contiguous := p.opSt[last] == 1 && p.offOutSt[n-1] == 1
	idx := make([]int, n)
	for {
		s, o := base, oo
		for i, ax := range p.offAxes[:n-1] {
			s += idx[i] * p.opSt[ax]
			o += idx[i] * p.offOutSt[i]
		}
		if contiguous {
			copy(db[o*p.size:(o+run)*p.size], sb[s*p.size:(s+run)*p.size])
		} else {
			for j := range run {
				so, do := (s+j*p.opSt[last])*p.size, (o+j*p.offOutSt[n-1])*p.size
				copy(db[do:do+p.size], sb[so:so+p.size])
			}
		}
		i := n - 2
		for ; i >= 0; i-- {
			if idx[i]++; idx[i] < p.sliceSizes[p.offAxes[i]] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

// indexReader returns a reader of an integer index slice.
func indexReader(flat any) func(i int) int {
	switch v := flat.(type) {
	case []int32:
		return func(i int) int { return int(v[i]) }
	case []int64:
		return func(i int) int { return int(v[i]) }
	}
	return nil
}
