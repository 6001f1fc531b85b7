package engine

import (
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
	"github.com/tensorbridge/tensorbridge/cpu/vec"
)

// Reductions of float32 over any axes. Each output element accumulates
// its inputs in increasing flat order, starting from the reduction's
// identity, in float32: the order and rounding of GoMLX's reference
// engine, so the results are the same bit for bit.

// reducePlan is a reduction seen as [outer, red, inner]: the input's axes
// grouped into a block of kept axes, a block of reduced axes and a block
// of kept axes, when the reduced axes are contiguous; general otherwise.
type reducePlan struct {
	op                backends.OpType
	outer, red, inner int
	init              float32
	dims, axes        []int
	contiguous        bool
	out               shapes.Shape
}

// reduceKernel returns the float32 reduction kernel of n.
func reduceKernel(n *node) kernel {
	if !allFloat32(n) {
		return nil
	}
	p := &reducePlan{op: n.op, dims: n.in[0].shape().Dimensions, axes: slices.Sorted(slices.Values(n.attr.(axesAttr).axes)), out: n.shapes[0]}
	if len(p.axes) == 0 && p.out.Rank() < len(p.dims) {
		p.axes = make([]int, len(p.dims)) // no axes given: GoMLX reduces them all
		for i := range p.axes {
			p.axes[i] = i
		}
	}
	switch n.op {
	case backends.OpTypeReduceSum:
		p.init = 0
	case backends.OpTypeReduceMax:
		p.init = dtypes.Float32.LowestValue().(float32)
	case backends.OpTypeReduceMin:
		p.init = dtypes.Float32.HighestValue().(float32)
	default:
		return nil
	}
	p.outer, p.red, p.inner, p.contiguous = 1, 1, 1, true
	for i, a := range p.axes {
		if i > 0 && a != p.axes[i-1]+1 {
			p.contiguous = false
		}
	}
	if p.contiguous && len(p.axes) > 0 {
		for a, d := range p.dims {
			switch {
			case a < p.axes[0]:
				p.outer *= d
			case a > p.axes[len(p.axes)-1]:
				p.inner *= d
			default:
				p.red *= d
			}
		}
	}
	return p.run
}

// combine returns the reduction's binary operation.
func (p *reducePlan) combine() func(a, b float32) float32 {
	switch p.op {
	case backends.OpTypeReduceMax:
		return func(a, b float32) float32 { return max(a, b) }
	case backends.OpTypeReduceMin:
		return func(a, b float32) float32 { return min(a, b) }
	}
	return func(a, b float32) float32 { return a + b }
}

func (p *reducePlan) run(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
	x, err := r.f32(ins[0])
	if err != nil {
		return nil, err
	}
	out, flat, err := r.alloc(p.out)
	if err != nil {
		return nil, err
	}
	y := flat.([]float32)
	for i := range y {
		y[i] = p.init
	}
	switch {
	case len(x) == 0 || len(y) == 0:
	case !p.contiguous || len(p.axes) == 0:
		if r1, k, r2, ok := p.keptMiddle(); ok {
			err = p.middle(x, y, r1, k, r2, r.threads)
		} else {
			p.general(x, y)
		}
	case p.inner == 1:
		err = p.rows(x, y, r.threads)
	default:
		err = p.columns(x, y, r.threads)
	}
	if err != nil {
		_ = r.x.e.inner.BufferFinalize(out)
		return nil, err
	}
	return r.one(out), nil
}

// rows reduces [outer, red] along red.
func (p *reducePlan) rows(x, y []float32, threads int) error {
	f := p.combine()
	sum := p.op == backends.OpTypeReduceSum
	return parallel.For(p.outer, max(1, 8192/p.red), threads, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			acc, row := y[o], x[o*p.red:(o+1)*p.red]
			switch {
			case sum:
				for _, v := range row {
					acc += v
				}
			case p.op == backends.OpTypeReduceMax:
				acc = vec.MaxReduce(row, acc)
			default:
				for _, v := range row {
					acc = f(acc, v)
				}
			}
			y[o] = acc
		}
	})
}

// columns reduces [outer, red, inner] along red, a vector of inner values
// at a time.
func (p *reducePlan) columns(x, y []float32, threads int) error {
	f := map[backends.OpType]func(d, a, b []float32){
		backends.OpTypeReduceSum: vec.Add, backends.OpTypeReduceMax: vec.Max, backends.OpTypeReduceMin: vec.Min,
	}[p.op]
	return parallel.For(p.outer, max(1, 8192/(p.red*p.inner)), threads, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			acc := y[o*p.inner : (o+1)*p.inner]
			for k := range p.red {
				f(acc, acc, x[(o*p.red+k)*p.inner:][:p.inner]) // element by element, in k order
			}
		}
	})
}

// keptMiddle reports whether the kept axes are one contiguous block with
// reduced axes on both sides, the input seen as [r1, k, r2] (a per-channel
// sum of NCHW activations, as batch normalization's gradients take).
func (p *reducePlan) keptMiddle() (r1, k, r2 int, ok bool) {
	r1, k, r2 = 1, 1, 1
	first, last := -1, -1
	for a, d := range p.dims {
		if slices.Contains(p.axes, a) {
			continue
		}
		if first < 0 {
			first = a
		} else if a != last+1 {
			return 0, 0, 0, false
		}
		last = a
		k *= d
	}
	if first <= 0 || last == len(p.dims)-1 {
		return 0, 0, 0, false
	}
	for a, d := range p.dims {
		switch {
		case a < first:
			r1 *= d
		case a > last:
			r2 *= d
		}
	}
	return r1, k, r2, true
}

// middle reduces [r1, k, r2] to [k] in general's order (each output takes
// its r2-runs one r1 index after the other), four outputs at a time so
// their sums proceed together, the outputs split between the threads.
func (p *reducePlan) middle(x, y []float32, r1, k, r2, threads int) error {
	f := p.combine()
	sum := p.op == backends.OpTypeReduceSum
	return parallel.For(k, max(1, 4096/max(1, r1*r2)), threads, func(lo, hi int) {
		c := lo
		for ; sum && c+4 <= hi; c += 4 {
			a0, a1, a2, a3 := y[c], y[c+1], y[c+2], y[c+3]
			for o := range r1 {
				base := (o*k + c) * r2
				s0, s1, s2, s3 := x[base:base+r2], x[base+r2:base+2*r2], x[base+2*r2:base+3*r2], x[base+3*r2:base+4*r2]
				for i := range s0 {
					a0 += s0[i]
					a1 += s1[i]
					a2 += s2[i]
					a3 += s3[i]
				}
			}
			y[c], y[c+1], y[c+2], y[c+3] = a0, a1, a2, a3
		}
		for ; c < hi; c++ {
			acc := y[c]
			for o := range r1 {
				for _, v := range x[(o*k+c)*r2 : (o*k+c+1)*r2] {
					acc = f(acc, v)
				}
			}
			y[c] = acc
		}
	})
}

// general reduces any axes, walking the input in order.
func (p *reducePlan) general(x, y []float32) {
	f := p.combine()
	r := len(p.dims)
	ost := make([]int, r) // output stride of each input axis (0 when reduced)
	acc := 1
	for a := r - 1; a >= 0; a-- {
		if !slices.Contains(p.axes, a) {
			ost[a] = acc
			acc *= p.dims[a]
		}
	}
	idx := make([]int, r)
	o := 0
	for _, v := range x {
		y[o] = f(y[o], v)
		for a := r - 1; a >= 0; a-- {
			idx[a]++
			o += ost[a]
			if idx[a] < p.dims[a] {
				break
			}
			o -= ost[a] * p.dims[a]
			idx[a] = 0
		}
	}
}
