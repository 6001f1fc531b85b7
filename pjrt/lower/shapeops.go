package lower

import (
	"fmt"
	"slices"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Reshape reinterprets x with new dimensions of the same total size.
func (b *Builder) Reshape(x backends.Op, dims ...int) (out backends.Op, err error) {
	defer b.guard("Reshape", &err)
	ns, err := b.nodes("Reshape", x)
	if err != nil {
		return nil, err
	}
	target := shapes.Shape{DType: ns[0].shape.DType, Dimensions: slices.Clone(dims)}
	if err := validShape(target); err != nil {
		return nil, b.opError("Reshape", err)
	}
	v, err := stablehlo.Reshape(ns[0].value, toXShape(target))
	if err != nil {
		return nil, b.opError("Reshape", err)
	}
	return b.node(v), nil
}

// Transpose permutes the axes of x: output axis i is input axis perm[i].
func (b *Builder) Transpose(x backends.Op, perm ...int) (out backends.Op, err error) {
	defer b.guard("Transpose", &err)
	ns, err := b.nodes("Transpose", x)
	if err != nil {
		return nil, err
	}
	v, err := stablehlo.Transpose(ns[0].value, slices.Clone(perm)...)
	if err != nil {
		return nil, b.opError("Transpose", err)
	}
	return b.node(v), nil
}

// BroadcastInDim broadcasts x to shape, x's axis i becoming output axis
// axes[i].
func (b *Builder) BroadcastInDim(x backends.Op, shape shapes.Shape, axes []int) (out backends.Op, err error) {
	defer b.guard("BroadcastInDim", &err)
	ns, err := b.nodes("BroadcastInDim", x)
	if err != nil {
		return nil, err
	}
	if err := validShape(shape); err != nil {
		return nil, b.opError("BroadcastInDim", err)
	}
	if shape.DType != ns[0].shape.DType {
		return nil, b.opError("BroadcastInDim", fmt.Errorf("target %s has a different dtype from the operand %s", shape, ns[0].shape))
	}
	v, err := stablehlo.BroadcastInDim(ns[0].value, toXShape(shape), slices.Clone(axes))
	if err != nil {
		return nil, b.opError("BroadcastInDim", err)
	}
	return b.node(v), nil
}

// Slice takes x[starts:limits:strides] on each axis; nil strides are 1.
func (b *Builder) Slice(x backends.Op, starts, limits, strides []int) (out backends.Op, err error) {
	defer b.guard("Slice", &err)
	ns, err := b.nodes("Slice", x)
	if err != nil {
		return nil, err
	}
	v, err := stablehlo.Slice(ns[0].value, slices.Clone(starts), slices.Clone(limits), slices.Clone(strides))
	if err != nil {
		return nil, b.opError("Slice", err)
	}
	return b.node(v), nil
}

// Concatenate joins operands along axis.
func (b *Builder) Concatenate(axis int, operands ...backends.Op) (out backends.Op, err error) {
	defer b.guard("Concatenate", &err)
	ns, err := b.nodes("Concatenate", operands...)
	if err != nil {
		return nil, err
	}
	if len(ns) == 0 {
		return nil, b.opError("Concatenate", fmt.Errorf("no operands"))
	}
	if len(ns) == 1 {
		return ns[0], nil
	}
	vals := make([]*stablehlo.Value, len(ns))
	for i, n := range ns {
		vals[i] = n.value
	}
	v, err := stablehlo.Concatenate(axis, vals...)
	if err != nil {
		return nil, b.opError("Concatenate", err)
	}
	return b.node(v), nil
}

// Pad pads x with fill: before, after and between elements on each axis.
// Missing axes are not padded.
func (b *Builder) Pad(x, fill backends.Op, axesConfig ...backends.PadAxis) (out backends.Op, err error) {
	defer b.guard("Pad", &err)
	ns, err := b.nodes("Pad", x, fill)
	if err != nil {
		return nil, err
	}
	xn, fn := ns[0], ns[1]
	rank := xn.shape.Rank()
	if len(axesConfig) > rank {
		return nil, b.opError("Pad", fmt.Errorf("%d axes configured for an operand of rank %d", len(axesConfig), rank))
	}
	if !fn.shape.IsScalar() || fn.shape.DType != xn.shape.DType {
		return nil, b.opError("Pad", fmt.Errorf("fill value must be a %s scalar, got %s", xn.shape.DType, fn.shape))
	}
	if rank == 0 {
		return xn, nil
	}
	lo, hi, in := make([]int, rank), make([]int, rank), make([]int, rank)
	for i, c := range axesConfig {
		if c.Interior < 0 {
			return nil, b.opError("Pad", fmt.Errorf("axis %d: negative interior padding %d", i, c.Interior))
		}
		lo[i], hi[i], in[i] = c.Start, c.End, c.Interior
	}
	for i, d := range xn.shape.Dimensions {
		if n := lo[i] + hi[i] + d + max(d-1, 0)*in[i]; n < 0 {
			return nil, b.opError("Pad", fmt.Errorf("axis %d: padding %+v of dimension %d leaves %d elements", i, axesConfig[i], d, n))
		}
	}
	v, err := stablehlo.Pad(xn.value, fn.value, lo, hi, in)
	if err != nil {
		return nil, b.opError("Pad", err)
	}
	return b.node(v), nil
}

// Reverse reverses x along the given axes.
func (b *Builder) Reverse(x backends.Op, axes ...int) (out backends.Op, err error) {
	defer b.guard("Reverse", &err)
	ns, err := b.nodes("Reverse", x)
	if err != nil {
		return nil, err
	}
	v, err := stablehlo.Reverse(ns[0].value, slices.Clone(axes)...)
	if err != nil {
		return nil, b.opError("Reverse", err)
	}
	return b.node(v), nil
}

// Iota returns a value of shape counting 0, 1, ... along axis.
func (b *Builder) Iota(shape shapes.Shape, axis int) (out backends.Op, err error) {
	defer b.guard("Iota", &err)
	if err := b.checkOpen("Iota"); err != nil {
		return nil, err
	}
	if err := validShape(shape); err != nil {
		return nil, b.opError("Iota", err)
	}
	if shape.IsScalar() {
		return nil, b.opError("Iota", fmt.Errorf("shape %s is a scalar; iota needs an axis", shape))
	}
	if !anyNumber.accepts(shape.DType) {
		return nil, b.unsupported("Iota", fmt.Sprintf("dtype %s is not a number", shape.DType))
	}
	v, err := b.fn.Iota(toXShape(shape), axis)
	if err != nil {
		return nil, b.opError("Iota", err)
	}
	return b.node(v), nil
}

// ConvertDType converts x's elements to dtype (booleans to 0/1, non-zero
// to true, complex to real by dropping the imaginary part).
func (b *Builder) ConvertDType(x backends.Op, dtype dtypes.DType) (out backends.Op, err error) {
	defer b.guard("ConvertDType", &err)
	ns, err := b.nodes("ConvertDType", x)
	if err != nil {
		return nil, err
	}
	if err := validShape(shapes.Make(dtype)); err != nil {
		return nil, b.opError("ConvertDType", fmt.Errorf("target dtype: %w", err))
	}
	if ns[0].shape.DType == dtype {
		return ns[0], nil
	}
	v, err := stablehlo.Convert(ns[0].value, toXDType(dtype))
	if err != nil {
		return nil, b.opError("ConvertDType", err)
	}
	return b.node(v), nil
}

// Bitcast reinterprets x's bits as dtype; a size change adds or removes a
// trailing axis.
func (b *Builder) Bitcast(x backends.Op, dtype dtypes.DType) (out backends.Op, err error) {
	defer b.guard("Bitcast", &err)
	ns, err := b.nodes("Bitcast", x)
	if err != nil {
		return nil, err
	}
	v, err := stablehlo.BitcastConvert(ns[0].value, toXDType(dtype))
	if err != nil {
		return nil, b.opError("Bitcast", err)
	}
	return b.node(v), nil
}

// startIndices returns one scalar value per operand axis. GoMLX passes one
// scalar per axis; a single rank-1 tensor holding all indices is also
// accepted. StableHLO wants them all of one integer dtype, so mixed dtypes
// are converted to Int64.
func (b *Builder) startIndices(op string, idx []*Node, rank int) ([]*stablehlo.Value, error) {
	if len(idx) == 1 && idx[0].shape.Rank() == 1 {
		n := idx[0]
		if n.shape.Dimensions[0] != rank || !n.shape.DType.IsInt() {
			return nil, fmt.Errorf("start indices tensor %s does not have one index per axis of a rank-%d operand", n.shape, rank)
		}
		out := make([]*stablehlo.Value, rank)
		for i := range rank {
			s, err := stablehlo.Slice(n.value, []int{i}, []int{i + 1}, []int{1})
			if err != nil {
				return nil, err
			}
			if out[i], err = stablehlo.Reshape(s, toXShape(shapes.Make(n.shape.DType))); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if len(idx) != rank {
		return nil, fmt.Errorf("%d start indices for an operand of rank %d", len(idx), rank)
	}
	out := make([]*stablehlo.Value, rank)
	mixed := false
	for i, n := range idx {
		if !n.shape.IsScalar() || !n.shape.DType.IsInt() {
			return nil, fmt.Errorf("start index #%d must be an integer scalar, got %s", i, n.shape)
		}
		if n.shape.DType != idx[0].shape.DType {
			mixed = true
		}
		out[i] = n.value
	}
	if mixed {
		for i, n := range idx {
			if n.shape.DType != dtypes.Int64 {
				v, err := stablehlo.Convert(n.value, toXDType(dtypes.Int64))
				if err != nil {
					return nil, err
				}
				out[i] = v
			}
		}
	}
	return out, nil
}

// DynamicSlice takes a slice of static size sliceDims at run-time start
// indices, clamped so the slice stays inside the operand.
func (b *Builder) DynamicSlice(operand backends.Op, startIndices []backends.Op, sliceDims []int) (out backends.Op, err error) {
	defer b.guard("DynamicSlice", &err)
	ns, err := b.nodes("DynamicSlice", append([]backends.Op{operand}, startIndices...)...)
	if err != nil {
		return nil, err
	}
	x := ns[0]
	if len(sliceDims) != x.shape.Rank() {
		return nil, b.opError("DynamicSlice", fmt.Errorf("%d slice sizes for an operand of rank %d", len(sliceDims), x.shape.Rank()))
	}
	for i, d := range sliceDims {
		if d < 0 || d > x.shape.Dimensions[i] {
			return nil, b.opError("DynamicSlice", fmt.Errorf("slice size %d on axis %d outside [0, %d]", d, i, x.shape.Dimensions[i]))
		}
	}
	idx, err := b.startIndices("DynamicSlice", ns[1:], x.shape.Rank())
	if err != nil {
		return nil, b.opError("DynamicSlice", err)
	}
	v, err := stablehlo.DynamicSlice(x.value, idx, slices.Clone(sliceDims))
	if err != nil {
		return nil, b.opError("DynamicSlice", err)
	}
	return b.node(v), nil
}

// DynamicUpdateSlice writes update into operand at run-time start indices,
// clamped so the update stays inside the operand.
func (b *Builder) DynamicUpdateSlice(operand, update backends.Op, startIndices []backends.Op) (out backends.Op, err error) {
	defer b.guard("DynamicUpdateSlice", &err)
	ns, err := b.nodes("DynamicUpdateSlice", append([]backends.Op{operand, update}, startIndices...)...)
	if err != nil {
		return nil, err
	}
	x, u := ns[0], ns[1]
	if x.shape.DType != u.shape.DType || x.shape.Rank() != u.shape.Rank() {
		return nil, b.opError("DynamicUpdateSlice", fmt.Errorf("update %s does not match operand %s in dtype and rank", u.shape, x.shape))
	}
	for i, d := range u.shape.Dimensions {
		if d > x.shape.Dimensions[i] {
			return nil, b.opError("DynamicUpdateSlice", fmt.Errorf("update %s larger than operand %s on axis %d", u.shape, x.shape, i))
		}
	}
	idx, err := b.startIndices("DynamicUpdateSlice", ns[2:], x.shape.Rank())
	if err != nil {
		return nil, b.opError("DynamicUpdateSlice", err)
	}
	v, err := stablehlo.DynamicUpdateSlice(x.value, u.value, idx)
	if err != nil {
		return nil, b.opError("DynamicUpdateSlice", err)
	}
	return b.node(v), nil
}

// Gather collects slices of operand at startIndices (XLA gather, without
// batching axes, which GoMLX v0.26.0 does not expose). Out-of-range
// indices are clamped.
func (b *Builder) Gather(operand, startIndices backends.Op, indexVectorAxis int,
	offsetOutputAxes, collapsedSliceAxes, startIndexMap, sliceSizes []int, indicesAreSorted bool) (out backends.Op, err error) {
	defer b.guard("Gather", &err)
	ns, err := b.nodes("Gather", operand, startIndices)
	if err != nil {
		return nil, err
	}
	if !ns[1].shape.DType.IsInt() {
		return nil, b.opError("Gather", fmt.Errorf("start indices must be integers, got %s", ns[1].shape))
	}
	if len(sliceSizes) != ns[0].shape.Rank() {
		return nil, b.opError("Gather", fmt.Errorf("%d slice sizes for an operand of rank %d", len(sliceSizes), ns[0].shape.Rank()))
	}
	v, err := stablehlo.Gather(ns[0].value, ns[1].value, indexVectorAxis,
		slices.Clone(offsetOutputAxes), slices.Clone(collapsedSliceAxes), nil, nil,
		slices.Clone(startIndexMap), slices.Clone(sliceSizes), indicesAreSorted)
	if err != nil {
		return nil, b.opError("Gather", err)
	}
	return b.node(v), nil
}
