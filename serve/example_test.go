package serve_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/serve"
)

// A program can embed the server and run inference in process, through the
// same queue, batching and input checks that HTTP and gRPC requests go
// through, without listening on a port.
func ExampleServer_Infer() {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "cpu", tensorbridge.WithSettings(tensorbridge.Settings{CacheDir: "off"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	s, err := serve.New(ctx, serve.Options{Backend: b, Replicas: 1,
		Models: []serve.ModelSource{{Path: "../testdata/models/mlp.onnx"}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	if err := s.Warmup(ctx); err != nil {
		fmt.Println(err)
		return
	}
	x := make([]byte, 64*4) // one row of 64 float32 zeros
	res, err := s.Infer(ctx, "mlp", "", &serve.InferRequest{Inputs: []serve.Tensor{{Name: "x", DType: ir.Float32, Shape: []int{1, 64}, Data: x}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	out := res.Outputs[0]
	// log_probs is a log-softmax: its exponentials sum to 1.
	sum := 0.0
	for i := 0; i < len(out.Data); i += 4 {
		sum += math.Exp(float64(math.Float32frombits(binary.LittleEndian.Uint32(out.Data[i:]))))
	}
	fmt.Printf("%s %v, probabilities sum to %.4f\n", out.Name, out.Shape, sum)
	// Output:
	// log_probs [1 10], probabilities sum to 1.0000
}
