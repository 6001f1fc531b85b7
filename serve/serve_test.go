package serve_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tensorbridge/tensorbridge/client"
	"github.com/tensorbridge/tensorbridge/serve"
	pb "github.com/tensorbridge/tensorbridge/serve/inferencepb"
)

// inferer is what both transports of package client offer.
type inferer interface {
	Infer(ctx context.Context, model string, req *client.InferRequest) (*client.InferResponse, error)
	ModelMetadata(ctx context.Context, model string) (*client.ModelMetadata, error)
	ServerMetadata(ctx context.Context) (*client.ServerMetadata, error)
	Live(ctx context.Context) (bool, error)
	Ready(ctx context.Context) (bool, error)
	ModelReady(ctx context.Context, model string) (bool, error)
}

type transport struct {
	name string
	c    inferer
	json bool
}

func transports(t *testing.T, ts *testServer) []transport {
	g, err := client.DialGRPC(ts.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	h := client.NewHTTP(ts.httpAddr, nil)
	return []transport{{"http-binary", h, false}, {"http-json", h, true}, {"grpc", g, false}}
}

var testCfg = serve.ModelConfig{MaxQueueDelay: 2 * time.Millisecond}

const testBuckets = "batch=1,2,4,8;sequence=9,16"

func TestMetadataAndHealth(t *testing.T) {
	b := openBackend(t, batchBuckets(t, testBuckets))
	ts := startServer(t, b, testCfg, 1, "mlp", "bert_tiny")
	ctx := context.Background()
	for _, tr := range transports(t, ts)[1:] {
		t.Run(tr.name, func(t *testing.T) {
			for _, f := range []func(context.Context) (bool, error){tr.c.Live, tr.c.Ready} {
				if ok, err := f(ctx); err != nil || !ok {
					t.Fatalf("live/ready: %v %v", ok, err)
				}
			}
			if ok, err := tr.c.ModelReady(ctx, "bert_tiny"); err != nil || !ok {
				t.Fatalf("model ready: %v %v", ok, err)
			}
			sm, err := tr.c.ServerMetadata(ctx)
			if err != nil || sm.Name != "tensorbridge" || !slices.Contains(sm.Extensions, "binary_tensor_data") {
				t.Fatalf("server metadata %+v, %v", sm, err)
			}
			md, err := tr.c.ModelMetadata(ctx, "bert_tiny")
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("%s %s in=%v out=%v", md.Name, md.Platform, md.Inputs, md.Outputs)
			want := "bert_tiny onnx_onnxv1 in=[{input_ids INT64 [-1 -1]} {attention_mask INT64 [-1 -1]}] out=[{hidden FP32 [-1 -1 64]} {pooled FP32 [-1 64]}]"
			if got != want {
				t.Fatalf("model metadata\n got %s\nwant %s", got, want)
			}
			md, err = tr.c.ModelMetadata(ctx, "mlp")
			if err != nil || fmt.Sprint(md.Inputs) != "[{x FP32 [-1 64]}]" {
				t.Fatalf("mlp metadata %+v, %v", md, err)
			}
			_, err = tr.c.ModelMetadata(ctx, "nope")
			var ce *client.Error
			if !errors.As(err, &ce) || (ce.Status != http.StatusNotFound && ce.Code != codes.NotFound) || !strings.Contains(ce.Message, `"nope"`) {
				t.Fatalf("unknown model metadata: %v", err)
			}
		})
	}
	conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, svc := range []string{"", "mlp"} {
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("grpc health %q: %v %v", svc, r, err)
		}
	}
}

// Batches of 1, 3 and 8 rows over each transport match PyTorch's outputs
// for the same rows.
func TestInferMatchesPyTorch(t *testing.T) {
	b := openBackend(t, batchBuckets(t, testBuckets))
	ts := startServer(t, b, testCfg, 1, "mlp", "bert_tiny")
	refs := map[string]reference{"mlp": loadReference(t, "mlp", 1, 1), "bert_tiny": loadReference(t, "bert_tiny", 2, 2)}
	ctx := context.Background()
	for _, tr := range transports(t, ts) {
		for _, model := range []string{"mlp", "bert_tiny"} {
			for _, n := range []int{1, 3, 8} {
				t.Run(fmt.Sprintf("%s/%s/%d", tr.name, model, n), func(t *testing.T) {
					in, want := refs[model].batch(1, n)
					res, err := tr.c.Infer(ctx, model, &client.InferRequest{ID: "req-7", Inputs: in, JSON: tr.json})
					if err != nil {
						t.Fatal(err)
					}
					if res.ID != "req-7" || res.ModelName != model {
						t.Fatalf("id %q model %q", res.ID, res.ModelName)
					}
					checkOutputs(t, res, want)
				})
			}
		}
	}
	// One requested output only.
	in, want := refs["bert_tiny"].batch(0, 2)
	res, err := client.NewHTTP(ts.httpAddr, nil).Infer(ctx, "bert_tiny", &client.InferRequest{Inputs: in, Outputs: []string{"pooled"}})
	if err != nil || len(res.Outputs) != 1 {
		t.Fatalf("outputs %v, %v", res, err)
	}
	checkOutputs(t, res, want[1:])
}

// Concurrent requests of mixed sizes are merged into shared runs and each
// still gets exactly its own rows' answers.
func TestConcurrentRequestsMerge(t *testing.T) {
	b := openBackend(t, batchBuckets(t, testBuckets))
	ts := startServer(t, b, serve.ModelConfig{MaxQueueDelay: 20 * time.Millisecond}, 1, "mlp")
	ref := loadReference(t, "mlp", 1, 1)
	g, err := client.DialGRPC(ts.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const n = 48
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := 1 + i%3
			in, want := ref.batch(i, rows)
			var c inferer = g
			if i%2 == 0 {
				c = client.NewHTTP(ts.httpAddr, nil)
			}
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
	if int(rows) != n/3*(1+2+3) {
		t.Fatalf("batch-size histogram counts %v rows, want %d", rows, n/3*6)
	}
}

// histogram returns the sample count and sum of a model's histogram.
func histogram(t *testing.T, s *serve.Server, name, model string) (uint64, float64) {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
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
	t.Fatalf("no %s for model %s", name, model)
	return 0, 0
}

// Each bad request gets a 4xx with a message naming the problem, and the
// server keeps answering.
func TestBadRequests(t *testing.T) {
	b := openBackend(t, batchBuckets(t, testBuckets))
	ts := startServer(t, b, testCfg, 1, "mlp")
	ref := loadReference(t, "mlp", 1, 1)
	good, want := ref.batch(0, 2)
	goodBody, headerLen, err := client.EncodeHTTPInfer(&client.InferRequest{Inputs: good})
	if err != nil {
		t.Fatal(err)
	}
	jsonInput := func(name, dt, shape, data string) string {
		return fmt.Sprintf(`{"inputs":[{"name":%q,"datatype":%q,"shape":%s,"data":%s}]}`, name, dt, shape, data)
	}
	row := "[" + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + "]"
	cases := []struct {
		name, model, body string
		headerLen         string
		status            int
		says              string
	}{
		{"malformed JSON", "mlp", `{"inputs": [`, "", 400, "malformed JSON"},
		{"not JSON", "mlp", "hello", "", 400, "malformed JSON"},
		{"no inputs", "mlp", `{"inputs": []}`, "", 400, "no inputs"},
		{"unknown model", "resnet", jsonInput("x", "FP32", "[1,64]", row), "", 404, `unknown model "resnet"`},
		{"unknown input", "mlp", jsonInput("y", "FP32", "[1,64]", row), "", 400, `unknown input "y"`},
		{"wrong dtype", "mlp", jsonInput("x", "FP64", "[1,64]", row), "", 400, "dtype: expected FP32, got FP64"},
		{"unknown datatype", "mlp", jsonInput("x", "FLOAT", "[1,64]", row), "", 400, `"FLOAT"`},
		{"wrong static dim", "mlp", jsonInput("x", "FP32", "[2,32]", row), "", 400, "dimension 1 is 64"},
		{"wrong rank", "mlp", jsonInput("x", "FP32", "[64]", row), "", 400, "shape"},
		{"too few elements", "mlp", jsonInput("x", "FP32", "[2,64]", row), "", 400, "value: expected 128 FP32 elements (512 bytes) for shape [2 64], got 64 elements in 257 bytes of JSON data"},
		{"too many elements", "mlp", jsonInput("x", "FP32", "[1,64]", "["+strings.Repeat("1,", 64)+"1]"), "", 400, "value: expected 64 FP32 elements (256 bytes) for shape [1 64], got 65 elements in 131 bytes of JSON data"},
		{"not a number", "mlp", jsonInput("x", "FP32", "[1,64]", strings.Replace(row, "0.5", `"a"`, 1)), "", 400, "want a number"},
		{"more elements than the data holds", "mlp", jsonInput("x", "FP32", "[8,64]", "[1,2]"), "", 400, "value: expected 512 FP32 elements (2048 bytes) for shape [8 64], got 2 elements in 5 bytes of JSON data"},
		{"short data (issue 25's wording)", "mlp", jsonInput("x", "FP32", "[1,64]", "[1,2,3]"), "", 400, `invalid input "x": value: expected 64 FP32 elements (256 bytes) for shape [1 64], got 3 elements in 7 bytes of JSON data`},
		{"80-byte request", "mlp", `{"inputs":[{"name":"x","shape":[137438953472],"datatype":"FP64","data":[1]}]}`, "", 400, "dtype"},
		{"unknown model first", "nosuchmodel", `{"inputs":[{"name":"x","shape":[137438953472],"datatype":"FP64","data":[1]}]}`, "", 404, "unknown model"},
		{"negative dim", "mlp", jsonInput("x", "FP32", "[-1,64]", row), "", 400, "negative dimension"},
		{"unknown output", "mlp", `{"inputs":[{"name":"x","datatype":"FP32","shape":[1,64],"data":` + row + `}],"outputs":[{"name":"probs"}]}`, "", 400, `unknown output "probs"`},
		{"classification", "mlp", `{"inputs":[{"name":"x","datatype":"FP32","shape":[1,64],"data":` + row + `}],"outputs":[{"name":"log_probs","parameters":{"classification":3}}]}`, "", 400, "classification extension is not supported"},
		{"binary size beyond body", "mlp", string(goodBody[:headerLen]) + "abc", fmt.Sprint(headerLen), 400, "binary_data_size"},
		{"header length beyond body", "mlp", string(goodBody), "999999", 400, "Inference-Header-Content-Length"},
		{"trailing binary", "mlp", string(goodBody) + "xyz", fmt.Sprint(headerLen), 400, "3 bytes after"},
		{"version", "mlp/versions/2", jsonInput("x", "FP32", "[1,64]", row), "", 404, "no version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, "http://"+ts.httpAddr+"/v2/models/"+c.model+"/infer", strings.NewReader(c.body))
			if c.headerLen != "" {
				req.Header.Set("Inference-Header-Content-Length", c.headerLen)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var eb struct{ Error string }
			if err := json.Unmarshal(body, &eb); err != nil {
				t.Fatalf("status %d, body not JSON: %q", resp.StatusCode, body)
			}
			if resp.StatusCode != c.status || !strings.Contains(eb.Error, c.says) {
				t.Fatalf("status %d %q; want %d with %q", resp.StatusCode, eb.Error, c.status, c.says)
			}
		})
	}
	g, err := client.DialGRPC(ts.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := context.Background()
	bad64 := good[0]
	bad64.Datatype = "FP64"
	short := good[0]
	short.Data = short.Data[:len(short.Data)-4]
	renamed := good[0]
	renamed.Name = "y"
	gcases := []struct {
		name, model string
		in          client.Tensor
		code        codes.Code
		says        string
	}{
		{"wrong dtype", "mlp", bad64, codes.InvalidArgument, "expected FP32, got FP64"},
		{"short data", "mlp", short, codes.InvalidArgument, "512 bytes"},
		{"unknown input", "mlp", renamed, codes.InvalidArgument, `unknown input "y"`},
		{"unknown model", "resnet", good[0], codes.NotFound, `unknown model "resnet"`},
	}
	for _, c := range gcases {
		t.Run("grpc/"+c.name, func(t *testing.T) {
			_, err := g.Infer(ctx, c.model, &client.InferRequest{Inputs: []client.Tensor{c.in}})
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Code != c.code || !strings.Contains(ce.Message, c.says) {
				t.Fatalf("got %v; want %s with %q", err, c.code, c.says)
			}
		})
	}
	// Still alive and answering.
	res, err := client.NewHTTP(ts.httpAddr, nil).Infer(ctx, "mlp", &client.InferRequest{Inputs: good})
	if err != nil {
		t.Fatal(err)
	}
	checkOutputs(t, res, want)
	if got := counter(t, ts.s, "mlp", "bad_request"); got < float64(len(cases)-2) {
		t.Fatalf("bad_request count %v", got)
	}
}

// counter reads requests_total for a model and outcome.
func counter(t testing.TB, s *serve.Server, model, outcome string) float64 {
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != serve.MetricRequests {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["model"] == model && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A request whose timeout has passed gets 503 with the reason; the server
// is not ready, with 503, before warm-up.
func TestTimeoutAndNotReady(t *testing.T) {
	b := openBackend(t, batchBuckets(t, testBuckets))
	ts := startServer(t, b, testCfg, 1, "mlp")
	ref := loadReference(t, "mlp", 1, 1)
	in, _ := ref.batch(0, 1)
	_, err := client.NewHTTP(ts.httpAddr, nil).Infer(context.Background(), "mlp", &client.InferRequest{Inputs: in, Timeout: time.Microsecond})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 503 || !strings.Contains(ce.Message, "timeout expired") {
		t.Fatalf("got %v, want 503 timeout", err)
	}

	s, err := serve.New(context.Background(), serve.Options{Backend: b, Logger: quietLogger(t), Replicas: 1,
		Models: []serve.ModelSource{{Path: modelsDir + "/mlp.onnx"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	for _, path := range []string{"/v2/health/ready", "/v2/models/mlp/ready"} {
		rec := httptestGet(h, path)
		if rec.status != 503 {
			t.Fatalf("%s before warm-up: %d", path, rec.status)
		}
	}
	body, hl, _ := client.EncodeHTTPInfer(&client.InferRequest{Inputs: in})
	rec := httptestPost(h, "/v2/models/mlp/infer", body, hl)
	if rec.status != 503 || !strings.Contains(rec.body, "not ready") {
		t.Fatalf("infer before warm-up: %d %s", rec.status, rec.body)
	}
	if err := s.Warmup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec := httptestGet(h, "/v2/health/ready"); rec.status != 200 {
		t.Fatalf("ready after warm-up: %d", rec.status)
	}
	if rec := httptestGet(h, "/metrics"); rec.status != 200 || !strings.Contains(rec.body, serve.MetricCompiled+`{model="mlp"} 4`) {
		t.Fatalf("metrics after warming 4 batch sizes: %d\n%s", rec.status, grepLines(rec.body, "tensorbridge_"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

type recorded struct {
	status int
	body   string
}

func httptestGet(h http.Handler, path string) recorded {
	req, _ := http.NewRequest(http.MethodGet, path, nil)
	return serveRec(h, req)
}

func httptestPost(h http.Handler, path string, body []byte, headerLen int) recorded {
	req, _ := http.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	if headerLen >= 0 {
		req.Header.Set("Inference-Header-Content-Length", fmt.Sprint(headerLen))
	}
	return serveRec(h, req)
}

func serveRec(h http.Handler, req *http.Request) recorded {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return recorded{status: rec.Code, body: rec.Body.String()}
}

// gRPC inputs in typed contents (instead of raw_input_contents) are read
// as well: FP32 for mlp, INT64 for bert_tiny.
func TestGRPCTypedContents(t *testing.T) {
	b := openBackend(t, batchBuckets(t, testBuckets))
	ts := startServer(t, b, testCfg, 1, "mlp", "bert_tiny")
	conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)
	for _, model := range []string{"mlp", "bert_tiny"} {
		nIn := map[string]int{"mlp": 1, "bert_tiny": 2}[model]
		ref := loadReference(t, model, nIn, nIn)
		in, want := ref.batch(0, 3)
		req := &pb.ModelInferRequest{ModelName: model}
		for _, x := range in {
			contents := &pb.InferTensorContents{}
			for i := 0; i < len(x.Data); i += map[string]int{"FP32": 4, "INT64": 8}[x.Datatype] {
				switch x.Datatype {
				case "FP32":
					contents.Fp32Contents = append(contents.Fp32Contents, math.Float32frombits(binary.LittleEndian.Uint32(x.Data[i:])))
				case "INT64":
					contents.Int64Contents = append(contents.Int64Contents, int64(binary.LittleEndian.Uint64(x.Data[i:])))
				}
			}
			req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: x.Name, Datatype: x.Datatype, Shape: x.Shape, Contents: contents})
		}
		resp, err := c.ModelInfer(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		got := &client.InferResponse{}
		for i, o := range resp.GetOutputs() {
			got.Outputs = append(got.Outputs, client.Tensor{Name: o.GetName(), Datatype: o.GetDatatype(), Shape: o.GetShape(), Data: resp.GetRawOutputContents()[i]})
		}
		checkOutputs(t, got, want)
	}
	// A count that does not match the shape is refused.
	_, err = c.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "mlp", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 64}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2}}}}})
	if st, _ := grpcstatus.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "expected 64 FP32 elements (256 bytes) for shape [1 64], got 2 elements in typed contents") {
		t.Fatalf("short contents: %v", err)
	}
}
