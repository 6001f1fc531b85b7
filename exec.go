package tensorbridge

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
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
// for concurrent use.
type Executable struct {
	b      *Backend
	name   string
	inputs []ir.Shape
	g      *ir.Graph
	// outPos maps each output the Func returned to its position among the
	// compiled outputs, which are deduplicated and may carry extra entries.
	outPos []int
	mu     sync.Mutex
}

// Compile builds fn for inputs of the given shapes and compiles it. When ctx
// has a deadline and compilation passes it, Compile returns a
// *CompileTimeoutError; the abandoned compilation finishes in the background
// and is then discarded.
func (b *Backend) Compile(ctx context.Context, name string, fn Func, inputs ...ir.Shape) (*Executable, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, s := range inputs {
		if !s.Ok() {
			return nil, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "shape", Expected: "a valid shape", Got: s.String()}
		}
	}
	type result struct {
		g      *ir.Graph
		outPos []int
		err    error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		g, outPos, err := b.build(name, fn, inputs)
		done <- result{g, outPos, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		return &Executable{b: b, name: name, inputs: inputs, g: r.g, outPos: r.outPos}, nil
	case <-ctx.Done():
		go func() { // release whatever the abandoned compile produces
			if r := <-done; r.g != nil {
				r.g.Finalize()
			}
		}()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &errs.CompileTimeoutError{Backend: b.Name(), Program: name, Timeout: time.Since(start).Round(time.Millisecond)}
		}
		return nil, ctx.Err()
	}
}

func (b *Backend) build(name string, fn Func, inputs []ir.Shape) (g *ir.Graph, outPos []int, err error) {
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

// Run executes on the backend's default device. Inputs must match the
// compiled shapes exactly; a mismatch is an *InputError naming the input.
func (e *Executable) Run(ctx context.Context, inputs ...*ir.Tensor) (outs []*ir.Tensor, err error) {
	if err := e.b.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(inputs) != len(e.inputs) {
		return nil, &errs.InputError{Name: e.name, Problem: "count",
			Expected: fmt.Sprintf("%d inputs", len(e.inputs)), Got: fmt.Sprint(len(inputs))}
	}
	args := make([]any, len(inputs))
	for i, t := range inputs {
		if t == nil {
			return nil, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "value", Expected: "a tensor", Got: "nil"}
		}
		if got := t.Shape(); !got.Equal(e.inputs[i]) {
			problem := "shape"
			if got.DType != e.inputs[i].DType {
				problem = "dtype"
			}
			return nil, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: problem,
				Expected: e.inputs[i].String(), Got: got.String()}
		}
		// GoMLX ties a tensor to the first backend instance that used it;
		// a tensor from another backend (or an earlier, closed one) is
		// copied rather than refused.
		if _, err := t.Buffer(e.b.drv.Engine(), 0); err != nil {
			if !strings.Contains(err.Error(), "across different backend instances") {
				return nil, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "value", Expected: "a valid tensor", Got: err.Error()}
			}
			c, cerr := t.LocalClone()
			if cerr != nil {
				return nil, &errs.InputError{Name: fmt.Sprintf("#%d", i), Problem: "value", Expected: "a tensor readable on the host", Got: cerr.Error()}
			}
			t = c
		}
		args[i] = t
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.g == nil {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: e.b.Name(), Op: "run", Err: ErrClosed}
	}
	defer recoverInto(&err, e.b.Name(), fmt.Sprintf("running %q", e.name))
	all := e.g.Run(args...)
	outs = make([]*ir.Tensor, len(e.outPos))
	used := make([]bool, len(all))
	for i, j := range e.outPos {
		outs[i] = all[j]
		used[j] = true
	}
	for j, t := range all {
		if !used[j] {
			t.FinalizeAll()
		}
	}
	return outs, nil
}

// Close releases the compiled program. It is idempotent.
func (e *Executable) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.g != nil {
		safeFinalize(e.g)
		e.g = nil
	}
	return nil
}

// recoverInto turns a panic into an error of kind Internal (or the error it
// carries, when the panic value is a tensorbridge error), naming what was
// being done. It must be deferred directly.
func recoverInto(err *error, backend, op string) {
	r := recover()
	if r == nil {
		return
	}
	if e, ok := r.(error); ok {
		var ue *errs.UnsupportedError
		if errors.As(e, &ue) {
			*err = e
			return
		}
		if u := unsupportedFromPanic(backend, e.Error()); u != nil {
			*err = u
			return
		}
		*err = &errs.Error{Kind: errs.Internal, Backend: backend, Op: op, Err: e}
		return
	}
	msg := fmt.Sprint(r)
	if u := unsupportedFromPanic(backend, msg); u != nil {
		*err = u
		return
	}
	*err = &errs.Error{Kind: errs.Internal, Backend: backend, Op: op,
		Err: fmt.Errorf("panic: %s\n%s", msg, firstFrames(debug.Stack(), 12))}
}

// unsupportedFromPanic recognises GoMLX's "not implemented" failures, which
// it raises as panics while a graph is built, so the user gets an
// UnsupportedError naming the op rather than an internal error.
func unsupportedFromPanic(backend, msg string) error {
	const marker = `sorry, op "`
	if i := strings.Index(msg, marker); i >= 0 {
		rest := msg[i+len(marker):]
		if j := strings.IndexByte(rest, '"'); j > 0 {
			return &errs.UnsupportedError{Backend: backend, What: "op", Name: rest[:j], Detail: firstLine(msg)}
		}
	}
	if strings.Contains(msg, "not implemented") {
		return &errs.UnsupportedError{Backend: backend, What: "op", Name: "(see detail)", Detail: firstLine(msg)}
	}
	return nil
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
