package onnxpb

import (
	"errors"
	"fmt"
)

// An opset range check on a decoded model, kept for the tests (the decoding
// tests and the fuzz target use it to exercise Model.Opset's domain
// matching). The importer does its own check with its own range
// (onnx.MinOpset..onnx.MaxOpset, accepting older opsets), so none of this is
// package API.

// Range of the default ("ai.onnx") operator set version for CheckOpsets.
const (
	MinSupportedOpset = 7
	MaxSupportedOpset = 28
)

// ErrOpset: the model imports an operator set version outside the range,
// or none for the default domain.
var ErrOpset = errors.New("unsupported opset")

// CheckOpsets returns an error wrapping ErrOpset unless the model imports
// the default ONNX operator set at a version in [min, max]. Other domains
// are not checked.
func (m *Model) CheckOpsets(min, max int64) error {
	v := m.Opset("")
	switch {
	case v == 0:
		return fmt.Errorf("onnxpb: model imports no default (ai.onnx) operator set; supported versions are %d..%d: %w",
			min, max, ErrOpset)
	case v < min:
		return fmt.Errorf("onnxpb: model uses ai.onnx opset %d, older than the oldest supported %d (supported %d..%d; "+
			"upgrade the model with the ONNX version converter): %w", v, min, min, max, ErrOpset)
	case v > max:
		return fmt.Errorf("onnxpb: model uses ai.onnx opset %d, newer than the newest supported %d (supported %d..%d; "+
			"re-export the model with opset %d or lower): %w", v, max, min, max, max, ErrOpset)
	}
	return nil
}
