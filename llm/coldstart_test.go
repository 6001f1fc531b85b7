package llm

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// coldOpts are the engine options of the cold-start tests: prompt
// buckets 16..128, batch buckets 1, 2, 4, context buckets 16..128 (16
// plain programs); the reference prompts (5 to 17 tokens, 48 generated)
// cross three context buckets.
func coldOpts(background bool, hook func(context.Context, progKey, bool) error) EngineOptions {
	return EngineOptions{MaxSequences: 4, MinPrefill: 16, MinDecodeContext: 16, BackgroundCompile: background, beforeCompile: hook}
}

// hookLog records the plain compiles a hook saw, by key and side.
type hookLog struct {
	mu    sync.Mutex
	calls map[progKey][2]int // [foreground, background]
}

func (h *hookLog) note(k progKey, background bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == nil {
		h.calls = map[progKey][2]int{}
	}
	c := h.calls[k]
	c[boolInt(background)]++
	h.calls[k] = c
}

func (h *hookLog) count(k progKey) [2]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[k]
}

// tokenRun is a generation's ids and the logprobs' bits.
type tokenRun struct {
	ids  []int
	bits []uint32
}

// Modes of genAll: one request after the other, all at once, or one after
// the other as n-choice requests (GenerateN: the n sequences run in each
// decode step together, a batch that does not depend on timing).
const (
	oneByOne = 0
	together = -1
)

// genAll runs reqs in mode (oneByOne, together, or n > 1: n choices each)
// and returns each one's tokens (with n choices, the choices' one after
// the other), failing after 2 minutes rather than hanging on a program
// that never compiles.
func genAll(t *testing.T, e *Engine, reqs []Request, mode int) []tokenRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := make([]tokenRun, len(reqs))
	read := func(i int, ch <-chan Token) {
		for tk := range ch {
			if tk.ID >= 0 {
				out[i].ids = append(out[i].ids, tk.ID)
				out[i].bits = append(out[i].bits, math.Float32bits(tk.Logprob))
			}
			if tk.Err != nil {
				t.Errorf("request %d: %v", i, tk.Err)
			}
		}
	}
	var wg sync.WaitGroup
	for i, r := range reqs {
		chans, err := e.GenerateN(ctx, r, max(mode, 1))
		if err != nil {
			t.Fatal(err)
		}
		if mode != together {
			for _, ch := range chans {
				read(i, ch)
			}
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); read(i, chans[0]) }()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("generation timed out: a step waited for a compile that never came")
	}
	return out
}

// waitCompiled waits until every one of names is compiled.
func waitCompiled(t *testing.T, e *Engine, names ...string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if p := e.Progress(); !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(p.Compiled, n) }) {
			return
		}
	}
	t.Fatalf("%v not compiled after 2 minutes: %+v", names, e.Progress())
}

// TestColdStart: an engine that compiled only its smallest buckets before
// ready answers the reference prompts with transformers' greedy ids, and
// bitwise (ids and logprobs) as a fully compiled engine does, whether its
// steps run in larger compiled buckets (no compile on a request's path)
// or compile the ones they need (exactly those, each once, waiting for
// the background's compile of one rather than compiling it twice); Close
// during background compiles returns at once and leaves no goroutine.
// Injected faults: routing a decode step to a smaller context bucket
// (routeDecode taking cc >= c away) fails the routed case; the
// background compiling without the claim (ensure compiling as owner
// always) fails the once-each count. Routing to a larger batch or prompt
// bucket too keeps the ids but changes logprobs' last bits, which this
// test catches: only the context bucket is routed (coldstart.go).
func TestColdStart(t *testing.T) {
	dir := filepath.Join(fixtureDir(t), "llama")
	ref := readReference(t, dir)
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var reqs []Request
	for _, r := range ref.References {
		reqs = append(reqs, Request{Prompt: r.PromptIDs, MaxTokens: len(r.TokenIDs)})
	}
	warm, err := NewEngine(ctx, m, coldOpts(false, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]tokenRun{}
	for _, mode := range []int{oneByOne, 2, 3, 4} {
		want[mode] = genAll(t, warm, reqs, mode)
	}
	if n := len(warm.Progress().Pending); n != 0 {
		t.Errorf("a fully compiled engine has %d programs pending", n)
	}
	_ = warm.Close()
	for i, r := range ref.References {
		if !slices.Equal(want[oneByOne][i].ids, r.TokenIDs) {
			t.Fatalf("warm engine, prompt %d: %v, transformers %v", i, want[oneByOne][i].ids, r.TokenIDs)
		}
	}
	t.Run("routed", func(t *testing.T) { coldRouted(t, m, ref, reqs, want) })
	t.Run("compiles-needed", func(t *testing.T) { coldNeeded(t, m, reqs, want[oneByOne]) })
	t.Run("close", func(t *testing.T) { coldClose(t, m) })
}

// same reports the runs whose ids are not want's, or whose logprobs
// differ from want's by more than ulps units in the last place (0:
// bitwise).
func same(t *testing.T, got, want []tokenRun, ulps int) {
	t.Helper()
	worst := 0
	for i := range want {
		if !slices.Equal(got[i].ids, want[i].ids) || len(got[i].bits) != len(want[i].bits) {
			t.Errorf("prompt %d: ids %v; fully compiled %v", i, got[i].ids, want[i].ids)
			continue
		}
		for j, g := range got[i].bits {
			worst = max(worst, ulpDiff(g, want[i].bits[j]))
		}
	}
	if worst > ulps {
		t.Errorf("logprobs differ from the fully compiled engine's by up to %d ulps, want at most %d", worst, ulps)
	}
}

// ulpDiff is how many float32 values lie between a and b (of one sign:
// logprobs are never positive).
func ulpDiff(a, b uint32) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

// coldRouted: with only the ready programs, prefill-32 and each batch
// bucket's largest context bucket compiled (the background's other
// compiles failing), every step runs in a compiled bucket: none compiles
// on a request's path. All at once, the batches depend on timing, and so
// do the logprobs' last bits (a fully compiled engine's too): the ids are
// transformers'.
func coldRouted(t *testing.T, m *Model, ref *reference, reqs []Request, want map[int][]tokenRun) {
	cover := []progKey{prefillProg(32), decodeProg(1, 128), decodeProg(2, 128), decodeProg(4, 128)}
	e, err := NewEngine(context.Background(), m, coldOpts(true, func(ctx context.Context, k progKey, bg bool) error {
		if bg && !slices.Contains(cover, k) {
			return errors.New("held by the test")
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if p := e.Progress(); !slices.Equal(p.Compiled, []string{"prefill-16", "decode-1x16"}) || len(p.Pending) != 14 {
		t.Fatalf("at ready: compiled %v, %d pending; want prefill-16, decode-1x16 and 14", p.Compiled, len(p.Pending))
	}
	waitCompiled(t, e, "prefill-32", "decode-1x128", "decode-2x128", "decode-4x128")
	for mode, w := range want {
		same(t, genAll(t, e, reqs, mode), w, routedULPs(m, mode))
	}
	for i, got := range genAll(t, e, reqs, together) {
		if r := ref.References[i]; !slices.Equal(got.ids, r.TokenIDs) {
			t.Errorf("all at once, prompt %d: %v, transformers %v", i, got.ids, r.TokenIDs)
		}
	}
	if n := e.progs.onPath.Load(); n != 0 {
		t.Errorf("%d compiles on a request's path (%v), want 0: larger buckets were compiled", n, e.progs.pathSoFar())
	}
	if e.progs.routed.Load() == 0 {
		t.Error("no step ran in a larger bucket: the test did not exercise routing")
	}
}

// coldNeeded: with the background held, a step compiles exactly the
// programs it needs, once each; a step needing the program the
// background is compiling waits for that compile instead of its own.
func coldNeeded(t *testing.T, m *Model, reqs []Request, want []tokenRun) {
	var log hookLog
	release := make(chan struct{})
	e, err := NewEngine(context.Background(), m, coldOpts(true, func(ctx context.Context, k progKey, bg bool) error {
		log.note(k, bg)
		if bg && k == decodeProg(1, 128) {
			select { // the first background compile: held until released
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if bg {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// Prompt 4 (17 tokens, bucket 32): its prefill-32, then 47 decode
	// steps at positions 17..63: batch 1, context buckets 32 and 64.
	same(t, genAll(t, e, reqs[4:5], oneByOne), want[4:5], 0)
	wantPath := []progKey{prefillProg(32), decodeProg(1, 32), decodeProg(1, 64)}
	if got := e.progs.pathSoFar(); !slices.Equal(got, wantPath) {
		t.Errorf("compiled on the path: %v, want %v", got, wantPath)
	}
	// Prompt 0 again (bucket 16, compiled): nothing more on the path.
	same(t, genAll(t, e, reqs[:1], oneByOne), want[:1], 0)
	if got := e.progs.pathSoFar(); len(got) != len(wantPath) {
		t.Errorf("compiled on the path for a compiled bucket: %v", got[len(wantPath):])
	}
	// A 100-token prompt compiles prefill-128; its decode step at
	// position 100 needs decode-1x128, which the background holds: the
	// step waits for that compile, then it is released.
	long := Request{Prompt: slices.Repeat(reqs[4].Prompt, 6)[:100], MaxTokens: 2}
	done := make(chan []tokenRun, 1)
	go func() { done <- genAll(t, e, []Request{long}, oneByOne) }()
	for deadline := time.Now().Add(time.Minute); e.progs.onPath.Load() < int64(len(wantPath)+2); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the long prompt's decode step did not reach decode-1x128")
		}
	}
	close(release)
	if got := <-done; len(got[0].ids) != 2 {
		t.Errorf("long prompt: %d tokens, want 2", len(got[0].ids))
	}
	wantPath = append(wantPath, prefillProg(128), decodeProg(1, 128))
	if got := e.progs.pathSoFar(); !slices.Equal(got, wantPath) {
		t.Errorf("compiled on the path: %v, want %v", got, wantPath)
	}
	for k, want := range map[progKey][2]int{decodeProg(1, 128): {0, 1}, prefillProg(32): {1, 0}, prefillProg(128): {1, 0}} {
		if got := log.count(k); got != want {
			t.Errorf("%v compiled %v times (foreground, background), want %v", k, got, want)
		}
	}
}

// coldClose: Close while the background compiles (held in the hook until
// its context ends) returns promptly, and the engine's goroutines end.
func coldClose(t *testing.T, m *Model) {
	before := runtime.NumGoroutine()
	started := make(chan struct{}, 1)
	e, err := NewEngine(context.Background(), m, coldOpts(true, func(ctx context.Context, k progKey, bg bool) error {
		if bg {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	closed := make(chan struct{})
	go func() { _ = e.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10 s of a background compile")
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before the engine, %d after Close:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
	}
}

// routedULPs is how far a routed step's logprobs may be from a fully
// compiled engine's: 0 (bitwise) one request at a time, and on cpu. On
// xla-cpu a decode of 2 to 4 rows run in context bucket 128 instead of 16
// gives the same ids and logprobs up to 13 ulps away (measured; XLA
// compiles the attention over 16 positions differently from 128), the
// order by which a fully compiled engine's logprobs already vary with the
// batch a request shares.
func routedULPs(m *Model, mode int) int {
	if mode == oneByOne || m.b.Name() == "cpu" {
		return 0
	}
	return 16
}
