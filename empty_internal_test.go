package tensorbridge

import (
	"context"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/tensorbridge/tensorbridge/ir"
)

// TestZeroBroadcast: GoMLX's shape inference broadcasts an axis of size 0
// against one of size 1 to size 1 (it takes the larger), where numpy and
// ONNX give 0: Sub of a [2, 0] and a [2, 1] tensor claims [2, 1]. Such a
// graph is not run on an empty request (runEmpty), and zeroBroadcast names
// the node; graphs where a zero axis legitimately grows (Pad, Concatenate)
// or stays zero pass. Fault injected: with zeroBroadcast returning nil,
// the Sub case is missed and this test fails.
func TestZeroBroadcast(t *testing.T) {
	b, err := Open(context.Background(), "cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cases := []struct {
		name  string
		build func(x, one *graph.Node) *graph.Node
		bad   bool
	}{
		{"Sub [2 0] - [2 1]", func(x, one *graph.Node) *graph.Node { return graph.Sub(x, one) }, true},
		{"Mul [2 1] * [2 0]", func(x, one *graph.Node) *graph.Node { return graph.Mul(one, x) }, true},
		{"Sub [2 0] - [2 0]", func(x, one *graph.Node) *graph.Node { return graph.Sub(x, x) }, false},
		{"Concatenate", func(x, one *graph.Node) *graph.Node { return graph.Concatenate([]*graph.Node{x, one}, 1) }, false},
		{"Pad", func(x, one *graph.Node) *graph.Node {
			return graph.Pad(x, graph.ScalarZero(x.Graph(), x.DType()), graph.PadAxis{}, graph.PadAxis{End: 1})
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := ir.NewGraph(b.drv.Engine(), "zero-broadcast")
			defer g.Finalize()
			x := ir.Parameter(g, "x", ir.MakeShape(ir.Float32, 2, 0))
			one := ir.Parameter(g, "one", ir.MakeShape(ir.Float32, 2, 1))
			tc.build(x, one)
			err := zeroBroadcast(g)
			if got := err != nil; got != tc.bad {
				t.Fatalf("zeroBroadcast = %v, want an error: %v", err, tc.bad)
			}
			if tc.bad && !strings.Contains(err.Error(), "an axis of size 0 broadcast to 1") {
				t.Errorf("error %q does not say what was broadcast", err)
			}
		})
	}
}
