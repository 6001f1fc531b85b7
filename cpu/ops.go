package cpu

// Ops GoMLX's backward passes emit that simplego v0.26.0 lacks, composed of
// ops it has. simplego lists Pad, Reverse and SelectAndScatter{Max,Min} as
// "not implemented yet" (backends/simplego/capabilities.go of GoMLX
// v0.26.0), yet graph.Gradient emits Pad for the gradient of every Slice
// and of sum pooling, Reverse for the input gradient of a convolution,
// and SelectAndScatter for that of max pooling. Without them a training
// step on the cpu backend fails while its backward graph is built.
//
// engine wraps the simplego engine and hands out builders that add these
// three ops, computed with Slice, Concatenate, Reshape, BroadcastInDim,
// Max/Min, Equal, Where and Add; every other method is simplego's own.
// The semantics are XLA's (https://openxla.org/xla/operation_semantics#pad,
// #rev_reverse and #selectandscatter); ops_test.go checks each against a
// direct Go implementation of those definitions.

import (
	"fmt"
	"reflect"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	tbengine "github.com/tensorbridge/tensorbridge/cpu/engine"
)

// engine is simplego with the extra ops of this file.
type engine struct {
	backends.Backend
}

// wrapEngine returns eng with Pad, Reverse and SelectAndScatter{Max,Min}.
func wrapEngine(eng backends.Backend) backends.Backend { return &engine{Backend: eng} }

// Capabilities reports simplego's capabilities plus the composed ops.
func (e *engine) Capabilities() backends.Capabilities {
	c := e.Backend.Capabilities().Clone()
	for _, op := range []backends.OpType{backends.OpTypePad, backends.OpTypeReverse,
		backends.OpTypeSelectAndScatterMax, backends.OpTypeSelectAndScatterMin} {
		c.Operations[op] = true
	}
	return c
}

// Builder returns a simplego builder with the composed ops.
func (e *engine) Builder(name string) backends.Builder {
	return &builder{Builder: e.Backend.Builder(name)}
}

// builder is a simplego builder with the composed ops.
type builder struct {
	backends.Builder
}

// fill returns a node of shape s holding the scalar node v everywhere.
func (b *builder) fill(v backends.Op, s shapes.Shape) (backends.Op, error) {
	return b.BroadcastInDim(v, s, nil)
}

// scalar returns a scalar constant of dtype dt holding val (the dtype's
// zero when val is nil).
func (b *builder) scalar(dt dtypes.DType, val any) (backends.Op, error) {
	flat := reflect.MakeSlice(reflect.SliceOf(dt.GoType()), 1, 1)
	if val != nil {
		flat.Index(0).Set(reflect.ValueOf(val))
	}
	return b.Constant(flat.Interface())
}

// withDim returns s with axis a set to n.
func withDim(s shapes.Shape, a, n int) shapes.Shape {
	s = s.Clone()
	s.Dimensions[a] = n
	return s
}

// Pad pads x with fillValue at the start, end and interior of each axis;
// negative start or end padding removes elements (XLA's Pad).
func (b *builder) Pad(x, fillValue backends.Op, axes ...backends.PadAxis) (backends.Op, error) {
	s, err := b.OpShape(x)
	if err != nil {
		return nil, err
	}
	if len(axes) > s.Rank() {
		return nil, fmt.Errorf("Pad: %d axis configurations for an operand of rank %d", len(axes), s.Rank())
	}
	for a, cfg := range axes {
		if cfg.Interior < 0 {
			return nil, fmt.Errorf("Pad: negative interior padding %d on axis %d", cfg.Interior, a)
		}
		if x, err = b.padAxis(x, fillValue, a, cfg); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// padAxis pads one axis: interior first, then the edges (negative edges
// slice).
func (b *builder) padAxis(x, fill backends.Op, a int, cfg backends.PadAxis) (backends.Op, error) {
	s, err := b.OpShape(x)
	if err != nil {
		return nil, err
	}
	n := s.Dimensions[a]
	inner := n
	if n > 0 {
		inner = n + (n-1)*cfg.Interior
	}
	total := cfg.Start + inner + cfg.End
	if total < 0 {
		return nil, fmt.Errorf("Pad: axis %d of size %d padded by %+v has negative size %d", a, n, cfg, total)
	}
	if total == 0 || inner == 0 || cfg.Start <= -inner || cfg.End <= -inner || cfg.Start+cfg.End <= -inner {
		// Nothing of x is left: the result is all fill.
		return b.fill(fill, withDim(s, a, total))
	}
	if cfg.Interior > 0 && n > 1 {
		if x, err = b.interleave(x, fill, s, a, cfg.Interior); err != nil {
			return nil, err
		}
		s = withDim(s, a, inner)
	}
	if cfg.Start < 0 || cfg.End < 0 {
		starts := make([]int, s.Rank())
		limits := append([]int(nil), s.Dimensions...)
		if cfg.Start < 0 {
			starts[a] = -cfg.Start
		}
		if cfg.End < 0 {
			limits[a] += cfg.End
		}
		if x, err = b.Slice(x, starts, limits, ones(len(starts))); err != nil {
			return nil, err
		}
		s = withDim(s, a, limits[a]-starts[a])
	}
	parts := []backends.Op{}
	if cfg.Start > 0 {
		f, err := b.fill(fill, withDim(s, a, cfg.Start))
		if err != nil {
			return nil, err
		}
		parts = append(parts, f)
	}
	parts = append(parts, x)
	if cfg.End > 0 {
		f, err := b.fill(fill, withDim(s, a, cfg.End))
		if err != nil {
			return nil, err
		}
		parts = append(parts, f)
	}
	if len(parts) == 1 {
		return x, nil
	}
	return b.Concatenate(a, parts...)
}

// interleave puts k fill values between consecutive elements of axis a of
// x (shape s, size n > 1 on a): x reshaped to [..., n, 1, ...] is
// concatenated with fill of [..., n, k, ...] on the new axis, flattened
// to n·(k+1) and the trailing k dropped.
func (b *builder) interleave(x, fill backends.Op, s shapes.Shape, a, k int) (backends.Op, error) {
	n := s.Dimensions[a]
	split := make([]int, 0, s.Rank()+1)
	split = append(split, s.Dimensions[:a+1]...)
	split = append(split, 1)
	split = append(split, s.Dimensions[a+1:]...)
	x, err := b.Reshape(x, split...)
	if err != nil {
		return nil, err
	}
	fs := shapes.Make(s.DType, split...)
	fs.Dimensions[a+1] = k
	f, err := b.fill(fill, fs)
	if err != nil {
		return nil, err
	}
	if x, err = b.Concatenate(a+1, x, f); err != nil {
		return nil, err
	}
	flat := append([]int(nil), s.Dimensions...)
	flat[a] = n * (k + 1)
	if x, err = b.Reshape(x, flat...); err != nil {
		return nil, err
	}
	limits := append([]int(nil), flat...)
	limits[a] = n*(k+1) - k
	return b.Slice(x, make([]int, len(flat)), limits, ones(len(flat)))
}

// Reverse reverses x along the given axes, by concatenating its
// single-element slices in reverse order.
func (b *builder) Reverse(x backends.Op, axes ...int) (backends.Op, error) {
	s, err := b.OpShape(x)
	if err != nil {
		return nil, err
	}
	for _, a := range axes {
		if a < 0 || a >= s.Rank() {
			return nil, fmt.Errorf("Reverse: axis %d out of range for rank %d", a, s.Rank())
		}
		n := s.Dimensions[a]
		if n <= 1 {
			continue
		}
		parts := make([]backends.Op, n)
		for i := range n {
			starts := make([]int, s.Rank())
			limits := append([]int(nil), s.Dimensions...)
			starts[a], limits[a] = n-1-i, n-i
			if parts[i], err = b.Slice(x, starts, limits, ones(len(starts))); err != nil {
				return nil, err
			}
		}
		if x, err = b.Concatenate(a, parts...); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// SelectAndScatterMax adds each source value to the operand position
// holding its window's maximum (the first one in row-major order on
// ties, as XLA's select with GE): the gradient of max pooling.
func (b *builder) SelectAndScatterMax(operand, source backends.Op, window, strides []int, paddings [][2]int) (backends.Op, error) {
	return b.selectAndScatter(operand, source, window, strides, paddings, true)
}

// SelectAndScatterMin is SelectAndScatterMax for the window's minimum.
func (b *builder) SelectAndScatterMin(operand, source backends.Op, window, strides []int, paddings [][2]int) (backends.Op, error) {
	return b.selectAndScatter(operand, source, window, strides, paddings, false)
}

// selectAndScatter pads the operand with the reduction's identity, takes
// for each window offset k the strided slice x_k of the padded operand
// aligned with source, the window extremum m = max_k x_k, the mask of the
// first k with x_k = m, and places each masked source at its window
// position (a Pad with interior stride-1), summing over k; the padding is
// sliced off at the end.
func (b *builder) selectAndScatter(operand, source backends.Op, window, strides []int, paddings [][2]int, isMax bool) (backends.Op, error) {
	xs, err := b.OpShape(operand)
	if err != nil {
		return nil, err
	}
	ss, err := b.OpShape(source)
	if err != nil {
		return nil, err
	}
	r := xs.Rank()
	if len(window) != r || ss.Rank() != r || (len(strides) != 0 && len(strides) != r) || (len(paddings) != 0 && len(paddings) != r) {
		return nil, fmt.Errorf("SelectAndScatter: operand %s, source %s, window %v, strides %v, paddings %v do not agree in rank", xs, ss, window, strides, paddings)
	}
	if len(strides) == 0 {
		strides = ones(r)
	}
	if len(paddings) == 0 {
		paddings = make([][2]int, r)
	}
	ident := xs.DType.LowestValue()
	if !isMax {
		ident = xs.DType.HighestValue()
	}
	identOp, err := b.scalar(xs.DType, ident)
	if err != nil {
		return nil, err
	}
	zero, err := b.scalar(xs.DType, nil)
	if err != nil {
		return nil, err
	}
	padCfg := make([]backends.PadAxis, r)
	padded := make([]int, r)
	for a := range r {
		padCfg[a] = backends.PadAxis{Start: paddings[a][0], End: paddings[a][1]}
		padded[a] = paddings[a][0] + xs.Dimensions[a] + paddings[a][1]
		if ss.Dimensions[a] > 0 && (ss.Dimensions[a]-1)*strides[a]+window[a] > padded[a] {
			return nil, fmt.Errorf("SelectAndScatter: source %s too large for operand %s with window %v, strides %v, paddings %v", ss, xs, window, strides, paddings)
		}
	}
	if ss.Size() == 0 {
		return b.fill(zero, xs)
	}
	px, err := b.Pad(operand, identOp, padCfg...)
	if err != nil {
		return nil, err
	}
	offsets := tbengine.WindowOffsets(window) // the engine's native kernel walks windows in the same order
	slices := make([]backends.Op, len(offsets))
	var m backends.Op
	for i, k := range offsets {
		starts := make([]int, r)
		limits := make([]int, r)
		for a := range r {
			starts[a] = k[a]
			limits[a] = k[a] + (ss.Dimensions[a]-1)*strides[a] + 1
		}
		if slices[i], err = b.Slice(px, starts, limits, strides); err != nil {
			return nil, err
		}
		switch {
		case i == 0:
			m = slices[i]
		case isMax:
			m, err = b.Max(m, slices[i])
		default:
			m, err = b.Min(m, slices[i])
		}
		if err != nil {
			return nil, err
		}
	}
	zeros, err := b.fill(zero, ss)
	if err != nil {
		return nil, err
	}
	var taken, sum backends.Op
	for i, k := range offsets {
		hit, err := b.Equal(slices[i], m)
		if err != nil {
			return nil, err
		}
		if taken != nil {
			free, err := b.LogicalNot(taken)
			if err != nil {
				return nil, err
			}
			if hit, err = b.LogicalAnd(hit, free); err != nil {
				return nil, err
			}
			if taken, err = b.LogicalOr(taken, hit); err != nil {
				return nil, err
			}
		} else {
			taken = hit
		}
		contrib, err := b.Where(hit, source, zeros)
		if err != nil {
			return nil, err
		}
		place := make([]backends.PadAxis, r)
		for a := range r {
			used := k[a] + (ss.Dimensions[a]-1)*strides[a] + 1
			place[a] = backends.PadAxis{Start: k[a], Interior: strides[a] - 1, End: padded[a] - used}
		}
		placed, err := b.Pad(contrib, zero, place...)
		if err != nil {
			return nil, err
		}
		if sum == nil {
			sum = placed
		} else if sum, err = b.Add(sum, placed); err != nil {
			return nil, err
		}
	}
	starts := make([]int, r)
	limits := make([]int, r)
	for a := range r {
		starts[a] = paddings[a][0]
		limits[a] = paddings[a][0] + xs.Dimensions[a]
	}
	return b.Slice(sum, starts, limits, ones(r))
}

// ones returns n ones (unit strides: simplego's Slice wants them spelled out).
func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// ConvGeneral is simplego's, with unset (nil or zero) strides and
// dilations read as 1. GoMLX v0.26.0's convolution gradients build their
// reverse convolutions without setting strides (ops_convolve.go,
// convVJPWrtX and convVJPWrtKernel), so the graph layer passes nil; XLA
// reads that as 1, but simplego's shape inference (shapeinference.go,
// ConvGeneralOp) leaves the stride 0 and refuses it, so without this no
// convolution could be differentiated on this backend.
func (b *builder) ConvGeneral(input, kernel backends.Op, axes backends.ConvolveAxesConfig,
	strides []int, paddings [][2]int, inputDilations, kernelDilations []int,
	channelGroupCount, batchGroupCount int) (backends.Op, error) {
	if len(strides) == 0 {
		strides = ones(len(axes.InputSpatial))
	}
	return b.Builder.ConvGeneral(input, kernel, axes, unsetToOne(strides), paddings,
		unsetToOne(inputDilations), unsetToOne(kernelDilations), channelGroupCount, batchGroupCount)
}

// unsetToOne returns v with its zeros replaced by ones (a copy when any).
func unsetToOne(v []int) []int {
	for i, x := range v {
		if x == 0 {
			out := append([]int(nil), v...)
			for j := i; j < len(out); j++ {
				if out[j] == 0 {
					out[j] = 1
				}
			}
			return out
		}
	}
	return v
}
