package lower

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/go-xla/pkg/types"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// combiner is a scalar function of two values used as the body of
// reductions, scatters, window ops and all-reduce.
type combiner int

const (
	combAdd combiner = iota
	combMul
	combMax
	combMin
	combAnd
	combOr
	combXor
	combGE // select-and-scatter selector for max
	combLE // select-and-scatter selector for min
)

type closureKey struct {
	c  combiner
	dt dtypes.DType
}

// closure returns the (cached) StableHLO closure computing c on two
// scalars of dt.
func (b *Builder) closure(c combiner, dt dtypes.DType) (*stablehlo.Function, error) {
	key := closureKey{c, dt}
	if fn, ok := b.closures[key]; ok {
		return fn, nil
	}
	fn := b.fn.Closure()
	s := toXShape(shapes.Make(dt))
	lhs, err := fn.Input(s)
	if err != nil {
		return nil, err
	}
	rhs, err := fn.Input(s)
	if err != nil {
		return nil, err
	}
	var v *stablehlo.Value
	switch c {
	case combAdd:
		v, err = stablehlo.Add(lhs, rhs)
	case combMul:
		v, err = stablehlo.Multiply(lhs, rhs)
	case combMax:
		v, err = stablehlo.Maximum(lhs, rhs)
	case combMin:
		v, err = stablehlo.Minimum(lhs, rhs)
	case combAnd:
		v, err = stablehlo.And(lhs, rhs)
	case combOr:
		v, err = stablehlo.Or(lhs, rhs)
	case combXor:
		v, err = stablehlo.Xor(lhs, rhs)
	case combGE:
		v, err = stablehlo.Compare(lhs, rhs, types.CompareGE, compareType(dt, false))
	case combLE:
		v, err = stablehlo.Compare(lhs, rhs, types.CompareLE, compareType(dt, false))
	default:
		return nil, fmt.Errorf("unknown combiner %d", c)
	}
	if err != nil {
		return nil, err
	}
	if err := fn.Return(v); err != nil {
		return nil, err
	}
	b.closures[key] = fn
	return fn, nil
}

// identity is the starting value of a reduction with combiner c.
func (c combiner) identity() scalarKind {
	switch c {
	case combMul:
		return oneScalar
	case combMax:
		return lowestScalar
	case combMin:
		return highestScalar
	case combAnd:
		return allOnesScalar
	}
	return zeroScalar
}

// reduce lowers the Reduce* family.
func (b *Builder) reduce(op string, class dtypeClass, c combiner, x backends.Op, axes []int) (out backends.Op, err error) {
	defer b.guard(op, &err)
	ns, err := b.nodes(op, x)
	if err != nil {
		return nil, err
	}
	n := ns[0]
	dt := n.shape.DType
	if !class.accepts(dt) {
		return nil, b.unsupported(op, fmt.Sprintf("operand is %s, the op needs %s", dt, class))
	}
	rank := n.shape.Rank()
	if len(axes) == 0 {
		axes = make([]int, rank)
		for i := range axes {
			axes[i] = i
		}
	} else {
		axes = slices.Clone(axes)
		for i, a := range axes {
			if a < -rank || a >= rank {
				return nil, b.opError(op, fmt.Errorf("axis %d out of range for %s", a, n.shape))
			}
			if a < 0 {
				axes[i] = a + rank
			}
		}
		sorted := slices.Clone(axes)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != len(axes) {
			return nil, b.opError(op, fmt.Errorf("axes %v repeat an axis", axes))
		}
	}
	if len(axes) == 0 {
		return n, nil // reducing a scalar over no axes
	}
	fn, err := b.closure(c, dt)
	if err != nil {
		return nil, b.opError(op, err)
	}
	init, err := b.scalar(dt, c.identity())
	if err != nil {
		return nil, b.opError(op, err)
	}
	v, err := stablehlo.Reduce(n.value, init, fn, axes...)
	if err != nil {
		return nil, b.opError(op, err)
	}
	return b.node(v), nil
}

// ReduceSum sums x over axes (all axes if none given).
func (b *Builder) ReduceSum(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceSum", anyNumber, combAdd, x, axes)
}

// ReduceProduct multiplies x over axes.
func (b *Builder) ReduceProduct(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceProduct", anyNumber, combMul, x, axes)
}

// ReduceMax takes the maximum over axes (-inf for an empty float axis).
func (b *Builder) ReduceMax(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceMax", realNumber, combMax, x, axes)
}

// ReduceMin takes the minimum over axes (+inf for an empty float axis).
func (b *Builder) ReduceMin(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceMin", realNumber, combMin, x, axes)
}

// ReduceBitwiseAnd ands the bits of x over axes.
func (b *Builder) ReduceBitwiseAnd(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceBitwiseAnd", integers, combAnd, x, axes)
}

// ReduceBitwiseOr ors the bits of x over axes.
func (b *Builder) ReduceBitwiseOr(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceBitwiseOr", integers, combOr, x, axes)
}

// ReduceBitwiseXor xors the bits of x over axes.
func (b *Builder) ReduceBitwiseXor(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceBitwiseXor", integers, combXor, x, axes)
}

// ReduceLogicalAnd is true where every element over axes is true.
func (b *Builder) ReduceLogicalAnd(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceLogicalAnd", booleans, combAnd, x, axes)
}

// ReduceLogicalOr is true where any element over axes is true.
func (b *Builder) ReduceLogicalOr(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceLogicalOr", booleans, combOr, x, axes)
}

// ReduceLogicalXor is true where an odd number of elements over axes are true.
func (b *Builder) ReduceLogicalXor(x backends.Op, axes ...int) (backends.Op, error) {
	return b.reduce("ReduceLogicalXor", booleans, combXor, x, axes)
}

// ArgMinMax returns, along axis, the index of the smallest (isMin) or
// largest element, as outputDType. Ties go to the lowest index; a NaN wins
// over any number (the first NaN if several), as in JAX and PyTorch.
//
// It is one variadic reduce over (values, indices) whose body picks the
// winning pair; the body is a total order on pairs, so XLA may combine
// elements in any order.
func (b *Builder) ArgMinMax(x backends.Op, axis int, outputDType dtypes.DType, isMin bool) (out backends.Op, err error) {
	const op = "ArgMinMax"
	defer b.guard(op, &err)
	ns, err := b.nodes(op, x)
	if err != nil {
		return nil, err
	}
	n := ns[0]
	dt := n.shape.DType
	if !realNumber.accepts(dt) && dt != dtypes.Bool {
		return nil, b.unsupported(op, fmt.Sprintf("operand is %s, which has no order", dt))
	}
	if !outputDType.IsInt() {
		return nil, b.opError(op, fmt.Errorf("output dtype must be an integer, got %s", outputDType))
	}
	rank := n.shape.Rank()
	if axis < -rank || axis >= rank {
		return nil, b.opError(op, fmt.Errorf("axis %d out of range for %s", axis, n.shape))
	}
	if axis < 0 {
		axis += rank
	}

	// Body: (lv, li, rv, ri) -> (v, i).
	body := b.fn.Closure()
	vs, is := toXShape(shapes.Make(dt)), toXShape(shapes.Make(outputDType))
	lv, err := body.Input(vs)
	if err != nil {
		return nil, b.opError(op, err)
	}
	li, err := body.Input(is)
	if err != nil {
		return nil, b.opError(op, err)
	}
	rv, err := body.Input(vs)
	if err != nil {
		return nil, b.opError(op, err)
	}
	ri, err := body.Input(is)
	if err != nil {
		return nil, b.opError(op, err)
	}
	ct := compareType(dt, false)
	dir := types.CompareGT
	if isMin {
		dir = types.CompareLT
	}
	var e error
	check := func(v *stablehlo.Value, err error) *stablehlo.Value {
		if err != nil && e == nil {
			e = err
		}
		return v
	}
	better := check(stablehlo.Compare(lv, rv, dir, ct))
	tie := check(stablehlo.Compare(lv, rv, types.CompareEQ, ct))
	if e == nil && dt.IsFloat() {
		lnan := check(stablehlo.Compare(lv, lv, types.CompareNE, types.CompareFloat))
		rnan := check(stablehlo.Compare(rv, rv, types.CompareNE, types.CompareFloat))
		if e == nil {
			rnum := check(stablehlo.Not(rnan))
			better = check(stablehlo.Or(better, check(stablehlo.And(lnan, rnum))))
			tie = check(stablehlo.Or(tie, check(stablehlo.And(lnan, rnan))))
		}
	}
	if e == nil {
		lower := check(stablehlo.Compare(li, ri, types.CompareLT, compareType(outputDType, false)))
		pickLeft := check(stablehlo.Or(better, check(stablehlo.And(tie, lower))))
		v := check(stablehlo.Select(pickLeft, lv, rv))
		i := check(stablehlo.Select(pickLeft, li, ri))
		if e == nil {
			e = body.Return(v, i)
		}
	}
	if e != nil {
		return nil, b.opError(op, e)
	}

	start := lowestScalar
	if isMin {
		start = highestScalar
	}
	initV, err := b.scalar(dt, start)
	if err != nil {
		return nil, b.opError(op, err)
	}
	initI, err := b.scalar(outputDType, zeroScalar)
	if err != nil {
		return nil, b.opError(op, err)
	}
	idx, err := b.fn.Iota(toXShape(shapes.Make(outputDType, n.shape.Dimensions...)), axis)
	if err != nil {
		return nil, b.opError(op, err)
	}
	res, err := stablehlo.MultiReduce([]*stablehlo.Value{n.value, idx}, []*stablehlo.Value{initV, initI}, body, axis)
	if err != nil {
		return nil, b.opError(op, err)
	}
	return b.node(res[1]), nil
}

func reduceOpCombiner(t backends.ReduceOpType) (combiner, error) {
	switch t {
	case backends.ReduceOpSum:
		return combAdd, nil
	case backends.ReduceOpProduct:
		return combMul, nil
	case backends.ReduceOpMax:
		return combMax, nil
	case backends.ReduceOpMin:
		return combMin, nil
	}
	return 0, fmt.Errorf("unsupported reduction type %s", t)
}

// i64Array renders an attribute as a StableHLO array<i64: ...>.
type i64Array []int

// ToStableHLO implements go-xla's attribute rendering.
func (a i64Array) ToStableHLO() string {
	var sb strings.Builder
	sb.WriteString("array<i64")
	for i, v := range a {
		if i == 0 {
			sb.WriteString(": ")
		} else {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Itoa(v))
	}
	sb.WriteString(">")
	return sb.String()
}

func ones(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// ReduceWindow reduces sliding windows of x. Nil strides equal the window
// dimensions; nil dilations are 1; nil paddings are 0.
func (b *Builder) ReduceWindow(x backends.Op, reductionType backends.ReduceOpType,
	windowDimensions, strides, baseDilations, windowDilations []int, paddings [][2]int) (out backends.Op, err error) {
	const op = "ReduceWindow"
	defer b.guard(op, &err)
	ns, err := b.nodes(op, x)
	if err != nil {
		return nil, err
	}
	n := ns[0]
	rank := n.shape.Rank()
	c, err := reduceOpCombiner(reductionType)
	if err != nil {
		return nil, b.opError(op, err)
	}
	if !realNumber.accepts(n.shape.DType) && !(c == combAdd || c == combMul) {
		return nil, b.unsupported(op, fmt.Sprintf("%s of %s", reductionType, n.shape.DType))
	}
	check := func(name string, v []int) error {
		if v != nil && len(v) != rank {
			return fmt.Errorf("%s has %d values for an operand of rank %d", name, len(v), rank)
		}
		for _, d := range v {
			if d < 1 {
				return fmt.Errorf("%s %v must be positive", name, v)
			}
		}
		return nil
	}
	if len(windowDimensions) != rank {
		return nil, b.opError(op, fmt.Errorf("%d window dimensions for an operand of rank %d", len(windowDimensions), rank))
	}
	for _, c := range []struct {
		name string
		v    []int
	}{{"window dimensions", windowDimensions}, {"strides", strides}, {"base dilations", baseDilations}, {"window dilations", windowDilations}} {
		if err := check(c.name, c.v); err != nil {
			return nil, b.opError(op, err)
		}
	}
	if paddings != nil && len(paddings) != rank {
		return nil, b.opError(op, fmt.Errorf("%d paddings for an operand of rank %d", len(paddings), rank))
	}
	if strides == nil {
		strides = windowDimensions
	}
	if baseDilations == nil {
		baseDilations = ones(rank)
	}
	if windowDilations == nil {
		windowDilations = ones(rank)
	}
	if paddings == nil {
		paddings = make([][2]int, rank)
	}
	if out, ok, err := b.poolChannelsLast(n, reductionType, windowDimensions, strides, baseDilations, windowDilations, paddings); ok || err != nil {
		return out, err
	}
	fn, err := b.closure(c, n.shape.DType)
	if err != nil {
		return nil, b.opError(op, err)
	}
	init, err := b.scalar(n.shape.DType, c.identity())
	if err != nil {
		return nil, b.opError(op, err)
	}
	v, err := stablehlo.ReduceWindow(n.value, init, fn, slices.Clone(windowDimensions), slices.Clone(strides),
		slices.Clone(baseDilations), slices.Clone(windowDilations), slices.Clone(paddings))
	if err != nil {
		return nil, b.opError(op, err)
	}
	// go-xla v0.1.4 writes the window dilations as base_dilations too
	// (ops.go, MultiReduceWindow); its shape inference is right, so only the
	// attribute needs correcting.
	last := b.fn.Statements[len(b.fn.Statements)-1]
	if len(last.Outputs) == 1 && last.Outputs[0] == v {
		last.Attributes["base_dilations"] = i64Array(slices.Clone(baseDilations))
	} else {
		return nil, b.opError(op, fmt.Errorf("internal: reduce_window statement not found to set base dilations"))
	}
	return b.node(v), nil
}

// SelectAndScatterMax adds each source value into the output at the
// position of its window's maximum (the gradient of max pooling).
func (b *Builder) SelectAndScatterMax(operand, source backends.Op, windowDimensions, windowStrides []int, paddings [][2]int) (backends.Op, error) {
	return b.selectAndScatter("SelectAndScatterMax", combGE, operand, source, windowDimensions, windowStrides, paddings)
}

// SelectAndScatterMin is SelectAndScatterMax selecting the minimum.
func (b *Builder) SelectAndScatterMin(operand, source backends.Op, windowDimensions, windowStrides []int, paddings [][2]int) (backends.Op, error) {
	return b.selectAndScatter("SelectAndScatterMin", combLE, operand, source, windowDimensions, windowStrides, paddings)
}

func (b *Builder) selectAndScatter(op string, sel combiner, operand, source backends.Op,
	windowDimensions, windowStrides []int, paddings [][2]int) (out backends.Op, err error) {
	defer b.guard(op, &err)
	ns, err := b.nodes(op, operand, source)
	if err != nil {
		return nil, err
	}
	x, src := ns[0], ns[1]
	rank := x.shape.Rank()
	if !realNumber.accepts(x.shape.DType) || src.shape.DType != x.shape.DType {
		return nil, b.opError(op, fmt.Errorf("operand %s and source %s must be numbers of one dtype", x.shape, src.shape))
	}
	if len(windowDimensions) != rank || (windowStrides != nil && len(windowStrides) != rank) || (paddings != nil && len(paddings) != rank) {
		return nil, b.opError(op, fmt.Errorf("window dimensions %v, strides %v and paddings %v must each have one entry per axis of %s",
			windowDimensions, windowStrides, paddings, x.shape))
	}
	if windowStrides == nil {
		windowStrides = windowDimensions
	}
	selFn, err := b.closure(sel, x.shape.DType)
	if err != nil {
		return nil, b.opError(op, err)
	}
	addFn, err := b.closure(combAdd, x.shape.DType)
	if err != nil {
		return nil, b.opError(op, err)
	}
	init, err := b.scalar(x.shape.DType, zeroScalar)
	if err != nil {
		return nil, b.opError(op, err)
	}
	v, err := stablehlo.SelectAndScatter(x.value, src.value, init, selFn, addFn,
		slices.Clone(windowDimensions), slices.Clone(windowStrides), slices.Clone(paddings))
	if err != nil {
		return nil, b.opError(op, err)
	}
	return b.node(v), nil
}

func (b *Builder) scatter(op string, c combiner, operand, indices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, sorted, unique bool) (out backends.Op, err error) {
	defer b.guard(op, &err)
	ns, err := b.nodes(op, operand, indices, updates)
	if err != nil {
		return nil, err
	}
	x, idx, upd := ns[0], ns[1], ns[2]
	if !idx.shape.DType.IsInt() {
		return nil, b.opError(op, fmt.Errorf("indices must be integers, got %s", idx.shape))
	}
	if upd.shape.DType != x.shape.DType {
		return nil, b.opError(op, fmt.Errorf("updates %s and operand %s have different dtypes", upd.shape, x.shape))
	}
	class := anyNumber
	if c != combAdd {
		class = realNumber
	}
	if !class.accepts(x.shape.DType) {
		return nil, b.unsupported(op, fmt.Sprintf("operand is %s, the op needs %s", x.shape.DType, class))
	}
	if err := checkScatter(x.shape, idx.shape, upd.shape, indexVectorAxis, updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes); err != nil {
		return nil, b.opError(op, err)
	}
	fn, err := b.closure(c, x.shape.DType)
	if err != nil {
		return nil, b.opError(op, err)
	}
	v, err := stablehlo.Scatter(x.value, idx.value, upd.value,
		slices.Clone(updateWindowAxes), slices.Clone(insertedWindowAxes), nil, nil,
		slices.Clone(scatterAxesToOperandAxes), indexVectorAxis, sorted, unique, fn)
	if err != nil {
		return nil, b.opError(op, err)
	}
	return b.node(v), nil
}

// ScatterSum adds updates into operand at the scattered indices.
func (b *Builder) ScatterSum(operand, scatterIndices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	return b.scatter("ScatterSum", combAdd, operand, scatterIndices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, indicesAreSorted, uniqueIndices)
}

// ScatterMax keeps the maximum of operand and the updates scattered onto it.
func (b *Builder) ScatterMax(operand, scatterIndices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	return b.scatter("ScatterMax", combMax, operand, scatterIndices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, indicesAreSorted, uniqueIndices)
}

// ScatterMin keeps the minimum of operand and the updates scattered onto it.
func (b *Builder) ScatterMin(operand, scatterIndices, updates backends.Op, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int, indicesAreSorted, uniqueIndices bool) (backends.Op, error) {
	return b.scatter("ScatterMin", combMin, operand, scatterIndices, updates, indexVectorAxis,
		updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes, indicesAreSorted, uniqueIndices)
}

// AllReduce reduces each operand across the devices of each replica group
// (indices into the device assignment). StableHLO's all_reduce takes one
// body for all its operands, so operands are grouped by dtype, one
// all_reduce per dtype, and returned in the original order.
func (b *Builder) AllReduce(operands []backends.Op, reductionType backends.ReduceOpType, replicaGroups [][]int) (out []backends.Op, err error) {
	const op = "AllReduce"
	defer b.guard(op, &err)
	ns, err := b.nodes(op, operands...)
	if err != nil {
		return nil, err
	}
	if len(ns) == 0 {
		return nil, b.opError(op, fmt.Errorf("no operands"))
	}
	c, err := reduceOpCombiner(reductionType)
	if err != nil {
		return nil, b.opError(op, err)
	}
	if b.strategy == AutoSharding {
		return nil, b.opError(op, fmt.Errorf("explicit collectives are not allowed with DistributedAutoSharding; Shardy inserts them"))
	}
	if len(replicaGroups) == 0 {
		replicaGroups = [][]int{make([]int, b.progDevices)}
		for i := range replicaGroups[0] {
			replicaGroups[0][i] = i
		}
	}
	for gi, g := range replicaGroups {
		if len(g) != len(replicaGroups[0]) {
			return nil, b.opError(op, fmt.Errorf("replica group #%d has %d devices, group #0 has %d: StableHLO needs groups of one size", gi, len(g), len(replicaGroups[0])))
		}
		for _, r := range g {
			if r < 0 || r >= b.progDevices {
				return nil, b.opError(op, fmt.Errorf("replica group #%d names replica %d; the computation has %d", gi, r, b.progDevices))
			}
		}
	}
	out = make([]backends.Op, len(ns))
	var order []dtypes.DType
	groups := map[dtypes.DType][]int{}
	for i, n := range ns {
		dt := n.shape.DType
		if !anyNumber.accepts(dt) || (c != combAdd && c != combMul && !realNumber.accepts(dt)) {
			return nil, b.unsupported(op, fmt.Sprintf("%s of operand #%d (%s)", reductionType, i, n.shape))
		}
		if _, ok := groups[dt]; !ok {
			order = append(order, dt)
		}
		groups[dt] = append(groups[dt], i)
	}
	for _, dt := range order {
		fn, err := b.closure(c, dt)
		if err != nil {
			return nil, b.opError(op, err)
		}
		vals := make([]*stablehlo.Value, len(groups[dt]))
		for j, i := range groups[dt] {
			vals[j] = ns[i].value
		}
		res, err := stablehlo.AllReduce(vals, replicaGroups, fn)
		if err != nil {
			return nil, b.opError(op, err)
		}
		for j, i := range groups[dt] {
			out[i] = b.node(res[j])
		}
	}
	return out, nil
}

// checkScatter applies the dimension-number constraints of the StableHLO
// specification's scatter op (without batching dimensions), which go-xla
// v0.1.4 does not all check.
func checkScatter(operand, indices, updates shapes.Shape, indexVectorAxis int,
	updateWindowAxes, insertedWindowAxes, scatterAxesToOperandAxes []int) error {
	if indexVectorAxis < 0 || indexVectorAxis > indices.Rank() {
		return fmt.Errorf("index vector axis %d out of range [0, %d] for indices %s", indexVectorAxis, indices.Rank(), indices)
	}
	distinct := func(name string, axes []int, rank int) error {
		seen := map[int]bool{}
		for _, a := range axes {
			if a < 0 || a >= rank || seen[a] {
				return fmt.Errorf("%s %v: each must be a distinct axis in [0, %d)", name, axes, rank)
			}
			seen[a] = true
		}
		return nil
	}
	if err := distinct("update window axes", updateWindowAxes, updates.Rank()); err != nil {
		return err
	}
	if err := distinct("inserted window axes", insertedWindowAxes, operand.Rank()); err != nil {
		return err
	}
	if err := distinct("scatter-to-operand axes", scatterAxesToOperandAxes, operand.Rank()); err != nil {
		return err
	}
	if len(updateWindowAxes)+len(insertedWindowAxes) != operand.Rank() {
		return fmt.Errorf("%d update window axes + %d inserted window axes must equal the operand rank %d",
			len(updateWindowAxes), len(insertedWindowAxes), operand.Rank())
	}
	vecLen := 1
	scatterDims := indices.Rank()
	if indexVectorAxis < indices.Rank() {
		vecLen = indices.Dimensions[indexVectorAxis]
		scatterDims--
	}
	if len(scatterAxesToOperandAxes) != vecLen {
		return fmt.Errorf("%d scatter-to-operand axes for index vectors of length %d", len(scatterAxesToOperandAxes), vecLen)
	}
	if updates.Rank() != scatterDims+len(updateWindowAxes) {
		return fmt.Errorf("updates %s: rank must be %d scatter axes + %d window axes", updates, scatterDims, len(updateWindowAxes))
	}
	return nil
}

// WithChannelsLastPooling makes ReduceWindow write channels-first poolings
// channels-last (poolChannelsLast). The pjrt engine turns it on for the
// CPU plugin, whose layout assignment keeps convolutions channels-last.
func (b *Builder) WithChannelsLastPooling(on bool) *Builder {
	b.poolsLast = on
	return b
}

// poolChannelsLast writes a pooling over the trailing axes of a
// channels-first operand ([batch, channels, spatial...], the window 1 on
// the two leading axes: ONNX's MaxPool and AveragePool) as the same window
// reduction of the channels-last transpose, transposed back. XLA's CPU
// layout assignment keeps convolution activations channels-last, so a
// channels-first reduce-window costs a transposing copy of its input and
// of its output (ResNet's max pooling); written channels-last the
// transposes cancel against the neighbouring convolutions'. It is a
// permutation of the same computation: every output element is the same
// reduction of the same elements. On where WithChannelsLastPooling turned
// it on (the CPU plugin); ok is false when the operand is not such a
// pooling.
func (b *Builder) poolChannelsLast(n *Node, reductionType backends.ReduceOpType,
	window, strides, baseDil, windowDil []int, paddings [][2]int) (backends.Op, bool, error) {
	rank := n.shape.Rank()
	if !b.poolsLast || b.poolRewriting || rank < 3 {
		return nil, false, nil
	}
	for a := 0; a < 2; a++ {
		if window[a] != 1 || strides[a] != 1 || baseDil[a] != 1 || windowDil[a] != 1 || paddings[a] != [2]int{} {
			return nil, false, nil
		}
	}
	if n.shape.Dimensions[1] == 1 {
		return nil, false, nil // one channel: the layouts coincide
	}
	perm := make([]int, 0, rank) // [batch, spatial..., channels]
	perm = append(perm, 0)
	for a := 2; a < rank; a++ {
		perm = append(perm, a)
	}
	perm = append(perm, 1)
	permute := func(v []int) []int {
		out := make([]int, rank)
		for i, a := range perm {
			out[i] = v[a]
		}
		return out
	}
	pads := make([][2]int, rank)
	for i, a := range perm {
		pads[i] = paddings[a]
	}
	x, err := b.Transpose(n, perm...)
	if err != nil {
		return nil, true, err
	}
	b.poolRewriting = true // the channels-last window may again leave its two leading axes alone
	y, err := b.ReduceWindow(x, reductionType, permute(window), permute(strides), permute(baseDil), permute(windowDil), pads)
	b.poolRewriting = false
	if err != nil {
		return nil, true, err
	}
	back := make([]int, rank) // inverse of perm
	for i, a := range perm {
		back[a] = i
	}
	out, err := b.Transpose(y, back...)
	return out, true, err
}
