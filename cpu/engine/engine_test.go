package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/x448/float16"
)

// newPair returns this engine (over a fresh simplego) and a separate
// simplego engine, the oracle.
func newPair(t testing.TB) (*Engine, backends.Backend) {
	t.Helper()
	inner, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	oracle, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	e := New(inner)
	t.Cleanup(func() { e.Finalize(); oracle.Finalize() })
	return e, oracle
}

type graphFn func(b backends.Builder, params []backends.Op) ([]backends.Op, error)

// runGraph builds fn over params of the given shapes on eng, runs it on
// inputs and returns the outputs' values.
func runGraph(t testing.TB, eng backends.Backend, ins []shapes.Shape, vals []any, fn graphFn) []any {
	t.Helper()
	res, err := tryGraph(eng, ins, vals, nil, fn)
	if err != nil {
		t.Fatalf("%s: %v", eng.Name(), err)
	}
	return res
}

func tryGraph(eng backends.Backend, ins []shapes.Shape, vals []any, donate []bool, fn graphFn) ([]any, error) {
	b := eng.Builder("test")
	params := make([]backends.Op, len(ins))
	for i, s := range ins {
		p, err := b.Parameter(fmt.Sprintf("p%d", i), s, nil)
		if err != nil {
			return nil, err
		}
		params[i] = p
	}
	outs, err := fn(b, params)
	if err != nil {
		return nil, err
	}
	exe, err := b.Compile(outs, nil)
	if err != nil {
		return nil, err
	}
	defer exe.Finalize()
	bufs := make([]backends.Buffer, len(ins))
	for i, v := range vals {
		if bufs[i], err = eng.BufferFromFlatData(0, v, ins[i]); err != nil {
			return nil, err
		}
	}
	res, err := exe.Execute(bufs, donate, 0)
	if err != nil {
		return nil, err
	}
	for i, want := range exe.Outputs() {
		if got, err := eng.BufferShape(res[i]); err != nil || !got.Equal(want) {
			return nil, fmt.Errorf("output %d: buffer of shape %s (%v), the executable declares %s", i, got, err, want)
		}
	}
	return toFlat(eng, res)
}

func toFlat(eng backends.Backend, res []backends.Buffer) ([]any, error) {
	out := make([]any, len(res))
	for i, r := range res {
		s, err := eng.BufferShape(r)
		if err != nil {
			return nil, err
		}
		flat := newFlat(s)
		if err := eng.BufferToFlatData(r, flat); err != nil {
			return nil, err
		}
		_ = eng.BufferFinalize(r)
		out[i] = flat
	}
	return out, nil
}

func newFlat(s shapes.Shape) any {
	switch s.DType {
	case dtypes.Float32:
		return make([]float32, s.Size())
	case dtypes.Float64:
		return make([]float64, s.Size())
	case dtypes.Int32:
		return make([]int32, s.Size())
	case dtypes.Int64:
		return make([]int64, s.Size())
	case dtypes.Bool:
		return make([]bool, s.Size())
	case dtypes.Float16:
		return make([]float16.Float16, s.Size())
	case dtypes.BFloat16:
		return make([]bfloat16.BFloat16, s.Size())
	case dtypes.Uint16:
		return make([]uint16, s.Size())
	}
	panic(fmt.Sprintf("newFlat: dtype %s", s.DType))
}

func randF32(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// closeF32 compares got with want, each element within tol·(scale+|want|):
// scale is the typical magnitude of the rounding errors of a sum (√k for
// a k-term dot product of unit normals), 1 for element-wise results.
func closeF32(t *testing.T, what string, got, want []float32, tol, scale float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		r := d / (scale + math.Abs(float64(want[i])))
		if r > tol || math.IsNaN(float64(got[i])) != math.IsNaN(float64(want[i])) {
			t.Fatalf("%s: element %d = %g, want %g (relative error %.3g > %.3g)", what, i, got[i], want[i], r, tol)
		}
		worst = max(worst, r)
	}
	t.Logf("%s: worst relative error %.3g", what, worst)
}

// contracted returns the number of terms each output of c sums.
func (c dotCase) contracted() int {
	k := 1
	for _, a := range c.lc {
		k *= c.ls[a]
	}
	return k
}

// dotCase is one DotGeneral configuration.
type dotCase struct {
	name           string
	ls, rs         []int
	lc, lb, rc, rb []int
}

var dotCases = []dotCase{
	{"matvec", []int{1, 784}, []int{784, 512}, []int{1}, nil, []int{0}, nil},
	{"matmul", []int{33, 17}, []int{17, 29}, []int{1}, nil, []int{0}, nil},
	{"lhs transposed", []int{17, 33}, []int{17, 29}, []int{0}, nil, []int{0}, nil},
	{"rhs transposed (torch Linear)", []int{8, 64}, []int{48, 64}, []int{1}, nil, []int{1}, nil},
	{"both transposed", []int{64, 8}, []int{48, 64}, []int{0}, nil, []int{1}, nil},
	{"3-D x 2-D", []int{2, 128, 32}, []int{32, 96}, []int{2}, nil, []int{0}, nil},
	{"attention scores", []int{4, 16, 8}, []int{4, 20, 8}, []int{2}, []int{0}, []int{2}, []int{0}},
	{"attention values", []int{4, 16, 20}, []int{4, 20, 8}, []int{2}, []int{0}, []int{1}, []int{0}},
	{"batch not leading", []int{16, 4, 8}, []int{8, 4, 20}, []int{2}, []int{1}, []int{0}, []int{1}},
	{"two contracting axes", []int{3, 5, 7}, []int{5, 7, 4}, []int{1, 2}, nil, []int{0, 1}, nil},
	{"contracting axes reordered", []int{3, 5, 7}, []int{7, 5, 4}, []int{2, 1}, nil, []int{0, 1}, nil},
	{"two batch axes", []int{2, 3, 5, 7}, []int{2, 3, 7, 4}, []int{3}, []int{0, 1}, []int{2}, []int{0, 1}},
	{"scalar output", []int{10}, []int{10}, []int{0}, nil, []int{0}, nil},
	{"outer product", []int{5}, []int{6}, nil, nil, nil, nil},
	{"size-1 axes", []int{1, 1, 6, 1}, []int{1, 6, 1, 3}, []int{2}, []int{0}, []int{1}, []int{0}},
}

// TestDotGeneralMatchesSimplego runs every case on both engines: the
// native kernel must agree with GoMLX's reference engine within float32
// rounding.
func TestDotGeneralMatchesSimplego(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range dotCases {
		for _, constRHS := range []bool{false, true} { // a constant rhs is packed at compile time
			t.Run(fmt.Sprint(c.name, "/const=", constRHS), func(t *testing.T) {
				ls, rs := shapes.Make(dtypes.Float32, c.ls...), shapes.Make(dtypes.Float32, c.rs...)
				lv, rv := randF32(rng, ls.Size()), randF32(rng, rs.Size())
				ins, vals := []shapes.Shape{ls, rs}, []any{lv, rv}
				if constRHS {
					ins, vals = ins[:1], vals[:1]
				}
				fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
					rhs := backends.Op(nil)
					if constRHS {
						var err error
						if rhs, err = b.Constant(rv, c.rs...); err != nil {
							return nil, err
						}
					} else {
						rhs = p[1]
					}
					o, err := b.DotGeneral(p[0], c.lc, c.lb, rhs, c.rc, c.rb)
					return []backends.Op{o}, err
				}
				got := runGraph(t, e, ins, vals, fn)
				want := runGraph(t, oracle, ins, vals, fn)
				closeF32(t, c.name, got[0].([]float32), want[0].([]float32), dotTol, math.Sqrt(float64(c.contracted())))
			})
		}
	}
}

// dotTol bounds the difference of two float32 dot products summed in
// different orders, relative to √k+|result|.
const dotTol = 2e-6

// TestMixedPlan mixes native steps and segments: outputs that are inputs,
// constants and repeats; a donated input; an unused parameter; and runs
// the executable twice to check nothing of the first run leaks into the
// second.
func TestMixedPlan(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(3, 4))
	ins := []shapes.Shape{shapes.Make(dtypes.Float32, 4, 8), shapes.Make(dtypes.Float32, 8, 5), shapes.Make(dtypes.Float32, 3)}
	repeat := false
	wv := randF32(rng, 5*2)
	fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		d, err := b.DotGeneral(p[0], []int{1}, nil, p[1], []int{0}, nil) // native
		if err != nil {
			return nil, err
		}
		th, err := b.Tanh(d) // segment
		if err != nil {
			return nil, err
		}
		w, err := b.Constant(wv, 5, 2)
		if err != nil {
			return nil, err
		}
		d2, err := b.DotGeneral(th, []int{1}, nil, w, []int{0}, nil) // native, reads a constant
		if err != nil {
			return nil, err
		}
		s, err := b.Add(d2, d2) // segment
		if err != nil {
			return nil, err
		}
		if repeat {
			return []backends.Op{s, d, p[0], w, d}, nil
		}
		return []backends.Op{s, d, p[0], w}, nil
	}
	vals := []any{randF32(rng, 32), randF32(rng, 40), randF32(rng, 3)}
	want := runGraph(t, oracle, ins, vals, fn) // simplego refuses repeated outputs
	repeat = true
	want = append(want, want[1])
	for run := range 2 {
		got, err := tryGraph(e, ins, vals, []bool{true, false, true}, fn)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			closeF32(t, fmt.Sprintf("run %d output %d", run, i), got[i].([]float32), want[i].([]float32), dotTol, 3)
		}
	}
}

// TestKernelPanicIsRunError injects a panic into a native kernel: the run
// fails with an *OpError naming DotGeneral, the process survives, and the
// next run of the same executable is correct.
func TestKernelPanicIsRunError(t *testing.T) {
	e, _ := newPair(t)
	b := e.Builder("panic")
	x, _ := b.Parameter("x", shapes.Make(dtypes.Float32, 2, 3), nil)
	y, _ := b.Parameter("y", shapes.Make(dtypes.Float32, 3, 2), nil)
	d, err := b.DotGeneral(x, []int{1}, nil, y, []int{0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile([]backends.Op{d}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	x86 := exe.(*Executable)
	orig := x86.p.steps[0].native
	x86.p.steps[0].native = func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		panic("injected")
	}
	bx, _ := e.BufferFromFlatData(0, []float32{1, 2, 3, 4, 5, 6}, shapes.Make(dtypes.Float32, 2, 3))
	by, _ := e.BufferFromFlatData(0, []float32{1, 0, 0, 1, 1, 1}, shapes.Make(dtypes.Float32, 3, 2))
	_, err = exe.Execute([]backends.Buffer{bx, by}, nil, 0)
	var oe *OpError
	if !errors.As(err, &oe) || oe.Op != "DotGeneral" {
		t.Fatalf("want an *OpError naming DotGeneral, got %v", err)
	}
	t.Logf("error: %v", err)
	x86.p.steps[0].native = orig
	res, err := exe.Execute([]backends.Buffer{bx, by}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := toFlat(e, res)
	want := []float32{4, 5, 10, 11} // [[1,2,3],[4,5,6]] x [[1,0],[0,1],[1,1]]
	for i, w := range want {
		if got[0].([]float32)[i] != w {
			t.Fatalf("after the panic: got %v, want %v", got[0], want)
		}
	}
}

// TestRefusals checks bad graphs fail at build or compile time, naming the
// problem.
func TestRefusals(t *testing.T) {
	e, _ := newPair(t)
	b := e.Builder("bad")
	x, _ := b.Parameter("x", shapes.Make(dtypes.Float32, 2, 3), nil)
	if _, err := b.DotGeneral(x, []int{1}, nil, x, []int{1, 0}, nil); err == nil {
		t.Fatal("DotGeneral with mismatched contracting axes was accepted")
	}
	other := e.Builder("other")
	y, _ := other.Parameter("y", shapes.Make(dtypes.Float32, 2, 3), nil)
	if _, err := b.Add(x, y); err == nil {
		t.Fatal("an op from another computation was accepted")
	}
	if err := b.DistributedSPMD(2); err == nil {
		t.Fatal("DistributedSPMD(2) was accepted")
	}
	exe, err := b.Compile([]backends.Op{x}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bx, _ := e.BufferFromFlatData(0, make([]float32, 4), shapes.Make(dtypes.Float32, 4))
	if _, err := exe.Execute([]backends.Buffer{bx}, nil, 0); err == nil {
		t.Fatal("an input of the wrong shape was accepted")
	} else {
		t.Log(err)
	}
}

// TestInt8WeightsMatchSimplego: a product with int8 weights under a
// ConvertDType (what --quantize int8 builds) reads the int8 values
// directly; the result equals simplego's (which converts first) within
// float32 rounding, for few rows (matrix-vector kernel) and many (GEMM).
func TestInt8WeightsMatchSimplego(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(9, 10))
	for _, m := range []int{1, 3, 20} {
		t.Run(fmt.Sprint("rows=", m), func(t *testing.T) {
			const n, k = 37, 300
			ins := []shapes.Shape{shapes.Make(dtypes.Float32, m, k), shapes.Make(dtypes.Int8, n, k)}
			q := make([]int8, n*k)
			for i := range q {
				q[i] = int8(rng.IntN(256) - 128)
			}
			vals := []any{randF32(rng, m*k), q}
			fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
				w, err := b.ConvertDType(p[1], dtypes.Float32)
				if err != nil {
					return nil, err
				}
				o, err := b.DotGeneral(p[0], []int{1}, nil, w, []int{1}, nil)
				return []backends.Op{o}, err
			}
			if m == 1 {
				steps := planOf(t, e, ins, fn)
				if len(steps) != 1 || steps[0].seg != nil {
					t.Fatalf("planned as %d steps, want one native step reading the int8 weights", len(steps))
				}
			}
			got := runGraph(t, e, ins, vals, fn)
			want := runGraph(t, oracle, ins, vals, fn)
			closeF32(t, "int8", got[0].([]float32), want[0].([]float32), dotTol, 128*math.Sqrt(k))
		})
	}
}

// planOf compiles fn and returns its steps.
func planOf(t *testing.T, e *Engine, ins []shapes.Shape, fn graphFn) []step {
	t.Helper()
	b := e.Builder("plan")
	var ps []backends.Op
	for i, s := range ins {
		p, err := b.Parameter(fmt.Sprint("p", i), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	outs, err := fn(b, ps)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile(outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exe.Finalize)
	return exe.(*Executable).p.steps
}

// TestKernelErrorIsRunError: an error returned by a kernel (not a panic)
// fails the run with an *OpError wrapping it.
func TestKernelErrorIsRunError(t *testing.T) {
	e, _ := newPair(t)
	b := e.Builder("err")
	x, _ := b.Parameter("x", shapes.Make(dtypes.Float32, 2, 3), nil)
	d, _ := b.DotGeneral(x, []int{1}, nil, x, []int{1}, nil)
	exe, err := b.Compile([]backends.Op{d}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	sentinel := errors.New("injected kernel error")
	exe.(*Executable).p.steps[0].native = func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) { return nil, sentinel }
	bx, _ := e.BufferFromFlatData(0, make([]float32, 6), shapes.Make(dtypes.Float32, 2, 3))
	if _, err := exe.Execute([]backends.Buffer{bx}, nil, 0); !errors.Is(err, sentinel) {
		t.Fatalf("got %v, want the kernel's error", err)
	}
}

// TestBuilderPanicIsError: arguments the inner engine's builder rejects by
// panicking (an index vector axis out of range) are an error.
func TestBuilderPanicIsError(t *testing.T) {
	e, _ := newPair(t)
	b := e.Builder("bad gather")
	x, _ := b.Parameter("x", shapes.Make(dtypes.Float32, 7, 4), nil)
	i, _ := b.Parameter("i", shapes.Make(dtypes.Int32, 2, 2), nil)
	if _, err := b.Gather(x, i, 2, []int{2}, []int{0}, []int{0}, []int{1, 4}, false); err == nil {
		t.Fatal("accepted")
	} else {
		t.Log(err)
	}
}

// TestFoldedReshapeOfConstant: a Reshape of a constant (folded at compile
// time) read by a native kernel, as ONNX models' weights are.
func TestFoldedReshapeOfConstant(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(4, 4))
	w := randF32(rng, 6*4)
	ins := []shapes.Shape{shapes.Make(dtypes.Float32, 2, 4)}
	fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		c, err := b.Constant(w, 24)
		if err != nil {
			return nil, err
		}
		r, err := b.Reshape(c, 4, 6)
		if err != nil {
			return nil, err
		}
		tr, err := b.Transpose(r, 1, 0)
		if err != nil {
			return nil, err
		}
		o, err := b.DotGeneral(p[0], []int{1}, nil, tr, []int{1}, nil)
		return []backends.Op{o}, err
	}
	vals := []any{randF32(rng, 8)}
	closeF32(t, "folded", runGraph(t, e, ins, vals, fn)[0].([]float32), runGraph(t, oracle, ins, vals, fn)[0].([]float32), dotTol, 2)
	if steps := planOf(t, e, ins, fn); len(steps) != 1 {
		t.Fatalf("%d steps, want the product alone (Reshape and Transpose of a constant folded)", len(steps))
	}
}

// TestConcurrentRuns: one executable run from 8 goroutines at once, each
// with its own inputs, gives each its own answer (the run state is per
// call; serve replicas share executables).
func TestConcurrentRuns(t *testing.T) {
	e, oracle := newPair(t)
	ins, fn := mlpGraph(2)
	b := e.Builder("mlp")
	x, _ := b.Parameter("x", ins[0], nil)
	outs, err := fn(b, []backends.Op{x})
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile(outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 20 {
				v := randF32(rng, ins[0].Size())
				_, wfn := mlpGraph(2) // the same constants: mlpGraph's generator is seeded
				want, err := tryGraph(oracle, ins, []any{v}, nil, wfn)
				if err != nil {
					errs <- err
					return
				}
				buf, _ := e.BufferFromFlatData(0, v, ins[0])
				res, err := exe.Execute([]backends.Buffer{buf}, []bool{true}, 0)
				if err != nil {
					errs <- err
					return
				}
				got, _ := toFlat(e, res)
				scale := 0.0 // the outputs' magnitude: sums of large terms cancel to small values
				for _, w := range want[0].([]float32) {
					scale = max(scale, math.Abs(float64(w)))
				}
				for i, w := range want[0].([]float32) {
					if d := math.Abs(float64(got[0].([]float32)[i] - w)); d > 1e-5*scale {
						errs <- fmt.Errorf("goroutine %d: element %d = %g, want %g", g, i, got[0].([]float32)[i], w)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestSteps: the plan of the MLP is three products and three fused
// bias(+ReLU) loops, nothing in segments.
func TestSteps(t *testing.T) {
	e, _ := newPair(t)
	ins, fn := mlpGraph(1)
	b := e.Builder("mlp")
	x, _ := b.Parameter("x", ins[0], nil)
	outs, err := fn(b, []backends.Op{x})
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile(outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	got := fmt.Sprint(exe.(*Executable).Steps())
	want := "[native DotGeneral fused[BroadcastInDim Add BroadcastInDim Max] in place native DotGeneral fused[BroadcastInDim Add BroadcastInDim Max] in place native DotGeneral fused[BroadcastInDim Add] in place]"
	if got != want {
		t.Fatalf("steps %s\nwant %s", got, want)
	}
}

// TestBroadcastOfMasks: BroadcastInDim of bool and int32 (attention masks,
// indices) runs natively, by XLA's definition (output index i reads input
// index i restricted to the mapped axes; axes may be permuted), checked
// against that definition computed here: a [2, 3] input to [3, 4, 2]
// with axes (2, 0), a [1, 5] row to [4, 5] (size-1 axis broadcast too),
// and a scalar.
func TestBroadcastOfMasks(t *testing.T) {
	e, _ := newPair(t)
	cases := []struct {
		in, out, axes []int
	}{
		{[]int{2, 3}, []int{3, 4, 2}, []int{2, 0}},
		{[]int{1, 5}, []int{4, 5}, []int{0, 1}},
		{[]int{}, []int{3, 2}, nil},
		{[]int{4}, []int{4, 3}, []int{0}}, // stride 0 on the innermost axis
	}
	for _, c := range cases {
		for _, dt := range []dtypes.DType{dtypes.Bool, dtypes.Int32} {
			t.Run(fmt.Sprint(dt, c.in, c.out, c.axes), func(t *testing.T) {
				s := shapes.Make(dt, c.in...)
				vals := make([]int32, s.Size())
				for i := range vals {
					vals[i] = int32(i*7%5 - 2)
				}
				var in any = vals
				if dt == dtypes.Bool {
					b := make([]bool, len(vals))
					for i, v := range vals {
						b[i] = v > 0
					}
					in = b
				}
				fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
					o, err := b.BroadcastInDim(p[0], shapes.Make(dt, c.out...), c.axes)
					return []backends.Op{o}, err
				}
				steps := planOf(t, e, []shapes.Shape{s}, fn)
				if len(steps) != 1 || steps[0].seg != nil {
					t.Fatalf("planned as %v, want one native step", steps)
				}
				got := runGraph(t, e, []shapes.Shape{s}, []any{in}, fn)[0]
				ist := rowMajorStrides(c.in)
				ost := shapes.Make(dt, c.out...)
				idx := make([]int, len(c.out))
				for o := range ost.Size() {
					rem := o
					for a := len(c.out) - 1; a >= 0; a-- {
						idx[a], rem = rem%c.out[a], rem/c.out[a]
					}
					src := 0
					for i, a := range c.axes {
						if c.in[i] != 1 {
							src += idx[a] * ist[i]
						}
					}
					var want, have any
					switch g := got.(type) {
					case []bool:
						want, have = in.([]bool)[src], g[o]
					case []int32:
						want, have = in.([]int32)[src], g[o]
					}
					if want != have {
						t.Fatalf("output %v = %v, want %v", idx, have, want)
					}
				}
			})
		}
	}
}
