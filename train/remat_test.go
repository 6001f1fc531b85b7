package train

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestRemat: three blocks (a product, a bias, tanh, a random-number-free
// elementwise mix) under Remat give the value and the gradients of the
// same blocks differentiated by GoMLX directly (its autodiff is the
// independent reference), and the backward pass reads none of the
// blocks' intermediate nodes: only their inputs (that is what saves the
// memory). The guards were proved by injecting their faults: with Remat
// returning fn's plain value the backward pass reads the forward
// intermediates; with a block's bias left out of the recomputation's
// gradients the values differ.
func TestRemat(t *testing.T) {
	if !RematSupported() {
		t.Fatal("RematSupported: GoMLX's Node lacks the fields Remat sets")
	}
	eng, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Finalize()
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(dims ...int) *tensors.Tensor {
		v := make([]float32, dims[0]*dims[1])
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.5)
		}
		return tensors.FromFlatDataAndDimensions(v, dims...)
	}
	const blocks = 3
	args := []any{fill(4, 6)}
	for range blocks {
		args = append(args, fill(6, 6), fill(1, 6))
	}
	block := func(in []*graph.Node) []*graph.Node {
		x, w, b := in[0], in[1], in[2]
		h := graph.Tanh(graph.Add(graph.Einsum("ni,io->no", x, w), graph.BroadcastToDims(b, x.Shape().Dimensions...)))
		return []*graph.Node{graph.Add(x, graph.Mul(h, graph.Sigmoid(h)))}
	}
	var intermediates [][2]graph.NodeId // each block's forward nodes, by id range
	run := func(remat bool) [][]float32 {
		intermediates = nil
		exec := graph.MustNewExec(eng, func(p []*graph.Node) []*graph.Node {
			x := p[0]
			for k := range blocks {
				in := []*graph.Node{x, p[1+2*k], p[2+2*k]}
				if !remat {
					x = block(in)[0]
					continue
				}
				lo := x.Graph().LastNode().Id()
				out, ok := Remat(block, in...)
				if !ok {
					t.Fatal("Remat could not set GoMLX's node fields")
				}
				intermediates = append(intermediates, [2]graph.NodeId{lo, out[0].Id()})
				x = out[0]
			}
			loss := graph.ReduceAllSum(graph.Mul(graph.Sin(x), graph.AddScalar(x, 2)))
			start := x.Graph().LastNode().Id()
			grads := graph.Gradient(loss, p...)
			if remat {
				checkBackwardReads(t, x.Graph(), start, intermediates)
			}
			return append([]*graph.Node{loss}, grads...)
		})
		var res [][]float32
		for _, o := range exec.MustExec(args...) {
			o.ConstFlatData(func(flat any) { res = append(res, append([]float32(nil), flat.([]float32)...)) })
		}
		return res
	}
	want, got := run(false), run(true)
	for k := range want {
		for i := range want[k] {
			if got[k][i] != want[k][i] {
				t.Fatalf("output %d (loss, then the gradients), element %d: %v under Remat, %v without", k, i, got[k][i], want[k][i])
			}
		}
	}
}

// checkBackwardReads fails when a node made after start (the backward
// pass) reads a node strictly inside one of the blocks' forward id ranges
// (constants excepted: GoMLX shares scalar constants across the graph).
func checkBackwardReads(t *testing.T, g *graph.Graph, start graph.NodeId, blocks [][2]graph.NodeId) {
	t.Helper()
	for _, n := range g.Nodes() {
		if n.Id() <= start {
			continue
		}
		for _, in := range n.Inputs() {
			if in.Type() == graph.NodeTypeConstant {
				continue
			}
			for k, r := range blocks {
				if in.Id() > r[0] && in.Id() < r[1] {
					t.Fatalf("backward node %s reads block %d's forward node %s", n, k, in)
				}
			}
		}
	}
}
