package pjrt_test

import (
	"context"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge/driver"
)

// pseudoRandom fills n float32 values in [-1, 1) from a fixed linear
// congruential sequence, so the test data is the same on every run.
func pseudoRandom(n int, seed uint32) []float32 {
	out := make([]float32, n)
	s := seed
	for i := range out {
		s = s*1664525 + 1013904223 // Numerical Recipes' LCG constants
		out[i] = float32(s>>8)/float32(1<<23) - 1
	}
	return out
}

func randTensor(seed uint32, dims ...int) *tensors.Tensor {
	s := shapes.Make(dtypes.Float32, dims...)
	t := tensors.FromShape(s)
	vals := pseudoRandom(s.Size(), seed)
	_ = tensors.MutableFlatData(t, func(flat []float32) { copy(flat, vals) })
	return t
}

// runGraph builds fn on backend be for the inputs' shapes and runs it.
func runGraph(be backends.Backend, fn func(g *graph.Graph, in []*graph.Node) []*graph.Node, inputs []*tensors.Tensor) (outs [][]float32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	g := graph.NewGraph(be, "diff")
	defer g.Finalize()
	var params []*graph.Node
	var args []any
	for i, x := range inputs {
		params = append(params, graph.Parameter(g, fmt.Sprintf("x%d", i), x.Shape()))
		c, err := x.LocalClone() // a tensor is bound to the first backend it is used on
		if err != nil {
			return nil, err
		}
		args = append(args, c)
	}
	g.Compile(fn(g, params)...)
	for _, t := range g.Run(args...) {
		f32 := graph.MustExecOnce(be, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.Float32) }, t)
		outs = append(outs, tensors.MustCopyFlatData[float32](f32))
	}
	return outs, nil
}

// TestDifferentialSimpleGo runs graphs written with GoMLX's graph package
// (the way the ONNX importer and GoMLX layers use the backend, gradients
// included) on xla-cpu and on GoMLX's independent pure-Go backend, and
// compares the results.
func TestDifferentialSimpleGo(t *testing.T) {
	d, _ := driver.Lookup("xla-cpu")
	if av := d.Probe(context.Background()); !av.Available {
		testreq.Skipf(t, "run scripts/install-plugins.sh xla-cpu: %s", av.Reason)
	}
	xb, err := d.Open(context.Background(), &driver.Options{MemoryFraction: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	defer xb.Close()
	xla := xb.Engine()
	ref, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Finalize()

	for _, tc := range []struct {
		name   string
		inputs []*tensors.Tensor
		fn     func(g *graph.Graph, in []*graph.Node) []*graph.Node
	}{
		{"SoftmaxLogSoftmax", []*tensors.Tensor{randTensor(1, 4, 7)}, func(g *graph.Graph, in []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.Softmax(in[0], -1), graph.LogSoftmax(in[0], 0)}
		}},
		{"DenseTanhWithGradients", []*tensors.Tensor{randTensor(2, 5, 3), randTensor(3, 3, 4), randTensor(4, 4)}, func(g *graph.Graph, in []*graph.Node) []*graph.Node {
			y := graph.Tanh(graph.Add(graph.Dot(in[0], in[1]), graph.ExpandAxes(in[2], 0)))
			loss := graph.ReduceAllSum(graph.Square(y))
			return append([]*graph.Node{y}, graph.Gradient(loss, in[1], in[2])...)
		}},
		{"GatherWithGradient", []*tensors.Tensor{randTensor(8, 6, 3), tensors.FromValue([][]int32{{4}, {0}, {4}, {2}})}, func(g *graph.Graph, in []*graph.Node) []*graph.Node {
			y := graph.Gather(in[0], in[1])
			return append([]*graph.Node{y}, graph.Gradient(graph.ReduceAllSum(graph.Square(y)), in[0])...)
		}},
		{"LayerNormGELU", []*tensors.Tensor{randTensor(9, 3, 8)}, func(g *graph.Graph, in []*graph.Node) []*graph.Node {
			x := in[0]
			mean := graph.ReduceAndKeep(x, graph.ReduceMean, -1)
			c := graph.Sub(x, mean)
			v := graph.ReduceAndKeep(graph.Square(c), graph.ReduceMean, -1)
			n := graph.Mul(c, graph.Rsqrt(graph.AddScalar(v, 1e-5)))
			gelu := graph.Mul(graph.MulScalar(n, 0.5), graph.OnePlus(graph.Erf(graph.MulScalar(n, 1/math.Sqrt2))))
			return []*graph.Node{n, gelu}
		}},
		{"EinsumAndReductions", []*tensors.Tensor{randTensor(10, 2, 3, 4), randTensor(11, 2, 4, 5)}, func(g *graph.Graph, in []*graph.Node) []*graph.Node {
			y := graph.Einsum("bij,bjk->bik", in[0], in[1])
			return []*graph.Node{y, graph.ReduceMax(y, 1), graph.ConvertDType(graph.ArgMax(y, -1), dtypes.Float32), graph.ReduceMin(y, 0, 2)}
		}},
		{"ElementwiseMix", []*tensors.Tensor{randTensor(12, 10)}, func(g *graph.Graph, in []*graph.Node) []*graph.Node {
			x := in[0]
			ax := graph.AddScalar(graph.Abs(x), 0.5)
			return []*graph.Node{graph.Exp(x), graph.Log(ax), graph.Sqrt(ax), graph.Sigmoid(x), graph.Round(graph.MulScalar(x, 4)),
				graph.Floor(graph.MulScalar(x, 3)), graph.Pow(ax, graph.Ceil(x)), graph.Clip(x, graph.Scalar(g, dtypes.Float32, -0.3), graph.Scalar(g, dtypes.Float32, 0.4))}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := runGraph(ref, tc.fn, tc.inputs)
			if err != nil {
				t.Skipf("the reference backend cannot run this graph: %v", err)
			}
			got, err := runGraph(xla, tc.fn, tc.inputs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d outputs, reference has %d", len(got), len(want))
			}
			for i := range want {
				if len(got[i]) != len(want[i]) {
					t.Errorf("output %d: %d values, reference %d", i, len(got[i]), len(want[i]))
					continue
				}
				for j := range want[i] {
					g, w := float64(got[i][j]), float64(want[i][j])
					if math.Abs(g-w) > 2e-5*max(1, math.Abs(w)) {
						t.Errorf("output %d element %d: xla-cpu %g, simplego %g", i, j, g, w)
						break
					}
				}
			}
		})
	}
}

// TestGradientsNumerically checks the gradients GoMLX derives for
// convolutions and pooling (transposed and dilated convolutions, pads,
// reverses, select-and-scatter) against central finite differences of the
// loss, all in float64 on xla-cpu. The reference is the definition of the
// derivative; simplego cannot serve here as it lacks Pad and Reverse.
func TestGradientsNumerically(t *testing.T) {
	d, _ := driver.Lookup("xla-cpu")
	if av := d.Probe(context.Background()); !av.Available {
		testreq.Skipf(t, "run scripts/install-plugins.sh xla-cpu: %s", av.Reason)
	}
	xb, err := d.Open(context.Background(), &driver.Options{MemoryFraction: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	defer xb.Close()
	eng := xb.Engine()

	rand64 := func(seed uint32, dims ...int) []float64 {
		f := pseudoRandom(shapes.Make(dtypes.Float64, dims...).Size(), seed)
		out := make([]float64, len(f))
		for i, v := range f {
			out[i] = float64(v)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		dims [][]int
		loss func(in []*graph.Node) *graph.Node
	}{
		{"Conv2DStridedSame", [][]int{{2, 6, 5, 3}, {3, 3, 3, 4}}, func(in []*graph.Node) *graph.Node {
			y := graph.Convolve(in[0], in[1]).StridePerAxis(2, 1).PadSame().Done()
			return graph.ReduceAllSum(graph.Mul(y, graph.Sin(y)))
		}},
		{"Conv1DDilated", [][]int{{1, 9, 2}, {3, 2, 3}}, func(in []*graph.Node) *graph.Node {
			y := graph.Convolve(in[0], in[1]).DilationPerAxis(2).NoPadding().Done()
			return graph.ReduceAllSum(graph.Square(y))
		}},
		{"MeanPool", [][]int{{1, 6, 6, 2}}, func(in []*graph.Node) *graph.Node {
			y := graph.MeanPool(in[0]).Window(3).Strides(2).Done()
			return graph.ReduceAllSum(graph.Square(y))
		}},
		{"MaxPool", [][]int{{1, 4, 6, 2}}, func(in []*graph.Node) *graph.Node {
			y := graph.MaxPool(in[0]).Window(2).Done()
			return graph.ReduceAllSum(graph.Mul(y, y))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.dims)
			lossExec := graph.MustNewExec(eng, func(in []*graph.Node) *graph.Node { return tc.loss(in) })
			defer lossExec.Finalize()
			gradExec := graph.MustNewExec(eng, func(in []*graph.Node) []*graph.Node { return graph.Gradient(tc.loss(in), in...) })
			defer gradExec.Finalize()
			vals := make([][]float64, n)
			for i, dims := range tc.dims {
				vals[i] = rand64(uint32(20+i), dims...)
			}
			args := func() []any {
				out := make([]any, n)
				for i, dims := range tc.dims {
					tt := tensors.FromShape(shapes.Make(dtypes.Float64, dims...))
					_ = tensors.MutableFlatData(tt, func(flat []float64) { copy(flat, vals[i]) })
					out[i] = tt
				}
				return out
			}
			grads := gradExec.MustExec(args()...)
			const eps = 1e-6
			for i := range n {
				g := tensors.MustCopyFlatData[float64](grads[i])
				for j := range vals[i] {
					orig := vals[i][j]
					vals[i][j] = orig + eps
					up := lossExec.MustExec(args()...)[0].Value().(float64)
					vals[i][j] = orig - eps
					down := lossExec.MustExec(args()...)[0].Value().(float64)
					vals[i][j] = orig
					num := (up - down) / (2 * eps)
					if math.Abs(num-g[j]) > 1e-6*max(1, math.Abs(num)) {
						t.Fatalf("input %d element %d: gradient %g, finite difference %g", i, j, g[j], num)
					}
				}
			}
		})
	}
}
