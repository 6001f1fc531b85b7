package llm

import (
	"context"
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/shard"
)

// Tensor-parallel generation (LoadOptions.Mesh with a model axis M > 1).
//
// Every program (prefill and decode buckets, prompt logits) is one SPMD
// program over the M devices, compiled by Backend.CompileSharded from the
// same graph functions as on one device: the graph sees whole tensors and
// XLA's partitioner inserts the collectives. What is split is where the
// tensors live, Megatron's pattern as package shard names it:
//
//   - attention: q_proj, k_proj, v_proj (and their biases) split by output
//     rows, i.e. by heads (column-parallel); o_proj split by its input
//     columns (row-parallel), so each device holds Heads/M query heads and
//     KVHeads/M key-value heads;
//   - MLP: gate_proj and up_proj by rows (column-parallel), down_proj by
//     columns (row-parallel);
//   - embed_tokens and lm_head split by vocabulary (each device holds
//     Vocab/M rows; the logits come out split by vocabulary and the
//     partitioner gathers them for sampling); a vocabulary M does not
//     divide is replicated instead (Model.meshNotes says so);
//   - the paged KV cache's block pool [blocks, blockSize, L, KVHeads, D]
//     split over KVHeads (the block tables replicated);
//   - norms, q/k norms and the rope tables replicated.
//
// Checkpoint matrices are [out, in] (torch Linear), so column-parallel is
// dimension 0 here where shard.Weight's ONNX default ([in, out]) takes the
// last: meshRules says so by name. Devices are numbered in mesh order
// over the backend's devices by their coordinates (shard.Coords), as
// WithMesh models do.

// MeshError says a checkpoint cannot be split over the asked mesh: the
// model axis must divide the config's head counts and MLP width, the mesh
// must have no data axis (generation splits weights, not batches) and the
// backend must have the devices. It matches errs.ErrInvalidInput.
type MeshError struct {
	Mesh shard.Mesh
	// Field is the config.json key (num_attention_heads,
	// num_key_value_heads, intermediate_size) or "data" or "devices".
	Field string
	Value int
	Dir   string
}

func (e *MeshError) Error() string {
	switch e.Field {
	case "data":
		return fmt.Sprintf("llm: mesh %s: generation splits the weights over the model axis only; a data axis (%d) is not supported (use --mesh model=M)", e.Mesh, e.Value)
	case "devices":
		return fmt.Sprintf("llm: mesh %s needs %d devices, the backend has %d", e.Mesh, e.Mesh.Devices(), e.Value)
	}
	return fmt.Sprintf("llm: %s: mesh model=%d does not divide %s = %d (config.json): tensor parallelism gives each device %s/%d of them",
		e.Dir, e.Mesh.Model, e.Field, e.Value, e.Field, e.Mesh.Model)
}

// Is makes a MeshError match errs.ErrInvalidInput.
func (e *MeshError) Is(target error) bool { return target == errs.ErrInvalidInput }

// normMesh reads an axis size below 1 (shard.Mesh{Model: 2}'s data axis)
// as 1.
func normMesh(m shard.Mesh) shard.Mesh {
	return shard.Mesh{Data: max(1, m.Data), Model: max(1, m.Model)}
}

// checkMesh refuses a mesh the model cannot be split over, before
// anything is placed.
func checkMesh(b *tensorbridge.Backend, dir string, c *Config, mesh shard.Mesh) error {
	if mesh.Data > 1 {
		return &MeshError{Mesh: mesh, Field: "data", Value: mesh.Data, Dir: dir}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads}, {"intermediate_size", c.Intermediate}} {
		if f.v%mesh.Model != 0 {
			return &MeshError{Mesh: mesh, Field: f.name, Value: f.v, Dir: dir}
		}
	}
	if n := len(b.Devices()); mesh.Devices() > n {
		return &MeshError{Mesh: mesh, Field: "devices", Value: n, Dir: dir}
	}
	return nil
}

// meshRules place the checkpoint's [out, in] matrices (see the comment
// above); norms are replicated, and so is anything else (NamedOnly).
var meshRules = shard.Options{NamedOnly: true, Rules: mustRules(
	`(norm|layernorm)\.weight$=r`,
	`(q_proj|k_proj|v_proj|gate_proj|up_proj)\.(weight|bias)$=0`,
	`(o_proj|down_proj)\.weight$=1`,
	`(embed_tokens|lm_head)\.weight$=0`,
)}

func mustRules(specs ...string) []shard.Rule {
	out := make([]shard.Rule, len(specs))
	for i, s := range specs {
		r, err := shard.ParseRule(s)
		if err != nil {
			panic(err)
		}
		out[i] = r
	}
	return out
}

// tpModel is a Model's state on a mesh.
type tpModel struct {
	mesh    shard.Mesh
	dm      *distributed.DeviceMesh
	devices []int // backend device of each mesh position
	// plans and shapes of every weight parameter (weightSpecs, then the
	// rope tables): how it lies over the mesh, and its whole shape.
	plans  []shard.Plan
	shapes []ir.Shape
	// replicas[d-1] are mesh position d's weights (position 0's are
	// Model.weights).
	replicas  [][]*ir.Tensor
	perDevice int64
	notes     []string
}

func (tp *tpModel) release() {
	if tp == nil {
		return
	}
	for _, r := range tp.replicas {
		freeAll(r)
	}
	tp.replicas = nil
}

// spec is the GoMLX sharding spec of a plan on the mesh.
func (tp *tpModel) spec(p shard.Plan) (*distributed.ShardingSpec, error) {
	l := shard.Layout{Mesh: tp.dm}
	return l.Spec(p)
}

// meshDevices picks the mesh's devices as WithMesh models do: the first
// ones by coordinates where the runtime reports them, else in order.
func meshDevices(b *tensorbridge.Backend, n int) []int {
	devs := b.Devices()
	ids := make([]int, len(devs))
	coords := make([][]int, len(devs))
	for i, d := range devs {
		ids[i], coords[i] = i, d.Coords
	}
	return shard.Coords(ids, coords, nil)[:n]
}

// placeWeightsMesh places every weight's shards (or copies, where
// replicated) on the mesh's devices; mesh position 0's are returned as
// ws, the others kept in tp. The device budget of each device is checked
// first against its share. On failure nothing stays placed.
func placeWeightsMesh(ctx context.Context, b *tensorbridge.Backend, dir string, c *Config, ct *checkpointTensors, dt ir.DType, maxContext int, mesh shard.Mesh) (ws []*ir.Tensor, tp *tpModel, err error) {
	tp = &tpModel{mesh: mesh, devices: meshDevices(b, mesh.Devices())}
	if tp.dm, err = distributed.NewDeviceMesh([]int{mesh.Data, mesh.Model}, []string{shard.Data, shard.Model}); err != nil {
		return nil, nil, err
	}
	half := c.HeadDim / 2
	type param struct {
		name string
		dims []int
		dt   ir.DType
		raw  func() []byte
	}
	var ps []param
	for _, w := range weightSpecs(c) {
		ps = append(ps, param{w.name, w.shape, dt, func() []byte { return convert(ct.tensors[w.name], dt) }})
	}
	cos, sin := ropeTables(c, maxContext)
	ps = append(ps,
		param{"rope.cos", []int{maxContext, half}, ir.Float32, func() []byte { return cos }},
		param{"rope.sin", []int{maxContext, half}, ir.Float32, func() []byte { return sin }})
	for _, p := range ps {
		pl, note := shard.Weight(p.name, p.dims, mesh.Model, meshRules)
		if note != "" {
			tp.notes = append(tp.notes, note)
		}
		s := ir.MakeShape(p.dt, p.dims...)
		tp.plans, tp.shapes = append(tp.plans, pl), append(tp.shapes, s)
		bytes := int64(s.Memory())
		if pl.Split() {
			bytes /= int64(mesh.Model)
		}
		tp.perDevice += bytes
	}
	for _, d := range tp.devices {
		if bud, err := b.BudgetOf(ctx, d); err == nil && uint64(tp.perDevice) > bud.Available {
			return nil, nil, &errs.OutOfMemoryError{Device: bud.Device, Needed: uint64(tp.perDevice), Available: bud.Available,
				Detail: fmt.Sprintf("device %d's share of the weights of %s in %s over mesh %s", d, dir, dt, mesh)}
		}
	}
	tp.replicas = make([][]*ir.Tensor, mesh.Devices()-1)
	defer func() {
		if err != nil {
			freeAll(ws)
			ws = nil
			tp.release()
		}
	}()
	for i, p := range ps {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		shards, err := tp.placeOne(b, p.name, p.dt, p.dims, p.raw(), tp.plans[i])
		if err != nil {
			return nil, nil, err
		}
		if t := ct.tensors[p.name]; t != nil {
			t.release()
		}
		ws = append(ws, shards[0])
		for d := 1; d < len(shards); d++ {
			tp.replicas[d-1] = append(tp.replicas[d-1], shards[d])
		}
	}
	return ws, tp, nil
}

// placeOne cuts one weight as its plan says and places each mesh
// position's part on its device.
func (tp *tpModel) placeOne(b *tensorbridge.Backend, name string, dt ir.DType, dims []int, raw []byte, pl shard.Plan) (out []*ir.Tensor, err error) {
	h, err := ir.TensorFromBytes(dt, dims, raw)
	if err != nil {
		return nil, fmt.Errorf("weight %q: %w", name, err)
	}
	defer func() { _ = h.FinalizeAll() }()
	parts := make([]*ir.Tensor, len(tp.devices))
	for d := range parts {
		parts[d] = h
	}
	if pl.Split() {
		spec, err := tp.spec(pl)
		if err != nil {
			return nil, err
		}
		st, err := distributed.ShardTensor(spec, h)
		if err != nil {
			return nil, fmt.Errorf("splitting weight %q %v as %s: %w", name, dims, pl, err)
		}
		copy(parts, st.Shards())
		defer freeAll(parts)
	}
	for d, part := range parts {
		t, err := ir.ToDevice(part, b.Engine(), tp.devices[d])
		if err != nil {
			freeAll(out)
			return nil, fmt.Errorf("placing weight %q on device %d: %w", name, tp.devices[d], err)
		}
		out = append(out, t)
	}
	return out, nil
}

// Mesh is the mesh the model is split over (one device: data=1,model=1).
func (m *Model) Mesh() shard.Mesh {
	if m.tp == nil {
		return shard.Mesh{Data: 1, Model: 1}
	}
	return m.tp.mesh
}

// WeightBytesPerDevice is the device memory the weights take on each
// device of the mesh (WeightBytes on one device).
func (m *Model) WeightBytesPerDevice() int64 {
	if m.tp == nil {
		return m.weightBytes
	}
	return m.tp.perDevice
}

// meshNotes say which weights could not be split over the mesh (and were
// replicated), and why.
func (m *Model) meshNotes() []string {
	if m.tp == nil {
		return nil
	}
	return append([]string(nil), m.tp.notes...)
}

// deviceWeights returns mesh position d's weights; nil once closed.
func (m *Model) deviceWeights(d int) []*ir.Tensor {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.weights == nil {
		return nil
	}
	if d == 0 {
		return m.weights
	}
	return m.tp.replicas[d-1]
}

// compileMesh compiles fn over the mesh; the first inputs are the
// weights (split as placed), then extra, whose plans are given (nil:
// replicated); outs are the outputs' plans.
func (m *Model) compileMesh(ctx context.Context, name string, fn tensorbridge.Func, extra []ir.Shape, extraPlans, outs []shard.Plan) (*tensorbridge.Executable, error) {
	shapes := append(m.weightShapes(), extra...)
	plans := append(append([]shard.Plan(nil), m.tp.plans...), extraPlans...)
	for len(plans) < len(shapes) {
		plans = append(plans, nil)
	}
	return m.b.CompileSharded(ctx, name, m.tp.mesh, m.tp.devices, fn, shapes, plans, outs)
}

// runMesh runs exe with each device's weights followed by extra[d]
// (which it frees), and returns each device's outputs.
func (m *Model) runMesh(ctx context.Context, exe *tensorbridge.Executable, extra [][]*ir.Tensor) ([][]*ir.Tensor, error) {
	args := make([][]*ir.Tensor, len(m.tp.devices))
	for d := range args {
		ws := m.deviceWeights(d)
		if ws == nil {
			return nil, tensorbridge.ErrClosed
		}
		args[d] = append(append([]*ir.Tensor(nil), ws...), extra[d]...)
	}
	return exe.RunSharded(ctx, args)
}

// promptLogitsMesh is PromptLogits over the mesh: fn is the same program,
// its logits gathered (replicated) on every device and read from the first.
func (m *Model) promptLogitsMesh(ctx context.Context, name string, fn tensorbridge.Func, tokens ir.Shape, ids []int) ([]float32, error) {
	exe, err := m.compileMesh(ctx, name, fn, []ir.Shape{tokens}, nil, []shard.Plan{nil})
	if err != nil {
		return nil, err
	}
	defer exe.Close()
	tok, err := int32Tensor(tokens.Dimensions, ids)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tok.FinalizeAll() }()
	extra := make([][]*ir.Tensor, len(m.tp.devices))
	for d := range extra {
		extra[d] = []*ir.Tensor{tok} // a host tensor: copied to each device for the run
	}
	outs, err := m.runMesh(ctx, exe, extra)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, o := range outs {
			freeAll(o)
		}
	}()
	return float32s(outs[0][0])
}

// engineTP is an engine's KV cache on mesh positions 1..M-1 (position
// 0's is Engine.kc and Engine.vc).
type engineTP struct {
	kc, vc []*ir.Tensor
}

// cachePlan splits a block pool [blocks, blockSize, L, KVHeads, D] over KV
// heads.
var cachePlan = shard.Plan{"", "", "", shard.Model, ""}

// allocCacheMesh places each device's zeroed share of the K and V caches.
func (e *Engine) allocCacheMesh() error {
	tp := e.m.tp
	dims := append([]int(nil), e.cacheShape.Dimensions...)
	dims[3] /= tp.mesh.Model
	e.tp = &engineTP{}
	for d, dev := range tp.devices {
		for _, p := range []**ir.Tensor{&e.kc, &e.vc} {
			h, err := ir.NewHostTensor(e.cacheShape.DType, dims...)
			if err != nil {
				return err
			}
			t, err := ir.ToDevice(h, e.m.b.Engine(), dev)
			_ = h.FinalizeAll()
			if err != nil {
				return fmt.Errorf("llm: placing the KV cache's share %v on device %d: %w", dims, dev, err)
			}
			switch {
			case d == 0:
				*p = t
			case p == &e.kc:
				e.tp.kc = append(e.tp.kc, t)
			default:
				e.tp.vc = append(e.tp.vc, t)
			}
		}
	}
	return nil
}

// releaseMesh frees the other devices' caches.
func (e *Engine) releaseMesh() {
	if e.tp == nil {
		return
	}
	freeAll(e.tp.kc)
	freeAll(e.tp.vc)
	e.tp.kc, e.tp.vc = nil, nil
}

// compileMeshProgram compiles a prefill or decode program over the mesh:
// the inputs after the weights are the K and V caches (split over KV
// heads) and host blocks (replicated); the outputs the token and its
// log-probability (replicated) and the new caches (split as the old),
// then extraOuts logprob outputs (replicated).
func (e *Engine) compileMeshProgram(ctx context.Context, name string, fn tensorbridge.Func, shapes []ir.Shape, extraOuts int) (*tensorbridge.Executable, error) {
	extra := shapes[numWeightParams(e.m.Config):]
	outs := append([]shard.Plan{nil, nil, cachePlan, cachePlan}, make([]shard.Plan, extraOuts)...)
	return e.m.compileMesh(ctx, name, fn, extra, []shard.Plan{cachePlan, cachePlan}, outs)
}

// runStepMesh is runStep over the mesh: every device gets its weights, its
// cache shares and a copy of the blocks and sampling inputs; the sampled
// tokens are read from device 0 and every device's new cache shares
// replace its old.
func (e *Engine) runStepMesh(ctx context.Context, exe *tensorbridge.Executable, blocks []*ir.Tensor, rows []row, n int, pen bool) (out stepOut, err error) {
	start := time.Now()
	var inProgram time.Duration
	defer func() { e.stats.add(time.Since(start), inProgram) }()
	defer freeAll(blocks)
	st, err := sampleTensors(rows, n, pen)
	if err != nil {
		return stepOut{}, err
	}
	defer freeAll(st)
	M := len(e.m.tp.devices)
	extra := make([][]*ir.Tensor, M)
	for d := range extra {
		kc, vc := e.kc, e.vc
		if d > 0 {
			kc, vc = e.tp.kc[d-1], e.tp.vc[d-1]
		}
		extra[d] = append(append([]*ir.Tensor{kc, vc}, blocks...), st...)
	}
	runStart := time.Now()
	outs, err := e.m.runMesh(ctx, exe, extra)
	if err != nil {
		return stepOut{}, err
	}
	// Reading the token waits for the program: it counts as in-program.
	err = out.read(outs[0][:2], outs[0][4:], e.topWidth())
	inProgram = time.Since(runStart)
	for d, o := range outs {
		freeAll(o[:2])
		freeAll(o[4:])
		if d == 0 {
			_ = e.kc.FinalizeAll()
			_ = e.vc.FinalizeAll()
			e.kc, e.vc = o[2], o[3]
			continue
		}
		_ = e.tp.kc[d-1].FinalizeAll()
		_ = e.tp.vc[d-1].FinalizeAll()
		e.tp.kc[d-1], e.tp.vc[d-1] = o[2], o[3]
	}
	return out, err
}
