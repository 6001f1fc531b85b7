package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// OpError is the error of a step that failed at run time: Op names the op
// (or the ops of a segment).
type OpError struct {
	Computation string
	Op          string
	Err         error
}

func (e *OpError) Error() string {
	return fmt.Sprintf("%s: computation %q, op %s: %v", Name, e.Computation, e.Op, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// Executable runs a plan. It is safe for concurrent use: each Execute has
// its own buffers.
type Executable struct {
	e          *Engine
	name       string
	p          *plan
	paramNames []string
	paramShape []shapes.Shape
	outShapes  []shapes.Shape
	finalized  bool
	runs       sync.Pool // *run
}

var _ backends.Executable = (*Executable)(nil)

func newExecutable(e *Engine, name string, params []*node, p *plan) *Executable {
	x := &Executable{e: e, name: name, p: p}
	for _, pn := range params {
		x.paramNames = append(x.paramNames, pn.attr.(string))
		x.paramShape = append(x.paramShape, pn.shapes[0])
	}
	for _, s := range p.outputs {
		x.outShapes = append(x.outShapes, p.slots[s].shape)
	}
	return x
}

// Finalize releases the segments and the constants.
func (x *Executable) Finalize() {
	if x.finalized {
		return
	}
	x.finalized = true
	for _, st := range x.p.steps {
		if st.seg != nil {
			st.seg.Finalize()
		}
	}
	for _, sl := range x.p.slots {
		if sl.kind == slotConst && sl.konst != nil {
			_ = x.e.inner.BufferFinalize(sl.konst)
		}
	}
}

// Inputs returns the parameters' names and shapes.
func (x *Executable) Inputs() ([]string, []shapes.Shape) {
	return slices.Clone(x.paramNames), slices.Clone(x.paramShape)
}

// Outputs returns the outputs' shapes.
func (x *Executable) Outputs() []shapes.Shape { return slices.Clone(x.outShapes) }

// run is the state of one Execute, reused by later ones (runs).
type run struct {
	x       *Executable
	cur     int // the step running
	bufs    []backends.Buffer
	owned   []bool
	ins     []backends.Buffer // a step's inputs
	out     [1]backends.Buffer
	outs    []backends.Buffer // many's slice
	fresh   []backends.Buffer // the arena buffers the running step allocated
	threads int
}

// getRun returns a cleared run state.
func (x *Executable) getRun() *run {
	if r, ok := x.runs.Get().(*run); ok {
		r.threads = parallel.Threads(0)
		return r
	}
	maxIns := 0
	for _, st := range x.p.steps {
		maxIns = max(maxIns, len(st.ins))
	}
	return &run{x: x, bufs: make([]backends.Buffer, len(x.p.slots)), owned: make([]bool, len(x.p.slots)),
		ins: make([]backends.Buffer, maxIns), threads: parallel.Threads(0)}
}

// putRun clears r (it holds no buffer after a run) and keeps it.
func (x *Executable) putRun(r *run) {
	clear(r.bufs)
	clear(r.owned)
	clear(r.ins)
	clear(r.outs)
	clear(r.fresh)
	r.fresh = r.fresh[:0]
	r.out[0] = nil
	x.runs.Put(r)
}

// Execute runs the plan. Donated inputs become the run's to free or reuse.
func (x *Executable) Execute(inputs []backends.Buffer, donate []bool, _ backends.DeviceNum) ([]backends.Buffer, error) {
	return x.ExecuteContext(context.Background(), inputs, donate)
}

// ExecuteContext is Execute that stops between steps once ctx is done,
// returning ctx's error after releasing every buffer the run holds (a
// step already running finishes first: kernels do not poll).
func (x *Executable) ExecuteContext(ctx context.Context, inputs []backends.Buffer, donate []bool) ([]backends.Buffer, error) {
	if x.finalized {
		return nil, fmt.Errorf("%s: computation %q: executable already finalized", Name, x.name)
	}
	if err := x.checkInputs(inputs, donate); err != nil {
		return nil, err
	}
	r := x.getRun()
	defer x.putRun(r)
	for i, s := range x.p.params {
		d := len(donate) > i && donate[i]
		if s < 0 {
			if d {
				_ = x.e.inner.BufferFinalize(inputs[i])
			}
			continue
		}
		r.bufs[s], r.owned[s] = inputs[i], d
	}
	for s, sl := range x.p.slots {
		if sl.kind == slotConst {
			r.bufs[s] = sl.konst
		}
	}
	done := ctx.Done()
	for i := range x.p.steps {
		if done != nil {
			select {
			case <-done:
				r.releaseAll()
				return nil, ctx.Err()
			default:
			}
		}
		if err := r.step(i); err != nil {
			r.releaseAll()
			return nil, err
		}
	}
	return r.outputs()
}

// Engine returns the engine the executable was compiled on.
func (x *Executable) Engine() *Engine { return x.e }

// Recycle takes back an output buffer of a run that its caller has
// copied out and will not use again (a direct run's outputs): the next
// run reuses it, so a direct run allocates no buffers of its own.
func (x *Executable) Recycle(b backends.Buffer) { x.e.recycle(b) }

// checkInputs checks the count and shapes of the inputs.
func (x *Executable) checkInputs(inputs []backends.Buffer, donate []bool) error {
	if len(inputs) != len(x.paramShape) {
		return fmt.Errorf("%s: computation %q takes %d inputs, got %d", Name, x.name, len(x.paramShape), len(inputs))
	}
	if len(donate) != 0 && len(donate) != len(inputs) {
		return fmt.Errorf("%s: computation %q: %d donation flags for %d inputs", Name, x.name, len(donate), len(inputs))
	}
	for i, in := range inputs {
		if in == nil {
			return fmt.Errorf("%s: computation %q: input #%d (%q) is nil", Name, x.name, i, x.paramNames[i])
		}
		s, err := x.e.inner.BufferShape(in)
		if err != nil {
			return fmt.Errorf("%s: computation %q: input #%d (%q): %w", Name, x.name, i, x.paramNames[i], err)
		}
		if !s.Equal(x.paramShape[i]) {
			return fmt.Errorf("%s: computation %q: input #%d (%q): expected shape %s, got %s",
				Name, x.name, i, x.paramNames[i], x.paramShape[i], s)
		}
	}
	return nil
}

// step runs step i and releases the buffers it read last.
func (r *run) step(i int) (err error) {
	st := &r.x.p.steps[i]
	r.cur = i
	ins := r.ins[:len(st.ins)]
	for j, s := range st.ins {
		ins[j] = r.bufs[s]
	}
	var outs []backends.Buffer
	if st.seg != nil {
		outs, err = r.segment(i, st, ins)
	} else {
		var kerr error
		if err = parallel.Run(func() { outs, kerr = st.native(r, ins) }); err == nil {
			err = kerr
		}
		if err == nil && len(outs) != len(st.outs) {
			err = fmt.Errorf("kernel returned %d outputs, want %d", len(outs), len(st.outs))
		}
	}
	if err != nil {
		r.dropFresh()
		var pe *parallel.PanicError
		if errors.As(err, &pe) {
			err = fmt.Errorf("%w (recovered; the executable stays usable)", err)
		}
		return &OpError{Computation: r.x.name, Op: st.name, Err: err}
	}
	clear(r.fresh)
	r.fresh = r.fresh[:0]
	for j, s := range st.outs {
		r.bufs[s], r.owned[s] = outs[j], true
	}
	for _, s := range st.release {
		r.free(s)
	}
	return nil
}

// segment runs a segment, donating the buffers it reads last.
func (r *run) segment(i int, st *step, ins []backends.Buffer) (outs []backends.Buffer, err error) {
	donate := make([]bool, len(ins))
	for j, s := range st.ins {
		sl := &r.x.p.slots[s]
		// The inner engine would pool a donated arena buffer as its own.
		donate[j] = r.owned[s] && sl.lastUse == i && !sl.output && !r.arenaOwned(ins[j])
	}
	res := make([]backends.Buffer, len(st.outs))
	for j, k := range st.outIndex {
		if k < 0 { // a copy of input -1-k, taken before the segment may reuse it
			c, err := r.clone(ins[-1-k])
			if err != nil {
				return nil, err
			}
			res[j] = c
		}
	}
	var serr error
	if err = parallel.Run(func() { outs, serr = st.seg.Execute(ins, donate, 0) }); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	for j, s := range st.ins {
		if donate[j] {
			r.bufs[s], r.owned[s] = nil, false // the segment took it
		}
	}
	taken := make([]bool, len(outs))
	for j, k := range st.outIndex {
		if k < 0 {
			continue
		}
		if !taken[k] {
			res[j], taken[k] = outs[k], true
			continue
		}
		if res[j], err = r.clone(outs[k]); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// many returns a copy of bs as a step's outputs, in a slice the run
// reuses, as one does.
func (r *run) many(bs []backends.Buffer) []backends.Buffer {
	r.outs = append(r.outs[:0], bs...)
	return r.outs
}

// one returns b as a step's only output, in a slice the run reuses (step
// copies its outputs out at once), so a kernel allocates none.
func (r *run) one(b backends.Buffer) []backends.Buffer {
	r.out[0] = b
	return r.out[:1]
}

// take gives the running native step input j's buffer to keep (to write
// its output in place) when the run owns it and this step reads it last;
// otherwise it returns nil and the step must not write into the input.
func (r *run) take(j int) backends.Buffer {
	st := &r.x.p.steps[r.cur]
	s := st.ins[j]
	sl := &r.x.p.slots[s]
	if !r.owned[s] || sl.lastUse != r.cur || sl.output {
		return nil
	}
	for k, o := range st.ins {
		if o == s && k != j {
			return nil // read twice by this step
		}
	}
	b := r.bufs[s]
	r.bufs[s], r.owned[s] = nil, false
	return b
}

// free releases slot s's buffer when the run owns it: to the engine's
// free lists, or, for a donated input, to the inner engine, which
// invalidates the caller's handle.
func (r *run) free(s int) {
	if b := r.bufs[s]; b != nil && r.owned[s] {
		if r.x.p.slots[s].kind == slotParam {
			_ = r.x.e.inner.BufferFinalize(b)
		} else {
			r.x.e.recycle(b)
		}
	}
	r.bufs[s], r.owned[s] = nil, false
}

// releaseAll frees every buffer the run owns (after a failure).
func (r *run) releaseAll() {
	for s := range r.bufs {
		r.free(s)
	}
}

// outputs hands out the outputs: owned heap buffers as they are, others
// (arena buffers, and repeats) as copies.
func (r *run) outputs() ([]backends.Buffer, error) {
	res := make([]backends.Buffer, len(r.x.p.outputs))
	for i, s := range r.x.p.outputs {
		if r.owned[s] && !r.arenaOwned(r.bufs[s]) {
			res[i], r.owned[s] = r.bufs[s], false
			continue
		}
		c, err := r.clone(r.bufs[s])
		if err != nil {
			r.releaseAll()
			return nil, &OpError{Computation: r.x.name, Op: "output", Err: err}
		}
		res[i] = c
	}
	for _, s := range r.x.p.outputs {
		r.free(s) // an arena buffer, copied out above
	}
	return res, nil
}

// clone copies a buffer.
func (r *run) clone(b backends.Buffer) (backends.Buffer, error) {
	s, err := r.x.e.inner.BufferShape(b)
	if err != nil {
		return nil, err
	}
	src, err := r.x.e.inner.BufferData(b)
	if err != nil {
		return nil, err
	}
	nb, dst, err := r.x.e.newBuffer(s)
	if err != nil {
		return nil, err
	}
	reflect.Copy(reflect.ValueOf(dst), reflect.ValueOf(src))
	return nb, nil
}

// alloc returns a new buffer of shape s and its flat values (not zeroed):
// a large one in the arena unless the running step makes an output of the
// run, which leaves the engine.
func (r *run) alloc(s shapes.Shape) (backends.Buffer, any, error) {
	if a := r.x.e.ar; a != nil && s.Memory() >= arenaMin && !r.outStep() {
		b, flat, err := a.alloc(s)
		if err == nil {
			r.fresh = append(r.fresh, b)
		}
		return b, flat, err
	}
	return r.x.e.newBuffer(s)
}

// dropFresh gives back the arena buffers a failed step allocated: no slot
// holds them, and the collector does not see arena memory, so a kernel
// that fails after allocating (an index out of range, a recovered panic)
// would otherwise leak them for good. Those the step already freed are
// not arena buffers any more (release reports false).
func (r *run) dropFresh() {
	for _, b := range r.fresh {
		r.x.e.ar.release(b)
	}
	clear(r.fresh)
	r.fresh = r.fresh[:0]
}

// outStep reports whether the running step makes an output of the run.
func (r *run) outStep() bool {
	for _, s := range r.x.p.steps[r.cur].outs {
		if r.x.p.slots[s].output {
			return true
		}
	}
	return false
}

// arenaOwned reports whether b is an arena buffer.
func (r *run) arenaOwned(b backends.Buffer) bool {
	return r.x.e.ar != nil && r.x.e.ar.owns(b)
}

// data returns a buffer's flat values.
func (r *run) data(b backends.Buffer) (any, error) { return r.x.e.inner.BufferData(b) }

// Steps describes the plan, one line per step in run order: "native OP",
// "fused[OPS]" or "segment [OPS]" (ops run by the inner engine), so a
// user or a test can see which ops of a model run natively.
func (x *Executable) Steps() []string {
	s := make([]string, len(x.p.steps))
	for i, st := range x.p.steps {
		switch {
		case st.seg != nil:
			s[i] = "segment " + st.name
		case len(st.name) > 0 && st.name[0] == 'f':
			s[i] = st.name
		default:
			s[i] = "native " + st.name
		}
	}
	return s
}
