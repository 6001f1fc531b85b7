package engine

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// The ops with parameters beyond their operands. Each records its
// parameters (cloned: callers may reuse their slices) in a replay closure
// and, for ops with native kernels, in an attr the planner reads.

type dotAttr struct{ lc, lb, rc, rb []int }

type convAttr struct {
	axes                      backends.ConvolveAxesConfig
	strides                   []int
	paddings                  [][2]int
	inDil, kerDil             []int
	channelGroups, batchGroup int
}

type axesAttr struct{ axes []int }

type windowAttr struct {
	red                               backends.ReduceOpType
	dims, strides, baseDil, windowDil []int
	paddings                          [][2]int
}

type bnAttr struct {
	eps  float32
	axis int
}

func clonePairs(p [][2]int) [][2]int { return slices.Clone(p) }

// ArgMinMax records GoMLX's ArgMinMax.
func (b *Builder) ArgMinMax(x backends.Op, axis int, outputDType dtypes.DType, isMin bool) (backends.Op, error) {
	return b.one(backends.OpTypeArgMinMax, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.ArgMinMax(in[0], axis, outputDType, isMin)
	}, x)
}

// BatchNormForInference records GoMLX's BatchNormForInference.
func (b *Builder) BatchNormForInference(operand, scale, offset, mean, variance backends.Op, epsilon float32, featureAxis int) (backends.Op, error) {
	return b.one(backends.OpTypeBatchNormForInference, bnAttr{epsilon, featureAxis}, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.BatchNormForInference(in[0], in[1], in[2], in[3], in[4], epsilon, featureAxis)
	}, operand, scale, offset, mean, variance)
}

// BatchNormForTraining records GoMLX's BatchNormForTraining.
func (b *Builder) BatchNormForTraining(operand, scale, offset backends.Op, epsilon float32, featureAxis int) (backends.Op, backends.Op, backends.Op, error) {
	outs, err := b.record(backends.OpTypeBatchNormForTraining, bnAttr{epsilon, featureAxis}, func(t backends.Builder, in []backends.Op) ([]backends.Op, error) {
		n, m, v, err := t.BatchNormForTraining(in[0], in[1], in[2], epsilon, featureAxis)
		return []backends.Op{n, m, v}, err
	}, operand, scale, offset)
	if err != nil {
		return nil, nil, nil, err
	}
	return outs[0], outs[1], outs[2], nil
}

// BatchNormGradient records GoMLX's BatchNormGradient.
func (b *Builder) BatchNormGradient(operand, scale, mean, variance, gradOutput backends.Op, epsilon float32, featureAxis int) (backends.Op, backends.Op, backends.Op, error) {
	outs, err := b.record(backends.OpTypeBatchNormGradient, bnAttr{epsilon, featureAxis}, func(t backends.Builder, in []backends.Op) ([]backends.Op, error) {
		g, s, o, err := t.BatchNormGradient(in[0], in[1], in[2], in[3], in[4], epsilon, featureAxis)
		return []backends.Op{g, s, o}, err
	}, operand, scale, mean, variance, gradOutput)
	if err != nil {
		return nil, nil, nil, err
	}
	return outs[0], outs[1], outs[2], nil
}

// Bitcast records GoMLX's Bitcast.
func (b *Builder) Bitcast(x backends.Op, targetDType dtypes.DType) (backends.Op, error) {
	if v, err := b.val("Bitcast", x); err == nil && (isF16(v) || narrowFloat(targetDType)) {
		if o, ok, err := b.bitcastBF16(v, targetDType); ok {
			return o, err
		}
		return nil, fmt.Errorf("Bitcast %s to %s: the %s engine has no bitcast of float16 (it stores float16 and computes in float32)", v.shape().DType, targetDType, Name)
	}
	return b.one(backends.OpTypeBitcast, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.Bitcast(in[0], targetDType)
	}, x)
}

// BroadcastInDim records GoMLX's BroadcastInDim.
func (b *Builder) BroadcastInDim(x backends.Op, outputShape shapes.Shape, broadcastAxes []int) (backends.Op, error) {
	outputShape, broadcastAxes = outputShape.Clone(), slices.Clone(broadcastAxes)
	if v, err := b.val("BroadcastInDim", x); err == nil && isF16(v) && outputShape.DType == v.shape().DType {
		w, err := b.ConvertDType(v, dtypes.Float32)
		if err != nil {
			return nil, err
		}
		o, err := b.BroadcastInDim(w, shadowShape(outputShape), broadcastAxes)
		if err != nil {
			return nil, err
		}
		return b.ConvertDType(o, outputShape.DType)
	}
	return b.one(backends.OpTypeBroadcastInDim, axesAttr{broadcastAxes}, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.BroadcastInDim(in[0], outputShape, broadcastAxes)
	}, x)
}

// Clamp records GoMLX's Clamp.
func (b *Builder) Clamp(lo, x, hi backends.Op) (backends.Op, error) {
	return b.one(backends.OpTypeClamp, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.Clamp(in[0], in[1], in[2])
	}, lo, x, hi)
}

// Concatenate records GoMLX's Concatenate.
func (b *Builder) Concatenate(axis int, operands ...backends.Op) (backends.Op, error) {
	return b.one(backends.OpTypeConcatenate, axis, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.Concatenate(axis, in...)
	}, operands...)
}

// ConvGeneral records GoMLX's ConvGeneral.
func (b *Builder) ConvGeneral(input, kernel backends.Op, axes backends.ConvolveAxesConfig, strides []int, paddings [][2]int,
	inputDilations, kernelDilations []int, channelGroupCount, batchGroupCount int) (backends.Op, error) {
	a := convAttr{axes: axes.Clone(), strides: slices.Clone(strides), paddings: clonePairs(paddings),
		inDil: slices.Clone(inputDilations), kerDil: slices.Clone(kernelDilations),
		channelGroups: channelGroupCount, batchGroup: batchGroupCount}
	return b.one(backends.OpTypeConvGeneral, a, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.ConvGeneral(in[0], in[1], a.axes, a.strides, a.paddings, a.inDil, a.kerDil, a.channelGroups, a.batchGroup)
	}, input, kernel)
}

// ConvertDType records GoMLX's ConvertDType.
func (b *Builder) ConvertDType(x backends.Op, dtype dtypes.DType) (backends.Op, error) {
	if v, err := b.val("ConvertDType", x); err == nil && (isF16(v) || narrowFloat(dtype)) {
		if v.shape().DType == dtype {
			return x, nil
		}
		if o, ok, err := b.roundTripBF16(v, dtype); ok {
			return o, err
		}
		return b.convertF16(v, dtype)
	}
	return b.one(backends.OpTypeConvertDType, dtype, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.ConvertDType(in[0], dtype)
	}, x)
}

// DotGeneral records GoMLX's DotGeneral.
func (b *Builder) DotGeneral(lhs backends.Op, lhsContractingAxes, lhsBatchAxes []int, rhs backends.Op, rhsContractingAxes, rhsBatchAxes []int) (backends.Op, error) {
	a := dotAttr{slices.Clone(lhsContractingAxes), slices.Clone(lhsBatchAxes), slices.Clone(rhsContractingAxes), slices.Clone(rhsBatchAxes)}
	return b.one(backends.OpTypeDotGeneral, a, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.DotGeneral(in[0], a.lc, a.lb, in[1], a.rc, a.rb)
	}, lhs, rhs)
}

// Dot records XLA's Dot of operands of rank 1 or 2 (the last axis of lhs
// against the first of rhs) as the DotGeneral it is, so it runs natively.
func (b *Builder) Dot(x, y backends.Op) (backends.Op, error) {
	xs, err := b.OpShape(x)
	if err != nil {
		return nil, err
	}
	ys, err := b.OpShape(y)
	if err != nil {
		return nil, err
	}
	if xs.Rank() < 1 || xs.Rank() > 2 || ys.Rank() < 1 || ys.Rank() > 2 {
		return b.binary(backends.OpTypeDot, backends.Builder.Dot, x, y)
	}
	return b.DotGeneral(x, []int{xs.Rank() - 1}, nil, y, []int{0}, nil)
}

// DynamicSlice records GoMLX's DynamicSlice (which simplego lacks: the
// engine runs it natively).
func (b *Builder) DynamicSlice(operand backends.Op, startIndices []backends.Op, sliceDims []int) (backends.Op, error) {
	sliceDims = slices.Clone(sliceDims)
	s, err := b.checkStarts("DynamicSlice", operand, startIndices)
	if err != nil {
		return nil, err
	}
	if len(sliceDims) != s.Rank() {
		return nil, fmt.Errorf("DynamicSlice: %d slice sizes for an operand of rank %d", len(sliceDims), s.Rank())
	}
	for i, d := range sliceDims {
		if d < 0 || d > s.Dimensions[i] {
			return nil, fmt.Errorf("DynamicSlice: slice size %d on axis %d of an operand of shape %s", d, i, s)
		}
	}
	return b.recordShaped(backends.OpTypeDynamicSlice, shapes.Make(s.DType, sliceDims...), func(t backends.Builder, in []backends.Op) ([]backends.Op, error) {
		o, err := t.DynamicSlice(in[0], in[1:], sliceDims)
		return []backends.Op{o}, err
	}, append([]backends.Op{operand}, startIndices...)...)
}

// DynamicUpdateSlice records GoMLX's DynamicUpdateSlice (which simplego
// lacks: the engine runs it natively, in place when it can).
func (b *Builder) DynamicUpdateSlice(operand, update backends.Op, startIndices []backends.Op) (backends.Op, error) {
	s, err := b.checkStarts("DynamicUpdateSlice", operand, startIndices)
	if err != nil {
		return nil, err
	}
	u, err := b.OpShape(update)
	if err != nil {
		return nil, err
	}
	if u.DType != s.DType || u.Rank() != s.Rank() {
		return nil, fmt.Errorf("DynamicUpdateSlice: update %s does not fit operand %s", u, s)
	}
	for i, d := range u.Dimensions {
		if d > s.Dimensions[i] {
			return nil, fmt.Errorf("DynamicUpdateSlice: update %s does not fit operand %s (axis %d)", u, s, i)
		}
	}
	return b.recordShaped(backends.OpTypeDynamicUpdateSlice, s.Clone(), func(t backends.Builder, in []backends.Op) ([]backends.Op, error) {
		o, err := t.DynamicUpdateSlice(in[0], in[1], in[2:])
		return []backends.Op{o}, err
	}, append([]backends.Op{operand, update}, startIndices...)...)
}

// checkStarts checks one scalar integer start index per axis of operand
// and returns the operand's shape.
func (b *Builder) checkStarts(op string, operand backends.Op, startIndices []backends.Op) (shapes.Shape, error) {
	s, err := b.OpShape(operand)
	if err != nil {
		return s, err
	}
	if len(startIndices) != s.Rank() {
		return s, fmt.Errorf("%s: %d start indices for an operand of rank %d", op, len(startIndices), s.Rank())
	}
	for i, st := range startIndices {
		is, err := b.OpShape(st)
		if err != nil {
			return s, err
		}
		if is.Rank() != 0 || (is.DType != dtypes.Int32 && is.DType != dtypes.Int64) {
			return s, fmt.Errorf("%s: start index %d is %s, want a scalar int32 or int64", op, i, is)
		}
	}
	return s, nil
}

// FFT records GoMLX's FFT.
func (b *Builder) FFT(operand backends.Op, fftType backends.FFTType, fftLength []int) (backends.Op, error) {
	fftLength = slices.Clone(fftLength)
	return b.one(backends.OpTypeFFT, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.FFT(in[0], fftType, fftLength)
	}, operand)
}

// Gather records GoMLX's Gather.
func (b *Builder) Gather(operand, startIndices backends.Op, indexVectorAxis int, offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes []int, indicesAreSorted bool) (backends.Op, error) {
	o, c, s, z := slices.Clone(offsetOutputAxes), slices.Clone(collapsedSliceAxes), slices.Clone(startIndexMap), slices.Clone(sliceSizes)
	return b.one(backends.OpTypeGather, gatherAttr{indexVectorAxis, o, c, s, z}, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.Gather(in[0], in[1], indexVectorAxis, o, c, s, z, indicesAreSorted)
	}, operand, startIndices)
}

// Iota records GoMLX's Iota.
func (b *Builder) Iota(shape shapes.Shape, iotaAxis int) (backends.Op, error) {
	shape = shape.Clone()
	if narrowFloat(shape.DType) {
		o, err := b.Iota(shadowShape(shape), iotaAxis)
		if err != nil {
			return nil, err
		}
		return b.ConvertDType(o, shape.DType)
	}
	return b.one(backends.OpTypeIota, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.Iota(shape, iotaAxis)
	})
}

// Pad records GoMLX's Pad.
func (b *Builder) Pad(x, fillValue backends.Op, axesConfig ...backends.PadAxis) (backends.Op, error) {
	axesConfig = slices.Clone(axesConfig)
	return b.one(backends.OpTypePad, padAttr{axesConfig}, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.Pad(in[0], in[1], axesConfig...)
	}, x, fillValue)
}

type reduceFn = func(backends.Builder, backends.Op, ...int) (backends.Op, error)

func (b *Builder) reduce(op backends.OpType, f reduceFn, x backends.Op, axes []int) (backends.Op, error) {
	axes = slices.Clone(axes)
	return b.one(op, axesAttr{axes}, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return f(t, in[0], axes...)
	}, x)
}

// ReduceBitwiseAnd records GoMLX's ReduceBitwiseAnd.
func (b *Builder) ReduceBitwiseAnd(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceBitwiseAnd, backends.Builder.ReduceBitwiseAnd, x, axes)
}

// ReduceBitwiseOr records GoMLX's ReduceBitwiseOr.
func (b *Builder) ReduceBitwiseOr(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceBitwiseOr, backends.Builder.ReduceBitwiseOr, x, axes)
}

// ReduceBitwiseXor records GoMLX's ReduceBitwiseXor.
func (b *Builder) ReduceBitwiseXor(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceBitwiseXor, backends.Builder.ReduceBitwiseXor, x, axes)
}

// ReduceLogicalAnd records GoMLX's ReduceLogicalAnd.
func (b *Builder) ReduceLogicalAnd(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceLogicalAnd, backends.Builder.ReduceLogicalAnd, x, axes)
}

// ReduceLogicalOr records GoMLX's ReduceLogicalOr.
func (b *Builder) ReduceLogicalOr(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceLogicalOr, backends.Builder.ReduceLogicalOr, x, axes)
}

// ReduceLogicalXor records GoMLX's ReduceLogicalXor.
func (b *Builder) ReduceLogicalXor(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceLogicalXor, backends.Builder.ReduceLogicalXor, x, axes)
}

// ReduceMax records GoMLX's ReduceMax.
func (b *Builder) ReduceMax(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceMax, backends.Builder.ReduceMax, x, axes)
}

// ReduceMin records GoMLX's ReduceMin.
func (b *Builder) ReduceMin(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceMin, backends.Builder.ReduceMin, x, axes)
}

// ReduceProduct records GoMLX's ReduceProduct.
func (b *Builder) ReduceProduct(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceProduct, backends.Builder.ReduceProduct, x, axes)
}

// ReduceSum records GoMLX's ReduceSum.
func (b *Builder) ReduceSum(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReduceSum, backends.Builder.ReduceSum, x, axes)
}

// ReduceWindow records GoMLX's ReduceWindow.
func (b *Builder) ReduceWindow(x backends.Op, reductionType backends.ReduceOpType, windowDimensions, strides, baseDilations, windowDilations []int, paddings [][2]int) (backends.Op, error) {
	a := windowAttr{reductionType, slices.Clone(windowDimensions), slices.Clone(strides), slices.Clone(baseDilations),
		slices.Clone(windowDilations), clonePairs(paddings)}
	return b.one(backends.OpTypeReduceWindow, a, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.ReduceWindow(in[0], a.red, a.dims, a.strides, a.baseDil, a.windowDil, a.paddings)
	}, x)
}

// Reshape records GoMLX's Reshape.
func (b *Builder) Reshape(x backends.Op, dimensions ...int) (backends.Op, error) {
	dimensions = slices.Clone(dimensions)
	return b.one(backends.OpTypeReshape, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.Reshape(in[0], dimensions...)
	}, x)
}

// Reverse records GoMLX's Reverse.
func (b *Builder) Reverse(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeReverse, backends.Builder.Reverse, x, axes)
}

// RNGBitGenerator records GoMLX's RNGBitGenerator.
func (b *Builder) RNGBitGenerator(state backends.Op, shape shapes.Shape) (backends.Op, backends.Op, error) {
	shape = shape.Clone()
	outs, err := b.record(backends.OpTypeRNGBitGenerator, nil, func(t backends.Builder, in []backends.Op) ([]backends.Op, error) {
		s, v, err := t.RNGBitGenerator(in[0], shape)
		return []backends.Op{s, v}, err
	}, state)
	if err != nil {
		return nil, nil, err
	}
	return outs[0], outs[1], nil
}

type scatterFn = func(t backends.Builder, operand, scatterIndices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error)

func (b *Builder) scatter(op backends.OpType, f scatterFn, operand, scatterIndices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	u, w, s := slices.Clone(updateWindowAxes), slices.Clone(insertedWindowAxes), slices.Clone(scatterAxesToOperandAxes)
	return b.one(op, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return f(t, in[0], in[1], in[2], indexVectorAxis, u, w, s, indicesAreSorted, uniqueIndices)
	}, operand, scatterIndices, updates)
}

// ScatterMax records GoMLX's ScatterMax.
func (b *Builder) ScatterMax(operand, scatterIndices, updates backends.Op, indexVectorAxis int, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	return b.scatter(backends.OpTypeScatterMax, backends.Builder.ScatterMax, operand, scatterIndices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, indicesAreSorted, uniqueIndices)
}

// ScatterMin records GoMLX's ScatterMin.
func (b *Builder) ScatterMin(operand, scatterIndices, updates backends.Op, indexVectorAxis int, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	return b.scatter(backends.OpTypeScatterMin, backends.Builder.ScatterMin, operand, scatterIndices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, indicesAreSorted, uniqueIndices)
}

// ScatterSum records GoMLX's ScatterSum.
func (b *Builder) ScatterSum(operand, scatterIndices, updates backends.Op, indexVectorAxis int, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	return b.scatter(backends.OpTypeScatterSum, backends.Builder.ScatterSum, operand, scatterIndices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, indicesAreSorted, uniqueIndices)
}

type selScatterFn = func(t backends.Builder, operand, source backends.Op, windowDimensions, windowStrides []int, paddings [][2]int) (backends.Op, error)

func (b *Builder) selectAndScatter(op backends.OpType, f selScatterFn, operand, source backends.Op, windowDimensions, windowStrides []int, paddings [][2]int) (backends.Op, error) {
	d, s, p := slices.Clone(windowDimensions), slices.Clone(windowStrides), clonePairs(paddings)
	return b.one(op, scatterAttr{d, s, p}, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return f(t, in[0], in[1], d, s, p)
	}, operand, source)
}

// SelectAndScatterMax records GoMLX's SelectAndScatterMax.
func (b *Builder) SelectAndScatterMax(operand, source backends.Op, windowDimensions, windowStrides []int, paddings [][2]int) (backends.Op, error) {
	return b.selectAndScatter(backends.OpTypeSelectAndScatterMax, backends.Builder.SelectAndScatterMax, operand, source, windowDimensions, windowStrides, paddings)
}

// SelectAndScatterMin records GoMLX's SelectAndScatterMin.
func (b *Builder) SelectAndScatterMin(operand, source backends.Op, windowDimensions, windowStrides []int, paddings [][2]int) (backends.Op, error) {
	return b.selectAndScatter(backends.OpTypeSelectAndScatterMin, backends.Builder.SelectAndScatterMin, operand, source, windowDimensions, windowStrides, paddings)
}

// Slice records GoMLX's Slice.
func (b *Builder) Slice(x backends.Op, starts, limits, strides []int) (backends.Op, error) {
	starts, limits, strides = slices.Clone(starts), slices.Clone(limits), slices.Clone(strides)
	return b.one(backends.OpTypeSlice, sliceAttr{starts, limits, strides}, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.Slice(in[0], starts, limits, strides)
	}, x)
}

// Transpose records GoMLX's Transpose.
func (b *Builder) Transpose(x backends.Op, permutation ...int) (backends.Op, error) {
	return b.reduce(backends.OpTypeTranspose, backends.Builder.Transpose, x, permutation)
}

// Where records GoMLX's Where.
func (b *Builder) Where(condition, onTrue, onFalse backends.Op) (backends.Op, error) {
	return b.one(backends.OpTypeWhere, nil, func(t backends.Builder, in []backends.Op) (backends.Op, error) {
		return t.Where(in[0], in[1], in[2])
	}, condition, onTrue, onFalse)
}
