package serve_test

import (
	"context"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/client"
	"github.com/tensorbridge/tensorbridge/serve"
	"github.com/tensorbridge/tensorbridge/shard"
)

// openMeshBackend opens XLA's CPU compiler with n host devices (a mesh
// needs several), or skips when the plugin is not installed.
func openMeshBackend(t testing.TB, n int) *tensorbridge.Backend {
	t.Helper()
	bk := batchBuckets(t, testBuckets)
	bk.CacheDir = "off"
	b, err := tensorbridge.Open(context.Background(), fmt.Sprintf("xla-cpu:devices=%d", n), tensorbridge.WithSettings(bk))
	if err != nil {
		testreq.Skipf(t, "xla-cpu with %d devices: %v", n, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// startMeshServer serves one model as one replica over mesh.
func startMeshServer(t testing.TB, b *tensorbridge.Backend, cfg serve.ModelConfig, mesh shard.Mesh, name string) *testServer {
	t.Helper()
	s, err := serve.New(context.Background(), serve.Options{Backend: b, Logger: quietLogger(t), DrainTimeout: 20 * time.Second, Version: "test",
		Models: []serve.ModelSource{{Path: filepath.Join(modelsDir, name+".onnx"), Config: cfg, Mesh: &mesh}}})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{s: s, httpAddr: hl.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- s.Run(ctx, hl, nil) }()
	t.Cleanup(func() { ts.stop(t) })
	deadline := time.Now().Add(5 * time.Minute)
	for !s.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("server not ready after warm-up")
		}
		select {
		case err := <-ts.done:
			t.Fatalf("server stopped before ready: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return ts
}

// A model served as one replica over a mesh answers what PyTorch computed
// for the same rows: batches of 1, 3 and 8 rows against a data axis of 4
// (1 and 3 padded to the data axis, since the batch dimension's rows are
// independent), and the weights split over a model axis.
func TestMeshReplicaMatchesPyTorch(t *testing.T) {
	b := openMeshBackend(t, 8)
	ctx := context.Background()
	for _, tc := range []struct {
		model string
		nIn   int
		nOut  int
		mesh  shard.Mesh
	}{
		{"mlp", 1, 1, shard.Mesh{Data: 4, Model: 1}},
		{"mlp", 1, 1, shard.Mesh{Data: 2, Model: 4}},
		{"bert_tiny", 2, 2, shard.Mesh{Data: 2, Model: 2}},
	} {
		t.Run(tc.model+"/"+tc.mesh.String(), func(t *testing.T) {
			ts := startMeshServer(t, b, testCfg, tc.mesh, tc.model)
			ref := loadReference(t, tc.model, tc.nIn, tc.nOut)
			c := client.NewHTTP(ts.httpAddr, nil)
			for _, n := range []int{1, 3, 8} {
				in, want := ref.batch(1, n)
				res, err := c.Infer(ctx, tc.model, &client.InferRequest{Inputs: in})
				if err != nil {
					t.Fatalf("batch %d: %v", n, err)
				}
				checkOutputs(t, res, want)
			}
		})
	}
}

// Concurrent requests are merged into runs on the mesh replica; each gets
// its own rows, and every merged batch is a multiple of the data axis.
func TestMeshReplicaMerges(t *testing.T) {
	b := openMeshBackend(t, 4)
	ts := startMeshServer(t, b, serve.ModelConfig{MaxQueueDelay: 20 * time.Millisecond}, shard.Mesh{Data: 4, Model: 1}, "mlp")
	ref := loadReference(t, "mlp", 1, 1)
	c := client.NewHTTP(ts.httpAddr, nil)
	const n = 24
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, want := ref.batch(i, 1+i%3)
			res, err := c.Infer(context.Background(), "mlp", &client.InferRequest{Inputs: in})
			if err != nil {
				errc <- err
				return
			}
			checkOutputs(t, res, want)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	runs, rows := histogram(t, ts.s, serve.MetricBatchSize, "mlp")
	t.Logf("%d requests (%d rows) in %d runs", n, int(rows), runs)
	if runs >= n {
		t.Fatalf("%d runs for %d concurrent requests: nothing was merged", runs, n)
	}
}

// BenchmarkServeMesh compares one replica data-parallel over 4 host devices
// (--mesh data=4) with 4 replicas, one per device, for the MLP under 64
// concurrent one-row REST clients with dynamic batching:
//
//	go test -run '^$' -bench BenchmarkServeMesh -benchtime 4000x ./serve/
func BenchmarkServeMesh(b *testing.B) {
	backend := openMeshBackend(b, 4)
	ref := loadReference(b, "mlp", 1, 1)
	in, _ := ref.batch(0, 1)
	cfg := serve.ModelConfig{MaxQueueDelay: time.Millisecond}
	for _, mode := range []string{"mesh=data=4", "replicas=4"} {
		b.Run(mode, func(b *testing.B) {
			var ts *testServer
			if mode == "replicas=4" {
				ts = startServer(b, backend, cfg, 4, "mlp")
			} else {
				ts = startMeshServer(b, backend, cfg, shard.Mesh{Data: 4, Model: 1}, "mlp")
			}
			runs0, rows0 := histogramB(b, ts.s, "mlp")
			lat := loadClients(b, ts.httpAddr, "mlp", in, 64)
			runs1, rows1 := histogramB(b, ts.s, "mlp")
			reportLatency(b, lat)
			if runs1 > runs0 {
				b.ReportMetric((rows1-rows0)/float64(runs1-runs0), "rows/run")
			}
		})
	}
}
