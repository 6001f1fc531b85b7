package llm

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// The soak: many requests (fresh random prompts, mixed lengths, greedy
// and seeded sampling, a share cancelled midway) through one engine, in
// concurrent waves, until soakTokens tokens were generated; host memory
// must stay flat and the device must hold as many buffers at the end as
// after warm-up. It uses only the engine's public API (Load, NewEngine,
// Generate, Close), so it holds whatever the engine does inside.
//
// Measured on this 2-core machine, shared with other jobs (load average
// 15-20), qwen2 fixture, 8 slots, `go test -count=1 -run 'TestSoak$' -v
// ./llm`: 10,000 tokens in 15-23 s on cpu (RSS -0.4 to +0.6 MiB), 6-10 s
// on xla-cpu (+2.3 MiB, live buffers 30 -> 30); 100,000 tokens
// (TENSORBRIDGE_SOAK_TOKENS=100000) in 168 s on cpu (+0.61 MiB) and
// 40 s on xla-cpu (+2.87 MiB, live buffers 30 -> 30); bound 4.88 MiB.

// soakDefaultTokens is the default soak length. The 100,000-token
// soak took 168 s on cpu here, over the ~90 s a CI test may take, so CI
// runs 10,000 by default and the full soak is opt-in
// (TENSORBRIDGE_SOAK_TOKENS=100000).
const soakDefaultTokens = 10000

// soakTokens is the soak's length: TENSORBRIDGE_SOAK_TOKENS, else
// soakDefaultTokens; -short runs 2,000.
func soakTokens(t *testing.T) int {
	if v := os.Getenv("TENSORBRIDGE_SOAK_TOKENS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			t.Fatalf("TENSORBRIDGE_SOAK_TOKENS=%q: want an integer >= 1000", v)
		}
		return n
	}
	if testing.Short() {
		return 2000
	}
	return soakDefaultTokens
}

// rssBytes is this process's resident set (VmRSS in /proc/self/status),
// after a collection that returns freed memory to the OS; 0 where /proc
// has no such figure.
func rssBytes(t *testing.T) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	return 0
}

// soakLeak is the test-only hook that proves the guard: when set, every
// request leaks its own size in host memory and, on a backend, one device
// buffer. It is reached only through EngineOptions.NewDetokenizer, which
// the engine calls once per request.
type soakLeak struct {
	b          *tensorbridge.Backend
	perReq     int
	mu         sync.Mutex
	hostHeld   [][]byte
	deviceHeld []*ir.Tensor
}

func (l *soakLeak) newDetokenizer() Detokenizer {
	buf := make([]byte, l.perReq)
	for i := range buf {
		buf[i] = byte(i) // touched: resident
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hostHeld = append(l.hostHeld, buf)
	if h, err := float32Tensor([]int{4}, []float32{1, 2, 3, 4}); err == nil {
		if d, err := ir.ToDevice(h, l.b.Engine(), 0); err == nil {
			l.deviceHeld = append(l.deviceHeld, d)
		}
		_ = h.FinalizeAll()
	}
	return nopDetok{}
}

func (l *soakLeak) release() {
	freeAll(l.deviceHeld)
	l.hostHeld, l.deviceHeld = nil, nil
}

type nopDetok struct{}

func (nopDetok) Add(int) string { return "" }
func (nopDetok) Flush() string  { return "" }

// soakStreams are the concurrent requests of a wave: twice the engine's
// 8 slots, so half wait in its queue.
const soakStreams = 16

// soakResult is what a soak measured.
type soakResult struct {
	tokens, requests, cancelled int
	rss0, rss1                  int64 // after warm-up, at the end
	live0, live1                int
	counts                      bool
	bound                       int64
	perReq                      int64
	curve                       []string // RSS growth (MiB) after each tenth of the tokens
}

// check is the soak's guard: host memory grew by no more than the bound
// and the device holds the buffers it held after warm-up.
func (r soakResult) check() error {
	var problems []string
	if r.rss0 > 0 && r.rss1-r.rss0 > r.bound {
		problems = append(problems, fmt.Sprintf("resident memory grew %.2f MiB over %d requests (%.1f KiB each), bound %.2f MiB",
			float64(r.rss1-r.rss0)/(1<<20), r.requests, float64(r.rss1-r.rss0)/float64(r.requests)/1024, float64(r.bound)/(1<<20)))
	}
	if r.counts && r.live1 != r.live0 {
		problems = append(problems, fmt.Sprintf("live device buffers: %d after warm-up, %d at the end", r.live0, r.live1))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// runSoak generates total tokens on the qwen2 fixture; leak, when set,
// leaks a request's size per request (the guard's proof).
func runSoak(t *testing.T, total int, leak bool) soakResult {
	dir := filepath.Join(fixtureDir(t), "qwen2")
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, dir, LoadOptions{MaxContext: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const slots, maxPrompt, maxNew = 8, 48, 64
	// A request's own size: its share of the KV cache (a slot of the
	// context) and its token stream's buffer (Generate sizes it to hold
	// every event).
	c := m.Config
	perReq := int64(2*c.Layers*c.KVHeads*c.HeadDim*m.DType().Size()*m.MaxContext()) + int64(maxNew+2)*int64(unsafe.Sizeof(Token{}))
	lk := &soakLeak{b: b, perReq: int(perReq)}
	defer lk.release()
	o := EngineOptions{MaxSequences: slots, MinPrefill: 16, MaxQueue: 64}
	if leak {
		o.NewDetokenizer = lk.newDetokenizer
	}
	e, err := NewEngine(ctx, m, o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	rng := rand.New(rand.NewPCG(20, 26))
	var res soakResult
	res.perReq = perReq
	var generated atomic.Int64
	wave := func() {
		var wg sync.WaitGroup
		for i := range soakStreams {
			p := make([]int, 1+rng.IntN(maxPrompt))
			for j := range p {
				p[j] = 3 + rng.IntN(c.Vocab-3)
			}
			r := Request{Prompt: p, MaxTokens: 1 + rng.IntN(maxNew), IgnoreEOS: i%4 != 0}
			if i%2 == 1 {
				r.Sampling = SamplingParams{Temperature: 0.9, TopK: 40, TopP: 0.95, Seed: rng.Uint32()}
			}
			cancelAt := -1
			if i%8 == 3 {
				cancelAt = 1 + rng.IntN(r.MaxTokens)
			}
			rctx, cancel := context.WithCancel(ctx)
			ch, err := e.Generate(rctx, r)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			res.requests++
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer cancel()
				n := 0
				for tk := range ch {
					if tk.ID >= 0 {
						n++
						if n == cancelAt {
							cancel()
						}
					}
					if tk.Finish == "error" {
						t.Errorf("stream ended with %v", tk.Err)
					}
				}
				generated.Add(int64(n))
			}()
		}
		wg.Wait()
	}
	// Warm-up: the first half of the tokens, so the allocators (Go's
	// and, on xla-cpu, the C++ runtime's), the Go runtime and the backend
	// reach their steady state before the baseline; the second half is
	// measured. On xla-cpu, with the baseline at 30,000 of 100,000 tokens,
	// RSS rose 5.6 MiB by 50,000 and then 0.5 MiB more by 90,000 (the Go
	// heap flat, the device's live buffers 30 -> 30): a settling native
	// heap, which a baseline at 50,000 leaves out, not a leak, which
	// would grow with the requests.
	for generated.Load() < int64(total/2) {
		wave()
	}
	res.rss0 = rssBytes(t)
	res.live0, _, res.counts = b.LiveBuffers()
	req0 := res.requests
	next := generated.Load() + int64(total/10)
	for generated.Load() < int64(total) && !t.Failed() {
		wave()
		if g := generated.Load(); g >= next {
			// The curve, for telling a leak (steady growth) from an
			// allocator settling (growth that stops).
			rss := rssBytes(t)
			res.curve = append(res.curve, fmt.Sprintf("%dk:%+.2f", g/1000, float64(rss-res.rss0)/(1<<20)))
			next += int64(total / 10)
		}
	}
	res.rss1 = rssBytes(t)
	res.live1, _, _ = b.LiveBuffers()
	res.tokens = int(generated.Load())
	res.requests -= req0
	// Flat: the growth over the measured requests stays under what three
	// waves of requests own at once plus three copies of the KV cache (a
	// step's input cache, its output and one the allocator keeps for
	// reuse: each step writes a new cache); memory held in flight or by
	// an allocator, past which growth is a leak. Over the default soak's
	// 160 measured requests that catches a leak of half of each request's
	// size, over the full soak's 1,600 a twentieth.
	_, _, cacheBytes := e.Capacity()
	res.bound = 3*soakStreams*perReq + 3*cacheBytes
	return res
}

// TestSoak generates soakTokens tokens (10,000 by default, the issue's
// 100,000 with TENSORBRIDGE_SOAK_TOKENS=100000) in waves of 16 concurrent
// streams on 8 slots: resident memory after the warm-up half and at the
// end differ by less than three waves' worth of requests' sizes, and
// the device's live buffers (counted on xla-cpu; the cpu backend cannot
// count them) are back to their count after warm-up.
//
// Injected fault: TestSoakGuard runs the same soak with the soakLeak hook
// (each request leaks its own size on the host and one device buffer),
// and its check must fail.
func TestSoak(t *testing.T) {
	total := soakTokens(t)
	r := runSoak(t, total, false)
	t.Logf("%d tokens in %d measured requests; RSS %.2f -> %.2f MiB (%+.2f MiB, bound %.2f MiB: 3 waves of %d requests of %.1f KiB and 3 KV caches); live buffers %d -> %d (counted: %v)",
		r.tokens, r.requests, float64(r.rss0)/(1<<20), float64(r.rss1)/(1<<20), float64(r.rss1-r.rss0)/(1<<20), float64(r.bound)/(1<<20), soakStreams, float64(r.perReq)/1024, r.live0, r.live1, r.counts)
	t.Logf("RSS growth by tokens (MiB): %s", strings.Join(r.curve, " "))
	if r.tokens < total {
		t.Fatalf("generated %d tokens, want %d", r.tokens, total)
	}
	if err := r.check(); err != nil {
		t.Error(err)
	}
}

// TestSoakGuard proves TestSoak's guard: a soak whose every request
// leaks its own size (host) and a device buffer fails the check.
func TestSoakGuard(t *testing.T) {
	r := runSoak(t, 8000, true)
	t.Logf("leaking: RSS %+.2f MiB over %d requests, bound %.2f MiB; live buffers %d -> %d (counted: %v)",
		float64(r.rss1-r.rss0)/(1<<20), r.requests, float64(r.bound)/(1<<20), r.live0, r.live1, r.counts)
	if r.rss0 == 0 {
		t.Skip("no VmRSS in /proc/self/status: the host guard cannot run here")
	}
	if err := r.check(); err == nil {
		t.Errorf("the injected leak passed the soak's check")
	}
}
