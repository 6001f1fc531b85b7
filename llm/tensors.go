package llm

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tensorbridge/tensorbridge/ir"
)

// int32Tensor builds a host int32 tensor of dims from vals.
func int32Tensor(dims []int, vals []int) (*ir.Tensor, error) {
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(int32(v)))
	}
	return ir.TensorFromBytes(ir.Int32, dims, raw)
}

// float32Tensor builds a host float32 tensor of dims from vals.
func float32Tensor(dims []int, vals []float32) (*ir.Tensor, error) {
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return ir.TensorFromBytes(ir.Float32, dims, raw)
}

// float32s reads a float32 tensor's elements.
func float32s(t *ir.Tensor) ([]float32, error) {
	if t.DType() != ir.Float32 {
		return nil, fmt.Errorf("want float32, got %s", t.DType())
	}
	raw, err := ir.TensorBytes(t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// int32s reads an int32 tensor's elements.
func int32s(t *ir.Tensor) ([]int, error) {
	if t.DType() != ir.Int32 {
		return nil, fmt.Errorf("want int32, got %s", t.DType())
	}
	raw, err := ir.TensorBytes(t)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(raw)/4)
	for i := range out {
		out[i] = int(int32(binary.LittleEndian.Uint32(raw[4*i:])))
	}
	return out, nil
}
