package engine

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/conv"
)

// Pointwise (1×1) and depthwise convolutions run on package conv: 1×1
// convolutions read the input as the product's operand with no im2col
// copy, and depthwise ones apply a kernel row's taps in one pass. Measured
// on MobileNetV2 and ResNet-50 (BENCHMARKS.md) they beat the im2col path
// of conv.go, which stays faster on the 3×3 and 7×7 layers of ResNet-18.
// So do convolutions of at most 4 input channels per group by a constant
// kernel (an image's first layer, at inference): package conv's channel-major patches are a row-major
// operand the product reads fast, where conv.go's channels-last patches
// copy 3 values per tap (MobileNetV2 batch 1, one thread: 6.4-6.6 ->
// 6.0-6.1 ms; batch 8: 52.6-54.5 -> 48.2-48.7 ms; ResNet-18 batch 8 222
// -> 215 ms).

// directConv reports whether n is a convolution package conv runs better.
func directConv(n *node, a convAttr) bool {
	ker := n.in[1].shape()
	pointwise := true
	for _, ax := range a.axes.KernelSpatial {
		if ker.Dimensions[ax] != 1 {
			pointwise = false
		}
	}
	cin := n.in[0].shape().Dimensions[a.axes.InputChannels]
	firstLayer := cin/a.channelGroups <= 4 && n.in[1].n.konst != nil // inference weights; training keeps conv.go's paths
	return pointwise || (a.channelGroups > 1 && a.channelGroups == cin) || firstLayer
}

// convKernelPkg returns the kernel running n on package conv; a constant
// kernel is packed once, here, and the step then reads only the input.
func convKernelPkg(e *Engine, n *node, a convAttr) (kernel, []*value) {
	p, out := convParamsPkg(n, a), n.shapes[0]
	if k := n.in[1].n; k.konst != nil {
		if flat, err := e.inner.BufferData(k.konst); err == nil {
			packed, perr := conv.PackKernel(p, flat.([]float32))
			if perr != nil {
				return nil, nil
			}
			p.Cache = new(conv.KernelCache) // the same packed kernel at every run
			return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
				return runConvPkg(r, ins[0], nil, packed, p, out)
			}, n.in[:1]
		}
	}
	return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		return runConvPkg(r, ins[0], ins[1], nil, p, out)
	}, n.in
}

// convParamsPkg describes the convolution n for package conv, from the
// same axis and stride analysis as the im2col path (newConvPlan).
func convParamsPkg(n *node, a convAttr) *conv.ConvParams {
	p := newConvPlan(n, a)
	return &conv.ConvParams{
		Batch: p.batch, InChannels: p.cg * p.groups, OutChannels: p.og * p.groups, Groups: p.groups,
		InSpatial: p.inSp, KernelSpatial: p.kSp, OutSpatial: p.outSp,
		Strides: p.strides, KernelDilations: p.kDil, InputDilations: p.inDil, PadLow: p.pad,
		InBatchStride: p.inB, InChanStride: p.inC, InSpatialStrides: p.inSt,
		KerOutStride: p.kO, KerInStride: p.kC, KerSpatialStrides: p.kSt,
		OutBatchStride: p.outB, OutChanStride: p.outC, OutSpatialStrides: p.outSt,
	}
}

// runConvPkg runs a convolution of x by kernel, or by packed (a kernel
// packed by conv.PackKernel) when kernel is nil.
func runConvPkg(r *run, x, kernel backends.Buffer, packed []float32, p *conv.ConvParams, outShape shapes.Shape) ([]backends.Buffer, error) {
	in, err := r.f32(x)
	if err != nil {
		return nil, err
	}
	out, flat, err := r.alloc(outShape)
	if err != nil {
		return nil, err
	}
	if packed != nil {
		err = conv.Float32Packed(p, packed, in, flat.([]float32), r.threads)
	} else {
		var k []float32
		if k, err = r.f32(kernel); err == nil {
			err = conv.Float32(p, in, k, flat.([]float32), r.threads)
		}
	}
	if err != nil {
		_ = r.x.e.inner.BufferFinalize(out)
		return nil, err
	}
	return r.one(out), nil
}
