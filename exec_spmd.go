package tensorbridge

import (
	"context"
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/shard"
)

// Sharded programs built from a Func.
//
// CompileSharded is Compile for one SPMD program over a mesh of the
// backend's devices, the way the mesh trainer and WithMesh models build
// theirs: each input is a GoMLX sharded parameter (its shard.Plan says
// which dimension lies over which mesh axis), the Func sees the whole
// (logical) shapes, each output is stored as its plan says, and XLA's
// partitioner (Shardy) inserts the collectives. RunSharded takes and
// returns one list of tensors per device, in mesh order, so that state
// kept on the devices between runs (split weights, a split KV cache)
// never crosses to the host.

// spmdState is what a sharded Executable keeps besides the graph.
type spmdState struct {
	devices []int // backend device of each mesh position
	outs    int   // outputs per device
	run     sync.Mutex
}

// CompileSharded builds fn for inputs of the given whole shapes as one
// program over mesh, on the backend devices devices (mesh order,
// data-major: position i is data index i/M, model index i%M). inPlans
// and outPlans say how each input and output lies over the mesh (a nil
// or empty plan: replicated); len(outPlans) must be the number of
// outputs fn returns. Run the result with RunSharded.
func (b *Backend) CompileSharded(ctx context.Context, name string, mesh shard.Mesh, devices []int, fn Func, inputs []ir.Shape, inPlans, outPlans []shard.Plan) (exe *Executable, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkShapes(inputs); err != nil {
		return nil, err
	}
	if len(inPlans) != len(inputs) {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "compile",
			Err: fmt.Errorf("program %q: %d input plans for %d inputs", name, len(inPlans), len(inputs))}
	}
	if len(devices) != mesh.Devices() {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "compile",
			Err: fmt.Errorf("program %q: %d devices for mesh %s of %d", name, len(devices), mesh, mesh.Devices())}
	}
	for _, d := range devices {
		if d < 0 || d >= len(b.devices) {
			return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "compile",
				Err: fmt.Errorf("program %q: device %d out of range: the backend has %d", name, d, len(b.devices))}
		}
	}
	leave, err := b.enter("compile")
	if err != nil {
		return nil, err
	}
	defer leave()
	dm, err := distributed.NewDeviceMesh([]int{mesh.Data, mesh.Model}, []string{shard.Data, shard.Model})
	if err != nil {
		return nil, err
	}
	g := ir.NewGraph(b.drv.Engine(), name)
	defer func() {
		if err != nil {
			safeFinalize(g)
		}
	}()
	defer recoverInto(&err, b.Name(), fmt.Sprintf("building sharded graph %q", name))
	if err := g.SetAutoSharding(dm); err != nil {
		return nil, err
	}
	devs := make([]backends.DeviceNum, len(devices))
	for i, d := range devices {
		devs[i] = backends.DeviceNum(d)
	}
	if err := g.SetDeviceAssignment(devs); err != nil {
		return nil, err
	}
	l := shard.Layout{Mesh: dm}
	spec := func(p shard.Plan, rank int) (*distributed.ShardingSpec, error) {
		if len(p) == 0 {
			p = make(shard.Plan, rank)
		}
		return l.Spec(p)
	}
	params := make([]*ir.Node, len(inputs))
	for i, s := range inputs {
		sp, err := spec(inPlans[i], s.Rank())
		if err != nil {
			return nil, fmt.Errorf("program %q input #%d %s: %w", name, i, s, err)
		}
		params[i] = graph.ShardedParameter(g, fmt.Sprintf("input%d", i), s, sp)
	}
	outs, err := fn(g, params)
	if err != nil {
		return nil, err
	}
	if len(outs) != len(outPlans) {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "compile",
			Err: fmt.Errorf("program %q returned %d outputs for %d output plans", name, len(outs), len(outPlans))}
	}
	specs := make([]*distributed.ShardingSpec, len(outs))
	for i, o := range outs {
		if o == nil {
			return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "compile",
				Err: fmt.Errorf("graph %q output #%d is nil", name, i)}
		}
		if specs[i], err = spec(outPlans[i], o.Rank()); err != nil {
			return nil, fmt.Errorf("program %q output #%d: %w", name, i, err)
		}
	}
	if err := compileSharded(g, outs, specs); err != nil {
		return nil, &errs.CompileError{Backend: b.Name(), Program: name, Err: err}
	}
	outPos := make([]int, len(outs))
	for i := range outPos {
		outPos[i] = i
	}
	return &Executable{b: b, name: name, inputs: inputs, g: g, outPos: outPos,
		spmd: &spmdState{devices: append([]int(nil), devices...), outs: len(outs)}}, nil
}

func compileSharded(g *ir.Graph, outs []*ir.Node, specs []*distributed.ShardingSpec) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	g.CompileWithSharding(outs, specs)
	return nil
}

// Devices returns the backend devices a sharded program runs on (mesh
// order); nil for a one-device program.
func (e *Executable) Devices() []int {
	if e.spmd == nil {
		return nil
	}
	return append([]int(nil), e.spmd.devices...)
}

// RunSharded runs a program from CompileSharded: args[i] are the inputs
// of mesh position i (each input's shard, or its whole value where
// replicated), on that position's device or on the host (copied for the
// run; the tensor itself is left as it was). It returns each position's
// outputs (its shards), kept on its device and owned by the caller.
// Runs of one program are serialised.
func (e *Executable) RunSharded(ctx context.Context, args [][]*ir.Tensor) (outs [][]*ir.Tensor, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e.spmd == nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: e.b.Name(), Op: "run",
			Err: fmt.Errorf("program %q is not sharded: use Run or RunOnDevice", e.name)}
	}
	n := len(e.spmd.devices)
	if len(args) != n {
		return nil, &errs.InputError{Name: e.name, Problem: "count",
			Expected: fmt.Sprintf("inputs for %d devices", n), Got: fmt.Sprint(len(args))}
	}
	for d, a := range args {
		if len(a) != len(e.inputs) {
			return nil, &errs.InputError{Name: e.name, Problem: "count",
				Expected: fmt.Sprintf("%d inputs per device", len(e.inputs)), Got: fmt.Sprintf("%d for mesh position %d", len(a), d)}
		}
	}
	if err := e.b.begin("run"); err != nil {
		return nil, err
	}
	defer e.b.end()
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.g == nil {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: e.b.Name(), Op: "run", Err: ErrClosed}
	}
	e.spmd.run.Lock() // GoMLX graphs: one execution at a time
	defer e.spmd.run.Unlock()
	defer recoverRunning(&err, e.b.Name(), e.name)
	eng := e.b.drv.Engine()
	bufs := make([]ir.Buffer, 0, n*len(e.inputs))
	var owned []ir.Buffer
	defer func() {
		for _, b := range owned {
			_ = ir.FreeBuffer(eng, b)
		}
	}()
	for d, a := range args {
		for i, t := range a {
			b, own, err := ir.DeviceBuffer(eng, e.spmd.devices[d], t)
			if err != nil {
				return nil, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "value",
					Expected: fmt.Sprintf("a tensor readable on the host or on device %d", e.spmd.devices[d]), Got: err.Error()}
			}
			if own {
				owned = append(owned, b)
			}
			bufs = append(bufs, b)
		}
	}
	all, err := ir.RunOnDevice(e.g, e.spmd.devices[0], bufs, nil)
	if err != nil {
		return nil, classify(err, e.b.Name(), fmt.Sprintf("running %q", e.name))
	}
	if len(all) != n*e.spmd.outs {
		freeAll(all)
		return nil, &errs.Error{Kind: errs.Internal, Backend: e.b.Name(), Op: "run",
			Err: fmt.Errorf("program %q: %d results from %d devices, want %d each", e.name, len(all), n, e.spmd.outs)}
	}
	outs = make([][]*ir.Tensor, n)
	for d := range outs {
		outs[d] = all[d*e.spmd.outs : (d+1)*e.spmd.outs]
	}
	return outs, nil
}
