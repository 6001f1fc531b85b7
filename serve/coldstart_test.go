package serve_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/client"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/serve"
)

// gate holds back the compiles of the batch buckets not in open until
// released, and says which bucket's compile is waiting.
type gate struct {
	open    []int
	waiting chan int
	release chan struct{}
}

func newGate(open ...int) *gate {
	return &gate{open: open, waiting: make(chan int, 16), release: make(chan struct{})}
}

func (g *gate) before(ctx context.Context, batch int) error {
	if slices.Contains(g.open, batch) {
		return nil
	}
	g.waiting <- batch
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newColdServer serves mlp (batch buckets 1, 2, 4, 8) with background
// warm-up, the compiles gated by g, and returns it with its REST API on a
// loopback test server.
func newColdServer(t *testing.T, b *tensorbridge.Backend, replicas int, g *gate) (*serve.Server, *httptest.Server) {
	t.Helper()
	cfg := testCfg
	cfg.MaxBatch = 8
	s, err := serve.New(context.Background(), serve.Options{Backend: b, Replicas: replicas, BackgroundWarmup: true,
		Logger: quietLogger(t), Version: "test",
		Models: []serve.ModelSource{{Path: filepath.Join(modelsDir, "mlp.onnx"), Config: cfg}}})
	if err != nil {
		t.Fatal(err)
	}
	serve.SetBeforeCompile(s, "mlp", g.before)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, hs
}

// readyBody is GET /v2/health/ready's answer.
type readyBody struct {
	Ready  bool `json:"ready"`
	Models map[string]struct {
		Ready    bool  `json:"ready"`
		Compiled []int `json:"batch_buckets_compiled"`
		Pending  []int `json:"batch_buckets_pending"`
	} `json:"models"`
}

func getReady(t *testing.T, hs *httptest.Server) (int, readyBody) {
	t.Helper()
	res, err := http.Get(hs.URL + "/v2/health/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body readyBody
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, body
}

// With background warm-up the server is ready once the smallest batch
// bucket is compiled; the largest compiles next and the others wait
// (gated here, so the order of events is fixed, not timed). While buckets
// 2 and 4 are not compiled, a 3-row request runs in bucket 8, compiles
// nothing, and answers PyTorch's rows; /v2/health/ready's body lists the
// compiled and pending buckets. (Fault injected: runMerged without the pad
// to the next compiled bucket, the 3 rows went to the runtime's bucket 4,
// which compiled on the request path and the misses check failed.)
func TestReadyBeforeEveryBucketCompiles(t *testing.T) {
	b := openBackend(t, batchBuckets(t, ""))
	ref := loadReference(t, "mlp", 1, 1)
	g := newGate(1, 8)
	s, hs := newColdServer(t, b, 1, g)
	defer s.Close()
	if code, _ := getReady(t, hs); code != http.StatusServiceUnavailable {
		t.Fatalf("before warm-up: ready answered %d, want 503", code)
	}
	if err := s.Warmup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !s.Ready() {
		t.Fatal("not ready after the smallest bucket compiled")
	}
	<-g.waiting // bucket 1 and 8 compiled, bucket 2's compile waits
	code, body := getReady(t, hs)
	p := body.Models["mlp"]
	if code != http.StatusOK || !body.Ready || !p.Ready || !slices.Equal(p.Compiled, []int{1, 8}) || !slices.Equal(p.Pending, []int{2, 4}) {
		t.Fatalf("ready: %d %+v; want 200, buckets 1 and 8 compiled, 2 and 4 pending", code, body)
	}
	before, _ := s.CompileMisses("mlp")
	in, want := ref.batch(1, 3)
	res, err := client.NewHTTP(strings.TrimPrefix(hs.URL, "http://"), nil).Infer(context.Background(), "mlp", &client.InferRequest{Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	checkOutputs(t, res, want)
	if after, _ := s.CompileMisses("mlp"); after != before {
		t.Fatalf("a 3-row request compiled %d shapes; want it run in the compiled bucket 8", after-before)
	}
	close(g.release)
}

// Close while background compiles wait stops them: every goroutine the
// server started has returned once Close does. (Fault injected: Close
// without stopping the background warm-ups, the gated compile goroutine
// stayed and the count check failed.)
func TestCloseStopsBackgroundWarmup(t *testing.T) {
	b := openBackend(t, batchBuckets(t, ""))
	base := runtime.NumGoroutine()
	g := newGate(1)
	s, hs := newColdServer(t, b, 1, g)
	if err := s.Warmup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-g.waiting; got != 8 {
		t.Fatalf("after the smallest bucket, bucket %d compiles; want the largest, 8", got)
	}
	hs.Close()
	http.DefaultClient.CloseIdleConnections()
	_ = s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before New:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The replicas of a model share its compiled shapes: on two devices
// warm-up compiles each batch bucket once, and requests spread over both
// replicas answer PyTorch's rows without compiling more. (Fault injected:
// loading each replica with LoadModel again, warm-up compiled 8 shapes
// for 4 buckets and the test failed.)
func TestReplicasShareCompiledShapes(t *testing.T) {
	b := openMeshBackend(t, 2)
	ref := loadReference(t, "mlp", 1, 1)
	cfg := testCfg
	cfg.MaxBatch = 8
	ts := startServer(t, b, cfg, 2, "mlp")
	warm, _ := ts.s.CompileMisses("mlp")
	if warm != 4 {
		t.Fatalf("warm-up compiled %d shapes on 2 replicas, want 4 (batch 1, 2, 4, 8 once)", warm)
	}
	h := client.NewHTTP(ts.httpAddr, nil)
	errc := make(chan error, 16)
	for i := range 16 {
		go func() {
			in, want := ref.batch(i, 1+i%4)
			res, err := h.Infer(context.Background(), "mlp", &client.InferRequest{Inputs: in})
			if err == nil {
				checkOutputs(t, res, want)
			}
			errc <- err
		}()
	}
	for range 16 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := ts.s.CompileMisses("mlp"); n != warm {
		t.Fatalf("requests compiled %d shapes after ready", n-warm)
	}
}

// Model.Replica: a replica keeps answering PyTorch's rows after the model
// it was made from is closed (the shared compiled shapes go with the last
// holder), compiles nothing that model compiled, and a device out of range
// is refused as invalid. (Fault injected: Close releasing the shared
// compiled shapes at once, the replica's run failed with ErrClosed.)
func TestReplicaOutlivesItsOrigin(t *testing.T) {
	b := openBackend(t, batchBuckets(t, ""))
	ref := loadReference(t, "mlp", 1, 1)
	ctx := context.Background()
	first, err := b.LoadModel(ctx, filepath.Join(modelsDir, "mlp.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Replica(ctx, len(b.Devices())); errs.KindOf(err) != errs.InvalidArgument {
		t.Fatalf("replica on device %d of %d: %v, want InvalidArgument", len(b.Devices()), len(b.Devices()), err)
	}
	in, want := ref.batch(0, 3)
	x, err := ir.TensorFromBytes(ir.Float32, []int{3, int(in[0].Shape[1])}, in[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Run(ctx, map[string]*ir.Tensor{"x": x}); err != nil {
		t.Fatal(err)
	}
	rep, err := first.Replica(ctx, len(b.Devices())-1)
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	_ = first.Close()
	_ = first.Close() // a second Close must not release the replica's share
	out, err := rep.Run(ctx, map[string]*ir.Tensor{"x": x})
	if err != nil {
		t.Fatalf("replica after its origin closed: %v", err)
	}
	raw, err := ir.TensorBytes(out["log_probs"])
	if err != nil {
		t.Fatal(err)
	}
	if e := relL2(raw, want[0].Data); e > 1e-4 || math.IsNaN(e) {
		t.Fatalf("replica: relative L2 error %g against PyTorch", e)
	}
	if st := rep.CompileStats(); st.Misses != 1 {
		t.Fatalf("origin and replica compiled %d shapes for one, want 1", st.Misses)
	}
}
