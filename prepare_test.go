package tensorbridge_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/cpu"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/precision"
)

func modelPath(name string) string { return filepath.Join("testdata", "models", name+".onnx") }

// rows returns rows [0, n) of a [batch, k] float32 tensor.
func rows(t *testing.T, x *ir.Tensor, n int) *ir.Tensor {
	d := x.Shape().Dimensions
	flat := tensors.MustCopyFlatData[float32](x)
	return tensors.FromFlatDataAndDimensions(flat[:n*d[1]], n, d[1])
}

// Batches 3 and 4 share the bucket 4: one compile; the padding is sliced
// off, and each row still matches PyTorch's output for that row.
func TestBucketsShareACompile(t *testing.T) {
	ctx := context.Background()
	b := openTest(t)
	m, err := b.LoadModel(ctx, modelPath("mlp"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x := readNPY(t, filepath.Join("testdata", "models", "mlp.b.input_0.npy"))    // [5, 64]
	ref := readNPY(t, filepath.Join("testdata", "models", "mlp.b.output_0.npy")) // [5, 10]
	for _, n := range []int{3, 4} {
		out, err := m.Run(ctx, map[string]*ir.Tensor{"x": rows(t, x, n)})
		if err != nil {
			t.Fatal(err)
		}
		// Measured up to 5.3e-8 on cpu, 3.8e-8 on xla-cpu (2026-11-26); the
		// bound is 9 times the larger (was 1e-5).
		if e := relL2(t, out["log_probs"], rows(t, ref, n)); e > 5e-7 {
			t.Fatalf("batch %d: relative L2 %.3g", n, e)
		}
	}
	if m.Compiled() != 1 {
		t.Fatalf("%d specialisations compiled, want 1 (batches 3 and 4 share bucket 4)", m.Compiled())
	}
}

func TestBucketPlans(t *testing.T) {
	ctx := context.Background()
	b := openCPU(t)
	// Each padded dimension says why and what the padding holds.
	tests := []struct{ model, want string }{
		{"mlp", "batch: padded (rows along it are independent"},
		{"tiny_resnet", "batch: padded (rows along it are independent"},
		// sequence is padded because attention_mask masks the padding out
		{"bert_tiny", "fill: copy of the last real row); sequence: padded (positions along it are independent"},
	}
	for _, tc := range tests {
		m, err := b.LoadModel(ctx, modelPath(tc.model))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Buckets(); !strings.Contains(got, tc.want) {
			t.Errorf("%s: buckets %q, want it to contain %q", tc.model, got, tc.want)
		}
		m.Close()
	}
	m, err := b.LoadModel(ctx, modelPath("mlp"), tensorbridge.WithExactShapes())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Buckets(); !strings.HasPrefix(got, "off") {
		t.Errorf("WithExactShapes: %q", got)
	}
}

func TestWarmup(t *testing.T) {
	ctx := context.Background()
	b := openTest(t)
	m, err := b.LoadModel(ctx, modelPath("bert_tiny"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var calls int
	n, err := m.Warmup(ctx, []map[string]int{
		{"batch": 1, "sequence": 16},
		{"batch": 1, "sequence": 9}, // bucket 16: already compiled
		{"batch": 3, "sequence": 16},
	}, func(done, total int, dims map[string]int, took time.Duration, err error) {
		calls++
		if done != calls || total != 3 || err != nil {
			t.Errorf("progress(%d, %d, %v, %v)", done, total, dims, err)
		}
	})
	if err != nil || n != 2 || calls != 3 || m.Compiled() != 2 {
		t.Fatalf("Warmup = %d, %v (calls %d, compiled %d); want 2 compiled", n, err, calls, m.Compiled())
	}
	_, err = m.Warmup(ctx, []map[string]int{{"batch": 1}}, nil)
	var ie *tensorbridge.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "sequence") {
		t.Fatalf("warmup without sequence: %v, want an InputError naming it", err)
	}
}

// A model whose weights exceed the budget is refused at load, before any
// compile, with the bytes needed against the bytes available.
func TestMemoryFitCheck(t *testing.T) {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, testBackend(), tensorbridge.WithMemoryFraction(1e-9))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.LoadModel(ctx, modelPath("mlp"))
	var oom *tensorbridge.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, tensorbridge.ErrOutOfMemory) {
		t.Fatalf("err %v, want *OutOfMemoryError", err)
	}
	// mlp: 17226 float32 parameters (testdata/models/mlp.json) = 68904 bytes.
	if oom.Needed != 17226*4 || oom.Available >= oom.Needed {
		t.Fatalf("needed %d available %d, want needed 68904 > available", oom.Needed, oom.Available)
	}
	bud, err := b.Budget(ctx)
	if err != nil || bud.Limit == 0 || bud.Fraction != 1e-9 {
		t.Fatalf("budget %+v, %v", bud, err)
	}
}

// Loading, running and closing a model many times leaks nothing: the
// goroutine count and the runtime's live device buffers come back to their
// baselines, and resident memory grows by less than half the model's file
// size per cycle (13.6 MiB over 40 cycles). The bound is derived from what
// it guards: leaking the model on every cycle (its weights alone are 0.7 MB)
// grows RSS by at least 40 x 0.7 MB = 28 MB. Measured: +0.54 MiB on this
// 2-core machine, +4.36 MiB on the CI machine (its native allocator keeps
// more of the compiler's freed memory; an eighth of the model per cycle,
// 3.4 MiB, failed there once). Injected once to prove it
// (TENSORBRIDGE_INJECT_LEAK=model keeps every model open): +105 MiB, the
// test fails. Leaks per run (an input or
// an output per call) are TestRunLeavesNoDeviceBuffers' to catch.
func TestModelLoadLoopMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("loop measurement skipped in -short mode")
	}
	ctx := context.Background()
	b := openTest(t)
	path := modelPath("tiny_resnet")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	x := readNPY(t, filepath.Join("testdata", "models", "tiny_resnet.input_0.npy"))
	var leaked []*tensorbridge.Model // the injected fault only
	inject := os.Getenv("TENSORBRIDGE_INJECT_LEAK") == "model"
	cycle := func() {
		m, err := b.LoadModel(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Run(ctx, map[string]*ir.Tensor{"image": x}); err != nil {
			t.Fatal(err)
		}
		if inject {
			leaked = append(leaked, m)
			return
		}
		m.Close()
	}
	rss := func() uint64 {
		// A collection and the return of freed pages to the OS, so RSS
		// counts what is retained, not the heap's high-water mark (a run
		// of the whole package once measured +21 MiB here, where alone
		// it measures ±3 MiB).
		debug.FreeOSMemory()
		n, err := cpu.ResidentBytes()
		if err != nil {
			t.Skip(err)
		}
		return n
	}
	for i := 0; i < 20; i++ { // allocator warm-up
		cycle()
	}
	start := rss()
	goroutines := settledGoroutines()
	live, _, counted := b.LiveBuffers()
	const n = 40
	for i := 0; i < n; i++ {
		cycle()
	}
	end := rss()
	growth := int64(end) - int64(start)
	bound := n * st.Size() / 2
	t.Logf("RSS after warm-up %.1f MiB, after %d more load/run/close cycles %.1f MiB: %+.2f MiB (%+.1f KiB per cycle; bound %.1f MiB)",
		float64(start)/(1<<20), n, float64(end)/(1<<20), float64(growth)/(1<<20), float64(growth)/1024/n, float64(bound)/(1<<20))
	if growth > bound {
		t.Errorf("memory grew by %d bytes over %d cycles, bound %d (half the model's %d bytes per cycle)", growth, n, bound, st.Size())
	}
	if g := settledGoroutines(); g > goroutines {
		t.Errorf("goroutines: %d after the cycles, %d before", g, goroutines)
	}
	if now, _, _ := b.LiveBuffers(); counted && now != live {
		t.Errorf("live device buffers: %d after the cycles, %d before", now, live)
	}
	for _, m := range leaked {
		m.Close()
	}
}

// settledGoroutines is the goroutine count once goroutines that are ending
// have ended (it waits up to a second for the count to stop falling).
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for i := 0; i < 20; i++ {
		time.Sleep(50 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n {
			return m
		}
		n = m
	}
	return n
}

// bfloat16 (mixed: float32 parameters and accumulation) costs under 1%
// relative L2 error against PyTorch's float32 outputs on the reference
// models; the outputs come back in the declared dtype, float32.
func TestPrecisionBFloat16(t *testing.T) {
	ctx := context.Background()
	b := openTest(t)
	for _, rm := range referenceModels {
		m, err := b.LoadModel(ctx, modelPath(rm.name), tensorbridge.WithPrecision("bfloat16", true))
		if err != nil {
			t.Fatal(err)
		}
		in := map[string]*ir.Tensor{}
		for i, name := range rm.inputs {
			in[name] = readNPY(t, filepath.Join("testdata", "models", rm.name+".input_"+string(rune('0'+i))+".npy"))
		}
		out, err := m.Run(ctx, in)
		if err != nil {
			t.Fatalf("%s: %v", rm.name, err)
		}
		for i, spec := range m.Outputs() {
			want := readNPY(t, filepath.Join("testdata", "models", rm.name+".output_"+string(rune('0'+i))+".npy"))
			if out[spec.Name].DType() != ir.Float32 {
				t.Fatalf("%s %s: dtype %s, want the declared Float32", rm.name, spec.Name, out[spec.Name].DType())
			}
			e := relL2(t, out[spec.Name], want)
			t.Logf("%s %s (%s): relative L2 %.4f", rm.name, spec.Name, m.Precision(), e)
			if bound := bf16Bound[rm.name]; e > bound {
				t.Errorf("%s %s: bfloat16 costs %.4f relative L2, want < %g", rm.name, spec.Name, e, bound)
			}
		}
		m.Close()
	}
}

// bf16Bound is each reference model's bound on what bfloat16 costs, about
// twice the largest figure measured on cpu and xla-cpu (2026-11-26): mlp
// 2e-4; tiny_resnet 4.3e-3; mobilenet_v2_w025 9.7e-3; bert_tiny 2.9e-3 and
// bert_tiny_op13 4.4e-3 (pooled output).
var bf16Bound = map[string]float64{
	"mlp":               5e-4,
	"tiny_resnet":       1e-2,
	"mobilenet_v2_w025": 2e-2,
	"bert_tiny":         6e-3,
	"bert_tiny_op13":    1e-2,
}

// TestPrecisionFloat16OnCPU: the cpu backend's engine stores float16 and
// computes each op in float32 (it was refused before); the MLP's output in
// float16 stays within float16's cost of PyTorch's float32 output
// (measured 3.3e-4 relative L2; bound 1e-3), and an unknown precision is
// still refused.
func TestPrecisionFloat16OnCPU(t *testing.T) {
	ctx := context.Background()
	b := openCPU(t)
	m, err := b.LoadModel(ctx, modelPath("mlp"), tensorbridge.WithPrecision("float16", false))
	if err != nil {
		t.Fatal(err)
	}
	x := readNPY(t, filepath.Join("testdata", "models", "mlp.input_0.npy"))
	out, err := m.Run(ctx, map[string]*ir.Tensor{"x": x})
	if err != nil {
		t.Fatalf("float16 on cpu: %v", err)
	}
	want := readNPY(t, filepath.Join("testdata", "models", "mlp.output_0.npy"))
	got := out[m.Outputs()[0].Name]
	if e := precision.RelativeL2(tensors.MustCopyFlatData[float32](got), tensors.MustCopyFlatData[float32](want)); !(e < 1e-3) {
		t.Errorf("float16 output: relative L2 error %.3g against PyTorch's float32, want < 1e-3", e)
	}
	if _, err := b.LoadModel(ctx, modelPath("mlp"), tensorbridge.WithPrecision("fp8", false)); err == nil {
		t.Fatal("fp8 accepted")
	}
}
