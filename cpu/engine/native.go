package engine

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tensorbridge/tensorbridge/cpu/gemm"
)

// KernelName names the matrix-multiply micro-kernel this CPU runs.
func KernelName() string { return gemm.KernelName() }

// nativeKernel returns the native kernel for n and the inputs it reads
// (n's, or fewer when it prepared some at compile time), or a nil kernel
// when n runs in a segment of the inner engine (its op, dtype or
// parameters have no kernel here yet).
func nativeKernel(e *Engine, n *node) (kernel, []*value) {
	switch n.op {
	case backends.OpTypeDotGeneral:
		return dotKernel(e, n)
	case backends.OpTypeConvGeneral:
		return convKernel(e, n)
	case backends.OpTypeReduceWindow:
		return windowKernel(n), n.in
	case backends.OpTypeDynamicSlice:
		return dynamicSliceKernel(n), n.in
	case backends.OpTypeDynamicUpdateSlice:
		return dynamicUpdateSliceKernel(n), n.in
	case backends.OpTypeGather:
		return gatherKernel(n), n.in
	case backends.OpTypeSlice:
		return sliceKernel(n), n.in
	case backends.OpTypeConcatenate:
		return concatKernel(n), n.in
	case backends.OpTypeReduceSum, backends.OpTypeReduceMax, backends.OpTypeReduceMin:
		return reduceKernel(n), n.in
	case backends.OpTypeBroadcastInDim:
		return broadcastKernel(n), n.in
	case backends.OpTypePad:
		return padKernel(n), n.in
	case backends.OpTypeReverse:
		return reverseKernel(n), n.in
	case backends.OpTypeSelectAndScatterMax, backends.OpTypeSelectAndScatterMin:
		return scatterKernel(n), n.in
	case backends.OpTypeConvertDType:
		if isRoundBF16(n) {
			return roundBF16Kernel(e, n), n.in
		}
		return convertF16Kernel(n), n.in
	case backends.OpTypeBitcast:
		return bitcast16Kernel(n), n.in
	}
	return nil, nil
}

// allFloat32 reports whether n's inputs and outputs are all float32.
func allFloat32(n *node) bool {
	for _, v := range n.in {
		if v.shape().DType != dtypes.Float32 {
			return false
		}
	}
	for _, s := range n.shapes {
		if s.DType != dtypes.Float32 {
			return false
		}
	}
	return true
}
