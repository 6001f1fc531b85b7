package tensorbridge_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Open the embedded cpu backend, compile y = 2x + 1 and run it.
func Example() {
	ctx := context.Background()
	b, err := tensorbridge.Open(ctx, "cpu")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	exe, err := b.Compile(ctx, "affine", func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return []*ir.Node{graph.AddScalar(graph.MulScalar(in[0], 2), 1)}, nil
	}, ir.MakeShape(ir.Float32, 3))
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := exe.Run(ctx, tensors.FromValue([]float32{1, 2, 3}))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(b.Name(), out[0].Value())
	// Output: cpu [3 5 7]
}

// Asking for a backend that is not there is an error that says why and
// lists what is available; errors.Is classifies it.
func ExampleOpen_unavailable() {
	_, err := tensorbridge.Open(context.Background(), "quantum")
	fmt.Println(errors.Is(err, tensorbridge.ErrUnavailable))
	var ue *tensorbridge.UnavailableError
	if errors.As(err, &ue) {
		fmt.Println(ue.Name, "-", ue.Reason)
	}
	// Output:
	// true
	// quantum - unknown backend name; known names are cpu, cuda, rocm, tpu, xla-cpu and "auto"
}
