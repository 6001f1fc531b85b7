package tensorbridge_test

import (
	"context"
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

// Asking for a backend that is not there is an error that says what is.
func ExampleOpen_unavailable() {
	_, err := tensorbridge.Open(context.Background(), "tpu")
	fmt.Println(err)
	// Output: tpu is unavailable: its driver is not built into this binary (it is provided by github.com/tensorbridge/tensorbridge/pjrt) (available: cpu)
}
