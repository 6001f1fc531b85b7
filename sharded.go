package tensorbridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gomlx/gomlx/pkg/core/distributed"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/shard"
)

// Sharded models.
//
// WithMesh spreads a model over a mesh of the backend's devices: the data
// axis splits the batch, the model axis splits the weights in the
// Megatron pattern (package shard), and XLA's SPMD partitioner (Shardy)
// inserts the collectives. The weights are placed once, each device
// holding its shard; a run takes and returns whole tensors: inputs are
// split on the host and outputs gathered for the caller. Shapes are
// compiled exactly (no buckets) and the weights are always device buffers.

// WithMesh runs the model over mesh.Devices() devices of the backend (the
// first ones by coordinates where the runtime reports them, else in
// order), split as the mesh says.
func WithMesh(mesh shard.Mesh, opts shard.Options) ModelOption {
	return func(o *modelOptions) { o.mesh, o.shardOpts = &mesh, opts }
}

// shardedModel is what a model on a mesh keeps besides Model's fields.
type shardedModel struct {
	mesh    shard.Mesh
	so      shard.Options
	dm      *distributed.DeviceMesh
	weights []onnx.Param
	devices []int // backend device of each mesh position, by coordinates
	mu      sync.Mutex
	placed  [][]*ir.Tensor // per weight, per device (mesh order): the shards on their devices; nil once closed
	bytes   int64          // per device
	execs   map[string]*shardedExec
	compile sync.Mutex
}

type shardedExec struct {
	g      *ir.Graph
	plan   *onnx.Plan
	layout *shard.Layout
	run    sync.Mutex // GoMLX graphs: one execution at a time
}

// newSharded places the weights' shards and prepares the model.
func (b *Backend) newSharded(ctx context.Context, m *onnx.Model, spec onnx.SpecializeOptions, mesh shard.Mesh, so shard.Options) (*shardedModel, error) {
	if n := mesh.Devices(); n > len(b.devices) {
		if err := b.checkMultiHost(mesh); err != nil { // multihost.go
			return nil, err
		}
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "load model",
			Err: fmt.Errorf("mesh %s needs %d devices, the backend has %d", mesh, n, len(b.devices))}
	}
	dm, err := distributed.NewDeviceMesh([]int{mesh.Data, mesh.Model}, []string{shard.Data, shard.Model})
	if err != nil {
		return nil, err
	}
	spec.WeightsAsParams = true
	ws, err := m.WeightParams(spec)
	if err != nil {
		return nil, err
	}
	s := &shardedModel{mesh: mesh, so: so, dm: dm, weights: ws, execs: map[string]*shardedExec{},
		placed: make([][]*ir.Tensor, 0, len(ws))} // non-nil until release: a model without weights runs too
	// Mesh positions over the devices in coordinate order (TPUs report
	// coordinates; other devices keep their order), so that the model
	// axis runs over interconnect neighbours.
	ids := make([]int, len(b.devices))
	coords := make([][]int, len(b.devices))
	for i, d := range b.devices {
		ids[i], coords[i] = i, d.Coords
	}
	s.devices = shard.Coords(ids, coords, nil)[:mesh.Devices()]
	for _, w := range ws {
		if err := ctx.Err(); err != nil {
			s.release()
			return nil, err
		}
		pl, _ := shard.Weight(w.Name, w.Shape.Dimensions, mesh.Model, so)
		host, err := m.WeightValue(w.Name, spec)
		if err == nil {
			var shards []*ir.Tensor
			shards, err = s.split(host, pl)
			if err == nil {
				var onDev []*ir.Tensor
				for d, t := range shards {
					dt, derr := ir.ToDevice(t, b.drv.Engine(), s.devices[d])
					if derr != nil {
						err = derr
						break
					}
					onDev = append(onDev, dt)
				}
				s.placed = append(s.placed, onDev)
				if len(onDev) > 0 {
					s.bytes += int64(onDev[0].Shape().Memory())
				}
			}
		}
		if err != nil {
			s.release()
			return nil, &errs.Error{Kind: errs.Internal, Backend: b.Name(), Op: "place weights",
				Err: fmt.Errorf("weight %q (%s) over mesh %s: %w", w.Name, w.Shape, mesh, err)}
		}
	}
	return s, nil
}

// split cuts a host tensor into one shard per device of the mesh, in mesh
// order.
func (s *shardedModel) split(t *ir.Tensor, pl shard.Plan) ([]*ir.Tensor, error) {
	l := shard.Layout{Mesh: s.dm}
	spec, err := l.Spec(pl)
	if err != nil {
		return nil, err
	}
	dt, err := distributed.ShardTensor(spec, t)
	if err != nil {
		return nil, err
	}
	return dt.Shards(), nil
}

func (s *shardedModel) release() {
	s.mu.Lock()
	placed := s.placed
	s.placed = nil
	execs := s.execs
	s.execs = map[string]*shardedExec{}
	s.mu.Unlock()
	for _, shards := range placed {
		for _, t := range shards {
			_ = t.FinalizeAll()
		}
	}
	for _, e := range execs {
		e.run.Lock()
		safeFinalize(e.g)
		e.run.Unlock()
	}
}

// runSharded is Model.Run for a model on a mesh.
func (m *Model) runSharded(ctx context.Context, inputs map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	s := m.sharded
	leave, err := m.b.enter("run") // the backend's driver stays open until this run ends
	if err != nil {
		return nil, err
	}
	defer leave()
	shapes, values, err := m.checkInputs(inputs)
	if err != nil {
		return nil, err
	}
	real := m.dimValues(shapes)
	given, givenShapes := inputs, shapes // what the index checks read
	if inputs, shapes, err = m.padForMesh(inputs, shapes); err != nil {
		return nil, err
	}
	if s.mesh.Data > 1 { // the batch must split evenly: no silent replication
		for _, in := range m.m.Inputs() {
			if len(in.Dims) > 0 && in.Dims[0].Value < 0 && len(shapes[in.Name]) > 0 && shapes[in.Name][0]%s.mesh.Data != 0 {
				return nil, &errs.InputError{Name: in.Name, Problem: "shape",
					Expected: fmt.Sprintf("a batch (dimension 0) that is a multiple of the data axis (%d) of mesh %s", s.mesh.Data, s.mesh),
					Got:      fmt.Sprint(shapes[in.Name])}
			}
		}
	}
	key := m.precStr + "|" + specialisationKey(shapes, values)
	e, err := s.exec(m, key, shapes, values)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := e.plan.IndexChecks().CheckInputs(given); err != nil { // onnx/indexcheck.go
		return nil, err
	}
	n := s.mesh.Devices()
	weights := e.plan.Weights()
	params := e.plan.Params()
	perDev := len(weights) + len(params)
	args := make([]any, perDev*n)
	s.mu.Lock()
	if s.placed == nil {
		s.mu.Unlock()
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: m.b.Name(), Op: "run model", Err: ErrClosed}
	}
	for i := range weights {
		for d := range n {
			args[d*perDev+i] = s.placed[i][d]
		}
	}
	s.mu.Unlock()
	var temps []*ir.Tensor
	defer func() {
		for _, t := range temps {
			_ = t.FinalizeAll()
		}
	}()
	for j, p := range params {
		t, err := e.plan.PrepareInput(p.Name, inputs[p.Name])
		if err != nil {
			return nil, err
		}
		shards, err := s.split(t, e.layout.Inputs[j])
		if err != nil {
			return nil, &errs.InputError{Name: p.Name, Problem: "shape", Expected: fmt.Sprintf("a batch the mesh %s divides", s.mesh), Got: err.Error()}
		}
		for d, sh := range shards {
			c, err := sh.LocalClone() // a tensor of our own, freed after the run
			if err != nil {
				return nil, err
			}
			temps = append(temps, c)
			args[d*perDev+len(weights)+j] = c
		}
	}
	res, err := e.execute(m.b.Name(), args)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, t := range res {
			_ = t.FinalizeAll()
		}
	}()
	specs := m.m.Outputs()
	perDevOut := len(specs)
	if e.layout.IndexCheck {
		perDevOut++
	}
	if len(res) != perDevOut*n {
		return nil, &errs.Error{Kind: errs.Internal, Backend: m.b.Name(), Op: "run model",
			Err: fmt.Errorf("%d results from %d devices for %d outputs", len(res), n, perDevOut)}
	}
	if e.layout.IndexCheck {
		if err := m.checkShardedIndices(ctx, e, res[len(specs)], given, !sameShapes(givenShapes, shapes)); err != nil {
			return nil, err
		}
	}
	outs := map[string]*ir.Tensor{}
	for k, spec := range specs {
		shards := make([]*ir.Tensor, n)
		for d := range n {
			c, err := res[d*perDevOut+k].LocalClone()
			if err != nil {
				return nil, err
			}
			shards[d] = c
		}
		l := shard.Layout{Mesh: s.dm}
		sp, err := l.Spec(e.layout.Outputs[k])
		if err != nil {
			return nil, err
		}
		dt, err := distributed.NewTensor(sp, shards)
		if err != nil {
			return nil, &errs.Error{Kind: errs.Internal, Backend: m.b.Name(), Op: "run model", Err: fmt.Errorf("output %q: %w", spec.Name, err)}
		}
		whole, err := dt.Merge()
		if err != nil {
			return nil, &errs.Error{Kind: errs.Internal, Backend: m.b.Name(), Op: "run model", Err: fmt.Errorf("output %q: %w", spec.Name, err)}
		}
		t, err := onnx.ToModelDType(whole, spec.DType)
		if err == nil {
			t, err = m.unpad(t, spec, real)
		}
		if err != nil {
			return nil, err
		}
		outs[spec.Name] = t
	}
	return outs, nil
}

// checkShardedIndices checks the index check output of a sharded run
// (replicated: device 0's copy is the whole). When padding rows took part
// (padded), a failed check is not trusted, since they can compute indices
// the real rows never form: the model run unpadded on one device of the
// backend decides, and only its error counts.
func (m *Model) checkShardedIndices(ctx context.Context, e *shardedExec, out *ir.Tensor, given map[string]*ir.Tensor, padded bool) error {
	checks := e.plan.IndexChecks()
	c, err := out.LocalClone()
	if err != nil {
		return err
	}
	defer func() { _ = c.FinalizeAll() }()
	err = checks.CheckOutput(c)
	if err == nil || !padded {
		return err
	}
	_, err = m.m.RunWith(ctx, m.b.drv.Engine(), given, m.prec)
	return err
}

// sameShapes says whether a and b give every name the same dims.
func sameShapes(a, b map[string][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func (e *shardedExec) execute(backend string, args []any) (res []*ir.Tensor, err error) {
	e.run.Lock()
	defer e.run.Unlock()
	if e.g == nil {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: backend, Op: "run model", Err: ErrClosed}
	}
	defer recoverInto(&err, backend, "running a sharded model")
	return e.g.Run(args...), nil
}

// exec returns the compiled program for these shapes, compiling it once.
func (s *shardedModel) exec(m *Model, key string, shapes map[string][]int, values map[string]*ir.Tensor) (*shardedExec, error) {
	s.compile.Lock()
	defer s.compile.Unlock()
	s.mu.Lock()
	e, ok := s.execs[key]
	s.mu.Unlock()
	if ok {
		return e, nil
	}
	spec := m.prec
	spec.WeightsAsParams = true
	p, err := m.m.SpecializeWith(shapes, values, spec)
	if err != nil {
		return nil, err
	}
	g := ir.NewGraph(m.b.drv.Engine(), "sharded:"+m.path)
	layout, err := func() (l *shard.Layout, err error) {
		defer recoverInto(&err, m.b.Name(), "compiling a sharded model")
		return shard.Build(g, p, s.mesh, s.so, s.devices...)
	}()
	if err != nil {
		safeFinalize(g)
		return nil, &errs.CompileError{Backend: m.b.Name(), Program: m.path, Err: err}
	}
	e = &shardedExec{g: g, plan: p, layout: layout}
	s.mu.Lock()
	s.execs[key] = e
	s.mu.Unlock()
	return e, nil
}

// Mesh returns the mesh the model runs on and the bytes of weights each
// device holds; ok is false for a model on one device.
func (m *Model) Mesh() (mesh shard.Mesh, weightsPerDevice int64, ok bool) {
	if m.sharded == nil {
		return shard.Mesh{}, 0, false
	}
	return m.sharded.mesh, m.sharded.bytes, true
}

// Padding on a mesh. A sharded model pads as a model on one device does
// (the bucket plan, only along dimensions whose rows are independent, and
// never with exact shapes), and then pads the leading dimension of each
// input, when it is such a dimension, up to a multiple of the data axis, so
// that the batch splits evenly; outputs are cut back to the real rows. A
// batch along a dimension the plan does not pad must itself be a multiple
// of the data axis (runSharded refuses it otherwise).

// meshPadded reports whether dim is padded to a multiple of the data axis:
// a bucketed dimension that leads some input of a model on a mesh with a
// data axis.
func (m *Model) meshPadded(dim string) bool {
	if m.sharded == nil || m.sharded.mesh.Data <= 1 || m.exact || !m.buckets.dims[dim] {
		return false
	}
	for _, in := range m.m.Inputs() {
		if len(in.Dims) > 0 && in.Dims[0].Param == dim {
			return true
		}
	}
	return false
}

func roundUp(n, k int) int { return (n + k - 1) / k * k }

// padForMesh pads the inputs for a run on the mesh (see above).
func (m *Model) padForMesh(inputs map[string]*ir.Tensor, shapes map[string][]int) (map[string]*ir.Tensor, map[string][]int, error) {
	inputs, shapes, err := m.pad(inputs, shapes)
	if err != nil {
		return nil, nil, err
	}
	d := m.sharded.mesh.Data
	var out map[string]*ir.Tensor
	for _, spec := range m.m.Inputs() {
		sh := shapes[spec.Name]
		if len(spec.Dims) == 0 || len(sh) == 0 || !m.meshPadded(spec.Dims[0].Param) || sh[0]%d == 0 {
			continue
		}
		if out == nil { // copy on first change: the caller's maps stay as they are
			out = make(map[string]*ir.Tensor, len(inputs))
			for k, v := range inputs {
				out[k] = v
			}
			ns := make(map[string][]int, len(shapes))
			for k, v := range shapes {
				ns[k] = v
			}
			shapes = ns
		}
		dims := append([]int(nil), sh...)
		dims[0] = roundUp(sh[0], d)
		t, err := padTensor(inputs[spec.Name], dims, m.buckets.fills(spec))
		if err != nil {
			return nil, nil, &errs.InputError{Name: spec.Name, Problem: "value", Expected: fmt.Sprint(dims), Got: err.Error()}
		}
		out[spec.Name], shapes[spec.Name] = t, dims
	}
	if out == nil {
		return inputs, shapes, nil
	}
	return out, shapes, nil
}

// warmupSharded compiles the program for each assignment by running it
// once on zeros (a sharded program compiles at its first run).
func (m *Model) warmupSharded(ctx context.Context, dims []map[string]int, progress WarmupProgress) (int, error) {
	compiled := 0
	for k, assign := range dims {
		start := time.Now()
		in := map[string]*ir.Tensor{}
		var err error
		for _, s := range m.m.Inputs() {
			var ds []int
			for _, d := range s.Dims {
				if d.Param == "" {
					ds = append(ds, d.Value)
					continue
				}
				n, ok := assign[d.Param]
				if !ok {
					return compiled, &errs.InputError{Name: s.Name, Problem: "dimension", Expected: "a size for " + d.Param, Got: fmt.Sprint(assign)}
				}
				ds = append(ds, n)
			}
			if in[s.Name], err = ir.NewHostTensor(s.DType, ds...); err != nil {
				return compiled, err
			}
		}
		m.sharded.mu.Lock()
		before := len(m.sharded.execs)
		m.sharded.mu.Unlock()
		_, err = m.runSharded(ctx, in)
		m.sharded.mu.Lock()
		if len(m.sharded.execs) > before {
			compiled++
			if errors.Is(err, errs.ErrInvalidInput) {
				err = nil // compiled; the zeros' values (an index they form out of range) are not the warmup's concern
			}
		}
		m.sharded.mu.Unlock()
		if progress != nil {
			progress(k+1, len(dims), assign, time.Since(start), err)
		}
		if err != nil {
			return compiled, err
		}
	}
	return compiled, nil
}
