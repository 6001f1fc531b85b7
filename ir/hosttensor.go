package ir

// Host-tensor helpers used by the ONNX and .npy readers (appended for
// onnx/onnxpb and npy). They return errors where GoMLX would panic.

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/x448/float16"
)

type (
	// Float16Value is the Go element type of Float16 tensors.
	Float16Value = float16.Float16
	// BFloat16Value is the Go element type of BFloat16 tensors.
	BFloat16Value = bfloat16.BFloat16
	// Element is the set of Go element types a host tensor can hold.
	Element = dtypes.Supported
)

// TensorFromFlat returns a host tensor of the given dimensions holding a
// copy of flat (row-major). It fails, instead of panicking, when a dimension
// is negative or len(flat) does not match the dimensions.
func TensorFromFlat[T Element](flat []T, dims ...int) (*Tensor, error) {
	n, err := numElements(dims)
	if err != nil {
		return nil, err
	}
	if n != len(flat) {
		return nil, fmt.Errorf("ir: %d values for dimensions %v, which hold %d", len(flat), dims, n)
	}
	return tensors.FromFlatDataAndDimensions(flat, dims...), nil
}

// NewHostTensor returns a zero-filled host tensor; fill it with
// Tensor.MutableBytes (skipped by callers for zero-size tensors, for which
// GoMLX's MutableBytes panics).
func NewHostTensor(dt DType, dims ...int) (*Tensor, error) {
	if _, err := numElements(dims); err != nil {
		return nil, err
	}
	s := shapes.Make(dt, dims...)
	if !s.Ok() {
		return nil, fmt.Errorf("ir: invalid shape %s", s)
	}
	return tensors.FromShape(s), nil
}

func numElements(dims []int) (int, error) {
	n := 1
	for _, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("ir: negative dimension in %v", dims)
		}
		if d != 0 && n > (1<<62)/d {
			return 0, fmt.Errorf("ir: dimensions %v hold too many elements", dims)
		}
		n *= d
	}
	return n, nil
}
