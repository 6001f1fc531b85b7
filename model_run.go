package tensorbridge

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// lastShapes is a resolved set of input shapes (Model.run).
// Everything in it is read-only once published.
type lastShapes struct {
	dims   [][]int          // each input's dims, in m.ins order; nil for STRING inputs
	shapes map[string][]int // the same by name, as checkInputs returns them
	padded map[string][]int // after bucketing
	real   map[string]int   // symbolic dimension sizes before bucketing
	pads   bool             // some input is padded
	key    string           // the specialisation key of padded
}

// matches reports whether inputs have exactly the dims l was resolved for
// (names and dtypes are checked by the caller).
func (l *lastShapes) matches(ins []ValueSpec, inputs map[string]*ir.Tensor) bool {
	for k, s := range ins {
		if s.DType == onnx.String {
			continue
		}
		t := inputs[s.Name]
		if t == nil || !slices.Equal(t.Shape().Dimensions, l.dims[k]) {
			return false
		}
	}
	return true
}

// Run executes the model on named inputs and returns its outputs by name, in
// the dtypes the model declares. Input names, dtypes and shapes are checked
// against the model first: a mismatch is an *InputError saying expected
// against got.
func (m *Model) Run(ctx context.Context, inputs map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	if err := m.hot.runErr; err != nil { // STRING values (strings.go), sequences and optionals (values.go)
		return nil, err
	}
	outs, _, _, err := m.run(ctx, inputs, nil)
	return outs, err
}

// run is Run with the STRING inputs (strings.go), returning the STRING
// outputs beside the others, and the plan that ran (RunValues reads the
// structure of its outputs from it).
func (m *Model) run(ctx context.Context, inputs map[string]*ir.Tensor, strs map[string]*StringTensor) (map[string]*ir.Tensor, map[string]*StringTensor, *onnx.Plan, error) {
	if err := m.b.check(); err != nil {
		return nil, nil, nil, err
	}
	if m.sharded != nil { // on a mesh (sharded.go)
		outs, err := m.runSharded(ctx, inputs)
		return outs, nil, nil, err
	}
	var (
		me     *modelExec
		done   func()
		real   map[string]int
		err    error
		given  = inputs // before padding: what the index checks read
		padded bool     // some input was padded: the in-graph index check sees padding rows
	)
	// The same dims as the latest call's (and nothing else that keys a
	// specialisation): reuse what that call resolved.
	if l := m.hot.last.Load(); l != nil && strs == nil && !m.hot.valueInputs && l.matches(m.hot.ins, inputs) {
		if err := m.checkNamesAndDTypes(inputs); err != nil {
			return nil, nil, nil, err
		}
		real, padded = l.real, l.pads
		if l.pads {
			if inputs, _, err = m.pad(inputs, l.shapes); err != nil {
				return nil, nil, nil, err
			}
		}
		var ok bool
		if me, done, ok = m.execs.Get(l.key); !ok { // evicted since
			me, done, err = m.execs.GetOrCompile(ctx, l.key, func(ctx context.Context) (*modelExec, int64, error) {
				return m.compile(ctx, l.padded, nil, nil)
			})
			if err != nil {
				return nil, nil, nil, err
			}
		}
	} else {
		shapes, values, err := m.checkInputs(inputs)
		if err != nil {
			return nil, nil, nil, err
		}
		if strs == nil && !m.hot.stringOutput && !m.m.HasStructuredBoundary() && m.hasEmptyInput(shapes) {
			outs, err := m.runEmpty(ctx, inputs, shapes, values) // empty.go
			return outs, nil, nil, err
		}
		real = m.dimValues(shapes)
		var padShapes map[string][]int
		inputs, padShapes, err = m.pad(inputs, shapes)
		if err != nil {
			return nil, nil, nil, err
		}
		for name, d := range shapes {
			padded = padded || !slices.Equal(d, padShapes[name])
		}
		key := m.specialisationKey(padShapes, values, strs)
		me, done, err = m.execs.GetOrCompile(ctx, key, func(ctx context.Context) (*modelExec, int64, error) {
			return m.compile(ctx, padShapes, values, strs)
		})
		if err != nil {
			return nil, nil, nil, err
		}
		if strs == nil && len(values) == 0 {
			m.remember(shapes, padShapes, real, key)
		}
	}
	defer done()
	return m.execute(ctx, me, given, inputs, real, padded, strs)
}

// execute runs a compiled specialisation me on inputs (given before
// padding, which the index checks read), checks the computed indices, and
// returns the outputs cut back to the real dims.
func (m *Model) execute(ctx context.Context, me *modelExec, given, inputs map[string]*ir.Tensor, real map[string]int, padded bool, strs map[string]*StringTensor) (map[string]*ir.Tensor, map[string]*StringTensor, *onnx.Plan, error) {
	checks := me.plan.IndexChecks()
	if err := checks.CheckInputs(given); err != nil { // indexcheck.go in package onnx
		return nil, nil, nil, err
	}
	args := make([]*ir.Tensor, 0, len(me.weights)+len(me.params))
	if len(me.weights) > 0 { // weights on the device go first (weights.go)
		w, err := m.weights.args(me.weights)
		if err != nil {
			return nil, nil, nil, err
		}
		args = append(args, w...)
	}
	for _, p := range me.params {
		t, err := me.plan.PrepareInput(p.Name, inputs[p.Name])
		if err != nil {
			return nil, nil, nil, err
		}
		args = append(args, t)
	}
	var (
		res []*ir.Tensor
		err error
	)
	if me.exe != nil { // nil when every output is STRING (strings.go)
		res, err = me.exe.RunOn(ctx, m.device, args...)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if checks.HasOutput() && len(res) > len(me.outs) {
		if err := checks.CheckOutput(res[len(me.outs)]); err != nil {
			if !padded {
				return nil, nil, nil, err
			}
			// Padding rows can compute indices the real rows never form:
			// the run at the exact shapes, whose check counts only the real
			// rows, decides (its error, or its answer).
			for _, t := range res {
				_ = t.FinalizeAll()
			}
			return m.runExact(ctx, given, strs)
		}
		res = res[:len(me.outs)]
	}
	outs := make(map[string]*ir.Tensor, len(res))
	for i, spec := range me.outs {
		t, err := onnx.ToModelDType(res[i], spec.DType)
		if err == nil {
			t, err = m.unpad(t, spec, real)
		}
		if err != nil {
			return nil, nil, nil, &errs.Error{Kind: errs.Internal, Backend: m.b.Name(), Op: "run model",
				Err: fmt.Errorf("output %q: %w", spec.Name, err)}
		}
		outs[spec.Name] = t
	}
	var souts map[string]*StringTensor
	if m.hot.stringOutput {
		if souts, err = me.plan.StringOutputs(); err != nil {
			return nil, nil, nil, err
		}
	}
	return outs, souts, me.plan, nil
}

// runExact runs inputs at their own shapes, unpadded, whatever the
// bucket plan: execute's answer to an index check that failed on a padded
// run.
func (m *Model) runExact(ctx context.Context, inputs map[string]*ir.Tensor, strs map[string]*StringTensor) (map[string]*ir.Tensor, map[string]*StringTensor, *onnx.Plan, error) {
	shapes, values, err := m.checkInputs(inputs)
	if err != nil {
		return nil, nil, nil, err
	}
	me, done, err := m.specialisation(ctx, shapes, values, strs)
	if err != nil {
		return nil, nil, nil, err
	}
	defer done()
	return m.execute(ctx, me, inputs, inputs, m.dimValues(shapes), false, strs)
}

// remember publishes a resolved set of input shapes for the next call's
// fast path. The maps are not written again after this.
func (m *Model) remember(shapes, padded map[string][]int, real map[string]int, key string) {
	l := &lastShapes{dims: make([][]int, len(m.hot.ins)), shapes: shapes, padded: padded, real: real, key: key}
	for k, s := range m.hot.ins {
		if d, ok := shapes[s.Name]; ok {
			l.dims[k] = d
			l.pads = l.pads || !slices.Equal(d, padded[s.Name])
		}
	}
	m.hot.last.Store(l)
}

// checkNamesAndDTypes is the part of checkInputs that the fast path (inputs
// of already resolved dims) still needs: every input is known, every
// numeric one given, of its declared dtype.
func (m *Model) checkNamesAndDTypes(inputs map[string]*ir.Tensor) error {
	given := 0
	for _, s := range m.hot.ins {
		if s.DType == onnx.String {
			continue
		}
		t := inputs[s.Name] // present and non-nil: matches found its dims
		if t.DType() != s.DType {
			return &errs.InputError{Name: s.Name, Problem: "dtype", Expected: s.DType.String(), Got: t.DType().String()}
		}
		given++
	}
	if len(inputs) != given { // an unknown name (or a STRING input given to Run): the full check says which
		_, _, err := m.checkInputs(inputs)
		if err == nil {
			err = &errs.Error{Kind: errs.Internal, Op: "run model", Err: fmt.Errorf("%d inputs given, %d numeric inputs declared", len(inputs), given)}
		}
		return err
	}
	return nil
}

// dimValues maps each symbolic dimension to its size in these inputs.
func (m *Model) dimValues(shapes map[string][]int) map[string]int {
	out := map[string]int{}
	for _, s := range m.m.Inputs() {
		for i, d := range s.Dims {
			if d.Param != "" && i < len(shapes[s.Name]) {
				out[d.Param] = shapes[s.Name][i]
			}
		}
	}
	return out
}

// pad pads the inputs along bucketed dimensions and returns them with their
// new shapes; what padded positions hold (a copy of the last real row, zeros,
// a mask's masked-out value) is the bucket plan's choice per input and axis.
func (m *Model) pad(inputs map[string]*ir.Tensor, shapes map[string][]int) (map[string]*ir.Tensor, map[string][]int, error) {
	if m.exact || len(m.buckets.dims) == 0 {
		return inputs, shapes, nil
	}
	padded, _, err := m.buckets.bucketShapes(m.m.Inputs(), shapes, m.bcfg)
	if err != nil {
		return nil, nil, err
	}
	specs := map[string]ValueSpec{}
	for _, s := range m.m.Inputs() {
		specs[s.Name] = s
	}
	out := make(map[string]*ir.Tensor, len(inputs))
	for name, t := range inputs {
		p, err := padTensor(t, padded[name], m.buckets.fills(specs[name]))
		if err != nil {
			return nil, nil, &errs.InputError{Name: name, Problem: "value", Expected: fmt.Sprint(padded[name]), Got: err.Error()}
		}
		out[name] = p
	}
	return out, padded, nil
}

// unpad slices an output back along its bucketed dimensions.
func (m *Model) unpad(t *ir.Tensor, spec ValueSpec, real map[string]int) (*ir.Tensor, error) {
	if m.exact || len(m.buckets.dims) == 0 {
		return t, nil
	}
	dims := append([]int(nil), t.Shape().Dimensions...)
	changed := false
	for i, d := range spec.Dims {
		if i < len(dims) && d.Param != "" && m.buckets.dims[d.Param] {
			if n, ok := real[d.Param]; ok && n != dims[i] {
				dims[i] = n
				changed = true
			}
		}
	}
	if !changed {
		return t, nil
	}
	return sliceTensor(t, dims)
}

// checkInputs checks inputs against the declared ones (known names, every
// numeric input given, dtypes, ranks, static dims, one size per symbolic
// dimension across inputs) and returns each numeric input's dims and the
// tensors of the inputs whose values set shapes.
func (m *Model) checkInputs(inputs map[string]*ir.Tensor) (map[string][]int, map[string]*ir.Tensor, error) {
	specs := m.m.Inputs()
	byName := make(map[string]ValueSpec, len(specs))
	var names []string
	for _, s := range specs {
		byName[s.Name] = s
		names = append(names, s.Name)
	}
	for name := range inputs {
		if _, ok := byName[name]; !ok {
			return nil, nil, &errs.InputError{Name: name, Problem: "name",
				Expected: "one of " + strings.Join(names, ", "), Got: fmt.Sprintf("unknown input %q", name)}
		}
	}
	shapes := map[string][]int{}
	symbolic := map[string]int{}        // dimension name -> size
	symbolicFrom := map[string]string{} // dimension name -> the input that set it
	for _, s := range specs {
		if s.DType == onnx.String {
			continue // given to RunStrings, checked by SpecializeStrings (strings.go)
		}
		t, ok := inputs[s.Name]
		if !ok || t == nil {
			return nil, nil, &errs.InputError{Name: s.Name, Problem: "value",
				Expected: "a tensor " + s.String(), Got: "none"}
		}
		if t.DType() != s.DType {
			return nil, nil, &errs.InputError{Name: s.Name, Problem: "dtype", Expected: s.DType.String(), Got: t.DType().String()}
		}
		dims := t.Shape().Dimensions
		if s.RankKnown && len(dims) != len(s.Dims) {
			return nil, nil, &errs.InputError{Name: s.Name, Problem: "shape", Expected: s.String(), Got: t.Shape().String()}
		}
		for i, d := range s.Dims {
			if d.Param != "" && i < len(dims) {
				if n, ok := symbolic[d.Param]; ok && n != dims[i] {
					return nil, nil, &errs.InputError{Name: s.Name, Problem: "shape",
						Expected: fmt.Sprintf("dimension %q = %d, as input %q has it", d.Param, n, symbolicFrom[d.Param]),
						Got:      fmt.Sprintf("%d (shape %s)", dims[i], t.Shape())}
				}
				symbolic[d.Param], symbolicFrom[d.Param] = dims[i], s.Name
			}
			if d.Param == "" && d.Value >= 0 && i < len(dims) && dims[i] != d.Value {
				return nil, nil, &errs.InputError{Name: s.Name, Problem: "shape",
					Expected: fmt.Sprintf("%s (dimension %d is %d)", s, i, d.Value), Got: t.Shape().String()}
			}
		}
		shapes[s.Name] = dims
	}
	values := map[string]*ir.Tensor{}
	for _, name := range m.m.ValueInputs() {
		values[name] = inputs[name]
	}
	return shapes, values, nil
}
