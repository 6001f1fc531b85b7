// Command serve-load is the load figure of BENCHMARKS.md: concurrent
// clients send requests of a random 1..N rows to a running `tensorbridge
// serve` for a fixed time and it reports throughput, latency percentiles,
// errors and the server's resident memory over the run; -direct runs
// Model.Run in a loop at the same batch sizes instead, in this process,
// for the comparison.
//
//	go run ./scripts/serve-load -addr 127.0.0.1:8000 -model bert_encoder_tf -pid PID
//	go run ./scripts/serve-load -direct MODEL.onnx -backend xla-cpu
//
// Inputs are int64 token ids in [0, 1000) and an all-ones attention mask
// for every INT64 input named *mask*, float32 values in [-1, 1) for FP32
// inputs, shaped from the model's metadata (every -1 is the batch).
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/client"
	"github.com/tensorbridge/tensorbridge/ir"
	_ "github.com/tensorbridge/tensorbridge/pjrt" // registers xla-cpu
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8000", "the server's HTTP address")
	model := flag.String("model", "", "model name on the server")
	clients := flag.Int("clients", 32, "concurrent clients")
	maxRows := flag.Int("rows", 4, "each request has 1..rows rows, uniformly")
	dur := flag.Duration("duration", 20*time.Second, "how long to send")
	pid := flag.Int("pid", 0, "the server's process id, to sample its resident memory")
	direct := flag.String("direct", "", "instead: run this model with Model.Run in a loop at the same batch sizes")
	backend := flag.String("backend", "xla-cpu", "backend for -direct")
	flag.Parse()
	var err error
	if *direct != "" {
		err = runDirect(*direct, *backend, *maxRows, *dur)
	} else {
		err = runLoad(*addr, *model, *clients, *maxRows, *dur, *pid)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve-load:", err)
		os.Exit(1)
	}
}

// spec is one input: name, datatype and shape with -1 for the batch.
type spec struct {
	name, dt string
	shape    []int64
}

// makeInputs builds a request of rows rows.
func makeInputs(specs []spec, rows int, rng *rand.Rand) []client.Tensor {
	var out []client.Tensor
	for _, s := range specs {
		shape := append([]int64(nil), s.shape...)
		n := 1
		for i, d := range shape {
			if d < 0 {
				shape[i] = int64(rows)
			}
			n *= int(shape[i])
		}
		var data []byte
		switch s.dt {
		case "INT64":
			for i := 0; i < n; i++ {
				v := uint64(rng.IntN(1000))
				if strings.Contains(s.name, "mask") {
					v = 1
				}
				data = binary.LittleEndian.AppendUint64(data, v)
			}
		default:
			for i := 0; i < n; i++ {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(rng.Float32()*2-1))
			}
		}
		out = append(out, client.Tensor{Name: s.name, Datatype: s.dt, Shape: shape, Data: data})
	}
	return out
}

func runLoad(addr, model string, clients, maxRows int, dur time.Duration, pid int) error {
	ctx := context.Background()
	h := client.NewHTTP(addr, nil)
	md, err := h.ModelMetadata(ctx, model)
	if err != nil {
		return err
	}
	var specs []spec
	for _, in := range md.Inputs {
		specs = append(specs, spec{in.Name, in.Datatype, in.Shape})
	}
	rss0, cpu0 := rss(pid), cpuSeconds(pid)
	var (
		mu      sync.Mutex
		lat     []time.Duration
		rows    atomic.Int64
		errsN   atomic.Int64
		firstEr atomic.Value
		peak    atomic.Int64
	)
	stop := time.Now().Add(dur)
	done := make(chan struct{})
	go func() { // resident memory, every 250 ms
		for {
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
				if r := rss(pid); r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			var mine []time.Duration
			for time.Now().Before(stop) {
				n := 1 + rng.IntN(maxRows)
				req := &client.InferRequest{Inputs: makeInputs(specs, n, rng)}
				t0 := time.Now()
				_, err := h.Infer(ctx, model, req)
				if err != nil {
					errsN.Add(1)
					firstEr.CompareAndSwap(nil, err.Error())
					continue
				}
				mine = append(mine, time.Since(t0))
				rows.Add(int64(n))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(done)
	rss1, cpu1 := rss(pid), cpuSeconds(pid)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	fmt.Printf("load: %d clients, 1..%d rows, %s: %d requests (%.1f/s), %.1f rows/s, errors %d, p50 %s, p99 %s, max %s\n",
		clients, maxRows, dur, len(lat), float64(len(lat))/dur.Seconds(), float64(rows.Load())/dur.Seconds(), errsN.Load(),
		pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), pct(1).Round(time.Millisecond))
	if e := firstEr.Load(); e != nil {
		fmt.Printf("first error: %s\n", e)
	}
	if pid > 0 {
		fmt.Printf("server RSS: %d MiB before, %d MiB peak, %d MiB after (%+d MiB); server CPU %.1f s, %.2f ms per row\n",
			rss0>>20, peak.Load()>>20, rss1>>20, (rss1-rss0)>>20, cpu1-cpu0, 1000*(cpu1-cpu0)/float64(max(1, rows.Load())))
	}
	return nil
}

// rss reads a process's resident memory in bytes (0 when unknown).
func rss(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// runDirect runs Model.Run in a loop, batch sizes 1..maxRows uniformly,
// after one warm-up run of each.
func runDirect(path, backend string, maxRows int, dur time.Duration) error {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, backend)
	if err != nil {
		return err
	}
	defer b.Close()
	m, err := b.LoadModel(ctx, path)
	if err != nil {
		return err
	}
	defer m.Close()
	var specs []spec
	for _, s := range m.Inputs() {
		var shape []int64
		for _, d := range s.Dims {
			if d.Param != "" {
				shape = append(shape, -1)
			} else {
				shape = append(shape, int64(d.Value))
			}
		}
		specs = append(specs, spec{s.Name, map[ir.DType]string{ir.Int64: "INT64"}[s.DType], shape})
	}
	rng := rand.New(rand.NewPCG(1, 1))
	inputs := func(n int) (map[string]*ir.Tensor, error) {
		in := map[string]*ir.Tensor{}
		for k, t := range makeInputs(specs, n, rng) {
			dims := make([]int, len(t.Shape))
			for i, d := range t.Shape {
				dims[i] = int(d)
			}
			x, err := ir.TensorFromBytes(m.Inputs()[k].DType, dims, t.Data)
			if err != nil {
				return nil, err
			}
			in[t.Name] = x
		}
		return in, nil
	}
	for n := 1; n <= maxRows; n++ {
		in, err := inputs(n)
		if err != nil {
			return err
		}
		if _, err := m.Run(ctx, in); err != nil {
			return err
		}
	}
	start, cpu0 := time.Now(), cpuSeconds(os.Getpid())
	runs, rows := 0, 0
	for time.Since(start) < dur {
		n := 1 + rng.IntN(maxRows)
		in, err := inputs(n)
		if err != nil {
			return err
		}
		if _, err := m.Run(ctx, in); err != nil {
			return err
		}
		runs++
		rows += n
	}
	el, cpu := time.Since(start).Seconds(), cpuSeconds(os.Getpid())-cpu0
	fmt.Printf("Model.Run loop (%s, 1..%d rows): %d runs (%.1f/s), %.1f rows/s; CPU %.1f s, %.2f ms per row\n",
		backend, maxRows, runs, float64(runs)/el, float64(rows)/el, cpu, 1000*cpu/float64(max(1, rows)))
	return nil
}

// cpuSeconds is a process's user and system CPU time (/proc/PID/stat
// fields 14 and 15, in clock ticks of 1/100 s on Linux), 0 when unknown.
func cpuSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100
}
