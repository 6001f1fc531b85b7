package tensorbridge_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/cpu"
	"github.com/tensorbridge/tensorbridge/ir"
)

// mlpInput returns a fresh [rows, 64] float32 input for testdata's mlp whose
// values depend on seed, so that no two calls share a tensor or its values.
func mlpInput(t testing.TB, rows, seed int) *ir.Tensor {
	t.Helper()
	flat := make([]float32, rows*64)
	for i := range flat {
		flat[i] = float32((i*7+seed*13)%97)/97 - 0.5
	}
	x, err := ir.TensorFromFlat(flat, rows, 64)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func flatF32(t testing.TB, x *ir.Tensor) []float32 {
	t.Helper()
	raw, err := ir.TensorBytes(x)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
	}
	return out
}

func rssMiB() float64 {
	debug.FreeOSMemory()
	r, _ := cpu.ResidentBytes()
	return float64(r) / (1 << 20)
}

// Model.Run with a fresh 1 MiB input every call, outputs dropped, must leave
// no device buffer behind: the live PJRT buffer count returns to its
// baseline after every run (not merely after a garbage collection: nothing
// relies on the safety net), and resident memory stays flat. Before buffer
// ownership, each run kept its input's device copy and its outputs alive
// (+2 MiB a call on xla-cpu).
func TestRunLeavesNoDeviceBuffers(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	m, err := b.LoadModel(ctx, modelPath("mlp"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const rows = 4096 // 4096 x 64 float32 = 1 MiB
	runs := 2000
	_, _, counts := b.LiveBuffers()
	if !counts {
		runs = 100 // pure-Go buffers are Go memory; resident memory is the measure
	}
	if testing.Short() {
		runs = 100
	}
	run := func(i int) {
		out, err := m.Run(ctx, map[string]*ir.Tensor{"x": mlpInput(t, rows, i)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out) == 0 {
			t.Fatal("no outputs")
		}
	}
	for i := 0; i < 20; i++ { // compile, warm the allocators
		run(i)
	}
	baseLive, _, _ := b.LiveBuffers()
	before := rssMiB()
	var half float64
	for i := 0; i < runs; i++ {
		if i == runs/2 {
			half = rssMiB()
		}
		run(1000 + i)
		if counts {
			if live, _, _ := b.LiveBuffers(); live != baseLive {
				t.Fatalf("run %d: %d live device buffers, baseline %d", i, live, baseLive)
			}
		}
	}
	after := rssMiB()
	_, lost, _ := b.LiveBuffers()
	t.Logf("%s: %d runs of a fresh 1 MiB input: resident %.1f -> %.1f (half-way) -> %.1f MiB: %+.1f MiB over the first half, %+.1f over the second; live buffers %d (baseline), lost %d",
		b.Name(), runs, before, half, after, half-before, after-half, baseLive, lost)
	if lost != 0 {
		t.Errorf("%d buffers were freed by the safety net, not by their owner", lost)
	}
	// Allocators settle in the first half; the second must be flat (a leak
	// of the input's device copy alone would be +1 MiB a run).
	if after-before > 64 || after-half > 16 {
		t.Errorf("resident memory grew %.1f MiB over %d runs (%.1f in the second half)", after-before, runs, after-half)
	}
}

// Eight goroutines running one Model fifty times each get exactly what
// serial runs of the same inputs get.
func TestConcurrentRunsEqualSerial(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	m, err := b.LoadModel(ctx, modelPath("mlp"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const workers, each = 8, 50
	want := make([][]float32, workers*each)
	for k := range want {
		out, err := m.Run(ctx, map[string]*ir.Tensor{"x": mlpInput(t, 1+k%3, k)})
		if err != nil {
			t.Fatal(err)
		}
		want[k] = flatF32(t, out["log_probs"])
	}
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				k := w*each + i
				out, err := m.Run(ctx, map[string]*ir.Tensor{"x": mlpInput(t, 1+k%3, k)})
				if err != nil {
					errc <- err
					return
				}
				got := flatF32(t, out["log_probs"])
				if fmt.Sprint(got) != fmt.Sprint(want[k]) {
					errc <- fmt.Errorf("run %d: concurrent result differs from the serial one", k)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// A compile cut off by its caller's deadline, then Close: Close must
// return at once, with the compile still in flight and the backend's
// driver (the plugin's client) still open under it, and the driver must be
// closed when the compile ends. The compile is made slow deterministically:
// its graph function blocks until the test lets it go (a 400-op graph took
// XLA over 9 minutes to compile, and Close waited for all of it). It runs
// in a child process, which must exit 0 (a use-after-free in the plugin
// would crash it). Fault injected: with Close waiting for work in flight
// again, the child's watchdog reported "Close waited" and it exited 4.
func TestCompileCutOffThenClose(t *testing.T) {
	if os.Getenv("TB_CHILD_COMPILE_CUTOFF") == "1" {
		compileCutOffThenClose()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCompileCutOffThenClose$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TB_CHILD_COMPILE_CUTOFF=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "closed after cut-off") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child: %s", lastLine(string(out), "closed after cut-off"))
}

func compileCutOffThenClose() {
	fail := func(code int, format string, a ...any) {
		fmt.Printf(format+"\n", a...)
		os.Exit(code)
	}
	b, err := tensorbridge.Open(context.Background(), testBackend())
	if err != nil {
		fail(2, "open: %v", err)
	}
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = b.Compile(ctx, "blocked", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		<-release // a compile that outlives its deadline, for as long as the test wants
		x := in[0]
		for i := 0; i < 40; i++ {
			x = graph.Tanh(graph.Add(graph.MatMul(x, in[0]), graph.Const(g, float32(i))))
		}
		return []*ir.Node{x}, nil
	}, ir.MakeShape(ir.Float32, 64, 64))
	if !errors.Is(err, tensorbridge.ErrCompileTimeout) {
		fail(3, "compile was not cut off: %v", err)
	}
	// Not a timing assertion: the compile cannot end before release is
	// closed, so a Close that waited for it would never return; the
	// watchdog turns that hang into a message.
	watchdog := time.AfterFunc(2*time.Minute, func() { fail(4, "Close waited for the abandoned compile") })
	if err := b.Close(); err != nil {
		fail(5, "close: %v", err)
	}
	watchdog.Stop()
	if n := tensorbridge.InFlight(b); n == 0 {
		fail(6, "after Close, nothing in flight; want the blocked compile")
	}
	if tensorbridge.DriverClosed(b) {
		fail(7, "Close closed the driver under the compile in flight")
	}
	close(release)
	for wait := 0; !tensorbridge.DriverClosed(b); wait++ {
		if wait == 60000 {
			fail(8, "the compile ended 10 minutes ago or never; the driver is still open")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := tensorbridge.InFlight(b); n != 0 || !b.Engine().IsFinalized() {
		fail(9, "driver closed with %d in flight, engine finalized: %v", n, b.Engine().IsFinalized())
	}
	fmt.Println("closed after cut-off: Close returned with the compile in flight; the driver closed when it ended")
}

func lastLine(s, having string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, having) {
			return l
		}
	}
	return ""
}

// A caller whose compile timeout passes gets a *CompileTimeoutError, but the
// compile keeps its cache slot: retries join it instead of starting another,
// and once it ends its result serves them. Exactly one compile happens.
func TestModelCompileTimeoutKeepsSlot(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, testBackend(), tensorbridge.WithSettings(tensorbridge.Settings{CompileTimeout: time.Microsecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := b.LoadModel(ctx, modelPath("bert_tiny"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ids, mask := readNPY(t, "testdata/models/bert_tiny.input_0.npy"), readNPY(t, "testdata/models/bert_tiny.input_1.npy")
	in := map[string]*ir.Tensor{"input_ids": ids, "attention_mask": mask}
	var timeouts int
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := m.Run(ctx, in)
		if err == nil {
			break
		}
		if !errors.Is(err, tensorbridge.ErrCompileTimeout) {
			t.Fatalf("run: %v, want a compile timeout or success", err)
		}
		timeouts++
		if time.Now().After(deadline) {
			t.Fatal("the compile never finished")
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := m.CompileStats()
	t.Logf("%d calls timed out while one compile ran; stats %+v", timeouts, st)
	if timeouts == 0 {
		t.Skip("the compile beat a 1 µs timeout")
	}
	if st.Misses != 1 {
		t.Fatalf("%d compiles started, want 1 (retries must join the compile in progress)", st.Misses)
	}
}

// Options compose in the order given: a later WithSettings keeps an earlier
// option's value for every field it does not set.
func TestOptionsComposeInOrder(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []tensorbridge.Option
		want float64
	}{
		{"fraction then settings", []tensorbridge.Option{tensorbridge.WithMemoryFraction(0.5), tensorbridge.WithSettings(tensorbridge.Settings{Precision: "float32"})}, 0.5},
		{"settings then fraction", []tensorbridge.Option{tensorbridge.WithSettings(tensorbridge.Settings{MemoryFraction: 0.3}), tensorbridge.WithMemoryFraction(0.6)}, 0.6},
		{"fraction then settings with a fraction", []tensorbridge.Option{tensorbridge.WithMemoryFraction(0.6), tensorbridge.WithSettings(tensorbridge.Settings{MemoryFraction: 0.3})}, 0.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tensorbridge.Open(ctx, "cpu", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if got := b.Settings().MemoryFraction; got != tc.want {
				t.Fatalf("memory fraction %v, want %v", got, tc.want)
			}
		})
	}
}

// With neither HOME nor XDG_CACHE_HOME, every backend still opens: there is
// just no disk cache, and the settings say why.
func TestOpenWithoutHome(t *testing.T) {
	t.Setenv("HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("TENSORBRIDGE_CACHE_DIR", "")
	os.Unsetenv("HOME")
	os.Unsetenv("XDG_CACHE_HOME")
	os.Unsetenv("TENSORBRIDGE_CACHE_DIR")
	b, err := tensorbridge.Open(context.Background(), "cpu")
	if err != nil {
		t.Fatalf("open without HOME: %v", err)
	}
	defer b.Close()
	s := b.Settings()
	if s.CacheDir != "" {
		t.Fatalf("cache dir %q, want none", s.CacheDir)
	}
	found := false
	for _, st := range s.Settings {
		if st.Name == "cache_dir" && strings.Contains(st.Source, "no user cache directory") {
			found = true
		}
	}
	if !found {
		t.Fatalf("settings do not say why the cache is off:\n%s", s)
	}
}

// Close while eight goroutines are running a model: every run either
// finishes with the right answer or fails with ErrClosed; Close returns
// only after the runs in flight ended, and nothing crashes.
func TestCloseDuringRuns(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, testBackend())
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.LoadModel(ctx, modelPath("mlp"))
	if err != nil {
		t.Fatal(err)
	}
	x := mlpInput(t, 2, 7)
	ref, err := m.Run(ctx, map[string]*ir.Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint(flatF32(t, ref["log_probs"]))
	var wg sync.WaitGroup
	var ok, closed atomic.Int64
	start := make(chan struct{})
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				out, err := m.Run(ctx, map[string]*ir.Tensor{"x": mlpInput(t, 2, 7)})
				if errors.Is(err, tensorbridge.ErrClosed) {
					closed.Add(1)
					return
				}
				if err != nil {
					t.Errorf("run: %v (want a result or ErrClosed)", err)
					return
				}
				if got := fmt.Sprint(flatF32(t, out["log_probs"])); got != want {
					t.Error("a run racing Close returned a wrong result")
					return
				}
				ok.Add(1)
			}
		}()
	}
	close(start)
	time.Sleep(50 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	wg.Wait()
	_ = m.Close() // after the backend: must not crash
	t.Logf("%d runs finished, %d refused after Close", ok.Load(), closed.Load())
	if closed.Load() != 8 {
		t.Fatalf("%d goroutines saw ErrClosed, want 8", closed.Load())
	}
}
