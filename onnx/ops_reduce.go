package onnx

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Reductions: Reduce* (axes as attribute, or as input from opset 13 for
// ReduceSum and 18 for the others), ArgMax, ArgMin.

func init() {
	type red struct {
		name string
		fn   func(x *graph.Node, axes []int) *graph.Node
		host func(a, b float64) float64
		init float64
	}
	reds := []red{
		{"ReduceSum", func(x *graph.Node, axes []int) *graph.Node { return graph.ReduceSum(x, axes...) },
			func(a, b float64) float64 { return a + b }, 0},
		{"ReduceMean", reduceMean, nil, 0},
		{"ReduceMax", func(x *graph.Node, axes []int) *graph.Node { return reduceMaxMin(x, axes, true) },
			math.Max, math.Inf(-1)},
		{"ReduceMin", func(x *graph.Node, axes []int) *graph.Node { return reduceMaxMin(x, axes, false) },
			math.Min, math.Inf(1)},
		{"ReduceProd", func(x *graph.Node, axes []int) *graph.Node { return graph.ReduceMultiply(x, axes...) },
			func(a, b float64) float64 { return a * b }, 1},
		{"ReduceL1", func(x *graph.Node, axes []int) *graph.Node { return graph.ReduceSum(graph.Abs(x), axes...) }, nil, 0},
		{"ReduceL2", func(x *graph.Node, axes []int) *graph.Node {
			return graph.Sqrt(graph.ReduceSum(graph.Mul(x, x), axes...))
		}, nil, 0},
		{"ReduceSumSquare", func(x *graph.Node, axes []int) *graph.Node { return graph.ReduceSum(graph.Mul(x, x), axes...) }, nil, 0},
		{"ReduceLogSum", func(x *graph.Node, axes []int) *graph.Node { return graph.Log(graph.ReduceSum(x, axes...)) }, nil, 0},
		{"ReduceLogSumExp", reduceLogSumExp, nil, 0},
	}
	for _, r := range reds {
		inputSince := 18
		if r.name == "ReduceSum" {
			inputSince = 13
		}
		conv := reduceConv(r.name, r.fn)
		d1 := register(r.name, 1, conv)
		d2 := register(r.name, inputSince, conv).needs(1)
		registerPadRule(r.name, padReduce)
		if r.host != nil {
			h := hostReduce(r.host, r.init)
			d1.withHost(h)
			d2.withHost(h)
		}
	}
	register("ArgMax", 1, convArgMinMax(true))
	register("ArgMin", 1, convArgMinMax(false))
	registerPadRules(padReduce, "ArgMax", "ArgMin")
}

// reduceAxes resolves a Reduce*'s axes for input rank r: nil means "no
// reduction" (noop_with_empty_axes with no axes).
func reduceAxes(c *opCtx, r int) []int {
	fromInput := c.def.since >= 13
	axes, ok := c.axesArg(1, fromInput)
	if !ok || len(axes) == 0 {
		if c.attrInt("noop_with_empty_axes", 0) != 0 {
			return nil
		}
		all := make([]int, r)
		for k := range all {
			all[k] = k
		}
		return all
	}
	return c.normAxes(axes, r)
}

// keptDims is dims with the reduced axes set to 1.
func keptDims(dims, axes []int) []int {
	out := append([]int{}, dims...)
	for _, a := range axes {
		out[a] = 1
	}
	return out
}

func reduceConv(op string, fn func(x *graph.Node, axes []int) *graph.Node) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		axes := reduceAxes(c, x.Rank())
		if axes == nil {
			c.set(0, x)
			return nil
		}
		if err := emptySetUndefined(c, op, c.dtype(0), x.Shape().Dimensions, axes); err != nil {
			return err
		}
		y := fn(x, axes)
		if c.attrInt("keepdims", 1) != 0 {
			y = graph.Reshape(y, keptDims(x.Shape().Dimensions, axes)...)
		}
		c.set(0, y)
		return nil
	}
}

// emptySetUndefined refuses, with an *EmptySetError, a reduction of op
// over axes of dims that has values to give (the kept dimensions hold
// elements) from an empty set (a reduced axis of size 0) where the ONNX
// specification defines none: ReduceMean (and GlobalAveragePool, its
// mean over the spatial axes), the log-sums of integers, ArgMax and
// ArgMin. Every other reduction has an identity there (GlobalMaxPool and
// GlobalLpPool those of ReduceMax and the L-p norms: -inf, 0).
func emptySetUndefined(c *opCtx, op string, dt ir.DType, dims, axes []int) error {
	empty, kept := false, 1
	for k, d := range dims {
		if containsInt(axes, k) {
			empty = empty || d == 0
		} else {
			kept *= d
		}
	}
	if !empty || kept == 0 {
		return nil
	}
	var rule string
	switch {
	case op == "ReduceMean":
		rule = "ReduceMean: \"reduction over an empty set of values yields undefined\""
	case op == "GlobalAveragePool":
		rule = "GlobalAveragePool is ReduceMean over the spatial axes, of which ONNX says \"reduction over an empty set of values yields undefined\""
	case (op == "ReduceLogSum" || op == "ReduceLogSumExp") && !isFloatDT(dt):
		rule = op + " of " + dt.String() + ": \"minus infinity (if supported by the datatype) or undefined otherwise\""
	case op == "ArgMax" || op == "ArgMin":
		rule = op + ": \"the input tensor must not be empty\""
	default:
		return nil
	}
	return &EmptySetError{Input: c.input(0).name, Dims: append([]int{}, dims...), Axes: append([]int{}, axes...), Rule: rule}
}

func reduceMean(x *graph.Node, axes []int) *graph.Node {
	n := 1
	for _, a := range axes {
		n *= x.Shape().Dimensions[a]
	}
	s := graph.ReduceSum(x, axes...)
	return graph.Div(s, scalarLikeB(s, float64(n)))
}

// reduceMaxMin reduces, giving ONNX's identities (-inf / +inf, or the
// dtype's extreme) for empty reductions.
func reduceMaxMin(x *graph.Node, axes []int, isMax bool) *graph.Node {
	if x.DType() == ir.Bool {
		dims := x.Shape().Dimensions
		for _, a := range axes {
			if dims[a] == 0 {
				// An empty set: false for max (any), true for min (all), as
				// a constant (the pure-Go backend fails reducing empty bools).
				var out []int
				for k, d := range dims {
					if !containsInt(axes, k) {
						out = append(out, d)
					}
				}
				return graph.BroadcastToDims(graph.Const(x.Graph(), !isMax), out...)
			}
		}
		// Max is "any", min is "all" (true over an empty set), counted in
		// Int32: no backend reduces Bool with max or min.
		count := func(v *graph.Node) *graph.Node {
			return graph.ReduceSum(graph.Where(v, graph.OnesLike(graph.ConvertDType(v, ir.Int32)),
				graph.ZerosLike(graph.ConvertDType(v, ir.Int32))), axes...)
		}
		if isMax {
			return graph.GreaterThan(count(x), graph.ZerosLike(count(x)))
		}
		n := count(graph.LogicalNot(x))
		return graph.Equal(n, graph.ZerosLike(n))
	}
	if isMax {
		return graph.ReduceMax(x, axes...)
	}
	return graph.ReduceMin(x, axes...)
}

func reduceLogSumExp(x *graph.Node, axes []int) *graph.Node {
	// The shift by the maximum cancels in value and derivative, so it is
	// taken out of the gradient: GoMLX's ReduceMax gradient is NaN on a
	// slice that is -Inf everywhere (x - max = -Inf - -Inf).
	m := graph.StopGradient(graph.ReduceMax(x, axes...))
	// Guard infinite maxima so exp(x - m) stays defined.
	mKeep := graph.Reshape(m, keptDims(x.Shape().Dimensions, axes)...)
	finite := graph.IsFinite(mKeep)
	mSafe := graph.Where(finite, mKeep, scalarLikeB(mKeep, 0))
	s := graph.ReduceSum(graph.Exp(graph.Sub(x, broadcastNodeTo(mSafe, x.Shape().Dimensions))), axes...)
	return graph.Add(graph.Log(s), graph.Reshape(mSafe, m.Shape().Dimensions...))
}

// hostReduce folds a reduction on the host (used for shape arithmetic such
// as ReduceProd of a shape).
func hostReduce(fn func(a, b float64) float64, init float64) converterFunc {
	return func(c *opCtx) error {
		x := c.hostIn(0)
		axes := reduceAxes(c, x.rank())
		if axes == nil {
			c.setHost(0, x)
			return nil
		}
		isInt := !x.isFloat()
		if isInt && x.dt == ir.Int64 {
			// Values beyond 2^53 would lose precision through float64.
			vals, err := x.ints()
			if err != nil {
				return err
			}
			for _, v := range vals {
				if v > 1<<53 || v < -(1<<53) {
					return errNoHost
				}
			}
		}
		f, err := x.floats()
		if err != nil {
			return err
		}
		red := make([]bool, x.rank())
		for _, a := range axes {
			red[a] = true
		}
		outDims := keptDims(x.dims, axes)
		ost := strides(outDims)
		out := make([]float64, numElems(outDims))
		for k := range out {
			out[k] = init
		}
		forEachIndex(x.dims, func(flat int, ix []int) {
			j := 0
			for a, i := range ix {
				if !red[a] {
					j += i * ost[a]
				}
			}
			out[j] = fn(out[j], f[flat])
		})
		// An empty set leaves the identity, ±Inf for max and min: an
		// integer's is its dtype's extreme, a bool's false or true.
		lo, hi, isIntDT := resizeIntRange(x.dt)
		if x.dt == ir.Bool {
			lo, hi, isIntDT = 0, 1, true
		}
		if isIntDT {
			for k := range out {
				out[k] = min(max(out[k], lo), hi)
			}
		}
		if c.attrInt("keepdims", 1) == 0 {
			var d []int
			for a, v := range x.dims {
				if !red[a] {
					d = append(d, v)
				}
			}
			outDims = d
			if outDims == nil {
				outDims = []int{}
			}
		}
		h := newHostFloats(ir.Float64, outDims, out)
		if r, err := h.castTo(x.dt); err == nil {
			c.setHost(0, r)
		} else {
			return err
		}
		return nil
	}
}

// convArgMinMax returns int64 indices; select_last_index reverses the axis
// first and maps the index back.
func convArgMinMax(isMax bool) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		axis := c.normAxis(c.attrInt("axis", 0), x.Rank())
		op := "ArgMin"
		if isMax {
			op = "ArgMax"
		}
		if err := emptySetUndefined(c, op, c.dtype(0), x.Shape().Dimensions, []int{axis}); err != nil {
			return err
		}
		last := c.attrInt("select_last_index", 0) != 0
		n := x.Shape().Dimensions[axis]
		if last {
			x = reverseAxis(x, axis)
		}
		var y *graph.Node
		if isMax {
			y = graph.ArgMax(x, axis, ir.Int64)
		} else {
			y = graph.ArgMin(x, axis, ir.Int64)
		}
		if last {
			y = graph.Sub(scalarLikeB(y, float64(n-1)), y)
		}
		if c.attrInt("keepdims", 1) != 0 {
			y = graph.Reshape(y, keptDims(x.Shape().Dimensions, []int{axis})...)
		}
		c.setDT(0, y, ir.Int64)
		return nil
	}
}
