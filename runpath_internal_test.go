package tensorbridge

import (
	"context"
	"errors"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"runtime"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/pjrt"
)

// openXLACPUInternal opens xla-cpu, or skips when its plugin is missing.
func openXLACPUInternal(t *testing.T) *Backend {
	t.Helper()
	b, err := Open(context.Background(), "xla-cpu")
	if err != nil {
		var ue *UnavailableError
		if errors.As(err, &ue) {
			testreq.Skipf(t, "%v", err) // a failure where CI installs the plugin
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// On a PJRT backend, a single-device program runs through the direct path
// (driver.DirectRunner), and that path keeps Executable.Run's contract: the
// outputs in the order the Func returned them (a node returned twice comes
// back twice), an unused parameter accepted, inputs on the host or on the
// device, exact values, and no device buffer left behind.
func TestRunDirectPath(t *testing.T) {
	b := openXLACPUInternal(t)
	ctx := context.Background()
	s := ir.MakeShape(ir.Float32, 2, 3)
	exe, err := b.Compile(ctx, "direct", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		sum := graph.Add(in[0], in[1])
		return []*ir.Node{sum, graph.Mul(in[0], in[1]), sum}, nil // in[2] unused
	}, s, s, ir.MakeShape(ir.Int32, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	if exe.direct == nil {
		t.Fatal("a single-device xla-cpu program has no direct form: Run goes through GoMLX's wrappers")
	}
	x := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	y := tensors.FromFlatDataAndDimensions([]float32{10, 20, 30, 40, 50, 60}, 2, 3)
	unused := tensors.FromFlatDataAndDimensions([]int32{1, 2, 3, 4}, 4)
	// y on the device, lent to the run.
	eng := b.drv.Engine()
	yb, own, err := ir.DeviceBuffer(eng, 0, y)
	if err != nil || !own {
		t.Fatal(own, err)
	}
	yDev, err := tensors.FromBuffer(eng, yb)
	if err != nil {
		t.Fatal(err)
	}
	defer yDev.FinalizeAll()
	live := b.drv.(*pjrt.Backend).LiveBuffers()
	for _, yIn := range []*ir.Tensor{y, yDev} {
		outs, err := exe.Run(ctx, x, yIn, unused)
		if err != nil {
			t.Fatal(err)
		}
		want := [][]float32{{11, 22, 33, 44, 55, 66}, {10, 40, 90, 160, 250, 360}, {11, 22, 33, 44, 55, 66}}
		if len(outs) != len(want) {
			t.Fatalf("%d outputs, want %d", len(outs), len(want))
		}
		for i, w := range want {
			if !outs[i].Shape().Equal(s) {
				t.Fatalf("output %d: shape %s, want %s", i, outs[i].Shape(), s)
			}
			got := tensors.MustCopyFlatData[float32](outs[i])
			for k := range w {
				if got[k] != w[k] {
					t.Fatalf("output %d = %v, want %v", i, got, w)
				}
			}
		}
		if n := b.drv.(*pjrt.Backend).LiveBuffers(); n != live {
			t.Fatalf("%d live device buffers after the run, %d before", n, live)
		}
	}
	// A wrong shape is still an *InputError naming the input.
	_, err = exe.Run(ctx, x, tensors.FromFlatDataAndDimensions([]float32{1, 2, 3}, 3), unused)
	var ie *InputError
	if !errors.As(err, &ie) || ie.Name != "#1" {
		t.Fatalf("wrong shape: %v, want an *InputError for #1", err)
	}
}

// ir.Compiled reaches the executable GoMLX keeps unexported: nil before
// Compile, the backend's executable after, nil after Finalize. A GoMLX
// upgrade that moves the field fails here instead of silently taking the
// slow path.
func TestCompiledFindsTheExecutable(t *testing.T) {
	b := openXLACPUInternal(t)
	g := ir.NewGraph(b.drv.Engine(), "compiled")
	p := ir.Parameter(g, "x", ir.MakeShape(ir.Float32, 2))
	if ir.Compiled(g) != nil {
		t.Fatal("Compiled returned an executable before Compile")
	}
	g.Compile(graph.Neg(p))
	if _, ok := ir.Compiled(g).(*pjrt.Executable); !ok {
		t.Fatalf("Compiled = %T, want *pjrt.Executable", ir.Compiled(g))
	}
	g.Finalize()
	if ir.Compiled(g) != nil {
		t.Fatal("Compiled returned an executable after Finalize")
	}
}

// directBackends are the backends with a direct path: xla-cpu (skipped
// without its plugin) and the embedded cpu engine.
var directBackends = []string{"xla-cpu", "cpu"}

// openDirectBackend opens name for a direct-path test.
func openDirectBackend(t *testing.T, name string) *Backend {
	t.Helper()
	if name == "xla-cpu" {
		return openXLACPUInternal(t)
	}
	b, err := Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// The binding knows each output's host size from the executable, so ToHost
// asks the plugin nothing more; a destination of the wrong size is still
// refused. The same checks hold on the cpu engine's direct path.
func TestDirectOutputSizeChecked(t *testing.T) {
	for _, name := range directBackends {
		t.Run(name, func(t *testing.T) { testDirectOutputSizeChecked(t, openDirectBackend(t, name)) })
	}
}

func testDirectOutputSizeChecked(t *testing.T, b *Backend) {
	ctx := context.Background()
	s := ir.MakeShape(ir.Float32, 2, 3)
	exe, err := b.Compile(ctx, "size", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return []*ir.Node{graph.Neg(in[0])}, nil
	}, s)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	x := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	raw, _ := ir.LocalBytes(x)
	var ie *InputError
	err = exe.direct.RunDirect(ctx, 0, nil, [][]byte{make([]byte, 24)})
	if !errors.As(err, &ie) || ie.Problem != "count" {
		t.Fatalf("no arguments: %v, want a count *InputError", err)
	}
	err = exe.direct.RunDirect(ctx, 0, []driver.DirectArg{{Host: raw[:20]}}, [][]byte{make([]byte, 24)})
	if !errors.As(err, &ie) || ie.Problem != "value" {
		t.Fatalf("20 bytes for 24: %v, want a value *InputError", err)
	}
	err = exe.direct.RunDirect(ctx, 0, []driver.DirectArg{{Host: raw}}, [][]byte{make([]byte, 20)})
	if KindOf(err) != InvalidArgument {
		t.Fatalf("a 20-byte destination for 24 bytes: %v, want InvalidArgument", err)
	}
}

// The direct path with an empty array in and out (no bytes to copy) and a
// boolean one (one byte per element on both sides).
func TestRunDirectEmptyAndBool(t *testing.T) {
	for _, name := range directBackends {
		t.Run(name, func(t *testing.T) { testRunDirectEmptyAndBool(t, openDirectBackend(t, name)) })
	}
}

func testRunDirectEmptyAndBool(t *testing.T, b *Backend) {
	ctx := context.Background()
	empty := ir.MakeShape(ir.Float32, 0, 3)
	exe, err := b.Compile(ctx, "empty-bool", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return []*ir.Node{graph.Add(in[0], in[0]), graph.LogicalNot(in[1])}, nil
	}, empty, ir.MakeShape(ir.Bool, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	if exe.direct == nil {
		t.Fatal("no direct form")
	}
	outs, err := exe.Run(ctx, tensors.FromShape(empty), tensors.FromFlatDataAndDimensions([]bool{true, false, false, true}, 4))
	if err != nil {
		t.Fatal(err)
	}
	if !outs[0].Shape().Equal(empty) {
		t.Fatalf("empty output has shape %s", outs[0].Shape())
	}
	got, want := tensors.MustCopyFlatData[bool](outs[1]), []bool{false, true, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("not = %v, want %v", got, want)
		}
	}
}

// On the cpu engine a program runs through the direct path, which stops
// between the engine's steps once the context is done: a long chain of
// products with a context cancelled from another goroutine returns the
// context's error well before a whole run's time, leaves no goroutine
// behind, and the next run of the same executable is correct. (Injected
// fault: with the engine's step loop not looking at the context, the run
// finishes and returns no error.)
func TestCPUDirectRunCancelled(t *testing.T) {
	b := openDirectBackend(t, "cpu")
	s := ir.MakeShape(ir.Float32, 256, 256)
	exe, err := b.Compile(context.Background(), "chain", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		x := in[0]
		for range 400 {
			x = graph.Tanh(graph.MatMul(x, in[0]))
		}
		return []*ir.Node{x}, nil
	}, s)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	if exe.direct == nil {
		t.Fatal("a cpu engine program has no direct form")
	}
	vals := make([]float32, 256*256)
	for i := range vals {
		vals[i] = float32(i%7) / 700
	}
	x := tensors.FromFlatDataAndDimensions(vals, 256, 256)
	start := time.Now()
	if _, err := exe.Run(context.Background(), x); err != nil { // also starts the kernels' worker pool
		t.Fatal(err)
	}
	full := time.Since(start)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(full / 10); cancel() }()
	start = time.Now()
	if _, err := exe.Run(ctx, x); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > full/2 {
		t.Errorf("the cancelled run took %v, a whole run %v: it did not stop early", d, full)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the cancelled run, %d before", n, before)
	}
	outs, err := exe.Run(context.Background(), x)
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[float32](outs[0])
	if got[0] != got[0] || got[0] == 0 {
		t.Fatalf("the run after a cancelled one gave %v", got[:4])
	}
}
