package tensorbridge

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tensorbridge/tensorbridge/cache"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/shard"
)

// ValueSpec describes a model input or output: name, dtype, and dimensions,
// each static or named symbolic ("batch").
type ValueSpec = onnx.ValueSpec

// Model is an ONNX model loaded onto a backend. It compiles once per
// distinct set of input shapes (and values of shape-determining inputs) and
// keeps the executables in a bounded LRU. It is safe for concurrent use.
type Model struct {
	b       *Backend
	path    string
	m       *onnx.Model
	execs   *cache.Memory[*modelExec]
	buckets bucketPlan
	bcfg    config.Buckets
	exact   bool // bucketing off
	prec    onnx.SpecializeOptions
	precStr string // for the specialisation key
	device  int    // backend device index the model runs on
	fit     string // what the memory fit check found, or why it could not run
	// weights: the weights on the device, when they are graph parameters
	// (weights.go); nil when they are compiled in as constants.
	weights *deviceWeights
	// sharded: the model on a mesh of devices (sharded.go); nil on one.
	sharded *shardedModel
	// execHolds counts the Models sharing execs (Replica, weights.go);
	// the last to close releases it. closed makes Close idempotent.
	execHolds *atomic.Int32
	closed    *atomic.Bool

	// hot is what Run reads of the model on every call (newRunInfo).
	hot *runInfo
}

// runInfo is what Run reads of the model on every call, taken once at
// load: the declared inputs (onnx.Model.Inputs clones them), why Run
// refuses the model if it does (STRING values, sequences or optionals),
// whether any input's value sets shapes, whether any output is STRING.
type runInfo struct {
	ins          []ValueSpec
	runErr       error
	valueInputs  bool
	stringOutput bool
	// last is the specialisation the latest call without shape-setting
	// values or STRING inputs resolved to, keyed by its inputs' dims: a call
	// with the same dims reuses its key, padded shapes and dimension sizes
	// instead of recomputing them (lastShapes).
	last atomic.Pointer[lastShapes]
}

// newRunInfo reads m's runInfo. A Model that is a view of another with a
// different onnx.Model or key (RunValues) gets its own.
func newRunInfo(m *Model) *runInfo {
	h := &runInfo{ins: m.m.Inputs(), valueInputs: len(m.m.ValueInputs()) > 0}
	for _, s := range m.m.Outputs() {
		h.stringOutput = h.stringOutput || s.DType == onnx.String
	}
	h.runErr = m.needsStrings() // strings.go
	if h.runErr == nil && m.m.HasStructuredBoundary() {
		h.runErr = errStructured(m) // sequences and optionals go through RunValues (values.go)
	}
	return h
}

// lastShapes is a resolved set of input shapes (model.go, Model.run).
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

// modelExec is one specialisation of a model, compiled.
type modelExec struct {
	exe    *Executable
	plan   *onnx.Plan
	params []onnx.Param
	// weights are the plan's weight parameters: the executable's first
	// len(weights) arguments, the model's device weights (weights.go).
	weights []onnx.Param
	// outs are the executable's results in order: the declared outputs, or
	// the tensors within sequence and optional ones (values.go).
	outs []onnx.ValueSpec
}

// ModelOption configures LoadModel.
type ModelOption func(*modelOptions)

type modelOptions struct {
	maxCompiled int
	exact       bool
	precision   config.Precision
	mixed       *bool
	device      int
	// weightsOnDevice: WithWeightsOnDevice, nil for the backend's default.
	weightsOnDevice *bool
	// mesh, shardOpts: WithMesh (sharded.go).
	mesh      *shard.Mesh
	shardOpts shard.Options
}

// OnDevice places the model on device n of the backend (an index into
// Backend.Devices); the default is device 0. A server runs one replica per
// device by loading the model once per device.
func OnDevice(n int) ModelOption { return func(o *modelOptions) { o.device = n } }

// WithPrecision sets this model's compute precision (and mixed precision),
// overriding the backend's settings for it. config.Auto, or not using this
// option, takes the backend's effective precision.
func WithPrecision(p config.Precision, mixed bool) ModelOption {
	return func(o *modelOptions) { o.precision = p; o.mixed = &mixed }
}

// WithMaxCompiled bounds how many shape specialisations stay compiled at
// once (default 16); the least recently used is released beyond it.
func WithMaxCompiled(n int) ModelOption { return func(o *modelOptions) { o.maxCompiled = n } }

// WithExactShapes turns shape buckets off: every distinct input shape
// compiles its own specialisation.
func WithExactShapes() ModelOption { return func(o *modelOptions) { o.exact = true } }

// LoadModel reads an ONNX model and checks it against the importer: an
// unsupported op anywhere in the model is reported now, for the whole model
// at once, not at the first run.
func (b *Backend) LoadModel(ctx context.Context, path string, opts ...ModelOption) (*Model, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m, err := onnx.Load(path)
	if err != nil {
		return nil, err
	}
	return b.loadONNX(ctx, path, m, opts)
}

// LoadONNX prepares a model already read by package onnx (onnx.Load,
// onnx.FromProto), as LoadModel does once it has read the file; name
// stands for it in messages and program names (LoadModel uses the path).
// Reading the file while the backend opens is what it is for:
//
//	parsed := make(chan *onnx.Model, 1)
//	go func() { m, _ := onnx.Load(path); parsed <- m }() // handle the error too
//	b, err := tensorbridge.Open(ctx, "xla-cpu")
//	...
//	model, err := b.LoadONNX(ctx, <-parsed, path)
//
// A model read from a file keeps its file's digest, so a warm start from
// the disk cache works as with LoadModel; one built in memory has none.
// The returned Model takes m over: pass each parsed model once.
func (b *Backend) LoadONNX(ctx context.Context, m *onnx.Model, name string, opts ...ModelOption) (*Model, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "load model", Err: errors.New("nil ONNX model")}
	}
	return b.loadONNX(ctx, name, m, opts)
}

func (b *Backend) loadONNX(ctx context.Context, path string, m *onnx.Model, opts []ModelOption) (*Model, error) {
	o := modelOptions{maxCompiled: 16}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxCompiled <= 0 {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "load model",
			Err: fmt.Errorf("max compiled specialisations must be positive, got %d", o.maxCompiled)}
	}
	if o.device < 0 || o.device >= len(b.devices) {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "load model",
			Err: fmt.Errorf("device %d out of range: the backend has %d device(s)", o.device, len(b.devices))}
	}
	prec, mixed := b.settings.Precision, b.settings.MixedPrecision
	if o.precision != "" && o.precision != config.Auto {
		if err := (config.Config{Precision: o.precision}).Validate(); err != nil {
			return nil, err
		}
		prec, mixed = o.precision, *o.mixed
	}
	spec, err := specializeOptions(prec, mixed)
	if err != nil {
		return nil, err
	}
	fit, err := b.checkFits(ctx, o.device, path, m, prec, mixed)
	if err != nil {
		return nil, err
	}
	// Weights on the device (weights.go): placed once, after the fit check;
	// on a mesh, split over its devices (sharded.go).
	var weights *deviceWeights
	var sharded *shardedModel
	if o.mesh != nil && o.mesh.Devices() > 1 {
		if sharded, err = b.newSharded(ctx, m, spec, *o.mesh, o.shardOpts); err != nil {
			return nil, err
		}
	} else if on := weightsOnDeviceByDefault(b.Name()); (o.weightsOnDevice == nil && on) || (o.weightsOnDevice != nil && *o.weightsOnDevice) {
		spec.WeightsAsParams = true
		if weights, err = b.placeWeights(ctx, m, spec, o.device); err != nil {
			return nil, err
		}
	}
	execs, err := cache.NewMemory(cache.MemoryOptions[*modelExec]{
		MaxEntries: o.maxCompiled,
		// A caller waits at most the compile timeout; the compile itself
		// keeps its slot until it ends, so a retry joins it, and its result
		// is kept for the next call.
		Timeout: b.settings.CompileTimeout,
		Release: func(_ string, e *modelExec) {
			if e.exe != nil { // nil when every output is STRING (strings.go)
				_ = e.exe.Close()
			}
		},
	})
	if err != nil {
		weights.release()
		if sharded != nil {
			sharded.release()
		}
		return nil, err
	}
	mdl := &Model{b: b, path: path, m: m, execs: execs, exact: o.exact, bcfg: b.settings.Buckets,
		buckets: planBuckets(m),
		prec:    spec, precStr: fmt.Sprintf("%s mixed=%v", prec, mixed), device: o.device, fit: fit,
		weights: weights, sharded: sharded, execHolds: new(atomic.Int32), closed: new(atomic.Bool)}
	mdl.execHolds.Store(1)
	mdl.hot = newRunInfo(mdl)
	return mdl, nil
}

// specializeOptions maps a precision setting onto the importer's options.
func specializeOptions(p config.Precision, mixed bool) (onnx.SpecializeOptions, error) {
	switch p {
	case config.Float32, "", config.Auto:
		return onnx.SpecializeOptions{Compute: ir.Float32}, nil
	case config.BFloat16:
		return onnx.SpecializeOptions{Compute: ir.BFloat16, Mixed: mixed}, nil
	case config.Float16:
		return onnx.SpecializeOptions{Compute: ir.Float16, Mixed: mixed}, nil
	}
	return onnx.SpecializeOptions{}, &errs.Error{Kind: errs.InvalidArgument, Op: "load model", Err: fmt.Errorf("unknown precision %q", p)}
}

// Precision returns the precision the model computes in ("bfloat16 mixed=true").
func (m *Model) Precision() string { return m.precStr }

// Buckets says which symbolic dimensions are padded up to buckets and why
// the others are compiled exactly.
func (m *Model) Buckets() string {
	if m.exact {
		return "off (exact shapes)"
	}
	return m.buckets.String()
}

// BucketPlan returns the bucketing decision for each symbolic dimension,
// sorted by name. With exact shapes (WithExactShapes) nothing is padded.
func (m *Model) BucketPlan() []DimPlan {
	ps := m.buckets.plans()
	if m.exact {
		for i := range ps {
			ps[i].Padded, ps[i].Fill, ps[i].Reason = false, "", "bucketing is off (exact shapes)"
		}
	}
	return ps
}

// FitCheck says what the memory check at load found ("fits: ..."), or why
// it could not be made ("not checked: ..." when the device's runtime reports
// no memory figures).
func (m *Model) FitCheck() string { return m.fit }

// BucketSize returns the size a symbolic dimension of n is padded to when
// the model runs: the bucket that holds n for a padded dimension, n itself
// for one that compiles exactly (or with bucketing off).
func (m *Model) BucketSize(dim string, n int) (int, error) {
	if m.exact || !m.buckets.dims[dim] {
		return n, nil
	}
	b, err := m.bcfg.Bucket(dim, n)
	if err == nil && m.meshPadded(dim) { // a batch split over a mesh's data axis (sharded.go)
		b = roundUp(b, m.sharded.mesh.Data)
	}
	return b, err
}

// Device returns the index of the backend device the model runs on.
func (m *Model) Device() int { return m.device }

// Path returns the file the model was loaded from.
func (m *Model) Path() string { return m.path }

// Inputs returns the inputs the caller provides, in declaration order.
func (m *Model) Inputs() []ValueSpec { return m.m.Inputs() }

// Outputs returns the outputs, in declaration order.
func (m *Model) Outputs() []ValueSpec { return m.m.Outputs() }

// ONNX returns the importer's view of the model.
func (m *Model) ONNX() *onnx.Model { return m.m }

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

// specialisation returns the compiled executable for these (padded)
// shapes, compiling it once however many callers ask at the same time.
func (m *Model) specialisation(ctx context.Context, shapes map[string][]int, values map[string]*ir.Tensor, strs map[string]*StringTensor) (*modelExec, func(), error) {
	return m.execs.GetOrCompile(ctx, m.specialisationKey(shapes, values, strs), func(ctx context.Context) (*modelExec, int64, error) {
		return m.compile(ctx, shapes, values, strs)
	})
}

// specialisationKey is the key of the compiled specialisation for these
// (padded) shapes, values of shape-setting inputs and STRING inputs.
func (m *Model) specialisationKey(shapes map[string][]int, values map[string]*ir.Tensor, strs map[string]*StringTensor) string {
	return m.precStr + "|" + specialisationKey(shapes, values) + stringsKey(strs)
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

// WarmupProgress is called after each specialisation Warmup compiles.
type WarmupProgress func(done, total int, dims map[string]int, took time.Duration, err error)

// Warmup compiles, ahead of the first request, the specialisation each
// assignment of symbolic dimensions needs (after bucketing), so that
// serving starts without compile stalls. It returns how many were compiled
// (already compiled ones are not counted) and the first error.
func (m *Model) Warmup(ctx context.Context, dims []map[string]int, progress WarmupProgress) (int, error) {
	if len(m.m.ValueInputs()) > 0 {
		return 0, &errs.UnsupportedError{What: "feature", Name: "warmup",
			Detail: fmt.Sprintf("inputs %v set shapes from their values, which warmup cannot know", m.m.ValueInputs())}
	}
	if m.sharded != nil { // on a mesh (sharded.go)
		return m.warmupSharded(ctx, dims, progress)
	}
	compiled := 0
	for k, assign := range dims {
		start := time.Now()
		shapes := map[string][]int{}
		for _, s := range m.m.Inputs() {
			var ds []int
			for _, d := range s.Dims {
				switch {
				case d.Param != "":
					n, ok := assign[d.Param]
					if !ok {
						return compiled, &errs.InputError{Name: s.Name, Problem: "dimension",
							Expected: "a size for " + d.Param, Got: fmt.Sprint(assign)}
					}
					ds = append(ds, n)
				default:
					ds = append(ds, d.Value)
				}
			}
			shapes[s.Name] = ds
		}
		if !m.exact && len(m.buckets.dims) > 0 {
			padded, _, err := m.buckets.bucketShapes(m.m.Inputs(), shapes, m.bcfg)
			if err != nil {
				return compiled, err
			}
			shapes = padded
		}
		before := m.execs.Stats().Misses
		_, done, err := m.specialisation(ctx, shapes, nil, nil)
		if err == nil {
			done()
			if m.execs.Stats().Misses > before {
				compiled++
			}
		}
		if progress != nil {
			progress(k+1, len(dims), assign, time.Since(start), err)
		}
		if err != nil {
			return compiled, err
		}
	}
	return compiled, nil
}

// CompileStats counts what the model's cache of compiled specialisations
// did: hits, compiles started (Misses), callers that joined a compile in
// progress (Shared), timeouts, evictions.
func (m *Model) CompileStats() cache.MemoryStats { return m.execs.Stats() }

// Compiled reports how many specialisations are compiled now.
func (m *Model) Compiled() int { return m.execs.Len() }

// Close releases the model's weights on its device and, with the last of
// the replicas sharing them (Replica), every compiled specialisation. A
// second Close does nothing.
func (m *Model) Close() error {
	if m.closed != nil && m.closed.Swap(true) {
		return nil
	}
	if m.execHolds == nil || m.execHolds.Add(-1) == 0 {
		m.execs.Close()
	}
	m.weights.release()
	if m.sharded != nil {
		m.sharded.release()
	}
	return nil
}

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

// specialisationKey identifies a compiled specialisation: every input's
// dims and, for inputs that determine shapes, their values.
func specialisationKey(shapes map[string][]int, values map[string]*ir.Tensor) string {
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	// Built by hand rather than with fmt: it runs on every call.
	buf := make([]byte, 0, 64)
	for _, n := range names {
		buf = strconv.AppendQuote(buf, n)
		buf = append(buf, ':')
		for i, d := range shapes[n] {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendInt(buf, int64(d), 10)
		}
		buf = append(buf, ';')
		if v, ok := values[n]; ok {
			raw, err := ir.TensorBytes(v)
			if err != nil {
				buf = fmt.Appendf(buf, "=%v;", v) // unreachable for host tensors; still distinct per value
			}
			buf = append(buf, '=')
			buf = hex.AppendEncode(buf, raw)
			buf = append(buf, ';')
		}
	}
	return string(buf)
}

func (m *Model) compile(ctx context.Context, shapes map[string][]int, values map[string]*ir.Tensor, strs map[string]*StringTensor) (*modelExec, int64, error) {
	plan, err := m.m.SpecializeStrings(shapes, values, strs, m.prec)
	if err != nil {
		return nil, 0, err
	}
	if err := plan.CheckEngine(m.b.drv.Engine()); err != nil {
		return nil, 0, err
	}
	params := plan.Params()
	weights := plan.Weights() // graph parameters before the inputs (weights.go)
	argShapes := make([]ir.Shape, 0, len(weights)+len(params))
	for _, p := range append(append([]onnx.Param(nil), weights...), params...) {
		argShapes = append(argShapes, p.Shape)
	}
	// Warm start (warmstart.go): load a specialisation an earlier process
	// compiled, found by a key computed before any graph is built.
	warm, recorded := m.warmStart(ctx, shapes, values, plan, params, argShapes)
	if warm != nil {
		return warm, 1, nil
	}
	defer recorded()
	// End of warm start.
	fn := func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		nodes := make(map[string]*ir.Node, len(weights)+len(params))
		for i, p := range weights {
			nodes[p.Name] = in[i]
		}
		for i, p := range params {
			nodes[p.Name] = in[len(weights)+i]
		}
		built, err := plan.Build(g, nodes)
		if err != nil {
			return nil, err
		}
		outSpecs := graphOutputs(plan) // after Build: sequences and optionals flattened (values.go), STRING outputs left on the host (strings.go)
		outs := make([]*ir.Node, 0, len(outSpecs))
		for _, o := range outSpecs {
			n, ok := built[o.Name]
			if !ok {
				return nil, fmt.Errorf("onnx: output %q was not built", o.Name)
			}
			outs = append(outs, n)
		}
		if n := built[onnx.IndexCheckOutput]; n != nil { // computed indices' range (indexcheck.go)
			outs = append(outs, n)
		}
		return outs, nil
	}
	if hostOnlyOutputs(m.m.Outputs()) {
		if err := buildOnHost(m.b.drv.Engine(), plan); err != nil { // strings.go
			return nil, 0, err
		}
		return &modelExec{plan: plan, params: params, weights: weights}, 1, nil
	}
	exe, err := m.b.compileSync("onnx:"+m.path, fn, argShapes)
	if err != nil {
		return nil, 0, err
	}
	return &modelExec{exe: exe, plan: plan, params: params, weights: weights, outs: graphOutputs(plan)}, 1, nil
}

// graphOutputs are the outputs the compiled graph returns, in order: the
// model's outputs with sequences and optionals flattened into tensors
// (values.go; known once the plan is built), less the STRING outputs, which
// are computed on the host (strings.go).
func graphOutputs(plan *onnx.Plan) []onnx.ValueSpec {
	var out []onnx.ValueSpec
	for _, o := range plan.FlatOutputs() {
		if o.DType != onnx.String {
			out = append(out, o)
		}
	}
	return out
}
