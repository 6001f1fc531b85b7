package onnx

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
)

// UnsupportedOpsError lists every operator of a model the importer cannot
// convert, with how many nodes use each. Load and Parse return it for the
// whole model at once, so one attempt shows all the work a model needs.
// It matches errs.ErrUnsupported.
type UnsupportedOpsError struct {
	// Ops maps an op name to its node count. Ops outside the default ONNX
	// domain are written "domain:Op"; an op whose name is known but whose
	// model opset predates every supported version of it is written
	// "Op@opset".
	Ops map[string]int
}

func (e *UnsupportedOpsError) Error() string {
	names := make([]string, 0, len(e.Ops))
	for n := range e.Ops {
		names = append(names, n)
	}
	sort.Slice(names, func(a, b int) bool {
		if e.Ops[names[a]] != e.Ops[names[b]] {
			return e.Ops[names[a]] > e.Ops[names[b]]
		}
		return names[a] < names[b]
	})
	parts := make([]string, len(names))
	for k, n := range names {
		unit := "nodes"
		if e.Ops[n] == 1 {
			unit = "node"
		}
		parts[k] = fmt.Sprintf("%s (%d %s)", n, e.Ops[n], unit)
	}
	return "unsupported ops: " + strings.Join(parts, ", ")
}

// Is makes UnsupportedOpsError match errs.ErrUnsupported.
func (e *UnsupportedOpsError) Is(target error) bool { return target == errs.ErrUnsupported }

// OpsetError says the model imports a version of an operator set outside the
// range the importer implements.
type OpsetError struct {
	Domain   string // "" for the default ai.onnx domain
	Version  int
	Min, Max int // supported range
}

func (e *OpsetError) Error() string {
	d := e.Domain
	if d == "" {
		d = "ai.onnx"
	}
	return fmt.Sprintf("model imports opset %s version %d; supported versions are %d to %d", d, e.Version, e.Min, e.Max)
}

// Is makes OpsetError match errs.ErrUnsupported.
func (e *OpsetError) Is(target error) bool { return target == errs.ErrUnsupported }

// UnsupportedDTypeError names an ONNX element type the importer cannot
// represent (strings, complex, 8-bit and 4-bit floats...).
type UnsupportedDTypeError struct {
	ONNXType int    // TensorProto.DataType value
	Name     string // ONNX spelling, e.g. "STRING"
	Where    string // the input, initializer or node where it was met
}

func (e *UnsupportedDTypeError) Error() string {
	s := "unsupported ONNX element type " + e.Name
	if e.Where != "" {
		s += " (" + e.Where + ")"
	}
	return s
}

// Is makes UnsupportedDTypeError match errs.ErrUnsupported.
func (e *UnsupportedDTypeError) Is(target error) bool { return target == errs.ErrUnsupported }

// DimError says a symbolic or unknown input dimension could not be given a
// value, or was given two different values.
type DimError struct {
	Param  string // the dimension's name; "" for an unnamed dimension
	Input  string // the input where it was met
	Axis   int
	Reason string
}

func (e *DimError) Error() string {
	name := "unnamed dimension"
	if e.Param != "" {
		name = fmt.Sprintf("dimension %q", e.Param)
	}
	return fmt.Sprintf("%s (input %q axis %d): %s", name, e.Input, e.Axis, e.Reason)
}

// Is makes DimError match errs.ErrInvalidInput.
func (e *DimError) Is(target error) bool { return target == errs.ErrInvalidInput }

// NotConstantError says an op needs the value of one of its inputs while the
// graph is built (a Reshape's shape, a Slice's starts...), and that value is
// only computed at run time.
type NotConstantError struct {
	Node  string // node name (or its first output when unnamed)
	Op    string
	Input int    // input position
	Name  string // the value's name
}

func (e *NotConstantError) Error() string {
	return fmt.Sprintf("node %q (%s): input %d (%q) must be known when the graph is built (a constant, an initializer, a shape computation or a value input), but it is computed at run time",
		e.Node, e.Op, e.Input, e.Name)
}

// Is makes NotConstantError match errs.ErrUnsupported: the model needs a
// dynamic-shape feature static graphs cannot express.
func (e *NotConstantError) Is(target error) bool { return target == errs.ErrUnsupported }

// NodeError wraps a failure while converting or evaluating one node, naming
// it. Unwrap gives the cause.
type NodeError struct {
	Node string // node name (or its first output when unnamed)
	Op   string
	Err  error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("node %q (%s): %v", e.Node, e.Op, e.Err)
}

func (e *NodeError) Unwrap() error { return e.Err }

// ModelError says the model file itself is malformed: a dangling value
// name, a missing graph, an attribute of the wrong type.
type ModelError struct {
	Reason string
}

func (e *ModelError) Error() string { return "invalid ONNX model: " + e.Reason }

// Is makes ModelError match errs.ErrInvalidInput.
func (e *ModelError) Is(target error) bool { return target == errs.ErrInvalidInput }

// ErrEmptySet is matched (errors.Is) by an EmptySetError: ONNX defines no
// value for what the model computes at these shapes. It matches
// errs.ErrInvalidInput too.
var ErrEmptySet = errors.New("a value ONNX leaves undefined over an empty set")

// EmptySetError says a node reduces over an empty set where ONNX defines no
// result: ReduceMean (its specification: "reduction over an empty set of
// values yields undefined"), ReduceLogSum and ReduceLogSumExp of an
// integer type ("minus infinity (if supported by the datatype) or
// undefined otherwise"), ArgMax and ArgMin ("the input tensor must not be
// empty"). The reductions ONNX does define over an empty set (ReduceSum,
// ReduceProd, ReduceMax...) give their identity instead. The builder wraps
// it in a *NodeError naming the node.
type EmptySetError struct {
	Input string // the reduced value's name
	Dims  []int  // its shape
	Axes  []int  // the reduced axes, one or more of them of size 0
	Rule  string // what the ONNX specification says of the op over an empty set
}

func (e *EmptySetError) Error() string {
	return fmt.Sprintf("reduces %q of shape %v over axes %v, an empty set of values, for an output that is not empty; ONNX defines no value there (%s)",
		e.Input, e.Dims, e.Axes, e.Rule)
}

// Is makes EmptySetError match ErrEmptySet and errs.ErrInvalidInput: the
// request's shapes, not the model, are at fault.
func (e *EmptySetError) Is(target error) bool {
	return target == ErrEmptySet || target == errs.ErrInvalidInput
}
