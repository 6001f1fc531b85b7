package train

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Gradients GoMLX v0.26.0 lacks for ops the ONNX importer emits, added
// through its VJP registration (graph.VJPRegistration) when this package is
// loaded, before any graph is built. An entry GoMLX (or another package)
// already has is left alone.
//
// Rsqrt (LayerNormalization, BatchNormalization): y = x^(-1/2), so
// dy/dx = -1/2 x^(-3/2) = -1/2 y^3.
func init() {
	if _, ok := graph.VJPRegistration[graph.NodeTypeRsqrt]; !ok {
		graph.VJPRegistration[graph.NodeTypeRsqrt] = func(node *graph.Node, v []*graph.Node, _ shapes.Shape) []*graph.Node {
			y3 := graph.Mul(graph.Mul(node, node), node)
			return []*graph.Node{graph.Mul(v[0], graph.MulScalar(y3, -0.5))}
		}
	}
}
