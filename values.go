package tensorbridge

import (
	"context"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// Sequence and optional values at the model boundary. ONNX models may take
// and return sequences of tensors and optional values; Run exchanges
// tensors only, RunValues exchanges Values:
//
//	outs, err := m.RunValues(ctx, map[string]tensorbridge.Value{
//		"frames": tensorbridge.SequenceValue(tensorbridge.TensorValue(a), tensorbridge.TensorValue(b)),
//		"state":  tensorbridge.NoneValue(), // or left out: an absent optional
//	})
//	for _, e := range outs["boxes"].Elems() { use(e.Tensor()) }
//
// A model is compiled once per structure of its inputs (each sequence's
// length, each optional's presence) and shapes, through the same
// specialisation cache, checks, buckets and precision as Run.

// Value is a model input or output: a tensor, a sequence of values, or an
// optional value (see onnx.Value).
type Value = onnx.Value

// ValueKind says what a Value or a ValueSpec holds.
type ValueKind = onnx.ValueKind

// The kinds of values.
const (
	KindTensor   = onnx.KindTensor
	KindSequence = onnx.KindSequence
	KindOptional = onnx.KindOptional
)

// TensorValue wraps a tensor as a Value.
func TensorValue(t *ir.Tensor) Value { return onnx.TensorValue(t) }

// SequenceValue is a sequence of the given elements (none: empty).
func SequenceValue(elems ...Value) Value { return onnx.SequenceValue(elems...) }

// OptionalValue is an optional holding v.
func OptionalValue(v Value) Value { return onnx.OptionalValue(v) }

// NoneValue is an empty optional.
func NoneValue() Value { return onnx.NoneValue() }

// errStructured is Run's answer for a model with sequence or optional
// inputs or outputs.
func errStructured(m *Model) error {
	return &errs.InputError{Name: m.path, Problem: "kind",
		Expected: "Model.RunValues: the model has sequence or optional inputs or outputs", Got: "Model.Run with tensors"}
}

// RunValues executes the model on named input values and returns its
// outputs as values; it runs any model (tensors are Values too). An
// optional input left out is absent. Errors are those of Run, plus an
// *InputError (Problem "kind") when a value's kind is not the one the
// model declares.
func (m *Model) RunValues(ctx context.Context, inputs map[string]Value) (map[string]Value, error) {
	dm, flat, key, err := m.m.WithInputs(inputs)
	if err != nil {
		return nil, err
	}
	view := m
	if dm != m.m {
		if m.sharded != nil {
			return nil, &errs.UnsupportedError{Backend: m.b.Name(), What: "feature", Name: "sequence or optional inputs on a mesh",
				Detail: "load the model on one device to run it with sequence or optional inputs"}
		}
		// The same model specialised to this input structure: it shares
		// the backend, weights and compile cache; the structure is part of
		// the specialisation key.
		c := *m
		c.m = dm
		c.precStr = m.precStr + "|" + key
		c.buckets = planBuckets(dm)
		c.hot = newRunInfo(&c)
		view = &c
	}
	outs, _, plan, err := view.run(ctx, flat, nil)
	if err != nil {
		return nil, err
	}
	if plan == nil { // a tensor-only model on a mesh
		res := make(map[string]Value, len(outs))
		for name, t := range outs {
			res[name] = TensorValue(t)
		}
		return res, nil
	}
	return plan.AssembleOutputs(outs)
}
