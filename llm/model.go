package llm

import (
	"context"
	"fmt"
	"sync"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/shard"
)

// Model is a checkpoint's decoder placed on a backend's device 0 (or
// split over a mesh of devices, LoadOptions.Mesh): its config and its
// weights as device buffers, which it owns.
type Model struct {
	Config *Config
	Dir    string
	b      *tensorbridge.Backend
	dtype  ir.DType
	// maxContext is the longest sequence (prompt and generated tokens) the
	// programs handle: the rope tables' length.
	maxContext  int
	weightBytes int64

	mu      sync.Mutex
	weights []*ir.Tensor // nil once closed; mesh position 0's with a mesh
	tp      *tpModel     // nil on one device (mesh.go)
	// kept are the weights a tensor-parallel Trainer still reads after
	// FineTune.ReleaseConstants closed the model (weights is nil then).
	kept []*ir.Tensor
}

// LoadOptions tune Load.
type LoadOptions struct {
	// Precision of weights and activations; "" takes the backend's
	// effective precision (bfloat16 on tpu, float32 on the CPU backends).
	Precision config.Precision
	// MaxContext caps the context length (default and upper bound: the
	// config's max_position_embeddings).
	MaxContext int
	// Mesh, with a model axis over more than one device, splits the
	// weights and the KV cache tensor-parallel over that many devices
	// (mesh.go); a data axis is refused.
	Mesh shard.Mesh
	// Quantize stores the layers' linear projections as int8 with a
	// float32 scale per output channel (quant.go); QuantNone keeps them in
	// Precision.
	Quantize Quantization
	// Adapters are LoRA adapters served beside the base model
	// (adapters.go): Request.Adapter picks one per request.
	Adapters []AdapterSource
	// OnHost keeps the weights in host memory instead of placing them on
	// device 0: for a tensor-parallel Trainer (train --strategy tp), which
	// places each device's part itself, so that no device ever holds the
	// whole model. Such a model still generates, copying its weights to
	// the device on each run; Mesh and Adapters are refused with it.
	OnHost bool
}

// Load reads a Hugging Face checkpoint directory (config.json,
// generation_config.json, model.safetensors or its sharded index) and
// places its weights on b's device 0. Anything it does not implement is
// refused by name (*UnsupportedError); a missing or misshapen tensor is a
// *MissingTensorError or *ShapeError.
func Load(ctx context.Context, b *tensorbridge.Backend, dir string, o LoadOptions) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ctxLen := cfg.MaxPositions
	if o.MaxContext > 0 && o.MaxContext < ctxLen {
		ctxLen = o.MaxContext
	}
	prec := o.Precision
	if prec == "" || prec == config.Auto {
		prec = b.Settings().Precision
	}
	dt, err := dtypeFor(prec)
	if err != nil {
		return nil, err
	}
	if cfg.quant, err = ParseQuantization(string(o.Quantize)); err != nil {
		return nil, err
	}
	ct, err := openCheckpointTensors(dir)
	if err != nil {
		return nil, err
	}
	defer ct.close()
	if err := checkTensors(dir, cfg, ct); err != nil {
		return nil, err
	}
	if o.OnHost && (normMesh(o.Mesh).Devices() > 1 || len(o.Adapters) > 0) {
		return nil, &errs.UnsupportedError{What: "feature", Name: "LoadOptions.OnHost with a mesh or adapters", Detail: "host weights are for a tensor-parallel Trainer, which splits them itself"}
	}
	if mesh := normMesh(o.Mesh); mesh.Devices() > 1 {
		if len(o.Adapters) > 0 {
			return nil, &errs.UnsupportedError{What: "feature", Name: "adapters on a mesh", Detail: "load the model on one device to serve adapters"}
		}
		if cfg.quantized() {
			return nil, &QuantizedMeshError{Quantize: cfg.quant, Mesh: mesh}
		}
		if err := checkMesh(b, dir, cfg, mesh); err != nil {
			return nil, err
		}
		ws, tp, err := placeWeightsMesh(ctx, b, dir, cfg, ct, dt, ctxLen, mesh)
		if err != nil {
			return nil, err
		}
		var whole int64
		for _, s := range tp.shapes {
			whole += int64(s.Memory())
		}
		return &Model{Config: cfg, Dir: dir, b: b, dtype: dt, maxContext: ctxLen, weightBytes: whole, weights: ws, tp: tp}, nil
	}
	if !o.OnHost {
		if err := checkWeightsFit(ctx, b, cfg, dt, dir); err != nil {
			return nil, err
		}
	}
	ws, bytes, err := placeWeights(ctx, b, cfg, ct, dt, ctxLen, o.OnHost)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, Dir: dir, b: b, dtype: dt, maxContext: ctxLen, weightBytes: bytes, weights: ws}
	if err := m.placeAdapters(ctx, o.Adapters); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// MaxContext is the longest sequence the model's programs handle.
func (m *Model) MaxContext() int { return m.maxContext }

// DType is the weights' and activations' element type.
func (m *Model) DType() ir.DType { return m.dtype }

// WeightBytes is the device memory the weights take (over all devices of
// a mesh, each split weight counted once).
func (m *Model) WeightBytes() int64 { return m.weightBytes }

// Backend is the backend the model is placed on.
func (m *Model) Backend() *tensorbridge.Backend { return m.b }

// Close frees the weights. It is idempotent.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	freeAll(m.weights)
	freeAll(m.kept)
	m.weights, m.kept = nil, nil
	m.tp.release()
	return nil
}

// weightShapes are the shapes of the weight parameters every program
// starts with.
func (m *Model) weightShapes() []ir.Shape {
	if m.tp != nil { // the whole shapes, not device 0's shares
		return append([]ir.Shape(nil), m.tp.shapes...)
	}
	out := make([]ir.Shape, len(m.weights))
	for i, w := range m.weights {
		out[i] = w.Shape()
	}
	return out
}

// PromptLogits returns the logits [len(ids), vocab] (float32, row-major)
// of a prompt, computed without a cache by a program compiled for exactly
// this length: scoring a text (its log-likelihood, perplexity) and checking
// the model against a reference, not the serving path (Engine). A prompt
// of no tokens, or longer than the context, is a *RequestError.
func (m *Model) PromptLogits(ctx context.Context, ids []int) ([]float32, error) {
	if len(ids) == 0 || len(ids) > m.maxContext {
		return nil, &RequestError{Problem: fmt.Sprintf("prompt logits: a prompt of %d tokens, want 1 to %d (the context)", len(ids), m.maxContext)}
	}
	c := m.Config
	n := len(ids)
	shapes := append(m.weightShapes(), ir.MakeShape(ir.Int32, 1, n))
	fn := func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		w := newNetWeights(c, in)
		tokens := in[len(in)-1]
		pos := Iota(g, ir.MakeShape(ir.Int32, 1, n), 1)
		h, _, _ := step(c, w, tokens, pos, nil)
		return []*ir.Node{logits(w, h)}, nil
	}
	if m.tp != nil {
		return m.promptLogitsMesh(ctx, fmt.Sprintf("llm-logits-%d", n), fn, shapes[len(shapes)-1], ids)
	}
	exe, err := m.b.Compile(ctx, fmt.Sprintf("llm-logits-%d", n), fn, shapes...)
	if err != nil {
		return nil, err
	}
	defer exe.Close()
	tok, err := int32Tensor([]int{1, n}, ids)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	ws := m.weights
	m.mu.Unlock()
	if ws == nil {
		return nil, tensorbridge.ErrClosed
	}
	outs, err := exe.Run(ctx, append(append([]*ir.Tensor(nil), ws...), tok)...)
	if err != nil {
		return nil, err
	}
	defer freeAll(outs)
	return float32s(outs[0])
}

// checkWeightsFit refuses, before anything is placed, weights that exceed
// device 0's memory budget (the memory fraction of its limit less what is
// in use). A backend that reports no memory figures is not checked.
func checkWeightsFit(ctx context.Context, b *tensorbridge.Backend, c *Config, dt ir.DType, dir string) error {
	need := weightBytes(c, dt)
	bud, err := b.Budget(ctx)
	if err != nil {
		return nil
	}
	if need > bud.Available {
		return &errs.OutOfMemoryError{Device: bud.Device, Needed: need, Available: bud.Available,
			Detail: fmt.Sprintf("the weights of %s in %s", dir, dt)}
	}
	return nil
}
