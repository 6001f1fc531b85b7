package llm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tensorbridge/tensorbridge"
)

// Cold start: ready after the smallest buckets (issue 25).
//
// The plain programs, those warm-up compiles (one prefill per prompt
// bucket, one decode per batch and context bucket, without penalties,
// mask or logprobs), live in a progTable. Without
// EngineOptions.BackgroundCompile NewEngine compiles and runs them all
// before it returns. With it, NewEngine compiles only what a short request
// needs (coldOrder's first two: the smallest prompt bucket's prefill and
// the decode of batch 1 in the smallest context bucket) and returns; the
// others compile on the engine's own goroutine while it serves, in
// coldOrder, until done or Close.
//
// A decode step whose own context bucket is not compiled yet runs in the
// smallest larger compiled one of its batch bucket: the positions past
// its own bucket are masked, and the answers are those of a fully
// compiled engine: bitwise on cpu, logprobs included; on xla-cpu the ids
// bitwise and, for steps of 2-4 rows, logprobs within 13 ulps (measured;
// a fully compiled engine's logprobs move as much with the batch a request
// shares) (TestColdStart). Only the context
// bucket is padded so: a larger batch or prompt bucket gives the same
// greedy ids but logprobs that differ in their last bits (measured on cpu:
// a batch-1 step run at batch 4, a 17-token prompt at bucket 128; the
// matrix products take other kernels at other row counts), so a step
// whose batch or prompt bucket is not compiled compiles it. A step
// compiles its own program only when no larger one it can run in is
// compiled, or waits for it when the background is compiling it right
// then: one compile per program at a time (progTable.claim). The programs
// with penalties, a mask or logprobs stay compiled on first need, for the
// step's own buckets.

// progKey names a plain program: prefill of prompt bucket p (p > 0), or
// decode of batch and context buckets (p == 0).
type progKey struct {
	p, batch, context int
}

func prefillProg(p int) progKey   { return progKey{p: p} }
func decodeProg(b, c int) progKey { return progKey{batch: b, context: c} }
func (k progKey) isPrefill() bool { return k.p > 0 }
func (k progKey) String() string {
	if k.isPrefill() {
		return fmt.Sprintf("prefill-%d", k.p)
	}
	return fmt.Sprintf("decode-%dx%d", k.batch, k.context)
}

// progEntry is one plain program: done is closed when its compile ended,
// with exe or err set.
type progEntry struct {
	done chan struct{}
	exe  *tensorbridge.Executable
	err  error
}

// progTable holds the plain programs, shared by the engine's loop and its
// background compiler; the mutex guards the map and each entry's fields
// until done is closed.
type progTable struct {
	mu      sync.Mutex
	entries map[progKey]*progEntry
	all     []progKey // every plain program, in coldOrder
	start   time.Time

	// Counters the tests read: compiles a step made or waited for
	// (onPath, their keys in pathKeys) and steps run in a larger bucket
	// than their own (routed).
	onPath   atomic.Int64
	routed   atomic.Int64
	pathKeys []progKey
}

func newProgTable(all []progKey) *progTable {
	return &progTable{entries: map[progKey]*progEntry{}, all: all, start: time.Now()}
}

// claim returns k's entry; owner is true when the caller created it and
// must compile it and call finish.
func (t *progTable) claim(k progKey) (en *progEntry, owner bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if en = t.entries[k]; en != nil {
		return en, false
	}
	en = &progEntry{done: make(chan struct{})}
	t.entries[k] = en
	return en, true
}

// finish records k's compile; a failed one leaves the table, so that a
// later step may try again.
func (t *progTable) finish(k progKey, en *progEntry, exe *tensorbridge.Executable, err error) {
	t.mu.Lock()
	en.exe, en.err = exe, err
	if err != nil {
		delete(t.entries, k)
	}
	t.mu.Unlock()
	close(en.done)
}

// compiled returns the first of cands that is compiled, or nil.
func (t *progTable) compiled(cands []progKey) (progKey, *tensorbridge.Executable) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range cands {
		if en := t.entries[k]; en != nil && en.exe != nil {
			return k, en.exe
		}
	}
	return progKey{}, nil
}

// exe returns k's program if it is compiled.
func (t *progTable) exe(k progKey) *tensorbridge.Executable {
	_, exe := t.compiled([]progKey{k})
	return exe
}

// CompileProgress is how far the engine is in compiling its plain
// programs (coldstart.go): their names, compiled and pending, and the
// time since NewEngine started.
type CompileProgress struct {
	Compiled []string
	Pending  []string
	Elapsed  time.Duration
}

// Progress reports the compiled and pending plain programs.
func (e *Engine) Progress() CompileProgress {
	t := e.progs
	p := CompileProgress{Compiled: []string{}, Pending: []string{}, Elapsed: time.Since(t.start)}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range t.all {
		if en := t.entries[k]; en != nil && en.exe != nil {
			p.Compiled = append(p.Compiled, k.String())
		} else {
			p.Pending = append(p.Pending, k.String())
		}
	}
	return p
}

// coldOrder is the order the plain programs compile in. First what a
// short request needs (the smallest prompt bucket's prefill and the
// decode of batch 1 in the smallest context bucket: compiled before
// ready); then the decode of batch 1 in the largest context bucket, in
// which a lone stream's every step can run; the prefills ascending
// (shorter prompts are the likelier); for each larger batch bucket its
// smallest and largest context buckets; then the other decodes by batch,
// then context.
func coldOrder(pb, db, cb []int) []progKey {
	lo, hi := cb[0], cb[len(cb)-1]
	out := []progKey{prefillProg(pb[0]), decodeProg(db[0], lo), decodeProg(db[0], hi)}
	for _, p := range pb {
		out = append(out, prefillProg(p))
	}
	for _, b := range db {
		out = append(out, decodeProg(b, lo), decodeProg(b, hi))
	}
	for _, b := range db {
		for _, c := range cb {
			out = append(out, decodeProg(b, c))
		}
	}
	var seen = map[progKey]bool{}
	return slices.DeleteFunc(out, func(k progKey) bool {
		dup := seen[k]
		seen[k] = true
		return dup
	})
}

// readyCount is how many of coldOrder's programs NewEngine compiles
// before it returns with EngineOptions.BackgroundCompile.
const readyCount = 2

// ensure returns k's program, compiling it on this goroutine unless
// another is compiling it: then it waits for that compile (or ctx).
func (e *Engine) ensure(ctx context.Context, k progKey, background bool) (*tensorbridge.Executable, error) {
	en, owner := e.progs.claim(k)
	for !owner {
		select {
		case <-en.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// The other compile was cancelled (the background's, by Close)
		// while this caller still needs the program: compile it here.
		if en.err == nil || !errors.Is(en.err, context.Canceled) || ctx.Err() != nil {
			return en.exe, en.err
		}
		en, owner = e.progs.claim(k)
	}
	start := time.Now()
	exe, err := e.compileProg(ctx, k, background)
	e.progs.finish(k, en, exe, err)
	if err == nil {
		e.logCompiled(k, time.Since(start), background)
	}
	return exe, err
}

// compileProg compiles plain program k, after the test hook.
func (e *Engine) compileProg(ctx context.Context, k progKey, background bool) (*tensorbridge.Executable, error) {
	if h := e.opts.beforeCompile; h != nil {
		if err := h(ctx, k, background); err != nil {
			return nil, err
		}
	}
	if k.isPrefill() {
		return e.compilePrefill(ctx, k.p)
	}
	return e.compileDecode(ctx, k.batch, k.context, false)
}

// logCompiled logs one compiled program and how many of all are done.
func (e *Engine) logCompiled(k progKey, took time.Duration, background bool) {
	if e.opts.Logger == nil {
		return
	}
	p := e.Progress()
	e.opts.Logger.Info("compiled program", "program", k.String(), "took", took.Round(time.Millisecond).String(),
		"background", background, "programs_done", len(p.Compiled), "programs", len(e.progs.all))
}

// logSummary logs "compiled k of n programs in T s".
func (e *Engine) logSummary(what string) {
	if e.opts.Logger == nil {
		return
	}
	p := e.Progress()
	e.opts.Logger.Info(fmt.Sprintf("%s: compiled %d of %d programs in %.1f s", what, len(p.Compiled), len(e.progs.all), p.Elapsed.Seconds()),
		"pending", p.Pending)
}

// compileRest compiles the programs not compiled yet, in order, until
// done or ctx ends; a failed one is logged and left to the step that
// needs it.
func (e *Engine) compileRest(ctx context.Context, order []progKey) {
	for _, k := range order {
		if _, err := e.ensure(ctx, k, true); err != nil {
			if ctx.Err() != nil {
				e.logSummary("background compiles stopped")
				return
			}
			if e.opts.Logger != nil {
				e.opts.Logger.Warn("background compile failed; a step that needs it compiles it", "program", k.String(), "error", err.Error())
			}
		}
	}
	e.logSummary("background compiles done")
}

// startBackground runs compileRest on the engine's goroutine, stopped and
// joined by stopBackground (Close).
func (e *Engine) startBackground(order []progKey) {
	ctx, cancel := context.WithCancel(context.Background())
	e.bgCancel = cancel
	e.bgWG.Add(1)
	go func() {
		defer e.bgWG.Done()
		e.compileRest(ctx, order)
	}()
}

func (e *Engine) stopBackground() {
	if e.bgCancel != nil {
		e.bgCancel()
	}
	e.bgWG.Wait()
}

// route returns the program a step of plain key own runs: the first
// compiled of cands (own first, then larger context buckets), else own's,
// compiled now or waited for.
func (e *Engine) route(ctx context.Context, own progKey, cands []progKey) (progKey, *tensorbridge.Executable, error) {
	if k, exe := e.progs.compiled(cands); exe != nil {
		if k != own {
			e.progs.routed.Add(1)
		}
		return k, exe, nil
	}
	e.progs.onPath.Add(1)
	e.progs.mu.Lock()
	e.progs.pathKeys = append(e.progs.pathKeys, own)
	e.progs.mu.Unlock()
	exe, err := e.ensure(ctx, own, false)
	return own, exe, err
}

// routePrefill returns the plain prefill program for prompt bucket p and
// the bucket it runs in: p's own (a larger one would change the logprobs'
// last bits).
func (e *Engine) routePrefill(ctx context.Context, p int) (*tensorbridge.Executable, int, error) {
	k, exe, err := e.route(ctx, prefillProg(p), []progKey{prefillProg(p)})
	return exe, k.p, err
}

// routeDecode returns the plain decode program for batch bucket b and
// context bucket c and the buckets it runs in: b, and c or the smallest
// larger compiled context bucket.
func (e *Engine) routeDecode(ctx context.Context, b, c int) (*tensorbridge.Executable, int, int, error) {
	var cands []progKey
	for _, cc := range e.cBuckets {
		if cc >= c {
			cands = append(cands, decodeProg(b, cc))
		}
	}
	k, exe, err := e.route(ctx, decodeProg(b, c), cands)
	return exe, k.batch, k.context, err
}

// pathSoFar returns the keys steps compiled or waited for (tests).
func (t *progTable) pathSoFar() []progKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.pathKeys)
}

// closeProgs closes every compiled plain program (after stopBackground).
func (t *progTable) closeProgs() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, en := range t.entries {
		if en.exe != nil {
			_ = en.exe.Close()
		}
	}
	clear(t.entries)
}
