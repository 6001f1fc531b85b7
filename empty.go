package tensorbridge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// Empty inputs.
//
// An input with a zero dimension (an empty batch) holds no data. ONNX
// Runtime answers such a request with empty outputs of the shapes the
// model's ops give (the MLP's (0, 64) input gives a (0, 10) output), but
// backends disagree on running a program with empty operands: GoMLX's
// pure-Go backend refuses a DotGeneral with a zero size, XLA runs it. So
// every backend answers an empty request the same way, without running
// anything: the plan is built for the request's shapes (no compile) and
// each output's shape read from the graph. When every output is empty,
// the answer is empty outputs of those shapes; when an output would hold
// values computed from no data (a reduction over the empty axis), or the
// model cannot be built at these shapes, the request is an *InputError.
//
// When the backend's graph builder itself refuses a zero size (the
// pure-Go backend's DotGeneral does), the shapes are worked out from
// builds at sizes 1, 2 and 3 in place of every zero dimension: an output
// dimension that is the same affine function of the size in all three
// (d(1), d(2), d(3) evenly spaced) is extrapolated to size 0.

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

// runEmpty answers a request with an empty input (see above).
func (m *Model) runEmpty(shapes map[string][]int, values map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	dims, err := m.emptyOutputDims(shapes, values, 0)
	if err != nil {
		// The builder may refuse zero sizes: extrapolate from 1, 2, 3.
		var at [3][][]int
		for k := range at {
			if at[k], err = m.emptyOutputDims(shapes, values, k+1); err != nil {
				return nil, m.emptyError(shapes, fmt.Sprintf("the model cannot be built for it: %v", err))
			}
		}
		dims = make([][]int, len(at[0]))
		for i := range dims {
			if dims[i], err = extrapolateDims(at[0][i], at[1][i], at[2][i]); err != nil {
				return nil, m.emptyError(shapes, fmt.Sprintf("output %d: %v", i, err))
			}
		}
	}
	specs := m.emptyOutputSpecs()
	outs := make(map[string]*ir.Tensor, len(specs))
	for i, spec := range specs {
		if !slices.Contains(dims[i], 0) {
			return nil, m.emptyError(shapes, fmt.Sprintf("output %q would have shape %v, values computed from no data", spec.Name, dims[i]))
		}
		t, err := ir.NewHostTensor(spec.DType, dims[i]...)
		if err != nil {
			return nil, &errs.Error{Kind: errs.Internal, Backend: m.b.Name(), Op: "run model", Err: fmt.Errorf("output %q: %w", spec.Name, err)}
		}
		outs[spec.Name] = t
	}
	return outs, nil
}

// emptyOutputSpecs are the outputs an empty request answers: the model's
// declared outputs (models with sequence, optional or STRING outputs run
// the usual way).
func (m *Model) emptyOutputSpecs() []onnx.ValueSpec { return m.m.Outputs() }

// emptyError is the InputError for an empty request the model cannot
// answer.
func (m *Model) emptyError(shapes map[string][]int, why string) error {
	var names []string
	for name, d := range shapes {
		if slices.Contains(d, 0) {
			names = append(names, fmt.Sprintf("%s %v", name, d))
		}
	}
	slices.Sort(names)
	return &errs.InputError{Name: strings.Join(names, ", "), Problem: "shape",
		Expected: "inputs with no zero dimension, or an empty input every output of which is empty",
		Got:      "an empty input: " + why}
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
