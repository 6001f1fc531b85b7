// Package conv computes float32 convolutions (XLA ConvGeneral with feature
// groups) on the CPU. (Window reductions, pooling, are cpu/engine's.)
//
// Tensors are flat slices described by element strides, so any axis layout
// (NCHW, NHWC, OIHW, HWIO, sliced or padded views) is read in place and the
// package does not depend on any engine's shape or buffer types.
package conv

import (
	"fmt"
	"slices"

	"github.com/tensorbridge/tensorbridge/cpu/gemm"
)

// ConvParams describes one convolution: the logical sizes, XLA's window
// configuration and the element strides of every logical axis in the flat
// input, kernel and output slices.
//
// Output channel o belongs to group g = o / (OutChannels/Groups) and reads
// input channels g·Cg … g·Cg+Cg-1 (Cg = InChannels/Groups); the kernel's
// input-channel axis has size Cg. With q = y·Strides - PadLow + k·KernelDilations
// a coordinate in the input dilated by InputDilations, output y reads the
// input element q/InputDilations when q is a multiple of the input dilation
// inside the input, and zero (padding) otherwise.
type ConvParams struct {
	Batch, InChannels, OutChannels, Groups int

	InSpatial, KernelSpatial, OutSpatial []int

	Strides, KernelDilations []int
	// PadLow is the zero padding before each spatial axis (XLA paddings[i][0]);
	// negative values crop. The padding after is implied by OutSpatial.
	PadLow []int
	// InputDilations is XLA's lhs dilation (transposed convolution); nil
	// means all 1.
	InputDilations []int

	InBatchStride, InChanStride int
	InSpatialStrides            []int
	// Kernel axes: output channel, input channel (size Cg), spatial.
	KerOutStride, KerInStride int
	KerSpatialStrides         []int
	OutBatchStride            int
	OutChanStride             int
	OutSpatialStrides         []int

	// Post (nil: none) is applied to every output, with Post.Bias one
	// value per output channel: the bias and ReLU or clip that follow the
	// convolution, run on each block of output while it is in cache
	// instead of as passes of their own (post.go).
	Post *gemm.Post
	// Cache (nil: none) keeps work derived from the kernel between calls:
	// set it only when every call with these params passes the same,
	// unchanged kernel.
	Cache *KernelCache
}

// Validate checks p against slices of the given lengths and returns an
// error naming the first offending field with the expected and actual
// values. Slices may be longer than the region they describe (views).
func (p *ConvParams) Validate(inLen, kerLen, outLen int) error {
	if err := p.validatePost(); err != nil {
		return err
	}
	if err := p.validateShape(); err != nil {
		return err
	}
	if err := p.validateStrides(); err != nil {
		return err
	}
	if err := checkLen("in", inLen, p.inExtent()); err != nil {
		return err
	}
	if err := checkLen("kernel", kerLen, p.kerExtent()); err != nil {
		return err
	}
	return checkLen("out", outLen, p.outExtent())
}

// validateShape checks the ranks, sizes and window configuration.
func (p *ConvParams) validateShape() error {
	n := len(p.InSpatial)
	lists := []struct {
		name string
		v    []int
	}{
		{"KernelSpatial", p.KernelSpatial}, {"OutSpatial", p.OutSpatial},
		{"Strides", p.Strides}, {"KernelDilations", p.KernelDilations},
		{"PadLow", p.PadLow}, {"InSpatialStrides", p.InSpatialStrides},
		{"KerSpatialStrides", p.KerSpatialStrides}, {"OutSpatialStrides", p.OutSpatialStrides},
	}
	for _, l := range lists {
		if len(l.v) != n {
			return fmt.Errorf("conv: len(%s) = %d, want %d (len(InSpatial))", l.name, len(l.v), n)
		}
	}
	if p.InputDilations != nil && len(p.InputDilations) != n {
		return fmt.Errorf("conv: len(InputDilations) = %d, want 0 or %d (len(InSpatial))", len(p.InputDilations), n)
	}
	if err := atLeast(0, "Batch", p.Batch, "InChannels", p.InChannels, "OutChannels", p.OutChannels); err != nil {
		return err
	}
	if p.Groups < 1 {
		return fmt.Errorf("conv: Groups = %d, want ≥ 1", p.Groups)
	}
	if p.InChannels%p.Groups != 0 || p.OutChannels%p.Groups != 0 {
		return fmt.Errorf("conv: Groups = %d must divide InChannels = %d and OutChannels = %d",
			p.Groups, p.InChannels, p.OutChannels)
	}
	return p.validateWindow()
}

// validateWindow checks the per-axis sizes, strides and dilations.
func (p *ConvParams) validateWindow() error {
	for i := range p.InSpatial {
		if err := atLeast(0, fmt.Sprintf("InSpatial[%d]", i), p.InSpatial[i],
			fmt.Sprintf("KernelSpatial[%d]", i), p.KernelSpatial[i],
			fmt.Sprintf("OutSpatial[%d]", i), p.OutSpatial[i]); err != nil {
			return err
		}
		if err := atLeast(1, fmt.Sprintf("Strides[%d]", i), p.Strides[i],
			fmt.Sprintf("KernelDilations[%d]", i), p.KernelDilations[i]); err != nil {
			return err
		}
		if p.InputDilations != nil {
			if err := atLeast(1, fmt.Sprintf("InputDilations[%d]", i), p.InputDilations[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// validateStrides checks that element strides are non-negative and that no
// two output elements share a memory location (workers write in parallel).
func (p *ConvParams) validateStrides() error {
	if err := atLeast(0, "InBatchStride", p.InBatchStride, "InChanStride", p.InChanStride,
		"KerOutStride", p.KerOutStride, "KerInStride", p.KerInStride,
		"OutBatchStride", p.OutBatchStride, "OutChanStride", p.OutChanStride); err != nil {
		return err
	}
	for i := range p.InSpatial {
		if err := atLeast(0, fmt.Sprintf("InSpatialStrides[%d]", i), p.InSpatialStrides[i],
			fmt.Sprintf("KerSpatialStrides[%d]", i), p.KerSpatialStrides[i],
			fmt.Sprintf("OutSpatialStrides[%d]", i), p.OutSpatialStrides[i]); err != nil {
			return err
		}
	}
	dims, strides := p.outAxes()
	if overlapping(dims, strides) {
		return fmt.Errorf("conv: output strides (OutBatchStride, OutChanStride, OutSpatialStrides) = %v for sizes %v make elements overlap", strides, dims)
	}
	return nil
}

// atLeast returns an error for the first (name, value) pair below lo.
func atLeast(lo int, pairs ...any) error {
	for i := 0; i < len(pairs); i += 2 {
		if v := pairs[i+1].(int); v < lo {
			return fmt.Errorf("conv: %s = %d, want ≥ %d", pairs[i].(string), v, lo)
		}
	}
	return nil
}

// checkLen reports a slice shorter than the region its layout spans.
func checkLen(name string, got, want int) error {
	if got < want {
		return fmt.Errorf("conv: len(%s) = %d, want ≥ %d (the extent of its sizes and strides)", name, got, want)
	}
	return nil
}

func (p *ConvParams) inAxes() (dims, strides []int) {
	return append([]int{p.Batch, p.InChannels}, p.InSpatial...),
		append([]int{p.InBatchStride, p.InChanStride}, p.InSpatialStrides...)
}

func (p *ConvParams) kerAxes() (dims, strides []int) {
	return append([]int{p.OutChannels, p.InChannels / p.Groups}, p.KernelSpatial...),
		append([]int{p.KerOutStride, p.KerInStride}, p.KerSpatialStrides...)
}

func (p *ConvParams) outAxes() (dims, strides []int) {
	return append([]int{p.Batch, p.OutChannels}, p.OutSpatial...),
		append([]int{p.OutBatchStride, p.OutChanStride}, p.OutSpatialStrides...)
}

func (p *ConvParams) inExtent() int  { return extent(p.inAxes()) }
func (p *ConvParams) kerExtent() int { return extent(p.kerAxes()) }
func (p *ConvParams) outExtent() int { return extent(p.outAxes()) }

// packedLen is the length of PackKernel's result: OutChannels × Cg·∏KernelSpatial.
func (p *ConvParams) packedLen() int {
	return p.OutChannels * (p.InChannels / p.Groups) * prod(p.KernelSpatial)
}

// normalized returns a copy of a valid p with InputDilations filled in and at
// least one spatial axis (a size-1 axis is added to 0-D convolutions), so the
// kernels can always treat the last spatial axis as the contiguous "row".
func (p *ConvParams) normalized() *ConvParams {
	q := *p
	n := len(p.InSpatial)
	if q.InputDilations == nil {
		q.InputDilations = ones(n)
	}
	for _, s := range []*[]int{&q.InSpatial, &q.KernelSpatial, &q.OutSpatial, &q.Strides,
		&q.KernelDilations, &q.PadLow, &q.InputDilations, &q.InSpatialStrides,
		&q.KerSpatialStrides, &q.OutSpatialStrides} {
		*s = slices.Clone(*s)
		if n == 0 {
			*s = []int{1}
		}
	}
	if n == 0 {
		q.PadLow[0] = 0
	}
	return &q
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}
