package tensorbridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// Empty inputs.
//
// An input with a zero dimension holds no data. When every output of the
// model is empty too (an empty batch: the MLP's (0, 64) input gives a
// (0, 10) output, as ONNX Runtime answers), backends disagree on running a
// program with empty operands (GoMLX's pure-Go backend refuses a
// DotGeneral with a zero size, XLA runs it), so every backend answers the
// same way without running anything: the plan is built for the request's
// shapes (no compile) and each output's shape read from the graph.
//
// When some output holds values (a reduction over an empty set, a Reduce*
// given an empty axes input, a zero-length dimension that no output
// keeps), ONNX defines them and the model runs at the request's exact
// shapes (never padded: padding copies a last real row there is none of).
// The importer gives each reduction its identity over an empty set (0 for
// sums, 1 for products, -inf/+inf or the dtype's extremes for max/min,
// -inf for the log-sums) and refuses with an *onnx.EmptySetError what
// ONNX leaves undefined (ReduceMean and ArgMax/ArgMin over an empty set,
// the log-sums of integers). The outputs are counted against the memory
// budget first (checkEmptyOutputs). Only a model that cannot be built at
// these shapes is an *InputError.
//
// When the graph cannot be built at a zero size (a backend's builder
// refuses one, or GoMLX's shape inference broadcasts a size-0 axis to
// size 1: zeroBroadcast), the shapes are worked out from builds at sizes
// 1, 2 and 3 in place of every zero dimension: an output dimension that is
// the same affine function of the size in all three (d(1), d(2), d(3)
// evenly spaced) is extrapolated to size 0. Only empty outputs are
// answered that way; a graph that could not be built is never run.

// hasEmptyInput says whether some input whose values the model reads has
// a zero dimension. An input read for its dtype only (CastLike's
// target_type, which ONNX lets have any shape, empty included:
// https://onnx.ai/onnx/operators/onnx__CastLike.html) holds no data the
// outputs are computed from, so an empty one leaves the request an
// ordinary one, run as usual.
func (m *Model) hasEmptyInput(shapes map[string][]int) bool {
	for name, d := range shapes {
		if slices.Contains(d, 0) && m.m.ReadsValues(name) {
			return true
		}
	}
	return false
}

// runEmpty answers a request with an empty input (see above): empty
// outputs when every output is empty, else the run at the exact shapes.
func (m *Model) runEmpty(ctx context.Context, inputs map[string]*ir.Tensor, shapes map[string][]int, values map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	dims, err := m.emptyOutputDims(shapes, values, 0)
	if err != nil {
		if errors.Is(err, onnx.ErrEmptySet) {
			return nil, err // ONNX defines no value there
		}
		// The builder may refuse zero sizes: extrapolate from 1, 2, 3.
		built := err
		if dims, err = m.extrapolatedDims(shapes, values); err != nil {
			return nil, m.emptyError(shapes, fmt.Sprintf("the model cannot be built at these shapes (%v), nor its output shapes extrapolated from sizes 1, 2, 3 in place of the zeros (%v)", built, err))
		}
		if i := firstNonEmpty(dims); i >= 0 {
			return nil, m.emptyError(shapes, fmt.Sprintf("output %q would have shape %v, and the model cannot be built at these shapes: %v",
				m.emptyOutputSpecs()[i].Name, dims[i], built))
		}
	}
	if firstNonEmpty(dims) >= 0 {
		if err := m.checkEmptyOutputs(ctx, shapes, dims); err != nil {
			return nil, err
		}
		outs, _, _, err := m.runExact(ctx, inputs, nil)
		return outs, err
	}
	specs := m.emptyOutputSpecs()
	outs := make(map[string]*ir.Tensor, len(specs))
	for i, spec := range specs {
		t, err := ir.NewHostTensor(spec.DType, dims[i]...)
		if err != nil {
			return nil, &errs.Error{Kind: errs.Internal, Backend: m.b.Name(), Op: "run model", Err: fmt.Errorf("output %q: %w", spec.Name, err)}
		}
		outs[spec.Name] = t
	}
	return outs, nil
}

// checkEmptyOutputs refuses a request with an empty input whose outputs
// would not fit the device's memory budget. An empty input costs its
// sender nothing, whatever its other dimensions, while the outputs ONNX
// defines may hold values along them (ReduceSum over the zero axis of
// [0, 2^40] is 2^40 zeros): they are counted before anything is
// allocated, an *OutOfMemoryError rather than a process killed for
// memory. A device without memory figures (an accelerator whose runtime
// reports none) is left to its runtime's own allocation errors.
func (m *Model) checkEmptyOutputs(ctx context.Context, shapes map[string][]int, dims [][]int) error {
	need := 0.0
	for i, spec := range m.emptyOutputSpecs() {
		n := float64(max(spec.DType.Size(), 1))
		for _, d := range dims[i] {
			n *= float64(d)
		}
		need += n
	}
	bud, err := m.b.BudgetOf(ctx, m.device)
	if err != nil || need <= float64(bud.Available) {
		return nil
	}
	return &errs.OutOfMemoryError{Device: bud.Device, Needed: uint64(min(need, 1<<63)), Available: bud.Available,
		Detail: fmt.Sprintf("the outputs %v of a request with a zero dimension (%s)", dims, zeroInputs(shapes))}
}

// firstNonEmpty is the index of the first dims without a zero, or -1.
func firstNonEmpty(dims [][]int) int {
	for i, d := range dims {
		if !slices.Contains(d, 0) {
			return i
		}
	}
	return -1
}

// extrapolatedDims gives the outputs' dims at the request's shapes from
// builds with every zero dimension replaced by 1, 2 and 3.
func (m *Model) extrapolatedDims(shapes map[string][]int, values map[string]*ir.Tensor) ([][]int, error) {
	var at [3][][]int
	for k := range at {
		var err error
		if at[k], err = m.emptyOutputDims(shapes, values, k+1); err != nil {
			return nil, fmt.Errorf("at size %d: %w", k+1, err)
		}
	}
	dims := make([][]int, len(at[0]))
	for i := range dims {
		var err error
		if dims[i], err = extrapolateDims(at[0][i], at[1][i], at[2][i]); err != nil {
			return nil, fmt.Errorf("output %q: %w", m.emptyOutputSpecs()[i].Name, err)
		}
	}
	return dims, nil
}

// emptyOutputSpecs are the outputs an empty request answers: the model's
// declared outputs (models with sequence, optional or STRING outputs run
// the usual way).
func (m *Model) emptyOutputSpecs() []onnx.ValueSpec { return m.m.Outputs() }

// emptyError is the InputError for an empty request the model cannot
// answer.
func (m *Model) emptyError(shapes map[string][]int, why string) error {
	return &errs.InputError{Name: zeroInputs(shapes), Problem: "shape",
		Expected: "shapes the model can be built at",
		Got:      "a zero dimension: " + why}
}

// zeroInputs names the inputs with a zero dimension, with their shapes.
func zeroInputs(shapes map[string][]int) string {
	var names []string
	for name, d := range shapes {
		if slices.Contains(d, 0) {
			names = append(names, fmt.Sprintf("%s %v", name, d))
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// emptyOutputDims builds the plan (no compile) with every zero dimension
// of shapes replaced by n and returns each output's dims.
func (m *Model) emptyOutputDims(shapes map[string][]int, values map[string]*ir.Tensor, n int) (dims [][]int, err error) {
	at := make(map[string][]int, len(shapes))
	for name, d := range shapes {
		d = slices.Clone(d)
		for k := range d {
			if d[k] == 0 {
				d[k] = n
			}
		}
		at[name] = d
	}
	plan, err := m.m.SpecializeWith(at, values, m.prec)
	if err != nil {
		return nil, err
	}
	g := ir.NewGraph(m.b.drv.Engine(), "onnx-empty")
	defer g.Finalize()
	defer func() {
		if r := recover(); r != nil {
			dims, err = nil, fmt.Errorf("building: %v", r)
		}
	}()
	nodes := map[string]*ir.Node{}
	for _, p := range append(plan.Weights(), plan.Params()...) {
		nodes[p.Name] = ir.Parameter(g, p.Name, p.Shape)
	}
	built, err := plan.Build(g, nodes)
	if err != nil {
		return nil, err
	}
	if err := zeroBroadcast(g); err != nil {
		return nil, err
	}
	for _, o := range m.emptyOutputSpecs() {
		node := built[o.Name]
		if node == nil {
			return nil, fmt.Errorf("output %q was not built", o.Name)
		}
		dims = append(dims, slices.Clone(node.Shape().Dimensions))
	}
	return dims, nil
}

// extrapolateDims gives an output's dims at size 0 from its dims at sizes
// 1, 2 and 3, when each dimension is affine in the size.
func extrapolateDims(d1, d2, d3 []int) ([]int, error) {
	if len(d1) != len(d2) || len(d1) != len(d3) {
		return nil, fmt.Errorf("its rank depends on the empty dimension's size (%v, %v, %v at sizes 1, 2, 3)", d1, d2, d3)
	}
	out := make([]int, len(d1))
	for k := range d1 {
		step := d2[k] - d1[k]
		if d3[k]-d2[k] != step || d1[k]-step < 0 {
			return nil, fmt.Errorf("dimension %d is %d, %d, %d at sizes 1, 2, 3: not extrapolated to size 0", k, d1[k], d2[k], d3[k])
		}
		out[k] = d1[k] - step
	}
	return out, nil
}

// elementwise are GoMLX's element-wise ops of two or three operands,
// whose result has, on each axis, the operands' common size.
var elementwise = map[graph.NodeType]bool{
	graph.NodeTypeAdd: true, graph.NodeTypeSub: true, graph.NodeTypeMul: true, graph.NodeTypeDiv: true,
	graph.NodeTypePow: true, graph.NodeTypeRem: true, graph.NodeTypeMax: true, graph.NodeTypeMin: true,
	graph.NodeTypeBitwiseAnd: true, graph.NodeTypeBitwiseOr: true, graph.NodeTypeBitwiseXor: true,
	graph.NodeTypeLogicalAnd: true, graph.NodeTypeLogicalOr: true, graph.NodeTypeLogicalXor: true,
	graph.NodeTypeEqual: true, graph.NodeTypeNotEqual: true, graph.NodeTypeGreaterOrEqual: true,
	graph.NodeTypeGreaterThan: true, graph.NodeTypeLessOrEqual: true, graph.NodeTypeLessThan: true,
	graph.NodeTypeEqualTotalOrder: true, graph.NodeTypeNotEqualTotalOrder: true,
	graph.NodeTypeGreaterOrEqualTotalOrder: true, graph.NodeTypeGreaterThanTotalOrder: true,
	graph.NodeTypeLessOrEqualTotalOrder: true, graph.NodeTypeLessThanTotalOrder: true,
	graph.NodeTypeShiftLeft: true, graph.NodeTypeShiftRightArithmetic: true, graph.NodeTypeShiftRightLogical: true,
	graph.NodeTypeWhere: true, graph.NodeTypeClamp: true, graph.NodeTypeComplex: true,
}

// zeroBroadcast finds an element-wise node whose shape GoMLX inferred
// wrongly at a zero size: its shape inference broadcasts an axis of size 0
// against one of size 1 to size 1 (the larger) where numpy's rule, and
// ONNX's, gives 0. Such a graph's output shapes and values cannot be
// trusted, so the request is not run on it.
func zeroBroadcast(g *ir.Graph) error {
	for _, n := range g.Nodes() {
		if !elementwise[n.Type()] {
			continue
		}
		out := n.Shape().Dimensions
		for _, in := range n.Inputs() {
			d := in.Shape().Dimensions
			if len(d) != len(out) {
				continue
			}
			for k := range d {
				if d[k] == 0 && out[k] != 0 {
					return fmt.Errorf("%s of %s gives %s: an axis of size 0 broadcast to %d (the graph library's shape inference, not numpy's)",
						n.Type(), in.Shape(), n.Shape(), out[k])
				}
			}
		}
	}
	return nil
}
