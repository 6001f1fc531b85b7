package serve_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/tensorbridge/tensorbridge/client"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/serve"
)

// After ready nothing compiles on the request path: warm-up compiled every
// batch size the batcher forms (max batch 4: buckets 1, 2, 4 under the
// default power-of-two rule), so requests of 1..4 rows, alone and merged
// under concurrency, leave the replicas' compile misses where warm-up left
// them and still answer PyTorch's outputs. A request of 6 rows would run
// at bucket 8, which warm-up did not compile: refused with 400 naming the
// warmed sizes; with AllowCompile it runs and compiles once. (Fault
// injected: with admit returning nil the 6-row request compiles and the
// test fails on the misses.)
func TestNothingCompilesAfterReady(t *testing.T) {
	b := openBackend(t, batchBuckets(t, ""))
	ref := loadReference(t, "mlp", 1, 1)
	for _, allow := range []bool{false, true} {
		name := map[bool]string{false: "refuse", true: "allow-compile"}[allow]
		t.Run(name, func(t *testing.T) {
			cfg := testCfg
			cfg.MaxBatch, cfg.AllowCompile = 4, allow
			ts := startServer(t, b, cfg, 1, "mlp")
			warm, ok := ts.s.CompileMisses("mlp")
			if !ok || warm != 3 {
				t.Fatalf("warm-up compiled %d shapes (model known: %v), want 3 (batch 1, 2, 4)", warm, ok)
			}
			ctx := context.Background()
			h := client.NewHTTP(ts.httpAddr, nil)
			var wg sync.WaitGroup
			errc := make(chan error, 64)
			for i := 0; i < 64; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					in, want := ref.batch(i, 1+i%4)
					res, err := h.Infer(ctx, "mlp", &client.InferRequest{Inputs: in})
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
			if n, _ := ts.s.CompileMisses("mlp"); n != warm {
				t.Fatalf("requests of 1..4 rows compiled %d shapes after ready", n-warm)
			}
			in, want := ref.batch(0, 6)
			res, err := h.Infer(ctx, "mlp", &client.InferRequest{Inputs: in})
			n, _ := ts.s.CompileMisses("mlp")
			if allow {
				if err != nil {
					t.Fatal(err)
				}
				checkOutputs(t, res, want)
				if n != warm+1 {
					t.Fatalf("6 rows with AllowCompile compiled %d shapes, want 1", n-warm)
				}
				return
			}
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != 400 || !strings.Contains(ce.Message, "batch in [1 2 4]") || !strings.Contains(ce.Message, "--allow-compile") {
				t.Fatalf("6 rows: %v; want 400 naming the warmed sizes", err)
			}
			if n != warm {
				t.Fatalf("a refused request compiled %d shapes", n-warm)
			}
		})
	}
}

// A model whose shapes warm-up cannot know (a symbolic dimension without
// configured sizes) is refused at load, naming the model, its file, every
// such dimension and the --buckets entries that fix it, unless
// AllowCompile. Proved once by returning at the first missing dimension,
// as before: quant_unet's message named H alone and the test failed.
func TestWarmupMustKnowShapes(t *testing.T) {
	b := openBackend(t, batchBuckets(t, "batch=1,2"))
	for _, c := range []struct{ model, says string }{
		{"bert_tiny", `model bert_tiny (../testdata/models/bert_tiny.onnx): warm-up cannot know every shape a request may bring: dimension "sequence" has no configured sizes (add sequence=... to --buckets); nothing compiles after ready unless --allow-compile is given`},
		{"quant_unet", `model quant_unet (../testdata/models/quant_unet.onnx): warm-up cannot know every shape a request may bring: dimensions "H" and "W" have no configured sizes (add H=...;W=... to --buckets)`},
	} {
		src := []serve.ModelSource{{Name: c.model, Path: modelsDir + "/" + c.model + ".onnx", Config: testCfg}}
		_, err := serve.New(context.Background(), serve.Options{Backend: b, Models: src, Logger: quietLogger(t), Version: "test"})
		if err == nil || !strings.Contains(err.Error(), c.says) || errs.KindOf(err) != errs.InvalidArgument {
			t.Fatalf("%s without sizes: %v\nwant %s", c.model, err, c.says)
		}
		src[0].Config.AllowCompile = true
		s, err := serve.New(context.Background(), serve.Options{Backend: b, Models: src, Logger: quietLogger(t), Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
	}
}
