package tensorbridge

// What a Trainer holds and hands out: weights, checkpoints (State,
// Restore), the exported model, and releasing it all on Close.

import (
	"context"
	"fmt"
	"sort"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/train"
)

// Weights returns host copies of the trained weights by initializer name,
// in the dtype the graph holds them in (float32 for float32 initializers,
// also under bfloat16 precision).
func (t *Trainer) Weights() (map[string]*ir.Tensor, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.weights == nil {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: t.b.Name(), Op: "weights", Err: ErrClosed}
	}
	if t.lost != nil {
		return nil, t.usable(context.Background())
	}
	out := make(map[string]*ir.Tensor, len(t.params))
	for i, p := range t.params {
		h, err := t.hostArg(i)
		if err != nil {
			return nil, t.deviceErr("read weights", p, err)
		}
		out[p.Name] = h
	}
	return out, nil
}

// State returns a checkpoint of the training: the weights ("weight/NAME"),
// the optimizer state ("SLOT/NAME", train.StateSlots), the updates done and
// the digests of the model and configuration. The data position is the
// caller's to fill in.
func (t *Trainer) State() (*train.Checkpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.weights == nil {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: t.b.Name(), Op: "state", Err: ErrClosed}
	}
	if t.lost != nil {
		return nil, t.usable(context.Background())
	}
	c := &train.Checkpoint{Step: t.updates, ModelDigest: t.modelDigest, ConfigDigest: t.cfg.Digest(),
		Config: t.cfg.Fields(), Tensors: map[string]*ir.Tensor{}}
	n := len(t.params)
	for i, p := range t.params {
		h, err := t.hostArg(i)
		if err != nil {
			return nil, t.deviceErr("read weights", p, err)
		}
		c.Tensors["weight/"+p.Name] = h
		for s, slot := range t.slots {
			h, err := t.hostArg(n*(1+s) + i)
			if err != nil {
				return nil, t.deviceErr("read optimizer state", p, err)
			}
			c.Tensors[slot+"/"+p.Name] = h
		}
	}
	return c, nil
}

// Restore replaces the weights, optimizer state and update count with a
// checkpoint's. A checkpoint of another model or configuration is a
// *train.MismatchError naming what differs; one that lacks a tensor or
// holds one of another shape is an *InputError. On error nothing changes.
func (t *Trainer) Restore(ctx context.Context, c *train.Checkpoint) error {
	if c == nil {
		return &errs.InputError{Name: "checkpoint", Problem: "value", Expected: "a checkpoint", Got: "nil"}
	}
	if err := c.Check(t.modelDigest, t.cfg); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	lost := t.lost
	t.lost = nil // Restore replaces what a failed step consumed
	err := t.usable(ctx)
	t.lost = lost
	if err != nil {
		return err
	}
	want := map[string]ir.Shape{}
	var order []string
	for _, p := range t.params {
		want["weight/"+p.Name] = p.Shape
		order = append(order, "weight/"+p.Name)
	}
	for _, slot := range t.slots {
		for _, p := range t.params {
			want[slot+"/"+p.Name] = p.Shape
			order = append(order, slot+"/"+p.Name)
		}
	}
	for _, name := range order {
		h := c.Tensors[name]
		if h == nil || !h.Shape().Equal(want[name]) {
			got := "none"
			if h != nil {
				got = h.Shape().String()
			}
			return &errs.InputError{Name: name, Problem: "shape", Expected: want[name].String() + " in the checkpoint", Got: got}
		}
	}
	placed := make([]*ir.Tensor, 0, len(order))
	for _, name := range order {
		d, err := ir.ToDevice(c.Tensors[name], t.b.drv.Engine(), t.dev)
		if err != nil {
			freeAll(placed)
			return &errs.Error{Kind: errs.Internal, Backend: t.b.Name(), Op: "restore", Err: fmt.Errorf("%s: %w", name, err)}
		}
		placed = append(placed, d)
	}
	n := len(t.params)
	old := t.weights
	t.weights = placed[:n]
	for s := range t.state {
		old = append(old, t.state[s]...)
		t.state[s] = placed[n*(1+s) : n*(2+s)]
	}
	freeAll(old)
	t.lost = nil
	t.updates = c.Step
	if t.mesh != nil {
		return t.replicate()
	}
	return nil
}

// Export writes a copy of the model's ONNX file at path whose trainable
// initializers hold the trained values (train.ExportONNX: same names,
// dtypes and graph; external data stays external; written atomically).
func (t *Trainer) Export(ctx context.Context, path string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.src != nil {
		return &errs.UnsupportedError{What: "feature", Name: "Export of " + t.src.TrainName(),
			Detail: "not an ONNX model: write its trained tensors from Weights"}
	}
	w, err := t.Weights()
	if err != nil {
		return err
	}
	return train.ExportONNX(t.m.path, path, w)
}

// Close releases the weights, the optimizer state and the compiled
// programs. It is idempotent.
func (t *Trainer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.release()
	return nil
}

func (t *Trainer) release() {
	t.mesh.release()
	freeAll(t.weights)
	for _, s := range t.state {
		freeAll(s)
	}
	t.weights, t.state = nil, nil
	keys := make([]string, 0, len(t.execs))
	for k := range t.execs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		_ = t.execs[k].exe.Close()
		delete(t.execs, k)
	}
}

func freeAll(ts []*ir.Tensor) {
	for _, x := range ts {
		if x != nil {
			_ = x.FinalizeAll()
		}
	}
}

// hostCopy copies a (device) tensor's value into a new host tensor.
func hostCopy(t *ir.Tensor) (*ir.Tensor, error) {
	var out *ir.Tensor
	var cerr error
	err := t.ConstBytes(func(data []byte) {
		out, cerr = ir.TensorFromBytes(t.DType(), t.Shape().Dimensions, append([]byte(nil), data...))
	})
	if err != nil {
		return nil, err
	}
	return out, cerr
}

// hostScalar reads a float32 scalar result and frees it.
func hostScalar(t *ir.Tensor) (float64, error) {
	defer func() { _ = t.FinalizeAll() }()
	var v float64
	err := t.ConstFlatData(func(flat any) {
		if f, ok := flat.([]float32); ok && len(f) == 1 {
			v = float64(f[0])
		}
	})
	return v, err
}
