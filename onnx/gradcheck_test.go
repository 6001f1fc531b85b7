package onnx

// Gradients of the importer's ops against central finite differences,
// over the ONNX node tests' own models and inputs (issue 17: "Gradients
// of every op the importer supports are checked against finite
// differences (float64 where the backend has it) over the conformance
// suite's own nodes").
//
// For each op, up to gcCasesPerOp single-node cases with floating-point
// inputs and outputs are converted to DOUBLE (every FLOAT value, tensor
// attribute and cast target), built on the cpu backend with the float
// inputs as graph parameters, and reduced to a scalar by a fixed random
// projection of the outputs. The gradient from graph.Gradient, projected
// on gcDirections random directions, is compared with the central
// difference of the scalar along each direction. The point is the case's
// input jittered by about 0.1% so that ties (max pooling examples, equal
// Min/Max operands) and kinks (ReLU at 0) lie far beyond the step.
//
// Per op the worst case decides: wrong (mismatch), none (no gradient:
// CheckGradients refuses it, and the test checks it does so naming the
// op), runfail (the gradient graph builds but does not run), pass. The
// result must equal testdata/gradcheck-golden.txt; regenerate it with
// go test -run TestGradCheck ./onnx -gradcheck.update.

import (
	"errors"
	"flag"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/tensorbridge/tensorbridge/cpu"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
	_ "github.com/tensorbridge/tensorbridge/pjrt" // xla-cpu for TestGradCheckXLACPU
)

var gcUpdate = flag.Bool("gradcheck.update", false, "rewrite testdata/gradcheck-golden.txt from this run")

// gcCasesPerOp bounds the cases checked per op (every case: the whole
// run takes seconds).
const (
	gcCasesPerOp = 1000
	gcDirections = 3 // random directions per case
	noiseCap     = 1e-4
)

// gcTol is how one dtype is checked.
type gcTol struct {
	dt ir.DType
	// step is the central-difference step along a unit-variance direction.
	step float64
	// jitter is the relative perturbation of the inputs, far beyond step,
	// that moves the point off ties and kinks.
	jitter float64
	// Agreement: |analytic-fd| <= rtol·max(|analytic|,|fd|), or
	// <= atol·(1+|f|) for derivatives that vanish.
	rtol, atol float64
}

var (
	// gcFloat64: truncation error O(step²) = 1e-12 relative, rounding
	// error about 1e-16·|f|/step = 1e-10 relative. Measured worst
	// relative error over the passing cases: 1.35e-7 (the test logs it);
	// rtol is within 10x of it.
	gcFloat64 = gcTol{dt: ir.Float64, step: 1e-6, jitter: 1e-3, rtol: 1e-6, atol: 1e-8}
	// gcFloat32 for ops the specification (and so the importer) computes
	// in Float32 whatever the input dtype: rounding error about
	// 6e-8·|f|/step = 6e-5 relative.
	gcFloat32 = gcTol{dt: ir.Float32, step: 1e-2, jitter: 5e-2, rtol: 2e-2, atol: 1e-4}
)

// gcFloat32Ops are checked in Float32, with the reason.
var gcFloat32Ops = map[string]string{
	"DequantizeLinear": "x_scale has no DOUBLE type in the specification; the importer computes in Float32",
}

// gcNonDifferentiable lists ops left out on purpose, with the reason.
// Ops whose outputs are all integer or boolean (ArgMax, Equal, Shape...)
// are left out automatically.
var gcNonDifferentiable = map[string]string{
	"RandomNormal":      "random: output does not depend on inputs",
	"RandomNormalLike":  "random: output does not depend on the input's values",
	"RandomUniform":     "random: output does not depend on inputs",
	"RandomUniformLike": "random: output does not depend on the input's values",
	"Bernoulli":         "random: samples are not differentiable",
	"Multinomial":       "random: samples are not differentiable",
}

// gcNodeDir finds the ONNX 1.23.2 node tests installed by
// scripts/fetch-onnx-node-tests.sh.
func gcNodeDir() string {
	dir := os.Getenv("TENSORBRIDGE_ONNX_NODE_TESTDATA")
	if dir == "" {
		cache := os.Getenv("TENSORBRIDGE_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "tensorbridge")
		}
		dir = filepath.Join(cache, "onnx-node-1.23.2")
	}
	for _, cand := range []string{filepath.Join(dir, "data", "node"), filepath.Join(dir, "node")} {
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			return cand
		}
	}
	return ""
}

var (
	gcEngineOnce sync.Once
	gcEngine     ir.Engine
	gcEngineErr  error
)

// cpuEngine is the cpu backend's engine (simplego with the composed
// backward ops of package cpu).
func cpuEngine(t testing.TB) ir.Engine {
	t.Helper()
	gcEngineOnce.Do(func() {
		var b driver.Backend
		b, gcEngineErr = cpu.Driver{}.Open(t.Context(), nil)
		if gcEngineErr == nil {
			gcEngine = b.Engine()
		}
	})
	if gcEngineErr != nil {
		t.Fatal(gcEngineErr)
	}
	return gcEngine
}

// gcResult is one case's outcome.
type gcResult struct {
	status string // pass, wrong, none, runfail, skip
	detail string
	relErr float64 // worst relative error over the directions (pass, wrong)
	f64    bool    // checked in Float64
}

var gcRank = map[string]int{"skip": 0, "pass": 1, "runfail": 2, "none": 3, "wrong": 4}

func TestGradCheck(t *testing.T) { gcRun(t, cpuEngine(t), gcCasesPerOp, *gcUpdate) }

// TestGradCheckXLACPU runs the same check on XLA's CPU compiler, on the
// first case of each op (XLA compiles each graph for about a second on a
// CI runner, so all 810 would take over ten minutes), against the same
// golden list; it is skipped where the plugin is not installed and in
// -short mode.
func TestGradCheckXLACPU(t *testing.T) {
	if testing.Short() {
		t.Skip("xla-cpu gradient check skipped in -short mode")
	}
	d, ok := driver.Lookup("xla-cpu")
	if !ok {
		t.Fatal("the pjrt backend is not linked in")
	}
	if av := d.Probe(t.Context()); !av.Available {
		testreq.Skipf(t, "xla-cpu unavailable: %s", av.Reason)
	}
	b, err := d.Open(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	gcRun(t, b.Engine(), 1, false)
}

// gcRun checks every case on engine eng against the golden list (or
// rewrites it when update is set).
func gcRun(t *testing.T, eng ir.Engine, perOpMax int, update bool) {
	dir := gcNodeDir()
	if dir == "" {
		testreq.Skipf(t, "ONNX node tests not installed (scripts/fetch-onnx-node-tests.sh)")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	perOp := map[string]int{}
	opWorst := map[string]string{}
	var lines []string
	var maxPassErr float64
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.Contains(name, "_expanded") {
			continue
		}
		pb, err := onnxpb.ReadModel(filepath.Join(dir, name, "model.onnx"))
		if err != nil || pb.Graph == nil || len(pb.Graph.Node) != 1 {
			continue
		}
		op := pb.Graph.Node[0].OpType
		if _, skip := gcNonDifferentiable[op]; skip || perOp[op] >= perOpMax || !gcFloatIO(pb) {
			continue
		}
		r := gradCheckCase(t, eng, filepath.Join(dir, name), pb)
		if r.status == "skip" {
			t.Logf("%s (%s): skipped: %s", name, op, r.detail)
			continue
		}
		perOp[op]++
		t.Logf("%s (%s): %s %s", name, op, r.status, r.detail)
		lines = append(lines, fmt.Sprintf("%s %s %s", name, op, r.status))
		if r.status == "pass" && r.f64 {
			maxPassErr = math.Max(maxPassErr, r.relErr)
		}
		if gcRank[r.status] > gcRank[opWorst[op]] {
			opWorst[op] = r.status
		}
	}
	counts := map[string]int{}
	for _, st := range opWorst {
		counts[st]++
	}
	t.Logf("worst relative error over passing Float64 cases: %.3g", maxPassErr)
	t.Logf("%d cases of %d ops; per op (worst case): %d pass, %d wrong, %d none, %d runfail",
		len(lines), len(opWorst), counts["pass"], counts["wrong"], counts["none"], counts["runfail"])
	var got strings.Builder
	got.WriteString("# TestGradCheck (onnx/gradcheck_test.go): ONNX 1.23.2 node test, op, and its gradient against\n")
	got.WriteString("# finite differences: pass | wrong | none (no gradient: Plan.CheckGradients refuses it) | runfail.\n")
	got.WriteString("# Regenerate: go test -run TestGradCheck ./onnx -gradcheck.update\n")
	for _, l := range lines {
		got.WriteString(l + "\n")
	}
	golden := filepath.Join("testdata", "gradcheck-golden.txt")
	if update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (regenerate with -gradcheck.update)", err)
	}
	gcCompareGolden(t, string(want), lines, perOpMax >= gcCasesPerOp)
}

// gcCompareGolden reports every case whose status differs from the
// golden list, naming the op, and (when all were run) every golden case
// not checked.
func gcCompareGolden(t *testing.T, golden string, lines []string, all bool) {
	want := map[string]string{}
	for _, line := range strings.Split(golden, "\n") {
		if f := strings.Fields(line); len(f) == 3 && !strings.HasPrefix(line, "#") {
			want[f[0]] = f[1] + " " + f[2]
		}
	}
	seen := map[string]bool{}
	for _, l := range lines {
		f := strings.Fields(l)
		seen[f[0]] = true
		if w, ok := want[f[0]]; !ok {
			t.Errorf("op %s: case %s: gradient %s, not in the golden list", f[1], f[0], f[2])
		} else if w != f[1]+" "+f[2] {
			t.Errorf("op %s: case %s: gradient %s, golden says %s", f[1], f[0], f[2], w)
		}
	}
	for c, w := range want {
		if all && !seen[c] {
			t.Errorf("case %s (%s): in the golden list but not checked", c, w)
		}
	}
}

// gcFloatIO says whether the single node has a FLOAT or DOUBLE input and
// output.
func gcFloatIO(pb *onnxpb.Model) bool {
	isF := func(vs []onnxpb.ValueInfo) bool {
		for _, v := range vs {
			if v.Type != nil && v.Type.TensorType != nil {
				if dt := v.Type.TensorType.ElemType; dt == onnxpb.Float || dt == onnxpb.Double {
					return true
				}
			}
		}
		return false
	}
	return isF(pb.Graph.Input) && isF(pb.Graph.Output)
}

// gradCheckCase checks one node test.
func gradCheckCase(t *testing.T, eng ir.Engine, dir string, pb *onnxpb.Model) (res gcResult) {
	defer func() {
		if r := recover(); r != nil {
			res = gcResult{status: "skip", detail: fmt.Sprint("panic: ", r)}
		}
	}()
	tol := gcFloat64
	if _, f32 := gcFloat32Ops[pb.Graph.Node[0].OpType]; f32 {
		tol = gcFloat32
	} else if err := toDouble(pb); err != nil {
		return gcResult{status: "skip", detail: "float64 conversion: " + err.Error()}
	}
	m, err := FromProto(pb)
	if err != nil {
		return gcResult{status: "skip", detail: "load: " + err.Error()}
	}
	seed := fnv.New64a()
	seed.Write([]byte(filepath.Base(dir)))
	rng := rand.New(rand.NewPCG(seed.Sum64(), 17))
	shapes := map[string][]int{}
	values := map[string]*ir.Tensor{}
	points := map[string][]float64{}
	isValue := map[string]bool{}
	for _, n := range m.ValueInputs() {
		isValue[n] = true
	}
	for k, in := range m.Inputs() {
		pt, err := onnxpb.ReadTensor(filepath.Join(dir, "test_data_set_0", fmt.Sprintf("input_%d.pb", k)))
		if err != nil {
			return gcResult{status: "skip", detail: "input: " + err.Error()}
		}
		tt, err := pt.ToIR()
		if err != nil {
			return gcResult{status: "skip", detail: "input: " + err.Error()}
		}
		dims := tt.Shape().Dimensions
		shapes[in.Name] = dims
		if in.DType != tol.dt || isValue[in.Name] || tt.Shape().Size() == 0 {
			if in.DType == tol.dt {
				tt = gcTensor(tol.dt, floats64(tt), dims)
			}
			values[in.Name] = tt
			continue
		}
		x := floats64(tt)
		for i := range x {
			u := 0.5 + 0.5*rng.Float64() // |u| in [0.5, 1): never within a step of the start
			if rng.IntN(2) == 0 {
				u = -u
			}
			x[i] += tol.jitter * u * (math.Abs(x[i]) + 0.1)
		}
		points[in.Name] = x
	}
	plan, err := m.Specialize(shapes, values)
	if err != nil {
		return gcResult{status: "skip", detail: "specialize: " + err.Error()}
	}
	return gcCheck(t, eng, filepath.Base(dir), plan, points, tol, rng, pb.Graph.Node[0].OpType)
}

// gcCheck checks the gradient of a random projection of plan's outputs
// with respect to its parameters at points, against finite differences,
// and that CheckGradients agrees with graph.Gradient about whether there
// is one (naming wantOp when there is not, if wantOp is given).
func gcCheck(t *testing.T, eng ir.Engine, name string, plan *Plan, points map[string][]float64, tol gcTol, rng *rand.Rand, wantOp string) gcResult {
	m := plan.Model()
	params := plan.Params()
	if len(params) == 0 {
		return gcResult{status: "skip", detail: "no floating-point graph input"}
	}
	var wrt []string
	for _, p := range params {
		wrt = append(wrt, p.Name)
	}
	checkErr := plan.CheckGradients(eng, wrt)

	g := graph.NewGraph(eng, "gradcheck")
	defer g.Finalize()
	inputs := map[string]*ir.Node{}
	var pnodes []*graph.Node
	for _, p := range params {
		n := graph.Parameter(g, p.Name, p.Shape)
		inputs[p.Name] = n
		pnodes = append(pnodes, n)
	}
	outs, err := plan.Build(g, inputs)
	if err != nil {
		return gcResult{status: "skip", detail: "build: " + err.Error()}
	}
	var loss *graph.Node
	for _, o := range m.Outputs() {
		n := outs[o.Name]
		if n == nil || n.DType() != tol.dt {
			continue
		}
		proj := make([]float64, n.Shape().Size())
		for i := range proj {
			proj[i] = rng.NormFloat64()
		}
		term := graph.ReduceAllSum(graph.Mul(n, graph.Const(g, gcTensor(tol.dt, proj, n.Shape().Dimensions))))
		if loss == nil {
			loss = term
		} else {
			loss = graph.Add(loss, term)
		}
	}
	if loss == nil {
		return gcResult{status: "skip", detail: "no " + tol.dt.String() + " output"}
	}
	var grads []*graph.Node
	gerr := tryGradient(loss, pnodes)
	if gerr == nil {
		grads = graph.Gradient(loss, pnodes...)
	}
	var ue *errs.UnsupportedError
	switch {
	case gerr != nil && checkErr == nil:
		t.Errorf("%s: graph.Gradient fails (%v) but CheckGradients accepts it", name, gerr)
		return gcResult{status: "none", detail: gerr.Error()}
	case gerr != nil && !errors.As(checkErr, &ue):
		t.Errorf("%s: CheckGradients = %v, want an *errs.UnsupportedError", name, checkErr)
		return gcResult{status: "none", detail: gerr.Error()}
	case gerr != nil:
		if wantOp != "" && ue.Name != wantOp {
			t.Errorf("%s: CheckGradients names op %q, want %q: %v", name, ue.Name, wantOp, checkErr)
		}
		return gcResult{status: "none", detail: checkErr.Error()}
	case checkErr != nil:
		if errors.As(checkErr, &ue) {
			return gcResult{status: "none", detail: checkErr.Error()}
		}
		t.Errorf("%s: CheckGradients = %v, though graph.Gradient builds", name, checkErr)
	}
	run, err := gcCompile(g, append([]*graph.Node{loss}, grads...))
	if err != nil {
		return gcResult{status: "runfail", detail: err.Error()}
	}
	res0, err := run(params, points)
	if err != nil {
		return gcResult{status: "runfail", detail: err.Error()}
	}
	f0 := res0[0]
	if math.IsNaN(f0) || math.IsInf(f0, 0) {
		return gcResult{status: "skip", detail: "the projected output is not finite at the test point"}
	}
	worst := 0.0
	var worstMsg string
	for range gcDirections {
		dirs := map[string][]float64{}
		analytic := 0.0
		off := 1
		for _, p := range params {
			d := make([]float64, len(points[p.Name]))
			for i := range d {
				d[i] = rng.NormFloat64()
			}
			dirs[p.Name] = d
			gflat := res0[off : off+len(d)]
			for i := range d {
				analytic += gflat[i] * d[i]
			}
			off += len(d)
		}
		f := func(sign float64) (float64, error) {
			pt := map[string][]float64{}
			for name, x := range points {
				y := make([]float64, len(x))
				for i := range x {
					y[i] = x[i] + sign*tol.step*dirs[name][i]
				}
				pt[name] = y
			}
			r, err := run(params, pt)
			if err != nil {
				return 0, err
			}
			return r[0], nil
		}
		// Central differences at steps h and h/2, combined (Richardson)
		// so that the O(h²) truncation error cancels.
		var d [2]float64
		for k, h := range []float64{1, 0.5} {
			fp, err := f(h)
			if err != nil {
				return gcResult{status: "runfail", detail: err.Error()}
			}
			fm, err := f(-h)
			if err != nil {
				return gcResult{status: "runfail", detail: err.Error()}
			}
			d[k] = (fp - fm) / (2 * h * tol.step)
		}
		fd := (4*d[1] - d[0]) / 3
		if math.IsNaN(analytic) || math.IsNaN(fd) {
			return gcResult{status: "wrong", detail: fmt.Sprintf("analytic %v, finite difference %v", analytic, fd)}
		}
		scale := math.Max(math.Abs(analytic), math.Abs(fd))
		// The two differences' disagreement estimates the finite
		// difference's own (rounding) error; it widens the tolerance, but
		// by at most noiseCap relative, so a crossed kink (where the two
		// disagree wildly) cannot hide a wrong gradient.
		noise := math.Min(2*math.Abs(d[0]-d[1]), noiseCap*scale)
		diff := math.Max(0, math.Abs(analytic-fd)-noise)
		rel := diff / math.Max(scale, 1e-300)
		if diff <= tol.atol*(1+math.Abs(f0)) {
			rel = 0
		}
		if rel > worst {
			worst = rel
			worstMsg = fmt.Sprintf("directional derivative %.10g, finite difference %.10g", analytic, fd)
		}
	}
	if worst > tol.rtol {
		return gcResult{status: "wrong", detail: worstMsg, relErr: worst}
	}
	return gcResult{status: "pass", detail: fmt.Sprintf("rel. error %.2g", worst), relErr: worst, f64: tol.dt == ir.Float64}
}

// gcCompile compiles outs once; the returned function runs them with the
// parameters' values and flattens every output into float64s (the loss,
// then each gradient).
func gcCompile(g *graph.Graph, outs []*graph.Node) (func([]Param, map[string][]float64) ([]float64, error), error) {
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicError(r)
			}
		}()
		g.Compile(outs...)
		return nil
	}()
	if err != nil {
		return nil, err
	}
	return func(params []Param, vals map[string][]float64) (flat []float64, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicError(r)
			}
		}()
		args := make([]any, len(params))
		for k, p := range params {
			args[k] = gcTensor(p.Shape.DType, vals[p.Name], p.Shape.Dimensions)
		}
		for _, r := range g.Run(args...) {
			flat = append(flat, floats64(r)...)
			r.FinalizeAll()
		}
		for _, a := range args {
			a.(*tensors.Tensor).FinalizeAll()
		}
		return flat, nil
	}, nil
}

// gcTensor makes a tensor of dtype dt (Float64 or Float32) from values.
func gcTensor(dt ir.DType, v []float64, dims []int) *ir.Tensor {
	if dt == ir.Float64 {
		return tensors.FromFlatDataAndDimensions(v, dims...)
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return tensors.FromFlatDataAndDimensions(f, dims...)
}

// floats64 returns a floating-point tensor's values as float64s.
func floats64(t *ir.Tensor) []float64 {
	var out []float64
	switch t.DType() {
	case ir.Float64:
		tensors.ConstFlatData(t, func(v []float64) { out = append(out, v...) })
	case ir.Float32:
		tensors.ConstFlatData(t, func(v []float32) {
			for _, x := range v {
				out = append(out, float64(x))
			}
		})
	default:
		panic(fmt.Sprintf("floats64: dtype %s", t.DType()))
	}
	return out
}

// toDouble rewrites a model so that every FLOAT value is DOUBLE: value
// types, initializers, tensor attributes, and cast targets (attributes
// to, dtype, output_dtype), in subgraphs too.
func toDouble(pb *onnxpb.Model) error {
	return graphToDouble(pb.Graph)
}

func graphToDouble(g *onnxpb.Graph) error {
	for _, vs := range [][]onnxpb.ValueInfo{g.Input, g.Output, g.ValueInfo} {
		for k := range vs {
			typeToDouble(vs[k].Type)
		}
	}
	for k := range g.Initializer {
		if err := tensorToDouble(&g.Initializer[k]); err != nil {
			return err
		}
	}
	for n := range g.Node {
		for a := range g.Node[n].Attribute {
			at := &g.Node[n].Attribute[a]
			switch {
			case at.T != nil:
				if err := tensorToDouble(at.T); err != nil {
					return err
				}
			case at.G != nil:
				if err := graphToDouble(at.G); err != nil {
					return err
				}
			case at.Type == onnxpb.AttrInt && at.I == int64(onnxpb.Float) &&
				(at.Name == "to" || at.Name == "dtype" || at.Name == "output_dtype"):
				at.I = int64(onnxpb.Double)
			}
			for k := range at.Tensors {
				if err := tensorToDouble(&at.Tensors[k]); err != nil {
					return err
				}
			}
			for k := range at.Graphs {
				if err := graphToDouble(&at.Graphs[k]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func typeToDouble(tp *onnxpb.TypeProto) {
	switch {
	case tp == nil:
	case tp.TensorType != nil:
		if tp.TensorType.ElemType == onnxpb.Float {
			tp.TensorType.ElemType = onnxpb.Double
		}
	case tp.SequenceType != nil:
		typeToDouble(tp.SequenceType.ElemType)
	case tp.OptionalType != nil:
		typeToDouble(tp.OptionalType.ElemType)
	}
}

func tensorToDouble(t *onnxpb.Tensor) error {
	if t.DataType != onnxpb.Float {
		return nil
	}
	it, err := t.ToIR()
	if err != nil {
		return err
	}
	*t = onnxpb.Tensor{Name: t.Name, Dims: t.Dims, DataType: onnxpb.Double, DoubleData: floats64(it)}
	return nil
}
