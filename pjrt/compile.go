package pjrt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/pjrt/lower"
)

// Builder is the engine's backends.Builder: the StableHLO lowering of
// package lower plus Compile, which hands the program to the plugin.
type Builder struct {
	*lower.Builder
	eng *Engine
	// donated is what SetDonated asked for: parameter position -> output
	// index, given to the program as lower.Program.Donated.
	donated map[int]int
}

// SetDonated asks Compile to alias each parameter in donated (its
// position) to the output that replaces it (lower.Program.Donated): XLA
// then writes that output into the parameter's buffer, and an execution
// that donates the parameter's buffer (Execute's donate flag) gives it up.
// Compile checks the positions and that each pair has one shape.
func (b *Builder) SetDonated(donated map[int]int) error {
	b.donated = maps.Clone(donated)
	return nil
}

// checkDonated checks the donation asked for against the finished
// program: positions in range, one shape on both sides, each output
// aliased once.
func checkDonated(prog *lower.Program, donated map[int]int) error {
	taken := map[int]int{}
	for i, j := range donated {
		if i < 0 || i >= len(prog.ParamShapes) {
			return fmt.Errorf("donated parameter %d: the program has %d parameters", i, len(prog.ParamShapes))
		}
		if j < 0 || j >= len(prog.OutputShapes) {
			return fmt.Errorf("parameter %d donated to output %d: the program has %d outputs", i, j, len(prog.OutputShapes))
		}
		if !prog.ParamShapes[i].Equal(prog.OutputShapes[j]) {
			return fmt.Errorf("parameter %d (%s) donated to output %d of another shape (%s)", i, prog.ParamShapes[i], j, prog.OutputShapes[j])
		}
		if k, dup := taken[j]; dup {
			return fmt.Errorf("parameters %d and %d both donated to output %d", min(i, k), max(i, k), j)
		}
		taken[j] = i
	}
	return nil
}

var _ backends.Builder = (*Builder)(nil)

// Compile finishes the program and compiles it with the plugin. A
// compiler failure is an *errs.CompileError carrying the plugin's message;
// running out of memory while compiling is an *errs.OutOfMemoryError.
func (b *Builder) Compile(outputs []backends.Op, shardings []*backends.ShardingSpec) (backends.Executable, error) {
	if err := b.eng.check("compile"); err != nil {
		return nil, err
	}
	prog, err := b.Finish(outputs, shardings)
	if err != nil {
		return nil, err
	}
	if len(b.donated) > 0 {
		if err := checkDonated(prog, b.donated); err != nil {
			return nil, &errs.CompileError{Backend: b.eng.name, Program: prog.Name, Err: err}
		}
		prog.Donated = b.donated
	}
	exe, err := b.eng.CompileProgram(context.Background(), prog)
	if err != nil {
		return nil, err
	}
	return exe, nil
}

// tuning holds the engine's compile-time choices, set once when the backend
// is opened (driver config) and read by every compile.
type tuning struct {
	// xlaOptions are XLA options set by name on every compile
	// (CompileOptionsProto.env_option_overrides).
	xlaOptions []capi.OptionOverride
	// depthwiseConv keeps depthwise convolutions as XLA convolutions on the
	// CPU plugin instead of the window sum of package lower.
	depthwiseConv bool
}

// XLAOptions returns the XLA options this engine sets by name on every
// compile.
func (e *Engine) XLAOptions() []capi.OptionOverride {
	return append([]capi.OptionOverride(nil), e.tune.xlaOptions...)
}

// depthwiseAsSum says whether programs lower depthwise convolutions as a
// window sum (lower.Builder.WithDepthwiseWindowSum): on the CPU plugin,
// unless the driver config asked for depthwise=conv.
func (e *Engine) depthwiseAsSum() bool {
	return e.platform == "cpu" && !e.tune.depthwiseConv
}

// CompileOptions returns the PJRT compile options for prog on this engine:
// replicas for SPMD, Shardy partitions for AutoSharding, the device
// assignment mapped to PJRT device ids, or a portable executable.
func (e *Engine) CompileOptions(prog *lower.Program) (capi.CompileOptions, error) {
	opts := capi.CompileOptions{NumReplicas: prog.NumReplicas, NumPartitions: prog.NumPartitions,
		EnvOptionOverrides: e.tune.xlaOptions}
	if prog.Portable() {
		opts.Portable = true
		return opts, nil
	}
	if len(prog.DeviceAssignment) != prog.NumDevices() {
		return opts, fmt.Errorf("program %q runs on %d device(s) but assigns %d", prog.Name, prog.NumDevices(), len(prog.DeviceAssignment))
	}
	ids := make([]int, len(prog.DeviceAssignment))
	for i, n := range prog.DeviceAssignment {
		d, err := e.device(backends.DeviceNum(n))
		if err != nil {
			return opts, err
		}
		ids[i] = d.ID()
	}
	switch prog.Strategy {
	case lower.AutoSharding:
		opts.UseSPMDPartitioning = true
		opts.UseShardyPartitioner = true
		opts.DeviceAssignment = [][]int{ids}
	default: // one replica per device (a single device included)
		opts.DeviceAssignment = make([][]int, len(ids))
		for r, id := range ids {
			opts.DeviceAssignment[r] = []int{id}
		}
	}
	return opts, nil
}

// CompileProgram compiles a finished program, through the compile hook if
// one is set.
func (e *Engine) CompileProgram(ctx context.Context, prog *lower.Program) (*Executable, error) {
	e.mu.RLock()
	hook := e.hook
	e.mu.RUnlock()
	compile := func(ctx context.Context) (*Executable, error) { return e.compile(ctx, prog) }
	if hook == nil {
		return compile(ctx)
	}
	// A program another Executable holds is shared before any hook (a
	// disk cache) loads a second copy of it (share.go).
	if x := e.sharedExecutable(prog); x != nil {
		return x, nil
	}
	return hook(ctx, prog, compile)
}

func (e *Engine) compile(ctx context.Context, prog *lower.Program) (*Executable, error) {
	if err := e.check("compile"); err != nil {
		return nil, err
	}
	opts, err := e.CompileOptions(prog)
	if err != nil {
		return nil, &errs.CompileError{Backend: e.name, Program: prog.Name, Err: err}
	}
	text, err := prog.CompileText()
	if err != nil {
		return nil, &errs.CompileError{Backend: e.name, Program: prog.Name, Err: err}
	}
	build := func() (*capi.LoadedExecutable, error) {
		le, err := e.client.Compile(ctx, capi.MLIR(string(text)), opts)
		if err != nil {
			return nil, compileError(e.name, prog.Name, err)
		}
		return le, nil
	}
	if key := shareKey(prog, opts, text); key != "" {
		le, err := e.acquire(ctx, key, build)
		if err != nil {
			return nil, err
		}
		return &Executable{eng: e, prog: prog, opts: opts, le: le, shareKey: key}, nil
	}
	le, err := build()
	if err != nil {
		return nil, err
	}
	return e.newExecutable(prog, le, opts)
}

// compileError classifies a failed compile: out of memory, a context
// error, or the compiler refusing the program.
func compileError(backend, program string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case capi.CodeOf(err) == capi.CodeResourceExhausted:
		return &errs.OutOfMemoryError{Detail: fmt.Sprintf("compiling %q on %s", program, backend), Err: err}
	}
	return &errs.CompileError{Backend: backend, Program: program, Err: err}
}

// LoadExecutable loads an executable serialized by Executable.Serialize
// for the same program, on a client of the same plugin build. The compile
// options are recomputed from prog, so the device assignment follows this
// engine.
func (e *Engine) LoadExecutable(ctx context.Context, prog *lower.Program, serialized []byte) (*Executable, error) {
	if err := e.check("load executable"); err != nil {
		return nil, err
	}
	opts, err := e.CompileOptions(prog)
	if err != nil {
		return nil, &errs.CompileError{Backend: e.name, Program: prog.Name, Err: err}
	}
	raw, err := opts.Marshal()
	if err != nil {
		return nil, &errs.CompileError{Backend: e.name, Program: prog.Name, Err: err}
	}
	build := func() (*capi.LoadedExecutable, error) {
		le, err := e.client.DeserializeAndLoad(ctx, serialized, raw)
		if err != nil {
			return nil, wrap(e.name, "load executable", "", fmt.Sprintf("program %q", prog.Name), err)
		}
		return le, nil
	}
	le, err := build()
	if err != nil {
		return nil, err
	}
	x, err := e.newExecutable(prog, le, opts)
	if err == nil {
		e.adopt(x)
	}
	return x, err
}

// Executable is a compiled program of an Engine. It is safe for
// concurrent use; Finalize must not race with Execute.
type Executable struct {
	eng  *Engine
	prog *lower.Program
	opts capi.CompileOptions

	mu sync.RWMutex
	le *capi.LoadedExecutable // nil once finalized
	// shareKey is set when le is shared with the engine's other
	// Executables of the same portable program (share.go).
	shareKey string

	// order[k] is the position, in the program's device assignment, of the
	// k-th device PJRT takes argument lists for.
	order   []int
	targets []backends.DeviceNum // engine device of each assignment position

	// direct is the signature in the binding's terms, for RunDirect
	// (direct.go), computed once.
	directOnce sync.Once
	direct     *directInfo
}

var _ backends.Executable = (*Executable)(nil)

func (e *Engine) newExecutable(prog *lower.Program, le *capi.LoadedExecutable, opts capi.CompileOptions) (*Executable, error) {
	x := &Executable{eng: e, prog: prog, opts: opts, le: le}
	if prog.Portable() {
		return x, nil
	}
	devs, err := le.AddressableDevices()
	if err != nil {
		_ = le.Destroy()
		return nil, wrap(e.name, "compile", "", "listing the executable's devices", err)
	}
	if len(devs) != len(prog.DeviceAssignment) {
		_ = le.Destroy()
		return nil, &errs.CompileError{Backend: e.name, Program: prog.Name,
			Err: fmt.Errorf("the plugin placed the program on %d device(s), %d were assigned", len(devs), len(prog.DeviceAssignment))}
	}
	x.targets = make([]backends.DeviceNum, len(prog.DeviceAssignment))
	for i, n := range prog.DeviceAssignment {
		x.targets[i] = backends.DeviceNum(n)
	}
	for _, d := range devs {
		n, ok := e.byID[d.ID()]
		pos := slices.Index(prog.DeviceAssignment, n)
		if !ok || pos < 0 {
			_ = le.Destroy()
			return nil, &errs.CompileError{Backend: e.name, Program: prog.Name,
				Err: fmt.Errorf("the plugin placed the program on device id %d, which was not assigned", d.ID())}
		}
		x.order = append(x.order, pos)
	}
	return x, nil
}

// Program returns the lowered program: its StableHLO text and signature.
func (x *Executable) Program() *lower.Program { return x.prog }

// Serialize returns the plugin's serialized executable, which
// Engine.LoadExecutable turns back into an Executable on a client of the
// same plugin build.
func (x *Executable) Serialize() ([]byte, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.le == nil {
		return nil, x.closedError("serialize")
	}
	b, err := x.le.Serialize()
	if err != nil {
		return nil, wrap(x.eng.name, "serialize", "", fmt.Sprintf("program %q", x.prog.Name), err)
	}
	return b, nil
}

func (x *Executable) closedError(op string) error {
	return &errs.Error{Kind: errs.FailedPrecondition, Backend: x.eng.name, Op: op,
		Err: fmt.Errorf("executable %q: %w", x.prog.Name, errs.ErrClosed)}
}

// Finalize frees the compiled program.
func (x *Executable) Finalize() {
	x.mu.Lock()
	le := x.le
	x.le = nil
	x.mu.Unlock()
	switch {
	case le == nil:
	case x.shareKey != "":
		x.eng.release(x.shareKey)
	case !x.eng.IsFinalized():
		_ = le.Destroy()
	}
}

// Inputs returns the parameter names (as in the StableHLO text) and shapes.
func (x *Executable) Inputs() ([]string, []shapes.Shape) {
	return slices.Clone(x.prog.ParamNames), slices.Clone(x.prog.ParamShapes)
}

// Outputs returns the output shapes.
func (x *Executable) Outputs() []shapes.Shape { return slices.Clone(x.prog.OutputShapes) }

// Execute runs the program. Inputs are given device-major: for a program
// over N devices, inputs[d*P+i] is parameter i on the d-th device of the
// assignment, and outputs come back the same way. A portable program runs
// on defaultDevice. Inputs on the wrong device are copied.
//
// donate[k] gives input k's buffer to the run: once the input checks pass
// it is consumed whether the run succeeds or fails (finalized: using it
// again is an error wrapping errs.ErrClosed). Where the program aliases
// the parameter to an output (lower.Program.Donated), the runtime writes
// that output into the buffer's memory; an aliased parameter whose input
// is not donated is marked non-donatable, so the runtime copies it and
// the caller's buffer stays valid.
func (x *Executable) Execute(inputs []backends.Buffer, donate []bool, defaultDevice backends.DeviceNum) ([]backends.Buffer, error) {
	return x.ExecuteContext(context.Background(), inputs, donate, defaultDevice)
}

// ExecuteContext is Execute with a context; canceling it abandons the wait
// (the plugin finishes the run and its outputs are freed).
func (x *Executable) ExecuteContext(ctx context.Context, inputs []backends.Buffer, donate []bool, defaultDevice backends.DeviceNum) (_ []backends.Buffer, err error) {
	const op = "execute"
	e := x.eng
	if err := e.check(op); err != nil {
		return nil, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.le == nil {
		return nil, x.closedError(op)
	}
	prog := x.prog
	numParams, numDev := len(prog.ParamShapes), prog.NumDevices()
	if len(inputs) != numParams*numDev {
		return nil, &errs.InputError{Name: prog.Name, Problem: "count",
			Expected: fmt.Sprintf("%d parameters × %d device(s) = %d buffers", numParams, numDev, numParams*numDev),
			Got:      fmt.Sprint(len(inputs))}
	}
	if donate != nil && len(donate) != len(inputs) {
		return nil, &errs.InputError{Name: prog.Name, Problem: "count",
			Expected: fmt.Sprintf("%d donate flags (or none)", len(inputs)), Got: fmt.Sprint(len(donate))}
	}
	// Donated inputs are consumed on every path from here.
	defer func() {
		if err != nil {
			for i, d := range donate {
				if d {
					_ = e.BufferFinalize(inputs[i])
				}
			}
		}
	}()
	targets := x.targets
	if prog.Portable() {
		if _, err := e.device(defaultDevice); err != nil {
			return nil, err
		}
		targets = []backends.DeviceNum{defaultDevice}
	}

	// Check every input and bring it to its device.
	var temps []*capi.Buffer
	defer func() {
		for _, t := range temps {
			_ = t.Destroy()
		}
	}()
	perPos := make([][]*capi.Buffer, numDev)
	for pos := range numDev {
		perPos[pos] = make([]*capi.Buffer, numParams)
		for i := range numParams {
			k := pos*numParams + i
			name := fmt.Sprintf("#%d (%s)", i, prog.ParamNames[i])
			if numDev > 1 {
				name += fmt.Sprintf(" on device %d of the assignment", pos)
			}
			b, err := e.buffer(op, inputs[k])
			if err != nil {
				return nil, fmt.Errorf("input %s: %w", name, err)
			}
			want := prog.ParamShapes[i]
			if prog.Strategy == lower.AutoSharding {
				// Each device holds a shard: only dtype and rank are fixed.
				if b.shape.DType != want.DType || b.shape.Rank() != want.Rank() {
					return nil, &errs.InputError{Name: name, Problem: "shape", Expected: fmt.Sprintf("a shard of %s", want), Got: b.shape.String()}
				}
			} else if !b.shape.Equal(want) {
				problem := "shape"
				if b.shape.DType != want.DType {
					problem = "dtype"
				}
				return nil, &errs.InputError{Name: name, Problem: problem, Expected: want.String(), Got: b.shape.String()}
			}
			pb := b.buf
			if b.dev != targets[pos] {
				dev, _ := e.device(targets[pos])
				cp, err := pb.CopyToDevice(ctx, dev)
				if err != nil {
					return nil, wrap(e.name, op, e.deviceName(targets[pos]), fmt.Sprintf("moving input %s from device %d", name, b.dev), err)
				}
				temps = append(temps, cp)
				pb = cp
			}
			perPos[pos][i] = pb
		}
	}

	var args [][]*capi.Buffer
	opts := &capi.ExecuteOptions{NonDonatable: nonDonatable(prog, donate)}
	if prog.Portable() {
		args = perPos
		opts.Device, _ = e.device(defaultDevice)
	} else {
		args = make([][]*capi.Buffer, numDev)
		for k, pos := range x.order {
			args[k] = perPos[pos]
		}
	}
	outs, err := x.le.Execute(ctx, args, opts)
	if err != nil {
		dev := ""
		if len(targets) == 1 {
			dev = e.deviceName(targets[0])
		}
		return nil, wrap(e.name, op, dev, fmt.Sprintf("running %q", prog.Name), err)
	}

	// Back to assignment order, device-major.
	numOut := len(prog.OutputShapes)
	result := make([]backends.Buffer, numOut*numDev)
	var convErr error
	for k, list := range outs {
		pos := k
		if !prog.Portable() {
			pos = x.order[k]
		}
		for j, pb := range list {
			if convErr != nil || j >= numOut {
				_ = pb.Destroy()
				continue
			}
			b, err := e.newBuffer(op, pb)
			if err != nil {
				_ = pb.Destroy()
				convErr = err
				continue
			}
			result[pos*numOut+j] = b
		}
	}
	if convErr == nil {
		for i, r := range result {
			if r == nil {
				convErr = &errs.Error{Kind: errs.Internal, Backend: e.name, Op: op,
					Err: fmt.Errorf("program %q: the plugin returned no output #%d", prog.Name, i)}
				break
			}
		}
	}
	if convErr != nil {
		for _, r := range result {
			if r != nil {
				_ = e.BufferFinalize(r)
			}
		}
		return nil, convErr
	}
	for i, d := range donate {
		if d {
			_ = e.BufferFinalize(inputs[i])
		}
	}
	return result, nil
}

// nonDonatable lists the parameters the program aliases to outputs whose
// inputs are not donated (on any device: donate is device-major, as
// Execute's inputs), sorted. The runtime must not reuse those buffers.
func nonDonatable(prog *lower.Program, donate []bool) []int {
	var out []int
	numParams := len(prog.ParamShapes)
	for i := range prog.Donated {
		given := donate != nil
		for k := i; given && k < len(donate); k += numParams {
			given = donate[k]
		}
		if !given {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}
