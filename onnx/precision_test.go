package onnx

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge/cpu"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
	"github.com/tensorbridge/tensorbridge/precision"

	_ "github.com/tensorbridge/tensorbridge/pjrt" // registers xla-cpu, used when its plugin is installed
)

// roundingVectors are float32 values with their bfloat16 (PyTorch) and
// float16 (NumPy) conversions, recorded by scripts/gen-precision-vectors.py
// for package precision: ties, carries into the exponent, subnormals,
// overflow, NaNs, infinities and random bit patterns.
func roundingVectors(t *testing.T) [][3]uint32 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "precision", "testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Vectors [][3]uint32 `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Vectors) < 50 {
		t.Fatalf("only %d vectors", len(v.Vectors))
	}
	return v.Vectors
}

func isNaN32(b uint32) bool   { return b&0x7fffffff > 0x7f800000 }
func isNaNBF16(b uint16) bool { return b&0x7fff > 0x7f80 }
func isNaNF16(b uint16) bool  { return b&0x7fff > 0x7c00 }

func bits16(t *testing.T, x *ir.Tensor) []uint16 {
	t.Helper()
	raw, err := ir.TensorBytes(x)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint16, len(raw)/2)
	for k := range out {
		out[k] = binary.LittleEndian.Uint16(raw[2*k:])
	}
	return out
}

func f32Bits(t *testing.T, x *ir.Tensor) []uint32 {
	t.Helper()
	raw, err := ir.TensorBytes(x)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint32, len(raw)/4)
	for k := range out {
		out[k] = binary.LittleEndian.Uint32(raw[4*k:])
	}
	return out
}

// The host conversion of inputs and initializers (package precision) gives
// the recorded PyTorch bfloat16 and NumPy float16 bits, NaN payloads aside.
func TestPrecisionHostConversionMatchesReferences(t *testing.T) {
	vec := roundingVectors(t)
	src := make([]float32, len(vec))
	for k, v := range vec {
		src[k] = math.Float32frombits(v[0])
	}
	x := f32(t, []int{len(src)}, src...)
	for _, tc := range []struct {
		dt    ir.DType
		col   int
		isNaN func(uint16) bool
	}{{ir.BFloat16, 1, isNaNBF16}, {ir.Float16, 2, isNaNF16}} {
		got, err := convertTensor(x, tc.dt)
		if err != nil {
			t.Fatal(err)
		}
		if got.DType() != tc.dt {
			t.Fatalf("dtype %s, want %s", got.DType(), tc.dt)
		}
		for k, b := range bits16(t, got) {
			want := uint16(vec[k][tc.col])
			if b != want && !(tc.isNaN(b) && tc.isNaN(want)) {
				t.Errorf("%s of %#08x: %#04x, want %#04x", tc.dt, vec[k][0], b, want)
			}
		}
		// Widening back is exact: bfloat16 is the top half of a float32.
		wide, err := widenTensor(got)
		if err != nil {
			t.Fatal(err)
		}
		for k, w := range f32Bits(t, wide) {
			b := uint16(vec[k][tc.col])
			want := uint32(b) << 16
			if tc.dt == ir.Float16 {
				want = math.Float32bits(precision.FromFloat16(b))
			}
			if w != want && !(isNaN32(w) && isNaN32(want)) {
				t.Errorf("widening %s %#04x: %#08x, want %#08x", tc.dt, b, w, want)
			}
		}
	}
}

// An initializer is rounded to nearest even on the host in a BFloat16 plan
// (GoMLX's own conversion would truncate), and kept Float32 in mixed mode
// except as a contraction operand, where it is rounded on the host too.
func TestPrecisionInitializersRoundToNearestEven(t *testing.T) {
	var w []float32
	var want []uint16
	for _, v := range roundingVectors(t) {
		f := math.Float32frombits(v[0])
		// Finite values whose bfloat16 is finite, not subnormal (XLA
		// backends may flush those) and small enough for the sum below.
		if isNaN32(v[0]) || math.IsInf(float64(f), 0) || uint16(v[1])&0x7f80 == 0x7f80 ||
			uint16(v[1])&0x7f80 == 0 || math.Abs(float64(f)) > 1e30 {
			continue
		}
		w = append(w, f)
		want = append(want, uint16(v[1]))
	}
	n := len(w)
	inits := []onnxpb.Tensor{tF32("w", []int64{int64(n)}, w...)}
	// y = x + w with x = 0: an exact addition, so y is w as the graph holds it.
	add := mustModel(t, model(17, []onnxpb.ValueInfo{vi("x", onnxpb.Float, n)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, n)},
		inits, node("Add", []string{"x", "w"}, []string{"y"})))
	// y = w^T · e_k picks w's elements one by one through a MatMul: ones on
	// the diagonal of a [n, n] identity x.
	eye := make([]float32, n*n)
	for k := range n {
		eye[k*n+k] = 1
	}
	mm := mustModel(t, model(17, []onnxpb.ValueInfo{vi("x", onnxpb.Float, n, n)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, n)},
		inits, node("MatMul", []string{"x", "w"}, []string{"y"})))
	zeros := f32(t, []int{n}, make([]float32, n)...)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		m       *Model
		in      *ir.Tensor
		opts    SpecializeOptions
		rounded bool
	}{
		{"bfloat16 Add", add, zeros, SpecializeOptions{Compute: ir.BFloat16}, true},
		{"bfloat16 MatMul", mm, f32(t, []int{n, n}, eye...), SpecializeOptions{Compute: ir.BFloat16}, true},
		{"mixed MatMul", mm, f32(t, []int{n, n}, eye...), SpecializeOptions{Compute: ir.BFloat16, Mixed: true}, true},
		{"float32 Add", add, zeros, SpecializeOptions{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.m.RunWith(ctx, engine(t), map[string]*ir.Tensor{"x": tc.in}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := f32Bits(t, out["y"])
			bad := 0
			for k := range w {
				exp := math.Float32bits(w[k])
				if tc.rounded {
					exp = uint32(want[k]) << 16
				}
				if got[k] != exp && !(got[k]&0x7fffffff == 0 && exp&0x7fffffff == 0) {
					if bad++; bad <= 5 {
						t.Errorf("w[%d] = %#08x: got %#08x, want %#08x", k, math.Float32bits(w[k]), got[k], exp)
					}
				}
			}
		})
	}
}

// rneBFloat16, the graph rounding used where a backend's conversion
// truncates, gives package precision's bits on the pure-Go backend, whose
// own conversion is found to truncate.
func TestPrecisionGraphRoundingMatchesHost(t *testing.T) {
	if !bf16ConvertTruncates(engine(t)) {
		t.Fatal("simplego's Float32 to BFloat16 conversion no longer truncates: rneBFloat16 is unneeded there")
	}
	var src []float32
	for _, v := range roundingVectors(t) {
		src = append(src, math.Float32frombits(v[0]))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		src = append(src, math.Float32frombits(r.Uint32()))
	}
	// Every tie and near-tie around a few significands and binades.
	for _, base := range []uint32{0x3f800000, 0x3f810000, 0x7f7f0000, 0x00010000, 0x80800000, 0x4b7f0000} {
		for _, low := range []uint32{0x7fff, 0x8000, 0x8001, 0xffff, 0x0001} {
			src = append(src, math.Float32frombits(base|low))
		}
	}
	g := graph.NewGraph(engine(t), "rne")
	defer g.Finalize()
	res, err := compileAndRun(g, []*graph.Node{rneBFloat16(graph.Const(g, src))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bits16(t, res[0])
	bad := 0
	for k, f := range src {
		want := precision.BFloat16(f)
		if got[k] != want && !(isNaNBF16(got[k]) && isNaNBF16(want)) {
			if bad++; bad <= 10 {
				t.Errorf("%#08x: got %#04x, want %#04x", math.Float32bits(f), got[k], want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d values differ", bad, len(src))
	}
}

func TestPrecisionOptionsValidation(t *testing.T) {
	m := mustModel(t, model(17, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2)}, nil,
		node("Relu", []string{"x"}, []string{"y"})))
	for _, tc := range []struct {
		opts SpecializeOptions
		want SpecializeOptions // zero: an error is expected
	}{
		{SpecializeOptions{}, SpecializeOptions{Compute: ir.Float32}},
		{SpecializeOptions{Compute: ir.Float32}, SpecializeOptions{Compute: ir.Float32}},
		{SpecializeOptions{Compute: ir.BFloat16}, SpecializeOptions{Compute: ir.BFloat16}},
		{SpecializeOptions{Compute: ir.Float16, Mixed: true}, SpecializeOptions{Compute: ir.Float16, Mixed: true}},
		{SpecializeOptions{Compute: ir.Float64}, SpecializeOptions{}},
		{SpecializeOptions{Compute: ir.Int32}, SpecializeOptions{}},
		{SpecializeOptions{Mixed: true}, SpecializeOptions{}},
	} {
		p, err := m.SpecializeWith(nil, nil, tc.opts)
		if reflect.DeepEqual(tc.want, SpecializeOptions{}) {
			if err == nil || errs.KindOf(err) != errs.InvalidArgument {
				t.Errorf("%+v: err %v, want an InvalidArgument error", tc.opts, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc.opts, err)
			continue
		}
		if got := p.Options(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: Options() = %+v, want %+v", tc.opts, got, tc.want)
		}
		if got, want := p.Params()[0].Shape.DType, tc.want.Compute; got != want {
			t.Errorf("%+v: parameter dtype %s, want %s", tc.opts, got, want)
		}
	}
}

func TestPrecisionPrepareInput(t *testing.T) {
	m := mustModel(t, model(17,
		[]onnxpb.ValueInfo{vi("x", onnxpb.Float, 3), vi("n", onnxpb.Int64, 3)},
		[]onnxpb.ValueInfo{vi("y", onnxpb.Float, 3), vi("m", onnxpb.Int64, 3)}, nil,
		node("Relu", []string{"x"}, []string{"y"}), node("Identity", []string{"n"}, []string{"m"})))
	p, err := m.SpecializeWith(nil, nil, SpecializeOptions{Compute: ir.BFloat16})
	if err != nil {
		t.Fatal(err)
	}
	// 1+2^-8 is a tie (to 1), 1+3·2^-8 a tie (to 1+2^-6), 1+2^-8+2^-20 above one (to 1+2^-7).
	x := f32(t, []int{3}, 1+0x1p-8, 1+3*0x1p-8, 1+0x1p-8+0x1p-20)
	got, err := p.PrepareInput("x", x)
	if err != nil {
		t.Fatal(err)
	}
	if b := bits16(t, got); got.DType() != ir.BFloat16 || b[0] != 0x3f80 || b[1] != 0x3f82 || b[2] != 0x3f81 {
		t.Errorf("PrepareInput: %s %#04x, want BFloat16 [0x3f80 0x3f82 0x3f81]", got.DType(), b)
	}
	if same, err := p.PrepareInput("x", got); err != nil || same != got {
		t.Errorf("a tensor already in the parameter's dtype: %v, %v", same, err)
	}
	n := i64(t, []int{3}, 1, 2, 3)
	if same, err := p.PrepareInput("n", n); err != nil || same != n {
		t.Errorf("an integer input passes unchanged: %v, %v", same, err)
	}
	for _, tc := range []struct {
		name, input string
		t           *ir.Tensor
		problem     string
	}{
		{"unknown", "z", x, "name"},
		{"dtype", "x", i64(t, []int{3}, 1, 2, 3), "dtype"},
		{"shape", "x", f32(t, []int{2}, 1, 2), "shape"},
		{"nil", "x", nil, "value"},
	} {
		_, err := p.PrepareInput(tc.input, tc.t)
		var ie *errs.InputError
		if !errors.As(err, &ie) || ie.Problem != tc.problem {
			t.Errorf("%s: err %v, want an InputError about %s", tc.name, err, tc.problem)
		}
	}
}

// Casts to FLOAT produce the compute dtype, rounded to nearest even:
// 259 lies halfway between the bfloat16 values 258 and 260 (8 significant
// bits), and rounds to 260, whose last significand bit is 0.
func TestPrecisionCastToComputeDType(t *testing.T) {
	m := mustModel(t, model(17, []onnxpb.ValueInfo{vi("n", onnxpb.Int64, 4)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, 4)}, nil,
		node("Cast", []string{"n"}, []string{"c"}, aInt("to", int64(onnxpb.Float))),
		node("Add", []string{"c", "c"}, []string{"y"})))
	for name, eng := range precisionEngines(t) {
		for _, opts := range []SpecializeOptions{{Compute: ir.BFloat16}, {Compute: ir.BFloat16, Mixed: true}} {
			out, err := m.RunWith(context.Background(), eng, map[string]*ir.Tensor{"n": i64(t, []int{4}, 1, 259, -259, 257)}, opts)
			if err != nil {
				t.Fatalf("%s %+v: %v", name, opts, err)
			}
			// c + c doubles exactly; 257 is a tie to 256 (even).
			expect(t, fmt.Sprintf("%s %+v", name, opts), out["y"], ir.Float32, []int{4}, floats(2, 520, -520, 512), 0)
		}
	}
}

// Float16 compute on the pure-Go backend, which has no Float16, is an
// *errs.UnsupportedError naming the dtype, not a panic.
func TestPrecisionFloat16UnsupportedOnCPU(t *testing.T) {
	m := mustModel(t, model(17, []onnxpb.ValueInfo{vi("x", onnxpb.Float, 2)}, []onnxpb.ValueInfo{vi("y", onnxpb.Float, 2)}, nil,
		node("Relu", []string{"x"}, []string{"y"})))
	for _, mixed := range []bool{false, true} {
		_, err := m.RunWith(context.Background(), engine(t), map[string]*ir.Tensor{"x": f32(t, []int{2}, 1, -1)},
			SpecializeOptions{Compute: ir.Float16, Mixed: mixed})
		var ue *errs.UnsupportedError
		if !errors.As(err, &ue) || !errors.Is(err, errs.ErrUnsupported) || ue.Name != "Float16" || ue.What != "dtype" {
			t.Errorf("mixed=%v: err %v, want an UnsupportedError for dtype Float16", mixed, err)
		}
	}
}

// precisionEngines returns the engines the tests run on: GoMLX's simplego
// ("cpu", no float16) and tensorbridge's cpu engine ("cpu-engine", float16
// stored and computed in float32) always, xla-cpu when its PJRT plugin is
// installed.
func precisionEngines(t *testing.T) map[string]ir.Engine {
	t.Helper()
	out := map[string]ir.Engine{"cpu": engine(t)}
	ctx := context.Background()
	tb, err := (cpu.Driver{}).Open(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	out["cpu-engine"] = tb.Engine()
	d, ok := driver.Lookup("xla-cpu")
	if !ok {
		return out
	}
	if av := d.Probe(ctx); !av.Available {
		t.Logf("xla-cpu not installed (%s): simplego only", av.Reason)
		return out
	}
	b, err := d.Open(ctx, nil)
	if err != nil {
		t.Fatalf("opening xla-cpu: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	out["xla-cpu"] = b.Engine()
	return out
}

// The reference models of testdata/models, with PyTorch's float32 outputs.
var precisionModels = []struct {
	name   string
	inputs []string
}{
	{"mlp", []string{"x"}},
	{"tiny_resnet", []string{"image"}},
	{"mobilenet_v2_w025", []string{"image"}},
	{"bert_tiny", []string{"input_ids", "attention_mask"}},
}

func modelPath(name string) string { return filepath.Join("..", "testdata", "models", name) }

func readNPYTensor(t *testing.T, name string) *ir.Tensor {
	t.Helper()
	a, err := npy.ReadFile(modelPath(name))
	if err != nil {
		t.Fatal(err)
	}
	x, err := a.ToIR()
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// In a plain BFloat16 plan every floating value is BFloat16 in the graph:
// on a backend that rounds its own conversions (xla-cpu) the only Float32
// nodes are the conversions of the outputs back to their declared Float32.
// (On the pure-Go backend each op computes in Float32 between roundings,
// see adaptInputs.) In mixed mode the contractions return Float32.
func TestPrecisionGraphDTypes(t *testing.T) {
	engines := precisionEngines(t)
	for _, mname := range []string{"mlp", "bert_tiny"} {
		m, err := Load(modelPath(mname + ".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		shapes := map[string][]int{}
		for _, in := range m.Inputs() {
			shapes[in.Name] = []int{2}
			if len(in.Dims) == 2 {
				if in.Dims[1].Value > 0 {
					shapes[in.Name] = []int{2, in.Dims[1].Value}
				} else {
					shapes[in.Name] = []int{2, 5}
				}
			}
		}
		for ename, eng := range engines {
			for _, mixed := range []bool{false, true} {
				p, err := m.SpecializeWith(shapes, nil, SpecializeOptions{Compute: ir.BFloat16, Mixed: mixed})
				if err != nil {
					t.Fatal(err)
				}
				for _, prm := range p.Params() {
					if in := m.inputByName(prm.Name); in.DType == ir.Float32 && prm.Shape.DType != ir.BFloat16 {
						t.Errorf("%s: parameter %s is %s, want BFloat16", mname, prm.Name, prm.Shape)
					}
				}
				g := graph.NewGraph(eng, "dtypes")
				nodes := map[string]*ir.Node{}
				for _, prm := range p.Params() {
					nodes[prm.Name] = graph.Parameter(g, prm.Name, prm.Shape)
				}
				outs, err := p.Build(g, nodes)
				if err != nil {
					t.Fatalf("%s %s mixed=%v: %v", mname, ename, mixed, err)
				}
				isOut := map[*ir.Node]bool{}
				for _, o := range m.Outputs() {
					if n := outs[o.Name]; n.DType() != ir.Float32 {
						t.Errorf("%s %s: output %s is %s, want Float32", mname, ename, o.Name, n.Shape())
					}
					isOut[outs[o.Name]] = true
				}
				f32Nodes, contractions := 0, 0
				for _, n := range g.Nodes() {
					if n.NumOutputs() > 1 {
						continue
					}
					typ := n.Type().String()
					if typ == "DotGeneral" || typ == "ConvGeneral" {
						contractions++
						if mixed && n.DType() != ir.Float32 {
							t.Errorf("%s %s mixed: %s returns %s, want Float32", mname, ename, typ, n.Shape())
						}
						if !mixed && n.DType() == ir.Float32 && ename == "xla-cpu" {
							t.Errorf("%s %s: %s computes in Float32", mname, ename, typ)
						}
					}
					if n.DType() == ir.Float32 && !isOut[n] {
						f32Nodes++
					}
				}
				if contractions == 0 {
					t.Errorf("%s: no contraction found in the graph", mname)
				}
				if !mixed && ename == "xla-cpu" && f32Nodes != 0 {
					t.Errorf("%s %s: %d Float32 nodes besides the outputs in a BFloat16 graph", mname, ename, f32Nodes)
				}
				g.Finalize()
			}
		}
	}
}

func (m *Model) inputByName(name string) ValueSpec {
	for _, in := range m.inputs {
		if in.Name == name {
			return in
		}
	}
	return ValueSpec{}
}

// Each reference model computed in reduced precision stays close to
// PyTorch's float32 outputs on the same inputs (two input sets each), on
// every engine available. Bounds: 1e-4 for float32 (the importer's own
// accuracy, as in the root tests), 1e-2 for 16-bit modes (the project's
// target), except plain bfloat16 MobileNetV2, measured at 1.15% and 1.5%:
// its 52 convolutions with seeded random weights lose 0.66% to 0.81% to
// the rounding of weights and input alone (measured with every activation
// kept in Float32), and each activation rounding adds to that; mixed mode
// meets 1e-2 there. Float16 cannot represent MobileNetV2's activations:
// its logits are of magnitude 1e-8, below float16's smallest subnormal
// (6e-8), so they underflow (errors of 15% to 95%, logged, not checked).
func TestPrecisionReferenceModels(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four models in several precisions")
	}
	ctx := context.Background()
	engines := precisionEngines(t)
	names := make([]string, 0, len(engines))
	for n := range engines {
		names = append(names, n)
	}
	sort.Strings(names)
	modes := []struct {
		name string
		opts SpecializeOptions
	}{
		{"float32", SpecializeOptions{}},
		{"bfloat16", SpecializeOptions{Compute: ir.BFloat16}},
		{"bfloat16 mixed", SpecializeOptions{Compute: ir.BFloat16, Mixed: true}},
		{"float16", SpecializeOptions{Compute: ir.Float16}},
		{"float16 mixed", SpecializeOptions{Compute: ir.Float16, Mixed: true}},
	}
	table := []string{fmt.Sprintf("%-8s %-18s %-10s %-15s %-9s %-9s", "engine", "model", "output", "precision", "set a", "set b")}
	for _, en := range names {
		eng := engines[en]
		for _, rm := range precisionModels {
			m, err := Load(modelPath(rm.name + ".onnx"))
			if err != nil {
				t.Fatal(err)
			}
			for _, md := range modes {
				if md.opts.Compute == ir.Float16 && en == "cpu" {
					continue // no Float16 on simplego (TestPrecisionFloat16UnsupportedOnCPU); cpu-engine has it
				}
				errsBySet := map[string][]float64{}
				for _, set := range []string{"", ".b"} {
					in := map[string]*ir.Tensor{}
					for i, name := range rm.inputs {
						in[name] = readNPYTensor(t, fmt.Sprintf("%s%s.input_%d.npy", rm.name, set, i))
					}
					out, err := m.RunWith(ctx, eng, in, md.opts)
					if err != nil {
						t.Errorf("%s %s %s: %v", en, rm.name, md.name, err)
						continue
					}
					for i, spec := range m.Outputs() {
						want := tensors.MustCopyFlatData[float32](readNPYTensor(t, fmt.Sprintf("%s%s.output_%d.npy", rm.name, set, i)))
						o := out[spec.Name]
						if o.DType() != ir.Float32 || o.Shape().Size() != len(want) {
							t.Fatalf("%s %s %s: output %s is %s, want Float32 with %d values", en, rm.name, md.name, spec.Name, o.Shape(), len(want))
						}
						e := precision.RelativeL2(tensors.MustCopyFlatData[float32](o), want)
						errsBySet[spec.Name] = append(errsBySet[spec.Name], e)
						limit := 1e-2
						switch {
						case md.opts.Compute == ir.InvalidDType:
							limit = 1e-4
						case rm.name == "mobilenet_v2_w025" && md.opts.Compute == ir.BFloat16 && !md.opts.Mixed:
							limit = 2e-2
						case rm.name == "mobilenet_v2_w025" && md.opts.Compute == ir.Float16:
							limit = math.Inf(1) // underflows: logged only
						}
						if !(e < limit) {
							t.Errorf("%s %s set %q output %s in %s: relative L2 error %.3g, want < %g", en, rm.name, set, spec.Name, md.name, e, limit)
						}
					}
				}
				for _, spec := range m.Outputs() {
					e := errsBySet[spec.Name]
					if len(e) == 2 {
						table = append(table, fmt.Sprintf("%-8s %-18s %-10s %-15s %-9.3g %-9.3g", en, rm.name, spec.Name, md.name, e[0], e[1]))
					}
				}
			}
		}
	}
	t.Logf("relative L2 error against PyTorch float32:\n%s", strings.Join(table, "\n"))
}

// bf16Tensor makes a BFloat16 tensor from bit patterns.
func bf16Tensor(t *testing.T, bits []uint16) *ir.Tensor {
	t.Helper()
	raw := make([]byte, 2*len(bits))
	for k, b := range bits {
		binary.LittleEndian.PutUint16(raw[2*k:], b)
	}
	x, err := ir.TensorFromBytes(ir.BFloat16, []int{len(bits)}, raw)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestPrecisionBFloat16ComputedInFloat32 checks that on the pure-Go
// backend, whose BFloat16 arithmetic truncates, a bfloat16 model at the
// default precision computes in Float32 and rounds to nearest even once,
// at casts to BFLOAT16 and at the outputs: the expected values are that
// arithmetic done here in float32 and rounded by package precision.
func TestPrecisionBFloat16ComputedInFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n = 4096
	xb, yb := make([]uint16, n), make([]uint16, n)
	for k := range xb {
		// Moderate exponents, random significands and signs.
		xb[k] = uint16(r.IntN(2))<<15 | uint16(120+r.IntN(14))<<7 | uint16(r.IntN(128))
		yb[k] = uint16(r.IntN(2))<<15 | uint16(120+r.IntN(14))<<7 | uint16(r.IntN(128))
	}
	bf := onnxpb.BFloat16
	pb := model(17,
		[]onnxpb.ValueInfo{vi("x", bf, n), vi("y", bf, n)},
		[]onnxpb.ValueInfo{vi("q", bf, n), vi("o", bf, n)},
		[]onnxpb.Tensor{tF32("three", []int64{}, 3)},
		node("Mul", []string{"x", "y"}, []string{"p"}),
		node("Add", []string{"p", "x"}, []string{"q"}),
		node("Cast", []string{"x"}, []string{"c"}, aInt("to", int64(onnxpb.Float))),
		node("Mul", []string{"c", "three"}, []string{"d"}),
		node("Cast", []string{"d"}, []string{"e"}, aInt("to", int64(onnxpb.BFloat16))),
		node("Add", []string{"e", "y"}, []string{"o"}),
	)
	pb.Graph.Node[2].Name, pb.Graph.Node[3].Name, pb.Graph.Node[4].Name = "cast_f", "mul3", "cast_bf"
	pb.Graph.Node[5].Name = "add2"
	m := mustModel(t, pb)
	outs := run(t, m, map[string]*ir.Tensor{"x": bf16Tensor(t, xb), "y": bf16Tensor(t, yb)})
	f := func(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }
	gotQ, gotO := bits16(t, outs["q"]), bits16(t, outs["o"])
	bad := 0
	for k := range xb {
		x, y := f(xb[k]), f(yb[k])
		wantQ := precision.BFloat16(x*y + x)
		e := f(precision.BFloat16(x * 3))
		wantO := precision.BFloat16(e + y)
		if gotQ[k] != wantQ || gotO[k] != wantO {
			if bad++; bad <= 5 {
				t.Errorf("x=%v y=%v: q %#04x want %#04x, o %#04x want %#04x", x, y, gotQ[k], wantQ, gotO[k], wantO)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d values differ", bad, n)
	}
}
