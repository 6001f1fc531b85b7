package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge"
	tbengine "github.com/tensorbridge/tensorbridge/cpu/engine"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/precision"
)

func init() {
	register(command{name: "matmul", summary: "measure matrix-product throughput (TFLOP/s) on a backend", run: runMatmul})
}

// matmulResult is one measurement of `tensorbridge matmul`.
type matmulResult struct {
	Backend  string    `json:"backend"`
	Device   string    `json:"device"`
	DType    string    `json:"dtype"`
	N        int       `json:"n"`
	Iters    int       `json:"iters"`
	Compile  float64   `json:"compile_seconds"`
	MedianMS float64   `json:"median_ms"`
	BestMS   float64   `json:"best_ms"`
	TFLOPS   float64   `json:"tflops_median"`
	PeakBF16 float64   `json:"catalog_peak_bf16_tflops,omitempty"`
	Samples  []float64 `json:"samples_ms"`
	Threads  string    `json:"threads,omitempty"`
	Kernel   string    `json:"kernel,omitempty"`
}

func runMatmul(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("matmul", stderr, "[--backend B] [--n N] [--dtype bfloat16|float32] [--iters K] [--threads T] [--json]")
	backend := fs.String("backend", "", "backend name or auto")
	n := fs.Int("n", 4096, "matrix size: multiplies two N x N matrices")
	dtName := fs.String("dtype", "bfloat16", "element type: bfloat16 or float32")
	iters := fs.Int("iters", 20, "timed runs after one warm-up")
	asJSON := fs.Bool("json", false, "print JSON")
	threads := fs.Int("threads", 0, "confine the process to T CPUs (affinity, GOMAXPROCS and the XLA CPU plugin's PJRT_NPROC) before opening the backend; 0: all")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *n <= 0 || *iters <= 0 || *threads < 0 {
		return usageErr("--n and --iters must be positive, --threads at least 0")
	}
	threadDesc := ""
	if *threads > 0 {
		desc, err := limitThreads(*threads)
		if err != nil {
			return err
		}
		threadDesc = desc
	}
	var dt ir.DType
	switch *dtName {
	case "bfloat16":
		dt = ir.BFloat16
	case "float32":
		dt = ir.Float32
	default:
		return usageErr("--dtype %q: want bfloat16 or float32", *dtName)
	}
	b, err := tensorbridge.Open(ctx, *backend)
	if err != nil {
		return err
	}
	defer b.Close()
	x, err := randomMatrix(dt, *n, 1)
	if err != nil {
		return err
	}
	y, err := randomMatrix(dt, *n, 2)
	if err != nil {
		return err
	}
	shape := ir.MakeShape(dt, *n, *n)
	start := time.Now()
	exe, err := b.Compile(ctx, "matmul", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return []*ir.Node{graph.MatMul(in[0], in[1])}, nil
	}, shape, shape)
	if err != nil {
		return err
	}
	defer exe.Close()
	res := matmulResult{Backend: b.Name(), DType: *dtName, N: *n, Iters: *iters, Compile: time.Since(start).Seconds(),
		Threads: threadDesc}
	if eng := b.Engine(); eng != nil && eng.Name() == tbengine.Name {
		res.Kernel = eng.Description()
	}
	if devs := b.Devices(); len(devs) > 0 {
		res.Device = devs[0].Kind
	}
	// Warm-up: also moves the inputs to the device, where they stay.
	out, err := exe.Run(ctx, x, y)
	if err != nil {
		return err
	}
	out[0].FinalizeAll()
	for i := 0; i < *iters; i++ {
		t0 := time.Now()
		out, err := exe.Run(ctx, x, y) // returns when the device has finished
		if err != nil {
			return err
		}
		res.Samples = append(res.Samples, float64(time.Since(t0).Microseconds())/1000)
		out[0].FinalizeAll()
	}
	sorted := append([]float64(nil), res.Samples...)
	sort.Float64s(sorted)
	res.BestMS, res.MedianMS = sorted[0], sorted[len(sorted)/2]
	flops := 2 * float64(*n) * float64(*n) * float64(*n)
	res.TFLOPS = flops / (res.MedianMS / 1000) / 1e12
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "backend %s, device %s: %dx%d %s matmul, compile %.2fs, median %.3f ms, best %.3f ms over %d runs: %.4g TFLOP/s (median)\n",
		res.Backend, orDash(res.Device), *n, *n, *dtName, res.Compile, res.MedianMS, res.BestMS, *iters, res.TFLOPS)
	if res.Threads != "" {
		fmt.Fprintln(stdout, res.Threads)
	}
	if res.Kernel != "" {
		fmt.Fprintf(stdout, "kernel: %s\n", res.Kernel)
	}
	return nil
}

// randomMatrix returns an n x n matrix of uniform values in [-1, 1).
func randomMatrix(dt ir.DType, n int, seed uint64) (*ir.Tensor, error) {
	r := rand.New(rand.NewPCG(seed, 0x7b))
	f := make([]float32, n*n)
	for i := range f {
		f[i] = 2*r.Float32() - 1
	}
	if dt == ir.Float32 {
		return ir.TensorFromFlat(f, n, n)
	}
	bits := precision.BFloat16s(nil, f)
	raw := make([]byte, 2*len(bits))
	for i, h := range bits {
		raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
	}
	return ir.TensorFromBytes(ir.BFloat16, []int{n, n}, raw)
}
