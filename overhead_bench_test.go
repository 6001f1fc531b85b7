package tensorbridge_test

// Per-call overhead: the same trivial computation (an element-wise add of
// two float32[3,4,5] tensors, the ONNX test data's test_add model) run
// through Model.Run, through Executable.Run, and by raw PJRT calls on the
// same plugin (internal/capi: upload both inputs, execute, read the output
// back, free the buffers), which is the least any host-to-host call must
// do. The difference per call is what tensorbridge adds:
//
//	go test -run '^$' -bench 'Overhead' -benchtime 20000x .
//
// Each runs with the plugin's default asynchronous dispatch and with the
// client option async=false (the XLA CPU client then runs every execution
// on the calling thread instead of its thread pool). BenchmarkOverheadMLP
// runs the 64-128-64-10 reference MLP through Model.Run.
//
// On a loaded machine the separate benchmarks drift apart by more than
// the overhead itself. BenchmarkOverheadPaired therefore alternates, call
// by call, the raw sequence and Model.Run on the same PJRT client (the
// backend's own, with its options) and reports the median per-call
// difference ("overhead-ns"), besides each side's median:
//
//	go test -run '^$' -bench 'OverheadPaired' -benchtime 20000x .

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/pjrt"
)

const progAdd345 = `func.func public @main(%a: tensor<3x4x5xf32>, %b: tensor<3x4x5xf32>) -> tensor<3x4x5xf32> {
  %0 = stablehlo.add %a, %b : tensor<3x4x5xf32>
  return %0 : tensor<3x4x5xf32>
}`

// addModelPath is the ONNX test data's test_add model, or a skip.
func addModelPath(b *testing.B) string {
	root := os.Getenv("TENSORBRIDGE_ONNX_TESTDATA")
	if root == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			b.Skip(err)
		}
		root = filepath.Join(cache, "tensorbridge", "onnx-testdata", "root", "usr", "share", "libonnx-testdata")
	}
	p := filepath.Join(root, "data", "node", "test_add", "model.onnx")
	if _, err := os.Stat(p); err != nil {
		b.Skipf("ONNX test data not found (run scripts/fetch-onnx-testdata.sh): %v", err)
	}
	return p
}

func add345Inputs() (x, y []float32) {
	x, y = make([]float32, 60), make([]float32, 60)
	for i := range x {
		x[i], y[i] = float32(i), float32(2*i)
	}
	return x, y
}

func openXLACPU(b *testing.B, spec string) *tensorbridge.Backend {
	be, err := tensorbridge.Open(context.Background(), spec)
	if err != nil {
		var ue *tensorbridge.UnavailableError
		if errors.As(err, &ue) {
			b.Skip(err)
		}
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	return be
}

func BenchmarkOverheadRawPJRT(b *testing.B) {
	b.Run("xla-cpu", func(b *testing.B) { rawAdd(b, nil) })
	no := false
	b.Run("xla-cpu:async=false", func(b *testing.B) {
		rawAdd(b, []capi.NamedValue{{Name: capi.OptAsynchronous, Value: no}})
	})
}

func rawAdd(b *testing.B, opts []capi.NamedValue) {
	f, err := (&pjrt.Driver{Kind: pjrt.Kinds[0]}).FindPlugin()
	if err != nil {
		b.Skip(err)
	}
	plugin, err := capi.Load(f.Path)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c, err := plugin.NewClient(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	devs, err := c.AddressableDevices()
	if err != nil {
		b.Fatal(err)
	}
	exe, err := c.Compile(ctx, capi.MLIR(progAdd345), capi.CompileOptions{DeviceAssignment: [][]int{{devs[0].ID()}}})
	if err != nil {
		b.Fatal(err)
	}
	defer exe.Destroy()
	x, y := add345Inputs()
	xb, yb := capi.Bytes(x), capi.Bytes(y)
	dims := []int64{3, 4, 5}
	out := make([]byte, 240)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		bx, err := c.BufferFromHost(ctx, devs[0], capi.F32, dims, xb, capi.ImmutableOnlyDuringCall)
		if err != nil {
			b.Fatal(err)
		}
		by, err := c.BufferFromHost(ctx, devs[0], capi.F32, dims, yb, capi.ImmutableOnlyDuringCall)
		if err != nil {
			b.Fatal(err)
		}
		res, err := exe.Execute(ctx, [][]*capi.Buffer{{bx, by}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := res[0][0].ToHost(ctx, out); err != nil {
			b.Fatal(err)
		}
		_ = bx.Destroy()
		_ = by.Destroy()
		_ = res[0][0].Destroy()
	}
}

func BenchmarkOverheadModelRun(b *testing.B) {
	for _, spec := range []string{"xla-cpu", "xla-cpu:async=false"} {
		b.Run(spec, func(b *testing.B) { modelRunAdd(b, spec) })
	}
}

func modelRunAdd(b *testing.B, spec string) {
	be := openXLACPU(b, spec)
	ctx := context.Background()
	m, err := be.LoadModel(ctx, addModelPath(b))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	x, y := add345Inputs()
	in := map[string]*ir.Tensor{"x": tensors.FromFlatDataAndDimensions(x, 3, 4, 5), "y": tensors.FromFlatDataAndDimensions(y, 3, 4, 5)}
	if _, err := m.Run(ctx, in); err != nil { // compile outside the timing
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		out, err := m.Run(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		_ = tensors.MustCopyFlatData[float32](out["sum"])
	}
}

func BenchmarkOverheadExecutableRun(b *testing.B) {
	be := openXLACPU(b, "xla-cpu")
	ctx := context.Background()
	s := ir.MakeShape(ir.Float32, 3, 4, 5)
	exe, err := be.Compile(ctx, "add", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return []*ir.Node{graph.Add(in[0], in[1])}, nil
	}, s, s)
	if err != nil {
		b.Fatal(err)
	}
	defer exe.Close()
	x, y := add345Inputs()
	tx, ty := tensors.FromFlatDataAndDimensions(x, 3, 4, 5), tensors.FromFlatDataAndDimensions(y, 3, 4, 5)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		out, err := exe.Run(ctx, tx, ty)
		if err != nil {
			b.Fatal(err)
		}
		_ = tensors.MustCopyFlatData[float32](out[0])
		out[0].FinalizeAll()
	}
}

func BenchmarkOverheadMLP(b *testing.B) {
	for _, spec := range []string{"xla-cpu", "xla-cpu:async=false"} {
		b.Run(spec, func(b *testing.B) {
			be := openXLACPU(b, spec)
			ctx := context.Background()
			m, err := be.LoadModel(ctx, filepath.Join("testdata", "models", "mlp.onnx"))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			x := make([]float32, 2*64)
			for i := range x {
				x[i] = float32(i%7) / 7
			}
			in := map[string]*ir.Tensor{"x": tensors.FromFlatDataAndDimensions(x, 2, 64)}
			if _, err := m.Run(ctx, in); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				out, err := m.Run(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				_ = tensors.MustCopyFlatData[float32](out["log_probs"])
			}
		})
	}
}

func BenchmarkOverheadPaired(b *testing.B) {
	for _, spec := range []string{"xla-cpu", "xla-cpu:async=false"} {
		b.Run(spec, func(b *testing.B) { pairedAdd(b, spec) })
	}
}

func pairedAdd(b *testing.B, spec string) {
	be := openXLACPU(b, spec)
	ctx := context.Background()
	m, err := be.LoadModel(ctx, addModelPath(b))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	eng, ok := be.Engine().(*pjrt.Engine)
	if !ok {
		b.Skipf("%s is not a PJRT backend", spec)
	}
	c := eng.Client()
	dev, err := eng.Device(0)
	if err != nil {
		b.Fatal(err)
	}
	exe, err := c.Compile(ctx, capi.MLIR(progAdd345), capi.CompileOptions{Portable: true, EnvOptionOverrides: eng.XLAOptions()})
	if err != nil {
		b.Fatal(err)
	}
	defer exe.Destroy()
	x, y := add345Inputs()
	xb, yb := capi.Bytes(x), capi.Bytes(y)
	dims := []int64{3, 4, 5}
	out := make([]byte, 240)
	eo := &capi.ExecuteOptions{Device: dev}
	raw := func() {
		bx, err := c.BufferFromHost(ctx, dev, capi.F32, dims, xb, capi.ImmutableOnlyDuringCall)
		if err != nil {
			b.Fatal(err)
		}
		by, err := c.BufferFromHost(ctx, dev, capi.F32, dims, yb, capi.ImmutableOnlyDuringCall)
		if err != nil {
			b.Fatal(err)
		}
		res, err := exe.Execute(ctx, [][]*capi.Buffer{{bx, by}}, eo)
		if err != nil {
			b.Fatal(err)
		}
		if err := res[0][0].ToHost(ctx, out); err != nil {
			b.Fatal(err)
		}
		_ = bx.Destroy()
		_ = by.Destroy()
		_ = res[0][0].Destroy()
	}
	in := map[string]*ir.Tensor{"x": tensors.FromFlatDataAndDimensions(x, 3, 4, 5), "y": tensors.FromFlatDataAndDimensions(y, 3, 4, 5)}
	model := func() {
		res, err := m.Run(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		_ = tensors.MustCopyFlatData[float32](res["sum"])
	}
	raw()
	model()
	rawNs, modelNs, diff := make([]float64, 0, b.N), make([]float64, 0, b.N), make([]float64, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first, so that neither always follows the other.
		first, second := raw, model
		if i%2 == 1 {
			first, second = model, raw
		}
		t0 := time.Now()
		first()
		t1 := time.Now()
		second()
		t2 := time.Now()
		r, mo := t1.Sub(t0), t2.Sub(t1)
		if i%2 == 1 {
			r, mo = mo, r
		}
		rawNs, modelNs, diff = append(rawNs, float64(r)), append(modelNs, float64(mo)), append(diff, float64(mo-r))
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(rawNs), "raw-ns")
	b.ReportMetric(median(modelNs), "model-ns")
	b.ReportMetric(median(diff), "overhead-ns")
}
