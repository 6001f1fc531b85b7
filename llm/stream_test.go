package llm

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestGenerateAllocatesByMaxTokens: a request's stream is sized by its
// max_tokens, at most streamCap, not by the context. At a 131,072-token
// context a channel sized by the context takes 131,074 × 64 bytes (8 MiB)
// per request, 670 MB for 80; here each Generate, whatever max_tokens
// says (0: up to the context), allocates under 64 KiB, measured by the
// heap's byte counter over 80 requests. No model runs: the engine only
// queues the requests. (Fault injected: the channel sized max+2 as
// before; the "max_tokens unset" case allocates 8 MiB per request.)
func TestGenerateAllocatesByMaxTokens(t *testing.T) {
	const context128k, requests = 131072, 80
	if tok := unsafe.Sizeof(Token{}); tok != 64 {
		t.Logf("a Token is %d bytes here", tok)
	}
	for _, tc := range []struct {
		name      string
		maxTokens int
		chanCap   int
	}{
		{"max_tokens 16", 16, 17},
		{"max_tokens unset (up to the context)", 0, streamCap + 1},
		{"max_tokens 100000", 100000, streamCap + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{
				m:         &Model{Config: &Config{Vocab: 100, EOS: []int{1}}, maxContext: context128k},
				pBuckets:  []int{context128k},
				queue:     make(chan *seq, requests),
				closing:   make(chan struct{}),
				streamCap: streamCap,
			}
			prompt := []int{5, 6, 7}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			chans := make([]<-chan Token, 0, requests)
			for range requests {
				ch, err := e.Generate(context.Background(), Request{Prompt: prompt, MaxTokens: tc.maxTokens})
				if err != nil {
					t.Fatal(err)
				}
				chans = append(chans, ch)
			}
			runtime.ReadMemStats(&after)
			perRequest := (after.TotalAlloc - before.TotalAlloc) / requests
			t.Logf("%d bytes allocated per request", perRequest)
			if perRequest > 64<<10 {
				t.Errorf("%d bytes allocated per request at a %d-token context, want under 64 KiB", perRequest, context128k)
			}
			if c := cap(chans[0]); c != tc.chanCap {
				t.Errorf("stream channel holds %d events, want %d", c, tc.chanCap)
			}
		})
	}
}

// readAll reads a stream to its end, waiting pause before each receive.
func readAll(t *testing.T, ch <-chan Token, pause time.Duration) (ids []int, last Token) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		time.Sleep(pause)
		select {
		case tk, ok := <-ch:
			if !ok {
				return ids, last
			}
			if tk.ID >= 0 {
				ids = append(ids, tk.ID)
			}
			if tk.Finish != "" {
				last = tk
			}
		case <-timeout:
			t.Fatalf("stream not closed after a minute (%d tokens read)", len(ids))
		}
	}
}

// waitGoroutines waits until at most n goroutines run.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, want at most %d: a stream's forwarder is stuck", runtime.NumGoroutine(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStreamBacklog drives a stream as the engine does (send never
// blocks) against readers of every kind, with a channel of 3 tokens:
// a reader that starts after 1,000 tokens were produced, and one that
// takes each with a pause, get every token in order and the last event,
// then a closed channel; a reader that cancels, then reads, gets a
// prefix of the tokens, a last event and a closed channel; a reader that
// cancels and never reads leaves no goroutine behind. (Faults injected:
// send dropping tokens when the channel is full; a blocking send in place
// of the backlog; tokens allowed into the last event's slot. The first
// fails on lost tokens, the second on the 1,000 sends not returning, the
// third on 100 forwarders stuck on readers that left.)
func TestStreamBacklog(t *testing.T) {
	const n = 1000
	g0 := runtime.NumGoroutine()
	produce := func(s *stream, count int, last Token) {
		done := make(chan struct{})
		go func() {
			for i := range count {
				s.send(Token{ID: i})
			}
			s.end(last)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the producer blocked on a reader that does not read")
		}
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	for _, pause := range []time.Duration{0, 20 * time.Microsecond} {
		s := newStream(context.Background(), 3)
		produce(s, n, Token{ID: -1, Finish: "length"})
		ids, last := readAll(t, s.ch, pause)
		if !slices.Equal(ids, want) || last.Finish != "length" {
			t.Errorf("pause %v: %d tokens (in order: %v), last %+v; want 0..%d and \"length\"", pause, len(ids), slices.Equal(ids, want), last, n-1)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	s := newStream(ctx, 3)
	produce(s, 10, Token{ID: -1, Finish: "length"})
	cancel()
	ids, last := readAll(t, s.ch, 0)
	if last.Finish == "" || !slices.Equal(ids, want[:len(ids)]) {
		t.Errorf("cancelled, then read: tokens %v, last %+v; want a prefix and a last event", ids, last)
	}

	for range 50 { // cancelled and never read
		ctx, cancel := context.WithCancel(context.Background())
		s := newStream(ctx, 3)
		produce(s, 20, Token{ID: -1, Finish: "length"})
		cancel()
	}
	for range 50 { // cancelled before the end, never read
		ctx, cancel := context.WithCancel(context.Background())
		s := newStream(ctx, 3)
		for i := range 20 {
			s.send(Token{ID: i})
		}
		cancel()
		s.end(Token{ID: -1, Finish: "cancelled", Err: ctx.Err()})
	}
	waitGoroutines(t, g0)
}

// TestSlowReaderDoesNotStallOthers: on an engine whose streams hold 2
// events, a reader that reads nothing until another sequence has
// finished does not hold that sequence back (the engine never waits for
// a reader), and then gets every token it would get alone, in order. A
// third stream, cancelled and never read, and an engine closed under an
// unread stream leave nothing blocked. (Fault injected: emit sending on
// the channel with a blocking send: the fast stream never finishes.)
func TestSlowReaderDoesNotStallOthers(t *testing.T) {
	dir := filepath.Join(fixtureDir(t), "qwen2")
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, dir, LoadOptions{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 4, MinPrefill: 16, MinDecodeContext: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, e, 30*time.Second)
	e.streamCap = 1 // channels of 2 events
	slowReq := Request{Prompt: []int{40, 41, 42, 43}, MaxTokens: 40, IgnoreEOS: true}
	fastReq := Request{Prompt: []int{50, 51}, MaxTokens: 40, IgnoreEOS: true}
	alone := func(r Request) []int {
		ch, err := e.Generate(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		ids, last := readAll(t, ch, 0)
		if last.Finish != "length" || len(ids) != r.MaxTokens {
			t.Fatalf("alone: %d tokens, last %+v", len(ids), last)
		}
		return ids
	}
	slowAlone, fastAlone := alone(slowReq), alone(fastReq)

	cctx, cancel := context.WithCancel(ctx)
	never, err := e.Generate(cctx, Request{Prompt: []int{60}, MaxTokens: 40, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := e.Generate(ctx, slowReq)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := e.Generate(ctx, fastReq)
	if err != nil {
		t.Fatal(err)
	}
	fastIDs, fastLast := readAll(t, fast, 0) // fails after a minute if the engine waits for slow
	cancel()
	slowIDs, slowLast := readAll(t, slow, time.Millisecond)
	if !slices.Equal(fastIDs, fastAlone) || fastLast.Finish != "length" {
		t.Errorf("fast stream: %v (%s), alone %v", fastIDs, fastLast.Finish, fastAlone)
	}
	if !slices.Equal(slowIDs, slowAlone) || slowLast.Finish != "length" {
		t.Errorf("slow stream: %v (%s), alone %v", slowIDs, slowLast.Finish, slowAlone)
	}
	_ = never // cancelled, never read

	unread, err := e.Generate(ctx, Request{Prompt: []int{70}, MaxTokens: 40, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	closeWithin(t, e, 30*time.Second)
	ids, last := readAll(t, unread, 0)
	if last.Finish == "" || !errors.Is(last.Err, ErrEngineClosed) && last.Finish != "length" {
		t.Errorf("stream read after Close: %d tokens, last %+v", len(ids), last)
	}
}

// closeWithin closes e, failing the test if Close takes longer than d
// (an engine blocked on a reader never returns from it).
func closeWithin(t *testing.T, e *Engine, d time.Duration) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(d):
		t.Errorf("Close blocked for %v", d)
	}
}
