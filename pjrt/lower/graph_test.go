package lower

import (
	"errors"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/ir"
)

// textBackend is a GoMLX backend that lowers graphs and keeps the program
// instead of compiling it, so GoMLX's own graph functions can be checked
// against the StableHLO they produce without any plugin.
type textBackend struct {
	devices int
	last    *Program
}

var errNoRuntime = errors.New("textBackend has no runtime")

func (t *textBackend) Name() string                                { return "text" }
func (t *textBackend) String() string                              { return "text" }
func (t *textBackend) Description() string                         { return "StableHLO text only" }
func (t *textBackend) NumDevices() int                             { return t.devices }
func (t *textBackend) DeviceDescription(backends.DeviceNum) string { return "none" }
func (t *textBackend) Capabilities() backends.Capabilities         { return backends.Capabilities{} }
func (t *textBackend) Builder(name string) backends.Builder {
	return &textBuilder{Builder: New(name, t.devices), be: t}
}
func (t *textBackend) Finalize()                            {}
func (t *textBackend) IsFinalized() bool                    { return false }
func (t *textBackend) BufferFinalize(backends.Buffer) error { return errNoRuntime }
func (t *textBackend) BufferShape(backends.Buffer) (shapes.Shape, error) {
	return shapes.Invalid(), errNoRuntime
}
func (t *textBackend) BufferDeviceNum(backends.Buffer) (backends.DeviceNum, error) {
	return 0, errNoRuntime
}
func (t *textBackend) BufferToFlatData(backends.Buffer, any) error { return errNoRuntime }
func (t *textBackend) BufferFromFlatData(backends.DeviceNum, any, shapes.Shape) (backends.Buffer, error) {
	return nil, errNoRuntime
}
func (t *textBackend) HasSharedBuffers() bool { return false }
func (t *textBackend) NewSharedBuffer(backends.DeviceNum, shapes.Shape) (backends.Buffer, any, error) {
	return nil, nil, errNoRuntime
}
func (t *textBackend) BufferData(backends.Buffer) (any, error) { return nil, errNoRuntime }
func (t *textBackend) BufferCopyToDevice(backends.Buffer, backends.DeviceNum) (backends.Buffer, error) {
	return nil, errNoRuntime
}

type textBuilder struct {
	*Builder
	be *textBackend
}

func (b *textBuilder) Compile(outputs []backends.Op, shardings []*backends.ShardingSpec) (backends.Executable, error) {
	p, err := b.Finish(outputs, shardings)
	if err != nil {
		return nil, err
	}
	b.be.last = p
	return textExec{p}, nil
}

type textExec struct{ p *Program }

func (x textExec) Finalize() {}
func (x textExec) Inputs() ([]string, []shapes.Shape) {
	return x.p.ParamNames, x.p.ParamShapes
}
func (x textExec) Outputs() []shapes.Shape { return x.p.OutputShapes }
func (x textExec) Execute([]backends.Buffer, []bool, backends.DeviceNum) ([]backends.Buffer, error) {
	return nil, errNoRuntime
}

// lowerGraph builds fn on parameters of the given shapes with GoMLX's graph
// package and returns the program.
func lowerGraph(t *testing.T, fn func(g *graph.Graph, in []*graph.Node) []*graph.Node, params ...shapes.Shape) *Program {
	t.Helper()
	be := &textBackend{devices: 1}
	g := ir.NewGraph(be, t.Name())
	var in []*graph.Node
	for i, s := range params {
		in = append(in, ir.Parameter(g, "in"+string(rune('0'+i)), s))
	}
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err, _ = r.(error)
				if err == nil {
					t.Fatalf("panic: %v", r)
				}
			}
		}()
		g.Compile(fn(g, in)...)
	}()
	if err != nil {
		t.Fatalf("building graph: %v", err)
	}
	return be.last
}

// TestGraphLowering lowers graphs written with GoMLX's graph package, as
// the ONNX importer and GoMLX's layers write them, and checks the ops and
// result types in the text.
func TestGraphLowering(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params []shapes.Shape
		fn     func(g *graph.Graph, in []*graph.Node) []*graph.Node
		want   map[string]string // StableHLO op -> a result type it must produce
	}{
		{"Softmax", []shapes.Shape{sh(f32, 4, 10)},
			func(g *graph.Graph, in []*graph.Node) []*graph.Node { return []*graph.Node{graph.Softmax(in[0], -1)} },
			map[string]string{"stablehlo.exponential": "tensor<4x10xf32>", "stablehlo.reduce": "tensor<4xf32>", "stablehlo.divide": "tensor<4x10xf32>"}},
		{"DenseRelu", []shapes.Shape{sh(f32, 8, 16), sh(f32, 16, 4), sh(f32, 4)},
			func(g *graph.Graph, in []*graph.Node) []*graph.Node {
				return []*graph.Node{graph.Max(graph.Add(graph.Dot(in[0], in[1]), graph.ExpandAxes(in[2], 0)), graph.ScalarZero(g, f32))}
			},
			map[string]string{"stablehlo.dot_general": "tensor<8x4xf32>", "stablehlo.add": "tensor<8x4xf32>", "stablehlo.maximum": "tensor<8x4xf32>"}},
		{"Conv2D", []shapes.Shape{sh(f32, 2, 8, 8, 3), sh(f32, 3, 3, 3, 5)},
			func(g *graph.Graph, in []*graph.Node) []*graph.Node {
				return []*graph.Node{graph.Convolve(in[0], in[1]).PadSame().Done()}
			},
			map[string]string{"stablehlo.convolution": "tensor<2x8x8x5xf32>"}},
		{"MaxPoolAndGradient", []shapes.Shape{sh(f32, 1, 4, 4, 2)},
			func(g *graph.Graph, in []*graph.Node) []*graph.Node {
				pooled := graph.MaxPool(in[0]).Window(2).Done()
				loss := graph.ReduceAllSum(pooled)
				return append([]*graph.Node{pooled}, graph.Gradient(loss, in[0])...)
			},
			map[string]string{"stablehlo.reduce_window": "tensor<1x2x2x2xf32>", "stablehlo.select_and_scatter": "tensor<1x4x4x2xf32>"}},
		{"GatherAndGradient", []shapes.Shape{sh(f32, 10, 3), sh(i32, 4, 1)},
			func(g *graph.Graph, in []*graph.Node) []*graph.Node {
				rows := graph.Gather(in[0], in[1])
				return append([]*graph.Node{rows}, graph.Gradient(graph.ReduceAllSum(rows), in[0])...)
			},
			map[string]string{"stablehlo.gather": "tensor<4x3xf32>", "stablehlo.scatter": "tensor<10x3xf32>"}},
		{"LayerNormStyle", []shapes.Shape{sh(f32, 2, 6)},
			func(g *graph.Graph, in []*graph.Node) []*graph.Node {
				mean := graph.ReduceAndKeep(in[0], graph.ReduceMean, -1)
				centered := graph.Sub(in[0], mean)
				variance := graph.ReduceAndKeep(graph.Square(centered), graph.ReduceMean, -1)
				return []*graph.Node{graph.Mul(centered, graph.Rsqrt(graph.AddScalar(variance, 1e-5)))}
			},
			map[string]string{"stablehlo.rsqrt": "tensor<2x1xf32>", "stablehlo.multiply": "tensor<2x6xf32>"}},
		{"ArgMaxAndWhere", []shapes.Shape{sh(f32, 3, 5)},
			func(g *graph.Graph, in []*graph.Node) []*graph.Node {
				return []*graph.Node{graph.ArgMax(in[0], -1), graph.Where(graph.IsNaN(in[0]), graph.ZerosLike(in[0]), in[0])}
			},
			map[string]string{"stablehlo.reduce": "tensor<3xi32>", "stablehlo.select": "tensor<3x5xf32>"}},
		{"IotaConcatSlice", []shapes.Shape{sh(f32, 4)},
			func(g *graph.Graph, in []*graph.Node) []*graph.Node {
				both := graph.Concatenate([]*graph.Node{in[0], graph.ConvertDType(graph.Iota(g, sh(i32, 4), 0), f32)}, 0)
				return []*graph.Node{graph.Slice(both, graph.AxisRange(2, 6))}
			},
			map[string]string{"stablehlo.iota": "tensor<4xi32>", "stablehlo.concatenate": "tensor<8xf32>", "stablehlo.slice": "tensor<4xf32>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prog := lowerGraph(t, tc.fn, tc.params...)
			stmts, err := parseStatements(string(prog.Text))
			if err != nil {
				t.Fatal(err)
			}
			for hlo, typ := range tc.want {
				found := false
				for _, s := range findOp(stmts, hlo) {
					for _, r := range s.results {
						if r == typ {
							found = true
						}
					}
				}
				if !found {
					t.Errorf("no %s producing %s in:\n%s", hlo, typ, prog.Text)
				}
			}
			if !strings.HasPrefix(string(prog.Text), "module @") {
				t.Errorf("text does not start with a module:\n%s", prog.Text)
			}
		})
	}
}
