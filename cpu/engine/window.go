package engine

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
	"github.com/tensorbridge/tensorbridge/cpu/vec"
)

// ReduceWindow of float32 (pooling): each output reduces its window in
// row-major window order from the reduction's identity, padding counting
// as the identity, as XLA defines it
// (https://openxla.org/xla/operation_semantics#reducewindow). Base
// dilations run in a segment.

type windowPlan struct {
	init            float32
	op              backends.ReduceOpType
	inDims, outDims []int
	win, str, wdil  []int
	padLow          []int
	inSt            []int
	out             shapes.Shape
}

func windowKernel(n *node) kernel {
	a := n.attr.(windowAttr)
	if !allFloat32(n) {
		return nil
	}
	in := n.in[0].shape()
	r := in.Rank()
	p := &windowPlan{op: a.red, inDims: in.Dimensions, outDims: n.shapes[0].Dimensions, inSt: rowMajorStrides(in.Dimensions), out: n.shapes[0]}
	for i := range r {
		if at(a.baseDil, i, 1) != 1 {
			return nil
		}
		p.win = append(p.win, at(a.dims, i, 1))
		p.str = append(p.str, at(a.strides, i, 1))
		p.wdil = append(p.wdil, at(a.windowDil, i, 1))
		low := 0
		if i < len(a.paddings) {
			low = a.paddings[i][0]
		}
		p.padLow = append(p.padLow, low)
	}
	switch a.red {
	case backends.ReduceOpMax:
		p.init = dtypes.Float32.LowestValue().(float32)
	case backends.ReduceOpMin:
		p.init = dtypes.Float32.HighestValue().(float32)
	case backends.ReduceOpSum:
	default:
		return nil
	}
	return p.run
}

func (p *windowPlan) run(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
	x, err := r.f32(ins[0])
	if err != nil {
		return nil, err
	}
	ob, flat, err := r.alloc(p.out)
	if err != nil {
		return nil, err
	}
	y := flat.([]float32)
	if r2 := len(p.outDims); r2 >= 2 && len(y) > 0 && p.pooling2D() {
		err = p.run2D(x, y, r.threads)
		if err != nil {
			_ = r.x.e.inner.BufferFinalize(ob)
			return nil, err
		}
		return r.one(ob), nil
	}
	last := max(1, p.outDims[len(p.outDims)-1])
	if len(y) > 0 {
		err = parallel.For(len(y)/last, max(1, 4096/last), r.threads, func(lo, hi int) {
			oidx, widx := make([]int, len(p.outDims)), make([]int, len(p.win))
			for row := lo; row < hi; row++ {
				for j := range last {
					o := row*last + j
					rem := o
					for i := len(p.outDims) - 1; i >= 0; i-- {
						oidx[i], rem = rem%p.outDims[i], rem/p.outDims[i]
					}
					y[o] = p.reduce(x, oidx, widx)
				}
			}
		})
	}
	if err != nil {
		_ = r.x.e.inner.BufferFinalize(ob)
		return nil, err
	}
	return r.one(ob), nil
}

// reduce reduces the window of output position oidx.
func (p *windowPlan) reduce(x []float32, oidx, widx []int) float32 {
	acc := p.init
	clear(widx)
	for {
		off, ok := 0, true
		for i, w := range widx {
			c := oidx[i]*p.str[i] - p.padLow[i] + w*p.wdil[i]
			if c < 0 || c >= p.inDims[i] {
				ok = false
				break
			}
			off += c * p.inSt[i]
		}
		if ok {
			v := x[off]
			switch p.op {
			case backends.ReduceOpMax:
				acc = max(acc, v)
			case backends.ReduceOpMin:
				acc = min(acc, v)
			default:
				acc += v
			}
		}
		i := len(widx) - 1
		for ; i >= 0; i-- {
			if widx[i]++; widx[i] < p.win[i] {
				break
			}
			widx[i] = 0
		}
		if i < 0 {
			return acc
		}
	}
}

// pooling2D reports whether the window spans only the last two axes.
func (p *windowPlan) pooling2D() bool {
	r := len(p.win)
	for i := range r - 2 {
		if p.win[i] != 1 || p.str[i] != 1 || p.padLow[i] != 0 || p.inDims[i] != p.outDims[i] {
			return false
		}
	}
	return true
}

// run2D pools each plane of the last two axes row by row, the window's
// taps in row-major order as reduce takes them.
func (p *windowPlan) run2D(x, y []float32, threads int) error {
	r := len(p.win)
	ih, iw, oh, ow := p.inDims[r-2], p.inDims[r-1], p.outDims[r-2], p.outDims[r-1]
	planes := len(y) / (oh * ow)
	return parallel.For(planes, 1, threads, func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			in, out := x[pl*ih*iw:(pl+1)*ih*iw], y[pl*oh*ow:(pl+1)*oh*ow]
			for i := range out {
				out[i] = p.init
			}
			for oy := range oh {
				acc := out[oy*ow : (oy+1)*ow]
				for ky := range p.win[r-2] {
					iy := oy*p.str[r-2] - p.padLow[r-2] + ky*p.wdil[r-2]
					if iy < 0 || iy >= ih {
						continue
					}
					row := in[iy*iw : (iy+1)*iw]
					for kx := range p.win[r-1] {
						off := kx*p.wdil[r-1] - p.padLow[r-1]
						a, b := rangeInside(off, p.str[r-1], iw, ow)
						p.combineRun(acc[a:b], row, a*p.str[r-1]+off, p.str[r-1])
					}
				}
			}
		}
	})
}

// combineRun folds row[start+i*stride] into acc[i].
func (p *windowPlan) combineRun(acc, row []float32, start, stride int) {
	src := row[start:]
	if stride != 1 {
		t := getF32(len(acc))
		defer putF32(t)
		vec.Gather(*t, src, stride)
		src = *t
	}
	switch p.op {
	case backends.ReduceOpMax:
		vec.Max(acc, acc, src)
	case backends.ReduceOpMin:
		vec.Min(acc, acc, src)
	default:
		vec.Add(acc, acc, src)
	}
}

// rangeInside returns the outputs x in [0, n) whose input x·stride+off
// lies in [0, size).
func rangeInside(off, stride, size, n int) (lo, hi int) {
	lo = 0
	if off < 0 {
		lo = (-off + stride - 1) / stride
	}
	hi = n
	if last := size - 1 - off; last < 0 {
		hi = 0
	} else {
		hi = min(n, last/stride+1)
	}
	return min(lo, hi), hi
}
