package tensorbridge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// Weights on the device.
//
// With weights on the device a Model compiles its weights as graph
// parameters (onnx.SpecializeOptions.WeightsAsParams) instead of constants,
// transfers them once, when it is loaded, to the device it runs on, and
// passes the same buffers to every compiled shape. Programs then hold
// shapes only: large models compile fast, cache entries hold no weights,
// and the device holds one copy of the weights however many shapes are
// compiled. The Model owns the buffers and frees them on Close.
//
// It is the default on accelerators (tpu, cuda, rocm). On the CPU backends
// (cpu, xla-cpu) folding the weights as constants stays the default: XLA's
// CPU compiler specialises on constant weights and runs faster with them
// (docs/onnx.md, "Weights on the device"); WithWeightsOnDevice(true) turns
// it on there.

// WithWeightsOnDevice chooses whether the model's weights are device
// buffers passed to every compiled shape (true) or constants compiled into
// each program (false). The default is true on tpu, cuda and rocm, false on
// cpu and xla-cpu.
func WithWeightsOnDevice(on bool) ModelOption {
	return func(o *modelOptions) { o.weightsOnDevice = &on }
}

// weightsOnDeviceByDefault says whether a backend places weights on the
// device unless told otherwise.
func weightsOnDeviceByDefault(backend string) bool {
	switch backend {
	case "tpu", "cuda", "rocm":
		return true
	}
	return false
}

// deviceWeights are a model's weights placed on one device: one tensor per
// weight parameter, in the order of onnx.Model.WeightParams, owned by the
// Model.
type deviceWeights struct {
	params  []onnx.Param
	device  int
	bytes   int64
	mu      sync.Mutex
	tensors []*ir.Tensor // nil once released
}

// placeWeights converts every weight parameter to the dtype the graph
// takes it in and transfers it to device. On failure nothing stays placed.
func (b *Backend) placeWeights(ctx context.Context, m *onnx.Model, spec onnx.SpecializeOptions, device int) (*deviceWeights, error) {
	params, err := m.WeightParams(spec)
	if err != nil {
		return nil, err
	}
	w := &deviceWeights{params: params, device: device, tensors: make([]*ir.Tensor, 0, len(params))}
	for _, p := range params {
		if err := ctx.Err(); err != nil {
			w.release()
			return nil, err
		}
		host, err := m.WeightValue(p.Name, spec)
		if err != nil {
			w.release()
			return nil, err
		}
		t, err := ir.ToDevice(host, b.drv.Engine(), device)
		if err != nil {
			w.release()
			return nil, &errs.Error{Kind: errs.Internal, Backend: b.Name(), Op: "place weights",
				Err: fmt.Errorf("weight %q (%s): %w", p.Name, p.Shape, err)}
		}
		w.tensors = append(w.tensors, t)
		w.bytes += int64(p.Shape.Memory())
	}
	return w, nil
}

// args returns the weight tensors to pass before a run's inputs, checking
// that the plan takes exactly these weights.
func (w *deviceWeights) args(plan []onnx.Param) ([]*ir.Tensor, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tensors == nil {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Op: "run model", Err: ErrClosed}
	}
	if len(plan) != len(w.params) {
		return nil, &errs.Error{Kind: errs.Internal, Op: "run model",
			Err: fmt.Errorf("the compiled shape takes %d weights, %d are on the device", len(plan), len(w.params))}
	}
	for i, p := range plan {
		if p.Name != w.params[i].Name || !p.Shape.Equal(w.params[i].Shape) {
			return nil, &errs.Error{Kind: errs.Internal, Op: "run model",
				Err: fmt.Errorf("weight #%d: the compiled shape takes %s %s, the device holds %s %s",
					i, p.Name, p.Shape, w.params[i].Name, w.params[i].Shape)}
		}
	}
	return append([]*ir.Tensor(nil), w.tensors...), nil
}

// release frees the device buffers. It is idempotent.
func (w *deviceWeights) release() {
	if w == nil {
		return
	}
	w.mu.Lock()
	ts := w.tensors
	w.tensors = nil
	w.mu.Unlock()
	for _, t := range ts {
		_ = t.FinalizeAll()
	}
}

// WeightsOnDevice reports whether the model's weights are device buffers
// shared by its compiled shapes, and their size in bytes (0 when they are
// compiled into each program as constants).
func (m *Model) WeightsOnDevice() (bool, int64) {
	if m.weights == nil {
		return false, 0
	}
	return true, m.weights.bytes
}

// Replicas: one model on several devices of a backend.
//
// A server runs one replica of a model per device. Loading the model once
// per device would parse it, specialise it and lower each shape once per
// device, and keep each of those copies. Replica instead shares what does
// not depend on the device: the parsed model, its bucket plan and its cache
// of compiled specialisations. A single-device program runs on whichever
// device Executable.RunOn names (on pjrt backends it is compiled portable,
// pjrt/share.go), so one compile per shape serves every replica, and
// weights compiled in as constants exist once, inside it. Weights on the
// device are placed again on the replica's device: a device buffer belongs
// to its device.

// Replica returns the model on device d of the same backend, sharing m's
// compiled specialisations (and with them weights compiled in as
// constants). Each replica is closed on its own; the shared
// specialisations are released with the last of them. A model on a mesh
// (WithMesh) has no replicas: it already spans its devices.
func (m *Model) Replica(ctx context.Context, d int) (*Model, error) {
	if err := m.b.check(); err != nil {
		return nil, err
	}
	if m.sharded != nil {
		return nil, &errs.UnsupportedError{Backend: m.b.Name(), What: "feature", Name: "replica of a model on a mesh",
			Detail: "a model on a mesh already spans its devices; load one per mesh instead"}
	}
	if d < 0 || d >= len(m.b.devices) {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: m.b.Name(), Op: "replica",
			Err: fmt.Errorf("device %d out of range: the backend has %d device(s)", d, len(m.b.devices))}
	}
	if m.closed != nil && m.closed.Load() {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: m.b.Name(), Op: "replica", Err: ErrClosed}
	}
	var w *deviceWeights
	if m.weights != nil {
		var err error
		if w, err = m.b.placeWeights(ctx, m.m, m.prec, d); err != nil {
			return nil, err
		}
	}
	m.execHolds.Add(1)
	return &Model{b: m.b, path: m.path, m: m.m, execs: m.execs, buckets: m.buckets, bcfg: m.bcfg, exact: m.exact,
		prec: m.prec, precStr: m.precStr, device: d, fit: m.fit, weights: w,
		execHolds: m.execHolds, closed: new(atomic.Bool), hot: m.hot}, nil
}
