package serve_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/client"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/serve"
)

// BenchmarkServe measures requests/s and latency percentiles of 64
// concurrent REST (binary) clients sending one-row requests, with dynamic
// batching on (up to 32 rows, 1 ms queue delay) and off (max batch 1), on
// 1 and on 4 replicas (when the backend has 4 devices). Run on xla-cpu
// with four host devices:
//
//	TENSORBRIDGE_TEST_BACKEND=xla-cpu:devices=4 go test -run '^$' -bench BenchmarkServe -benchtime 4000x ./serve/
func BenchmarkServe(b *testing.B) {
	backend := openBackend(b, batchBuckets(b, "batch=1,2,4,8,16,32;sequence=16"))
	servers := map[string]*testServer{}
	defer func() {
		for _, ts := range servers {
			ts.stop(b)
		}
	}()
	for _, model := range []string{"mlp", "bert_tiny"} {
		nIn, nOut := 1, 1
		if model == "bert_tiny" {
			nIn, nOut = 2, 2
		}
		ref := loadReference(b, model, nIn, nOut)
		in, _ := ref.batch(0, 1)
		for _, batching := range []string{"on", "off"} {
			for _, replicas := range []int{1, 4} {
				name := fmt.Sprintf("%s/batching=%s/replicas=%d", model, batching, replicas)
				b.Run(name, func(b *testing.B) {
					if replicas > len(backend.Devices()) {
						b.Skipf("backend has %d device(s)", len(backend.Devices()))
					}
					ts, ok := servers[name]
					if !ok {
						cfg := serve.ModelConfig{MaxQueueDelay: time.Millisecond}
						if batching == "off" {
							cfg.MaxBatch = 1
						}
						ts = startServer(b, backend, cfg, replicas, model)
						ts2 := *ts
						servers[name] = &ts2
						ts.cancel = nil // stopped by the deferred loop, not b.Cleanup
					}
					runs0, rows0 := histogramB(b, ts.s, model)
					lat := loadClients(b, ts.httpAddr, model, in, 64)
					runs1, rows1 := histogramB(b, ts.s, model)
					reportLatency(b, lat)
					if runs1 > runs0 {
						b.ReportMetric((rows1-rows0)/float64(runs1-runs0), "rows/run")
					}
				})
			}
		}
	}
}

// loadClients sends b.N requests from n concurrent clients and returns
// their latencies.
func loadClients(b *testing.B, addr, model string, in []client.Tensor, n int) []time.Duration {
	h := client.NewHTTP(addr, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}})
	req := &client.InferRequest{Inputs: in}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if _, err := h.Infer(context.Background(), model, req); err != nil {
					failed.CompareAndSwap(nil, err)
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	return lat
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

func histogramB(b *testing.B, s *serve.Server, model string) (uint64, float64) {
	mfs, err := s.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != serve.MetricBatchSize {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" && l.GetValue() == model {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

// BenchmarkOverhead compares one client's batch-1 requests through the
// server (REST binary, gRPC; batching off) with calling Model.Run directly,
// the path `tensorbridge bench` measures:
//
//	TENSORBRIDGE_TEST_BACKEND=xla-cpu go test -run '^$' -bench BenchmarkOverhead -benchtime 3s ./serve/
func BenchmarkOverhead(b *testing.B) {
	backend := openBackend(b, batchBuckets(b, "batch=1,2,4,8;sequence=16"))
	for _, model := range []string{"mlp", "bert_tiny"} {
		nIn, nOut := 1, 1
		if model == "bert_tiny" {
			nIn, nOut = 2, 2
		}
		ref := loadReference(b, model, nIn, nOut)
		in, _ := ref.batch(0, 1)
		// direct runs Model.Run with a background context; direct-deadline
		// with a context carrying a deadline, as every server request has
		// (the runtime then waits on each plugin call from another goroutine).
		for _, variant := range []string{"direct", "direct-deadline"} {
			b.Run(model+"/"+variant, func(b *testing.B) {
				ctx := context.Background()
				if variant == "direct-deadline" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Hour)
					defer cancel()
				}
				m, err := backend.LoadModel(context.Background(), filepath.Join(modelsDir, model+".onnx"))
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				x := map[string]*ir.Tensor{}
				for _, t := range in {
					dt := map[string]ir.DType{"FP32": ir.Float32, "INT64": ir.Int64}[t.Datatype]
					shape := []int{int(t.Shape[0]), int(t.Shape[1])}
					v, err := ir.TensorFromBytes(dt, shape, t.Data)
					if err != nil {
						b.Fatal(err)
					}
					x[t.Name] = v
				}
				if _, err := m.Run(ctx, x); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if _, err := m.Run(ctx, x); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		ts := startServer(b, backend, serve.ModelConfig{MaxBatch: 1}, 1, model)
		g, err := client.DialGRPC(ts.grpcAddr)
		if err != nil {
			b.Fatal(err)
		}
		for _, tr := range []struct {
			name string
			c    inferer
		}{{"http", client.NewHTTP(ts.httpAddr, nil)}, {"grpc", g}} {
			b.Run(model+"/"+tr.name, func(b *testing.B) {
				req := &client.InferRequest{Inputs: in}
				if _, err := tr.c.Infer(context.Background(), model, req); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if _, err := tr.c.Infer(context.Background(), model, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		_ = g.Close()
		ts.stop(b)
	}
}

// BenchmarkGoodput measures what the server answers in time under 4×
// overload with short deadlines, against its throughput at capacity.
// bert_tiny (sequence 16), one replica, batching up to 8 rows with a 1 ms
// queue delay, one-row requests (GOODPUT_ROWS=n: n rows each) through
// Server.Infer (no network, so that the load generator takes little of
// the CPU):
//
//  1. capacity: 32 callers in a closed loop, no deadline: X requests/s;
//  2. overload: requests arriving at 4·X per second, each with a deadline
//     D of ten full-batch runs at capacity (10·8/(rows·X), at least
//     20 ms): goodput G is the requests answered successfully within D,
//     per second.
//
// The two alternate in 2 s slices, five of each (on a shared machine the
// load of other work drifts by as much as 3x over seconds; alternating
// makes it weigh on both alike); X and G are over all slices.
//
// It reports X, G, G/X (the issue asks at least 0.8) and what happened to
// the others. Run with:
//
//	go test -run '^$' -bench BenchmarkGoodput -benchtime 1x ./serve/
//	TENSORBRIDGE_TEST_BACKEND=xla-cpu go test -run '^$' -bench BenchmarkGoodput -benchtime 1x ./serve/
func BenchmarkGoodput(b *testing.B) {
	backend := openBackend(b, batchBuckets(b, "batch=1,2,4,8;sequence=16"))
	ts := startServer(b, backend, serve.ModelConfig{MaxQueueDelay: time.Millisecond, MaxBatch: 8}, 1, "bert_tiny")
	ref := loadReference(b, "bert_tiny", 2, 2)
	rows := 1
	if r, err := strconv.Atoi(os.Getenv("GOODPUT_ROWS")); err == nil && r > 0 {
		rows = r
	}
	in, _ := ref.batch(0, rows)
	var inputs []serve.Tensor
	for _, t := range in {
		dt := map[string]ir.DType{"INT64": ir.Int64, "FP32": ir.Float32, "INT32": ir.Int32}[t.Datatype]
		shape := make([]int, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int(d)
		}
		inputs = append(inputs, serve.Tensor{Name: t.Name, DType: dt, Shape: shape, Data: t.Data})
	}
	// The phases alternate in slices of 2 s, five of each, so that the
	// load of other work on a shared machine, which drifts by as much as
	// 3x over seconds, weighs on both alike.
	const slice, slices = 2 * time.Second, 5
	for i := 0; i < b.N; i++ {
		x0, _ := capacity(b, ts.s, inputs, 32, slice)
		// Ten full-batch runs at capacity: short against the 1,024
		// requests (128 runs) the queue holds, long enough for a request
		// to wait for a few runs ahead of it on a machine whose run times
		// vary. At least 20 ms, above the scheduling noise of a loaded
		// machine.
		deadline := max(time.Duration(10*8/float64(rows)/x0*float64(time.Second)), 20*time.Millisecond)
		var xs []float64
		var total overloadResult
		runs0, rows0 := histogramB(b, ts.s, "bert_tiny")
		for range slices {
			x, _ := capacity(b, ts.s, inputs, 32, slice)
			xs = append(xs, x)
			res := overload(b, ts.s, inputs, 4*x, deadline, slice)
			total.sent += res.sent
			total.good += res.good
			total.late += res.late
			total.refused += res.refused
			total.timeout += res.timeout
			total.other += res.other
		}
		runs1, rows1 := histogramB(b, ts.s, "bert_tiny")
		var x float64
		for _, v := range xs {
			x += v
		}
		x /= float64(len(xs))
		g := float64(total.good) / (slices * slice).Seconds()
		b.ReportMetric(x, "capacity_req/s")
		b.ReportMetric(g, "goodput_req/s")
		b.ReportMetric(g/x, "goodput/capacity")
		b.ReportMetric(float64(deadline.Microseconds())/1000, "deadline_ms")
		b.Logf("capacity %.0f req/s (slices %.0f); at 4x with a %s deadline: %d sent, %d in time, %d late, %d refused at admission or a full queue (503), %d timed out, %d other errors; %d runs of %.1f rows over both phases; goodput %.0f req/s = %.2f of capacity",
			x, xs, deadline, total.sent, total.good, total.late, total.refused, total.timeout, total.other, runs1-runs0, (rows1-rows0)/float64(max(runs1-runs0, 1)), g, g/x)
	}
}

// capacity runs n callers in a closed loop for d and returns the
// requests/s and the median latency.
func capacity(b *testing.B, s *serve.Server, inputs []serve.Tensor, n int, d time.Duration) (float64, time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(end) {
				t0 := time.Now()
				if _, err := s.Infer(context.Background(), "bert_tiny", "", &serve.InferRequest{Inputs: inputs}); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	if len(lat) == 0 {
		b.Fatal("no request finished")
	}
	return float64(len(lat)) / d.Seconds(), lat[len(lat)/2]
}

type overloadResult struct {
	sent, good, late, refused, timeout, other int64
}

// overload sends requests at rate per second for d, each with the given
// deadline, and sorts their outcomes. A pool of callers, started before
// the clock, takes the arrivals, so that the generator spends little of
// the CPU the model runs on (on a CPU backend the two compete).
func overload(b *testing.B, s *serve.Server, inputs []serve.Tensor, rate float64, deadline, d time.Duration) overloadResult {
	var res overloadResult
	var good, late, refused, timeout, other atomic.Int64
	const callers = 4096
	arrivals := make(chan time.Time, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t0 := range arrivals {
				ctx, cancel := context.WithDeadline(context.Background(), t0.Add(deadline))
				_, err := s.Infer(ctx, "bert_tiny", "", &serve.InferRequest{Inputs: inputs})
				cancel()
				var te *serve.TimeoutError
				var qf *serve.QueueFullError
				var ol *serve.OverloadError
				switch {
				case err == nil && time.Since(t0) <= deadline:
					good.Add(1)
				case err == nil:
					late.Add(1)
				case errors.As(err, &te) || errors.Is(err, context.DeadlineExceeded):
					timeout.Add(1)
				case errors.As(err, &qf) || errors.As(err, &ol):
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for k := 0; ; k++ {
		at := start.Add(time.Duration(k) * interval)
		if at.Sub(start) >= d {
			break
		}
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		select {
		case arrivals <- at:
			res.sent++
		default:
			other.Add(1) // every caller busy: counted as lost
		}
	}
	close(arrivals)
	wg.Wait()
	res.good, res.late, res.refused, res.timeout, res.other = good.Load(), late.Load(), refused.Load(), timeout.Load(), other.Load()
	return res
}
