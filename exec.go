package tensorbridge

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Func builds a computation: given the graph and one parameter node per
// declared input, it returns the output nodes. It may return an error, or
// panic as GoMLX graph-building functions do; both come back from Compile as
// errors.
type Func func(g *ir.Graph, inputs []*ir.Node) ([]*ir.Node, error)

// Executable is a compiled computation with fixed input shapes. It is safe
// for concurrent use: runs share it without holding a lock across the
// execution, and Close waits for the runs in flight.
type Executable struct {
	b      *Backend
	name   string
	inputs []ir.Shape
	// outPos maps each output the Func returned to its position among the
	// compiled outputs, which are deduplicated and may carry extra entries.
	outPos []int

	// direct is the compiled program run without GoMLX's wrappers, when
	// the backend offers it (driver.DirectRunner); outShapes are its
	// outputs' shapes. nil: runs go through GoMLX's Graph.
	direct    driver.DirectExecutable
	outShapes []ir.Shape

	// donated[i] says input i is given to every run (CompileDonating);
	// nil when none is.
	donated []bool

	mu sync.RWMutex // held shared by each run, exclusively by Close
	g  *ir.Graph    // nil once closed

	// spmd is the sharded program's state (exec_spmd.go); nil for a
	// one-device program.
	spmd *spmdState
}

// Compile builds fn for inputs of the given shapes and compiles it. When ctx
// ends first, Compile returns (a *CompileTimeoutError for a deadline); the
// abandoned compilation still counts as work in flight for Backend.Close,
// finishes in the background and is then released.
func (b *Backend) Compile(ctx context.Context, name string, fn Func, inputs ...ir.Shape) (*Executable, error) {
	return b.CompileDonating(ctx, name, fn, nil, inputs...)
}

// Donation maps an input's index to the index of the output that replaces
// it (among the outputs the Func returns): state a program carries from one
// run to the next, such as a KV cache or a training step's weights and
// optimizer state. The pair must have one shape and dtype, and an output
// takes at most one input.
type Donation map[int]int

// CompileDonating is Compile for a program whose runs update some inputs in
// place: every run of it (Run, RunOn, RunOnDevice) gives the tensors at
// donate's inputs to the program, which writes each one's replacement into
// the same device memory instead of allotting a new buffer and copying the
// old value into it (on pjrt backends the compiled program carries XLA's
// input/output aliasing; the cpu backend reuses the buffer at run time).
//
// A donated input is consumed by the run, whether it succeeds or fails
// once the inputs are checked: the tensor is finalized, and passing it to
// a run again is an error wrapping ErrClosed. A host tensor given for a
// donated input is copied to the device and finalized too. The same tensor
// may not be given for a donated input and any other input of one run.
func (b *Backend) CompileDonating(ctx context.Context, name string, fn Func, donate Donation, inputs ...ir.Shape) (*Executable, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkShapes(inputs); err != nil {
		return nil, err
	}
	leave, err := b.enter("compile")
	if err != nil {
		return nil, err
	}
	type result struct {
		exe *Executable
		err error
	}
	var (
		mu        sync.Mutex
		abandoned bool
	)
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		defer leave()
		exe, err := b.compileSyncDonating(name, fn, donate, inputs)
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			if exe != nil {
				_ = exe.Close()
			}
			return
		}
		done <- result{exe, err}
	}()
	select {
	case r := <-done:
		return r.exe, r.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		select {
		case r := <-done: // finished while we took the lock
			return r.exe, r.err
		default:
		}
		abandoned = true
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &errs.CompileTimeoutError{Backend: b.Name(), Program: name, Timeout: time.Since(start).Round(time.Millisecond)}
		}
		return nil, ctx.Err()
	}
}

func checkShapes(inputs []ir.Shape) error {
	for i, s := range inputs {
		if !s.Ok() {
			return &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "shape", Expected: "a valid shape", Got: s.String()}
		}
	}
	return nil
}

// compileSync builds and compiles on the calling goroutine, counted as work
// in flight. The model cache calls it from its own compile goroutine, which
// outlives impatient callers so that a retry joins the compile in progress.
func (b *Backend) compileSync(name string, fn Func, inputs []ir.Shape) (*Executable, error) {
	return b.compileSyncDonating(name, fn, nil, inputs)
}

// compileSyncDonating is compileSync for a program with donated inputs
// (CompileDonating).
func (b *Backend) compileSyncDonating(name string, fn Func, donate Donation, inputs []ir.Shape) (*Executable, error) {
	if err := checkShapes(inputs); err != nil {
		return nil, err
	}
	leave, err := b.enter("compile")
	if err != nil {
		return nil, err
	}
	defer leave()
	g, outPos, err := b.build(name, fn, inputs, donate)
	if err != nil {
		return nil, err
	}
	exe := &Executable{b: b, name: name, inputs: inputs, g: g, outPos: outPos}
	if len(donate) > 0 {
		exe.donated = make([]bool, len(inputs))
		for i := range donate {
			exe.donated[i] = true
		}
	}
	// The direct path lends every input: a donating program runs through
	// GoMLX, which gives the donated buffers.
	if dr, ok := b.drv.(driver.DirectRunner); ok && exe.donated == nil {
		if d := dr.Direct(g); d != nil {
			exe.direct, exe.outShapes = d, d.OutputShapes()
		}
	}
	return exe, nil
}

func (b *Backend) build(name string, fn Func, inputs []ir.Shape, donate Donation) (g *ir.Graph, outPos []int, err error) {
	if err := b.check(); err != nil {
		return nil, nil, err
	}
	g = ir.NewGraph(b.drv.Engine(), name)
	defer func() {
		if err != nil && g != nil {
			safeFinalize(g)
			g = nil
		}
	}()
	defer recoverInto(&err, b.Name(), fmt.Sprintf("building graph %q", name))
	params := make([]*ir.Node, len(inputs))
	for i, s := range inputs {
		params[i] = ir.Parameter(g, fmt.Sprintf("input%d", i), s)
	}
	outs, err := fn(g, params)
	if err != nil {
		return nil, nil, err
	}
	if len(outs) == 0 {
		return nil, nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "compile",
			Err: fmt.Errorf("graph %q returned no outputs", name)}
	}
	for i, o := range outs {
		if o == nil {
			return nil, nil, &errs.Error{Kind: errs.InvalidArgument, Backend: b.Name(), Op: "compile",
				Err: fmt.Errorf("graph %q output #%d is nil", name, i)}
		}
	}
	compiled, outPos := compiledOutputs(outs, params)
	if len(donate) > 0 {
		aliases, err := donation(name, donate, inputs, outs, outPos)
		if err != nil {
			return nil, nil, err
		}
		if err := ir.SetDonation(g, aliases); err != nil {
			return nil, nil, &errs.CompileError{Backend: b.Name(), Program: name, Err: err}
		}
	}
	if gc, ok := b.drv.(driver.GraphChecker); ok {
		if err := gc.CheckGraph(g, compiled); err != nil {
			return nil, nil, err
		}
	}
	if err := compileGraph(g, compiled); err != nil {
		return nil, nil, &errs.CompileError{Backend: b.Name(), Program: name, Err: err}
	}
	return g, outPos, nil
}

// donation checks donate against the program's inputs and the outputs fn
// returned, and returns it in terms of the compiled outputs (outPos).
func donation(name string, donate Donation, inputs []ir.Shape, outs []*ir.Node, outPos []int) (map[int]int, error) {
	aliases := make(map[int]int, len(donate))
	taken := map[int]int{}
	for i, j := range donate {
		what := fmt.Sprintf("donation of input #%d to output #%d", i, j)
		if i < 0 || i >= len(inputs) {
			return nil, &errs.InputError{Name: name, Problem: "value", Expected: fmt.Sprintf("in a %s: an input in [0, %d)", what, len(inputs)), Got: fmt.Sprint(i)}
		}
		if j < 0 || j >= len(outs) {
			return nil, &errs.InputError{Name: name, Problem: "value", Expected: fmt.Sprintf("in a %s: an output in [0, %d)", what, len(outs)), Got: fmt.Sprint(j)}
		}
		if got := outs[j].Shape(); !got.Equal(inputs[i]) {
			return nil, &errs.InputError{Name: name, Problem: "shape", Expected: fmt.Sprintf("in a %s: the input's shape %s", what, inputs[i]), Got: got.String()}
		}
		c := outPos[j]
		if k, dup := taken[c]; dup {
			return nil, &errs.InputError{Name: name, Problem: "value", Expected: fmt.Sprintf("in a %s: an output no other input is donated to", what), Got: fmt.Sprintf("input #%d donated to the same output", k)}
		}
		taken[c] = i
		aliases[i] = c
	}
	return aliases, nil
}

// compiledOutputs deduplicates the outputs (a node may be returned twice)
// and appends every parameter no output depends on: GoMLX v0.26.0's simplego
// indexes out of range executing a graph with an unused parameter. Run
// returns only the requested outputs, in the requested order.
func compiledOutputs(outs, params []*ir.Node) (compiled []*ir.Node, outPos []int) {
	index := map[*ir.Node]int{}
	outPos = make([]int, len(outs))
	for i, o := range outs {
		j, ok := index[o]
		if !ok {
			j = len(compiled)
			index[o] = j
			compiled = append(compiled, o)
		}
		outPos[i] = j
	}
	seen := map[*ir.Node]bool{}
	stack := append([]*ir.Node(nil), compiled...)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == nil || seen[n] {
			continue
		}
		seen[n] = true
		stack = append(stack, n.Inputs()...)
	}
	for _, p := range params {
		if !seen[p] {
			compiled = append(compiled, p)
		}
	}
	return compiled, outPos
}

func compileGraph(g *ir.Graph, outs []*ir.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e // keep the chain: backends panic with typed errors
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	g.Compile(outs...)
	return nil
}

func safeFinalize(g *ir.Graph) {
	defer func() { _ = recover() }()
	g.Finalize()
}

// Inputs returns the input shapes the executable was compiled for.
func (e *Executable) Inputs() []ir.Shape { return append([]ir.Shape(nil), e.inputs...) }

// Run executes on the backend's default device (device 0). Inputs must match
// the compiled shapes exactly; a mismatch is an *InputError naming the input.
//
// The outputs are host tensors that the caller owns: no device memory stays
// allocated for them, and they are ordinary Go memory (FinalizeAll releases
// it early). Inputs are left as they were: a host tensor is copied to a
// device buffer that is freed when the run ends; a tensor already on the
// device lends its buffer.
func (e *Executable) Run(ctx context.Context, inputs ...*ir.Tensor) ([]*ir.Tensor, error) {
	return e.RunOn(ctx, 0, inputs...)
}

// RunOn is Run on device dev, an index into Backend.Devices.
func (e *Executable) RunOn(ctx context.Context, dev int, inputs ...*ir.Tensor) (outs []*ir.Tensor, err error) {
	finish, err := e.startRun(ctx, dev, inputs)
	if err != nil {
		return nil, err
	}
	defer finish()
	defer recoverRunning(&err, e.b.Name(), e.name)
	if e.direct != nil {
		return e.runDirect(ctx, dev, inputs)
	}
	bufs, release, err := e.placeInputs(dev, inputs)
	defer release()
	if err != nil {
		return nil, err
	}
	all, err := ir.RunOwnedDonating(e.g, dev, bufs, e.donated)
	if err != nil {
		return nil, classify(err, e.b.Name(), fmt.Sprintf("running %q", e.name))
	}
	outs = make([]*ir.Tensor, len(e.outPos))
	used := make([]bool, len(all))
	for i, j := range e.outPos {
		outs[i] = all[j]
		used[j] = true
	}
	for j, t := range all {
		if !used[j] {
			_ = t.FinalizeAll()
		}
	}
	return outs, nil
}

// runDirect is RunOn through the backend's direct path: host inputs are
// uploaded from their own storage, device inputs lent, and the outputs
// downloaded straight into new host tensors. The caller holds e.mu.
func (e *Executable) runDirect(ctx context.Context, dev int, inputs []*ir.Tensor) ([]*ir.Tensor, error) {
	eng := e.b.drv.Engine()
	args := make([]driver.DirectArg, len(inputs))
	var owned []ir.Buffer
	defer func() {
		for _, b := range owned {
			_ = ir.FreeBuffer(eng, b)
		}
	}()
	for i, t := range inputs {
		if raw, ok := ir.LocalBytes(t); ok {
			args[i].Host = raw
			continue
		}
		b, own, err := ir.DeviceBuffer(eng, dev, t)
		if err != nil {
			return nil, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "value", Expected: "a tensor readable on the host or on this device", Got: err.Error()}
		}
		if own {
			owned = append(owned, b)
		}
		args[i].Buffer = b
	}
	// Only the requested outputs are downloaded (the compiled ones may
	// carry extra entries, see compiledOutputs), each once.
	dst := make([][]byte, len(e.outShapes))
	all := make([]*ir.Tensor, len(e.outShapes))
	outs := make([]*ir.Tensor, len(e.outPos))
	for i, j := range e.outPos {
		if all[j] == nil {
			t, raw, err := ir.NewHostTensorBytes(e.outShapes[j])
			if err != nil {
				return nil, &errs.Error{Kind: errs.Internal, Backend: e.b.Name(), Op: "run", Err: fmt.Errorf("output #%d: %w", i, err)}
			}
			all[j], dst[j] = t, raw
		}
		outs[i] = all[j]
	}
	err := e.direct.RunDirect(ctx, dev, args, dst)
	runtime.KeepAlive(inputs) // their storage is read by the run
	if err != nil {
		return nil, classify(err, e.b.Name(), "running "+strconv.Quote(e.name))
	}
	return outs, nil
}

// Close releases the compiled program, after the runs in flight ended. It is
// idempotent.
func (e *Executable) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.g != nil {
		safeFinalize(e.g)
		e.g = nil
	}
	return nil
}

// recoverInto turns a panic into an error (see classify), naming what was
// being done. It must be deferred directly.
func recoverInto(err *error, backend, op string) {
	r := recover()
	if r == nil {
		return
	}
	if e, ok := r.(error); ok {
		*err = classify(e, backend, op)
		return
	}
	*err = &errs.Error{Kind: errs.Internal, Backend: backend, Op: op,
		Err: fmt.Errorf("panic: %v\n%s", r, firstFrames(debug.Stack(), 12))}
}

// recoverRunning is recoverInto for a run of the named program, which
// builds the operation's name only when there was a panic. It must be
// deferred directly.
func recoverRunning(err *error, backend, name string) {
	r := recover()
	if r == nil {
		return
	}
	op := "running " + strconv.Quote(name)
	if e, ok := r.(error); ok {
		*err = classify(e, backend, op)
		return
	}
	*err = &errs.Error{Kind: errs.Internal, Backend: backend, Op: op,
		Err: fmt.Errorf("panic: %v\n%s", r, firstFrames(debug.Stack(), 12))}
}

// classify returns err as a tensorbridge error, by type: errors that already
// carry a kind are kept; GoMLX's not-implemented failures (ir.ErrNotImplemented)
// become an *UnsupportedError; anything else is Internal.
func classify(err error, backend, op string) error {
	if errs.KindOf(err) != errs.Unknown {
		return err
	}
	if ir.IsNotImplemented(err) {
		return &errs.UnsupportedError{Backend: backend, What: "op", Name: opName(err.Error()), Detail: firstLine(err.Error())}
	}
	return &errs.Error{Kind: errs.Internal, Backend: backend, Op: op, Err: err}
}

// opName picks the op's name out of a not-implemented message, for display
// only (the error was classified by type already).
func opName(msg string) string {
	const marker = `op "`
	if i := strings.Index(msg, marker); i >= 0 {
		rest := msg[i+len(marker):]
		if j := strings.IndexByte(rest, '"'); j > 0 {
			return rest[:j]
		}
	}
	return "(see detail)"
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func firstFrames(stack []byte, n int) string {
	lines := strings.Split(string(stack), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// startRun does what every run does before it touches the device: the
// context, the inputs' count and shapes (checkRunInputs), the backend's
// in-flight count and the executable's read lock, refusing a closed
// executable. finish releases the last two; it is nil when err is not.
func (e *Executable) startRun(ctx context.Context, dev int, inputs []*ir.Tensor) (finish func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(inputs) != len(e.inputs) {
		return nil, &errs.InputError{Name: e.name, Problem: "count",
			Expected: fmt.Sprintf("%d inputs", len(e.inputs)), Got: fmt.Sprint(len(inputs))}
	}
	if err := e.checkRunInputs(dev, inputs); err != nil {
		return nil, err
	}
	if err := e.b.begin("run"); err != nil {
		return nil, err
	}
	e.mu.RLock()
	if e.g == nil {
		e.mu.RUnlock()
		e.b.end()
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: e.b.Name(), Op: "run", Err: ErrClosed}
	}
	return func() { e.mu.RUnlock(); e.b.end() }, nil
}

// checkRunInputs checks a run's inputs (none nil, each of its parameter's
// shape and dtype) and device index before anything is placed.
func (e *Executable) checkRunInputs(dev int, inputs []*ir.Tensor) error {
	for i, t := range inputs {
		if t == nil {
			return &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "value", Expected: "a tensor", Got: "nil"}
		}
		if t.CheckValid() != nil {
			return &errs.Error{Kind: errs.FailedPrecondition, Backend: e.b.Name(), Op: "run",
				Err: fmt.Errorf("%q input #%d: the tensor was finalized or donated to an earlier run: %w", e.name, i, ErrClosed)}
		}
		if got := t.Shape(); !got.Equal(e.inputs[i]) {
			problem := "shape"
			if got.DType != e.inputs[i].DType {
				problem = "dtype"
			}
			return &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: problem,
				Expected: e.inputs[i].String(), Got: got.String()}
		}
	}
	if dev < 0 || dev >= len(e.b.devices) {
		return &errs.Error{Kind: errs.InvalidArgument, Backend: e.b.Name(), Op: "run",
			Err: fmt.Errorf("device %d out of range: the backend has %d device(s)", dev, len(e.b.devices))}
	}
	return e.checkDonatedOnce(inputs)
}

// checkDonatedOnce refuses a run that gives a donated input's tensor at
// another position too: the run would read memory it overwrites.
func (e *Executable) checkDonatedOnce(inputs []*ir.Tensor) error {
	if e.donated == nil {
		return nil
	}
	at := make(map[*ir.Tensor]int, len(inputs))
	for i, t := range inputs {
		j, seen := at[t]
		if seen && (e.donated[i] || e.donated[j]) {
			return &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "value",
				Expected: "a tensor not also given for a donated input", Got: fmt.Sprintf("the tensor given for input #%d", j)}
		}
		at[t] = i
	}
	return nil
}

// placeInputs puts each input on device dev: a tensor already there is
// lent, a host one is copied into a buffer that release frees (release is
// always safe to call, also after an error). Donated inputs are placed
// last, with ir.DonatedBuffer: their buffers go to the run, which consumes
// them; release frees them only when placing failed before the run.
func (e *Executable) placeInputs(dev int, inputs []*ir.Tensor) (bufs []ir.Buffer, release func(), err error) {
	eng := e.b.drv.Engine()
	bufs = make([]ir.Buffer, len(inputs))
	owned := make([]bool, len(inputs))
	release = func() {
		for i, b := range bufs {
			if owned[i] {
				_ = ir.FreeBuffer(eng, b)
			}
		}
	}
	for i, t := range inputs {
		if e.donated != nil && e.donated[i] {
			continue
		}
		b, own, err := ir.DeviceBuffer(eng, dev, t)
		if err != nil {
			return bufs, release, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "value", Expected: "a tensor readable on the host or on this device", Got: err.Error()}
		}
		bufs[i], owned[i] = b, own
	}
	for i, t := range inputs {
		if e.donated == nil || !e.donated[i] {
			continue
		}
		b, err := ir.DonatedBuffer(eng, dev, t)
		if err != nil {
			return bufs, release, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "value", Expected: "a tensor readable on the host or on this device (donated)", Got: err.Error()}
		}
		bufs[i], owned[i] = b, true
	}
	// From here the run owns the donated buffers.
	for i, d := range e.donated {
		owned[i] = owned[i] && !d
	}
	return bufs, release, nil
}
