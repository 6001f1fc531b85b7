package capi

import (
	"bufio"
	"context"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// Leak check: compile, upload, execute, download and destroy many times and
// watch the process's resident set size (VmRSS in /proc/self/status). Every
// C object of a cycle (executable, its PJRT_Executable view, input and
// output buffers, events, errors, serialized blobs) must be freed, so after a
// warm-up the RSS must stay flat.
//
// The loop runs only on request (a cycle takes 50–100 ms on a 2-core
// machine, nearly all of it XLA compiling):
//
//	TB_CAPI_LEAK_CYCLES=1000 go test -run TestLeakCycles -v ./internal/capi/
//
// or as a benchmark that reports the RSS growth per cycle (its short warm-up
// leaves the allocators' early growth in the figure; the test's second-half
// figure is the leak verdict):
//
//	go test -run XXX -bench CompileExecuteDestroy -benchtime 1000x ./internal/capi/

// leakBudgetPerCycle is the RSS growth per cycle tolerated after warm-up. A
// leaked 2×2 executable costs tens of KiB per cycle; allocator noise
// averaged over hundreds of cycles is far below this.
const leakBudgetPerCycle = 4 << 10

func rssBytes(t testing.TB) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			fields := strings.Fields(rest) // "12345 kB"
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil || len(fields) != 2 || fields[1] != "kB" {
				t.Fatalf("cannot parse VmRSS line %q", s.Text())
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// settledRSS collects Go garbage and returns freed Go memory to the OS first,
// so that the figure is about C allocations.
func settledRSS(t testing.TB) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	return rssBytes(t)
}

func cycle(t testing.TB, c *Client, dev *Device) {
	ctx := context.Background()
	exe, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{DeviceAssignment: [][]int{{dev.ID()}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exe.Serialize(); err != nil {
		t.Fatal(err)
	}
	if _, err := exe.DeviceAssignment(); err != nil {
		t.Fatal(err)
	}
	bx, err := c.BufferFromHost(ctx, dev, F32, []int64{2, 2}, f32(1, 2, 3, 4), ImmutableUntilTransferCompletes)
	if err != nil {
		t.Fatal(err)
	}
	by, err := c.BufferFromHost(ctx, dev, F32, []int64{2, 2}, f32(5, 6, 7, 8), ImmutableOnlyDuringCall)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exe.Execute(ctx, [][]*Buffer{{bx, by}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := out[0][1].ToHostBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := FromBytes[float32](raw); !reflect.DeepEqual(got, []float32{19, 22, 43, 50}) {
		t.Fatalf("x·y = %v", got)
	}
	// An error path too: a plugin error object is created and must be freed.
	if _, err := c.DeserializeAndLoad(ctx, []byte("junk"), nil); err == nil {
		t.Fatal("junk executable loaded")
	}
	for _, b := range []*Buffer{bx, by, out[0][0], out[0][1]} {
		if err := b.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := exe.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestLeakCycles(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TB_CAPI_LEAK_CYCLES"))
	if n <= 0 {
		t.Skip("set TB_CAPI_LEAK_CYCLES=N to run N compile/execute/destroy cycles and check RSS")
	}
	c := cpu(t)
	dev := devices(t, c)[0]
	const warmup = 50
	for range warmup {
		cycle(t, c, dev)
	}
	// RSS is sampled at each quarter. Allocators (glibc arenas, XLA's
	// per-thread caches) grow for a while before they settle, so the leak
	// verdict uses the second half of the run only.
	samples := []int64{settledRSS(t)}
	for q := 1; q <= 4; q++ {
		for range n / 4 {
			cycle(t, c, dev)
		}
		samples = append(samples, settledRSS(t))
	}
	done := 4 * (n / 4)
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	t.Logf("RSS after %d warm-up cycles: %.2f MiB; after each further quarter of %d cycles: %.2f, %.2f, %.2f, %.2f MiB",
		warmup, mib(samples[0]), n/4, mib(samples[1]), mib(samples[2]), mib(samples[3]), mib(samples[4]))
	total := float64(samples[4]-samples[0]) / float64(done)
	late := float64(samples[4]-samples[2]) / float64(done/2)
	t.Logf("growth: %+.0f bytes/cycle over all %d cycles, %+.0f bytes/cycle over the last %d", total, done, late, done/2)
	if late > leakBudgetPerCycle {
		t.Errorf("RSS grew %.0f bytes per cycle in the second half (budget %d): something is not freed", late, leakBudgetPerCycle)
	}
}

func BenchmarkCompileExecuteDestroy(b *testing.B) {
	c := cpu(b)
	ds, err := c.AddressableDevices()
	if err != nil {
		b.Fatal(err)
	}
	for range 20 {
		cycle(b, c, ds[0])
	}
	before := settledRSS(b)
	b.ResetTimer()
	for b.Loop() {
		cycle(b, c, ds[0])
	}
	b.StopTimer()
	after := settledRSS(b)
	b.ReportMetric(float64(after-before)/float64(b.N), "rss-bytes/op")
}
