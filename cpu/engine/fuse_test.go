package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// fuseCase is an element-wise graph over inputs of the given shapes.
type fuseCase struct {
	name string
	ins  [][]int
	fn   graphFn
	// want, when set, is the reference instead of simplego (which reads a
	// BroadcastInDim with permuted axes as a reshape, against XLA's
	// definition: https://openxla.org/xla/operation_semantics#broadcastindim).
	want func(vals []any) []any
}

func op1(f func(backends.Builder, backends.Op) (backends.Op, error)) func(b backends.Builder, x backends.Op) backends.Op {
	return func(b backends.Builder, x backends.Op) backends.Op {
		o, err := f(b, x)
		if err != nil {
			panic(err)
		}
		return o
	}
}

func op2(f func(backends.Builder, backends.Op, backends.Op) (backends.Op, error)) func(b backends.Builder, x, y backends.Op) backends.Op {
	return func(b backends.Builder, x, y backends.Op) backends.Op {
		o, err := f(b, x, y)
		if err != nil {
			panic(err)
		}
		return o
	}
}

var (
	add, sub, mul, div = op2(backends.Builder.Add), op2(backends.Builder.Sub), op2(backends.Builder.Mul), op2(backends.Builder.Div)
	maxOp, powOp       = op2(backends.Builder.Max), op2(backends.Builder.Pow)
	exp, tanh, erf     = op1(backends.Builder.Exp), op1(backends.Builder.Tanh), op1(backends.Builder.Erf)
	rsqrt, logistic    = op1(backends.Builder.Rsqrt), op1(backends.Builder.Logistic)
	neg, abs, logOp    = op1(backends.Builder.Neg), op1(backends.Builder.Abs), op1(backends.Builder.Log)
	signOp             = op1(backends.Builder.Sign)
)

func bcast(b backends.Builder, x backends.Op, dims []int, axes ...int) backends.Op {
	o, err := b.BroadcastInDim(x, shapes.Make(dtypes.Float32, dims...), axes)
	if err != nil {
		panic(err)
	}
	return o
}

func scalar(b backends.Builder, v float32) backends.Op {
	o, err := b.Constant([]float32{v})
	if err != nil {
		panic(err)
	}
	return o
}

func catch(fn func() []backends.Op) (outs []backends.Op, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return fn(), nil
}

var fuseCases = []fuseCase{
	{"gelu", [][]int{{4, 300}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			x := p[0]
			h := mul(b, x, scalar(b, 0.5))
			e := erf(b, mul(b, x, scalar(b, float32(1/math.Sqrt2))))
			return []backends.Op{mul(b, h, add(b, e, scalar(b, 1)))}
		})
	}, nil},
	{"bias relu (rows)", [][]int{{8, 1030}, {1030}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			y := add(b, p[0], bcast(b, p[1], []int{8, 1030}, 1))
			return []backends.Op{maxOp(b, y, bcast(b, scalar(b, 0), []int{8, 1030}))}
		})
	}, nil},
	{"layer norm tail (columns) with middle outputs", [][]int{{6, 5, 7}, {6, 5}, {7}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			c := sub(b, p[0], bcast(b, p[1], []int{6, 5, 7}, 0, 1))
			r := rsqrt(b, add(b, mul(b, c, c), bcast(b, scalar(b, 1e-5), []int{6, 5, 7})))
			y := mul(b, mul(b, c, r), bcast(b, p[2], []int{6, 5, 7}, 2))
			return []backends.Op{y, c, bcast(b, p[2], []int{6, 5, 7}, 2)}
		})
	}, nil},
	{"transposed broadcast", [][]int{{3, 4}, {4, 3}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			return []backends.Op{add(b, p[0], bcast(b, p[1], []int{3, 4}, 1, 0))}
		})
	}, func(vals []any) []any {
		x, y := vals[0].([]float32), vals[1].([]float32)
		out := make([]float32, 12)
		for i := range 3 {
			for j := range 4 {
				out[i*4+j] = x[i*4+j] + y[j*3+i] // y is [4, 3]: its axis 0 is the output's axis 1
			}
		}
		return []any{out}
	}},
	{"implicit size-1 broadcast and scalars", [][]int{{5, 9}, {5, 1}, {}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			return []backends.Op{div(b, sub(b, p[0], p[1]), p[2]), logistic(b, neg(b, p[0]))}
		})
	}, nil},
	{"unary zoo", [][]int{{2, 3, 129}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			x := p[0]
			return []backends.Op{tanh(b, x), exp(b, x), abs(b, x), logOp(b, abs(b, x)), powOp(b, abs(b, x), x), signOp(b, x)}
		})
	}, nil},
	{"pow squares as a product", [][]int{{3, 131}, {3, 131}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			two := bcast(b, scalar(b, 2), []int{3, 131})
			return []backends.Op{powOp(b, p[0], two), powOp(b, p[0], scalar(b, 2)), powOp(b, p[1], p[0])}
		})
	}, nil},
	{"scalar graph", [][]int{{}, {}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op { return []backends.Op{mul(b, add(b, p[0], p[1]), p[1])} })
	}, nil},
	{"reshapes between members", [][]int{{4, 6}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			a := add(b, p[0], p[0])
			same, err := b.Reshape(a, 4, 6)
			if err != nil {
				panic(err)
			}
			flat, err := b.Reshape(a, 24)
			if err != nil {
				panic(err)
			}
			id, err := b.Identity(flat)
			if err != nil {
				panic(err)
			}
			return []backends.Op{exp(b, same), tanh(b, id)}
		})
	}, nil},
	{"comparisons and where", [][]int{{3, 130}, {3, 130}, {130}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			ge, err := b.GreaterOrEqual(p[0], p[1])
			if err != nil {
				panic(err)
			}
			ne, err := b.NotEqual(p[0], p[0]) // true at NaN
			if err != nil {
				panic(err)
			}
			w, err := b.Where(ge, p[0], bcast(b, p[2], []int{3, 130}, 1))
			if err != nil {
				panic(err)
			}
			w2, err := b.Where(ne, scalar(b, -1), w)
			if err != nil {
				panic(err)
			}
			asBool, err := b.ConvertDType(p[1], dtypes.Bool) // NaN and -0 included
			if err != nil {
				panic(err)
			}
			back, err := b.ConvertDType(asBool, dtypes.Float32)
			if err != nil {
				panic(err)
			}
			return []backends.Op{exp(b, w2), ge, asBool, add(b, back, w2)}
		})
	}, nil},
	// Short rows, several to a tile (fuserows.go): a channel's bias and a
	// clip over 7 x 7 planes; rows that do not fill the last group; a load
	// broadcast over a middle axis, so its rows are not back to back; a
	// bool made and read inside the region.
	{"channel bias and clip over short planes", [][]int{{64, 7, 7}, {64}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			y := add(b, p[0], bcast(b, p[1], []int{64, 7, 7}, 0))
			lo, hi := bcast(b, scalar(b, 0), []int{64, 7, 7}), bcast(b, scalar(b, 6), []int{64, 7, 7})
			return []backends.Op{neg(b, maxOp(b, neg(b, maxOp(b, y, lo)), neg(b, hi)))}
		})
	}, nil},
	{"uneven row groups", [][]int{{100, 13}, {100, 13}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op { return []backends.Op{mul(b, tanh(b, p[0]), p[1])} })
	}, nil},
	{"short rows broadcast over a middle axis", [][]int{{3, 5, 7}, {3, 7}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op {
			ge, err := b.GreaterOrEqual(p[0], bcast(b, p[1], []int{3, 5, 7}, 0, 2))
			if err != nil {
				panic(err)
			}
			w, err := b.Where(ge, p[0], bcast(b, p[1], []int{3, 5, 7}, 0, 2))
			if err != nil {
				panic(err)
			}
			return []backends.Op{sub(b, w, p[0]), ge}
		})
	}, nil},
	{"empty", [][]int{{0, 4}}, func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		return catch(func() []backends.Op { return []backends.Op{exp(b, p[0])} })
	}, nil},
}

// TestFusionBitExact runs element-wise graphs on both engines: fusion
// keeps every op's own rounding, so the results are identical to
// simplego's bit for bit, NaNs and infinities included.
func TestFusionBitExact(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -3e38,
		math.Float32frombits(0x7fc01234)} // a NaN with its own payload
	for _, c := range fuseCases {
		t.Run(c.name, func(t *testing.T) {
			var ins []shapes.Shape
			var vals []any
			for _, d := range c.ins {
				s := shapes.Make(dtypes.Float32, d...)
				v := randF32(rng, s.Size())
				for i := range min(len(v)/3, len(special)) {
					v[3*i] = special[i]
				}
				ins, vals = append(ins, s), append(vals, v)
			}
			got := runGraph(t, e, ins, vals, c.fn)
			var want []any
			if c.want != nil {
				want = c.want(vals)
			} else {
				want = runGraph(t, oracle, ins, vals, c.fn)
			}
			bitsEqual(t, got, want)
		})
	}
}

// TestFusionForms checks the plan: one fused step for a chain, not one
// step per op.
func TestFusionForms(t *testing.T) {
	e, _ := newPair(t)
	b := e.Builder("gelu")
	x, _ := b.Parameter("x", shapes.Make(dtypes.Float32, 4, 300), nil)
	outs, err := fuseCases[0].fn(b, []backends.Op{x})
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile(outs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	steps := exe.(*Executable).p.steps
	if len(steps) != 1 || steps[0].seg != nil {
		var names []string
		for _, s := range steps {
			names = append(names, s.name)
		}
		t.Fatalf("GELU planned as %d steps %v, want one fused step", len(steps), names)
	}
	t.Log(steps[0].name)
}

// TestReduceAndAdaptersBitExact: reductions over every pattern of axes,
// and transposes and reshapes read through fusion, equal simplego's bit
// for bit (the same order of accumulation).
func TestReduceAndAdaptersBitExact(t *testing.T) {
	e, oracle := newPair(t)
	rng := rand.New(rand.NewPCG(7, 8))
	dims := []int{3, 4, 5, 6}
	s := shapes.Make(dtypes.Float32, dims...)
	v := randF32(rng, s.Size())
	v[7], v[50] = float32(math.NaN()), float32(math.Inf(-1))
	type red = func(backends.Builder, backends.Op, ...int) (backends.Op, error)
	for _, r := range []struct {
		name string
		f    red
	}{{"sum", backends.Builder.ReduceSum}, {"max", backends.Builder.ReduceMax}, {"min", backends.Builder.ReduceMin}} {
		for _, axes := range [][]int{{3}, {2, 3}, {1}, {0}, {0, 2}, {1, 3}, {0, 2, 3}, {0, 3}, {0, 1, 2, 3}, {}} {
			t.Run(fmt.Sprint(r.name, axes), func(t *testing.T) {
				fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
					o, err := r.f(b, p[0], axes...)
					return []backends.Op{o}, err
				}
				bitsEqual(t, runGraph(t, e, []shapes.Shape{s}, []any{v}, fn), runGraph(t, oracle, []shapes.Shape{s}, []any{v}, fn))
			})
		}
	}
	t.Run("transpose and reshape", func(t *testing.T) {
		fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
			tr, err := b.Transpose(p[0], 2, 0, 3, 1)
			if err != nil {
				return nil, err
			}
			rs, err := b.Reshape(p[0], 12, 30)
			if err != nil {
				return nil, err
			}
			x, err := b.Exp(tr)
			return []backends.Op{tr, rs, x}, err
		}
		bitsEqual(t, runGraph(t, e, []shapes.Shape{s}, []any{v}, fn), runGraph(t, oracle, []shapes.Shape{s}, []any{v}, fn))
	})
}

func bitsEqual(t *testing.T, got, want []any) {
	t.Helper()
	for i := range want {
		if wb, ok := want[i].([]bool); ok {
			if fmt.Sprint(got[i]) != fmt.Sprint(wb) {
				t.Fatalf("output %d: %v, want %v", i, got[i], wb)
			}
			continue
		}
		g, w := got[i].([]float32), want[i].([]float32)
		if len(g) != len(w) {
			t.Fatalf("output %d: %d values, want %d", i, len(g), len(w))
		}
		for j := range w {
			if math.Float32bits(g[j]) != math.Float32bits(w[j]) {
				t.Fatalf("output %d element %d: %g, want %g", i, j, g[j], w[j])
			}
		}
	}
}

// TestSliceConcatExact: native Slice (with strides) and Concatenate of
// several dtypes equal simplego's exactly.
func TestSliceConcatExact(t *testing.T) {
	e, oracle := newPair(t)
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Int32, dtypes.Int64, dtypes.Float64} {
		t.Run(dt.String(), func(t *testing.T) {
			s := shapes.Make(dt, 4, 5, 6)
			v := newFlat(s)
			rv := reflect.ValueOf(v)
			for i := range rv.Len() {
				rv.Index(i).Set(reflect.ValueOf(i*7 - 50).Convert(rv.Type().Elem()))
			}
			fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
				a, err := b.Slice(p[0], []int{1, 0, 2}, []int{4, 5, 6}, []int{2, 1, 1})
				if err != nil {
					return nil, err
				}
				c, err := b.Slice(p[0], []int{0, 1, 0}, []int{4, 5, 6}, []int{1, 2, 3})
				if err != nil {
					return nil, err
				}
				cat, err := b.Concatenate(1, p[0], p[0])
				if err != nil {
					return nil, err
				}
				cat0, err := b.Concatenate(0, p[0], p[0])
				return []backends.Op{a, c, cat, cat0}, err
			}
			got := runGraph(t, e, []shapes.Shape{s}, []any{v}, fn)
			want := runGraph(t, oracle, []shapes.Shape{s}, []any{v}, fn)
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("output %d: %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestGatherExact: native Gather (embedding lookups, index vectors of two
// coordinates, out-of-range starts clamped, int64 indices) equals
// simplego's exactly.
func TestGatherExact(t *testing.T) {
	e, oracle := newPair(t)
	table := make([]float32, 7*5*4)
	for i := range table {
		table[i] = float32(i)
	}
	ts := shapes.Make(dtypes.Float32, 7, 5, 4)
	cases := []struct {
		name      string
		idx       any
		idxDims   []int
		ivAxis    int
		offOut    []int
		collapsed []int
		startMap  []int
		sizes     []int
	}{
		{"rows", []int32{3, 0, 6, 3}, []int{2, 2, 1}, 2, []int{2, 3}, []int{0}, []int{0}, []int{1, 5, 4}},
		{"two coordinates", []int32{1, 2, 6, 4, 0, 0}, []int{3, 2}, 1, []int{1}, []int{0, 1}, []int{0, 1}, []int{1, 1, 4}},
		{"clamped windows", []int64{5, 3, -2, 9}, []int{2, 2}, 1, []int{1, 2, 3}, nil, []int{0, 1}, []int{3, 3, 2}},
		{"middle axis", []int32{4, 1}, []int{2, 1}, 1, []int{1, 2}, []int{1}, []int{1}, []int{7, 1, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dt := dtypes.Int32
			if _, ok := c.idx.([]int64); ok {
				dt = dtypes.Int64
			}
			ins := []shapes.Shape{ts, shapes.Make(dt, c.idxDims...)}
			fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
				o, err := b.Gather(p[0], p[1], c.ivAxis, c.offOut, c.collapsed, c.startMap, c.sizes, false)
				return []backends.Op{o}, err
			}
			if steps := planOf(t, e, ins, fn); len(steps) != 1 || steps[0].seg != nil {
				t.Fatal("Gather not planned as one native step")
			}
			got := runGraph(t, e, ins, []any{table, c.idx}, fn)
			want := runGraph(t, oracle, ins, []any{table, c.idx}, fn)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v\nwant %v", got, want)
			}
		})
	}
}

// TestDynamicSlices: DynamicSlice and DynamicUpdateSlice (which simplego
// lacks) against hand-computed results, starts clamped as XLA clamps them;
// an update of a value read again afterwards must not change that read.
func TestDynamicSlices(t *testing.T) {
	e, _ := newPair(t)
	ins := []shapes.Shape{shapes.Make(dtypes.Int32, 3, 4), shapes.Make(dtypes.Int32, 2, 2), shapes.Make(dtypes.Int32), shapes.Make(dtypes.Int32)}
	fn := func(b backends.Builder, p []backends.Op) ([]backends.Op, error) {
		ds, err := b.DynamicSlice(p[0], []backends.Op{p[2], p[3]}, []int{2, 2})
		if err != nil {
			return nil, err
		}
		up, err := b.DynamicUpdateSlice(p[0], p[1], []backends.Op{p[2], p[3]})
		if err != nil {
			return nil, err
		}
		twice, err := b.DynamicUpdateSlice(up, p[1], []backends.Op{p[3], p[2]})
		return []backends.Op{ds, up, twice}, err
	}
	x := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	u := []int32{-1, -2, -3, -4}
	for _, c := range []struct {
		r, c          int32
		ds, up, twice string
	}{
		{1, 1, "[5 6 9 10]", "[0 1 2 3 4 -1 -2 7 8 -3 -4 11]", "[0 1 2 3 4 -1 -2 7 8 -3 -4 11]"},
		{5, -3, "[4 5 8 9]", "[0 1 2 3 -1 -2 6 7 -3 -4 10 11]", "[0 1 -1 -2 -1 -2 -3 -4 -3 -4 10 11]"},
	} {
		got := runGraph(t, e, ins, []any{x, u, []int32{c.r}, []int32{c.c}}, fn)
		if fmt.Sprint(got[0]) != c.ds || fmt.Sprint(got[1]) != c.up || fmt.Sprint(got[2]) != c.twice {
			t.Errorf("start (%d,%d): got %v %v %v, want %s %s %s", c.r, c.c, got[0], got[1], got[2], c.ds, c.up, c.twice)
		}
	}
	if fmt.Sprint(x) != "[0 1 2 3 4 5 6 7 8 9 10 11]" {
		t.Fatalf("the caller's input changed: %v", x)
	}
}
