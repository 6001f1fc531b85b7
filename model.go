package tensorbridge

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

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

// Inputs returns the inputs the caller provides, in declaration order.
func (m *Model) Inputs() []ValueSpec { return m.m.Inputs() }

// Outputs returns the outputs, in declaration order.
func (m *Model) Outputs() []ValueSpec { return m.m.Outputs() }

// ONNX returns the importer's view of the model.
func (m *Model) ONNX() *onnx.Model { return m.m }

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
