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
	return pointwise || (a.channelGroups > 1 && a.channelGroups == cin)
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
			return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
				return runConvPkg(r, ins[0], nil, packed, p, out)
			}, n.in[:1]
		}
	}
	return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		return runConvPkg(r, ins[0], ins[1], nil, p, out)
	}, n.in
}

// convParamsPkg describes the convolution n for package conv.
func convParamsPkg(n *node, a convAttr) *conv.ConvParams {
	in, ker, out := n.in[0].shape(), n.in[1].shape(), n.shapes[0]
	ist, kst, ost := rowMajorStrides(in.Dimensions), rowMajorStrides(ker.Dimensions), rowMajorStrides(out.Dimensions)
	ax := a.axes
	p := &conv.ConvParams{
		Batch: in.Dimensions[ax.InputBatch], InChannels: in.Dimensions[ax.InputChannels],
		OutChannels: out.Dimensions[ax.OutputChannels], Groups: max(a.channelGroups, 1),
		InBatchStride: ist[ax.InputBatch], InChanStride: ist[ax.InputChannels],
		KerOutStride: kst[ax.KernelOutputChannels], KerInStride: kst[ax.KernelInputChannels],
		OutBatchStride: ost[ax.OutputBatch], OutChanStride: ost[ax.OutputChannels],
	}
	for i := range ax.InputSpatial {
		p.InSpatial = append(p.InSpatial, in.Dimensions[ax.InputSpatial[i]])
		p.KernelSpatial = append(p.KernelSpatial, ker.Dimensions[ax.KernelSpatial[i]])
		p.OutSpatial = append(p.OutSpatial, out.Dimensions[ax.OutputSpatial[i]])
		p.InSpatialStrides = append(p.InSpatialStrides, ist[ax.InputSpatial[i]])
		p.KerSpatialStrides = append(p.KerSpatialStrides, kst[ax.KernelSpatial[i]])
		p.OutSpatialStrides = append(p.OutSpatialStrides, ost[ax.OutputSpatial[i]])
		p.Strides = append(p.Strides, at(a.strides, i, 1))
		p.KernelDilations = append(p.KernelDilations, at(a.kerDil, i, 1))
		p.InputDilations = append(p.InputDilations, at(a.inDil, i, 1))
		low := 0
		if i < len(a.paddings) {
			low = a.paddings[i][0]
		}
		p.PadLow = append(p.PadLow, low)
	}
	return p
}

// runConv runs a convolution of x by kernel, or by packed (a kernel
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
