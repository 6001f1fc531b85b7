package onnx

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Constants, casts, generators and inference-time no-ops: Constant, Cast,
// CastLike, ConstantOfShape, Range, Dropout, EyeLike, OneHot, Trilu.

func init() {
	register("Constant", 1, convConstant).withHost(convConstant)
	registerPadRule("Constant", padConstantRule).withoutInputs()
	register("Cast", 6, convCast).withHost(hostCast)
	// CastLike reads only target_type's dtype: ONNX puts no constraint on
	// its shape, and the ONNX 1.23 test cases give an empty one
	// (https://onnx.ai/onnx/operators/onnx__CastLike.html).
	register("CastLike", 15, convCastLike).withHost(hostCastLike).onlyTypeOf(1)
	registerPadRules(padCast, "Cast", "CastLike")
	register("ConstantOfShape", 9, convConstantOfShape).withHost(convConstantOfShape).needs(0)
	registerPadRule("ConstantOfShape", padConstantOfShape).takesSize(0)
	register("Range", 11, nil).withHost(hostRange).needsAll()
	// 27 adds stash_type: float16/bfloat16 ranges computed in float (1, the
	// default, what hostRange does in float64 and rounds once) or in their
	// own type (0, refused).
	register("Range", 27, nil).withHost(func(c *opCtx) error {
		if dt := c.dtype(0); (dt == ir.Float16 || dt == ir.BFloat16) && c.attrInt("stash_type", 1) == 0 {
			return fmt.Errorf("stash_type 0 (accumulating in %s) is not supported", dt)
		}
		return hostRange(c)
	}).needsAll()
	registerPadRule("Range", padRange).takesSize(1)
	register("Dropout", 1, convDropout).withHost(convDropout)
	register("Dropout", 12, convDropout).withHost(convDropout).needs(1, 2)
	registerPadRule("Dropout", padIdentity)
	register("EyeLike", 9, convEyeLike).onlyShapes()
	register("OneHot", 9, convOneHot).needs(1)
	register("Trilu", 14, convTrilu).needs(1)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("EyeLike", "OneHot", "Trilu")
}

func convConstant(c *opCtx) error {
	switch {
	case c.hasAttr("value"):
		c.setHost(0, c.attrTensor("value"))
	case c.hasAttr("value_float"):
		c.setHost(0, newHostFloats(ir.Float32, []int{}, []float64{c.attrFloat("value_float", 0)}))
	case c.hasAttr("value_floats"):
		f := c.attrFloats("value_floats", nil)
		c.setHost(0, newHostFloats(ir.Float32, []int{len(f)}, f))
	case c.hasAttr("value_int"):
		c.setHost(0, hostInt64s([]int64{c.attrInt("value_int", 0)}, []int{}...))
	case c.hasAttr("value_ints"):
		c.setHost(0, hostInt64s(append([]int64{}, c.attrInts("value_ints", nil)...)))
	case c.hasAttr("sparse_value"):
		return &UnsupportedDTypeError{Name: "sparse tensor", Where: "Constant sparse_value"}
	default:
		return &UnsupportedDTypeError{Name: "STRING", Where: "Constant string value"}
	}
	return nil
}

// castTarget reads Cast's "to" attribute.
func castTarget(c *opCtx) ir.DType {
	to := onnxpb.DataType(c.attrInt("to", 0))
	dt, err := dtypeFromONNX(to)
	if err != nil {
		panic(withWhere(err, "Cast to"))
	}
	return dt
}

// castNodeAs converts x to the graph dtype gdt.
func castNodeAs(x *graph.Node, gdt ir.DType) *graph.Node {
	if x.DType() == gdt {
		return x
	}
	if gdt == ir.Bool {
		return graph.NotEqual(x, scalarLikeB(x, 0))
	}
	if x.DType() == ir.Bool {
		return graph.Where(x, filled(x.Graph(), gdt, x.Shape().Dimensions, 1), filled(x.Graph(), gdt, x.Shape().Dimensions, 0))
	}
	return graph.ConvertDType(x, gdt)
}

// convCast casts in the graph; with a 16-bit compute precision a cast to
// FLOAT, FLOAT16 or BFLOAT16 is a cast to the compute dtype.
func convCast(c *opCtx) error {
	return castTo(c, castTarget(c))
}

// castTo casts input 0 to the declared dtype to. Under wideBF16 a cast to
// BFLOAT16 rounds to nearest even and stays a Float32 node.
func castTo(c *opCtx, to ir.DType) error {
	if isNarrow(to) {
		c.setDT(0, castNarrowNode(c, c.in(0), c.dtype(0), to), to)
		return nil
	}
	if c.b.wideBF16 && to == ir.BFloat16 {
		x := castNodeAs(c.in(0), ir.Float32)
		if c.dtype(0) != ir.BFloat16 {
			x = graph.ConvertDType(rneBFloat16(x), ir.Float32)
		}
		c.setDT(0, x, ir.BFloat16)
		return nil
	}
	c.setDT(0, c.castNode(c.in(0), c.b.castDT(c.in(0), to)), c.b.prec.logicalDT(to))
	return nil
}

// castNode is castNodeAs, except that Float32 to BFloat16 rounds to
// nearest even on a backend whose conversion truncates, as ONNX Cast
// specifies (https://onnx.ai/onnx/operators/onnx__Cast.html).
func (c *opCtx) castNode(x *graph.Node, gdt ir.DType) *graph.Node {
	if gdt == ir.BFloat16 && x.DType() == ir.Float32 {
		return c.b.roundNode(x, gdt)
	}
	return castNodeAs(x, gdt)
}

// castSaturate reads Cast's saturate attribute (opset 19 on; 1 by default),
// which applies to the FLOAT8 targets.
func castSaturate(c *opCtx) bool { return c.attrInt("saturate", 1) != 0 }

// castRoundMode reads Cast's round_mode attribute (opset 24 on; "up" by
// default), which applies to FLOAT8E8M0.
func castRoundMode(c *opCtx) string {
	m := c.attrString("round_mode", "up")
	if m != "up" && m != "down" && m != "nearest" {
		c.fail("round_mode %q: expected up, down or nearest", m)
	}
	return m
}

// castNarrowNode casts the node x, of logical dtype from, to the narrow
// type to, returning a node of to's carrier (see narrow.go for the rules).
func castNarrowNode(c *opCtx, x *graph.Node, from, to ir.DType) *graph.Node {
	switch {
	case to == f8E8M0:
		return roundToE8M0(castNodeAs(x, ir.Float32), castSaturate(c), castRoundMode(c))
	case isNarrowFloat(to):
		if isNarrowFloat(from) && from == to {
			return x
		}
		return roundToMinifloat(castNodeAs(x, ir.Float32), to, castSaturate(c))
	}
	// Integers: floats truncate toward zero (Float64 holds every float
	// value's integer part exactly up to 2^53), then wrap.
	if isFloatDT(from) || x.DType().IsFloat() {
		x = graph.ConvertDType(graph.ConvertDType(x, ir.Float64), ir.Int64)
	}
	return wrapIntNode(castNodeAs(x, ir.Int64), to)
}

// hostCastNarrow is castNarrowNode on the host.
func hostCastNarrow(c *opCtx, h *hostTensor, to ir.DType) (*hostTensor, error) {
	if isNarrowInt(to) {
		return h.castTo(to)
	}
	f, err := h.floats()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(f))
	sat := castSaturate(c)
	for k, v := range f {
		if to == f8E8M0 {
			out[k] = encodeE8M0(float32(v), sat, castRoundMode(c))
		} else {
			out[k] = encodeFloat(v, to, sat)
		}
	}
	return &hostTensor{dt: to, dims: append([]int{}, h.dims...), f: out}, nil
}

func hostCast(c *opCtx) error {
	if to := castTarget(c); isNarrow(to) {
		h, err := hostCastNarrow(c, c.hostIn(0), to)
		if err != nil {
			return err
		}
		c.setHost(0, h)
		return nil
	}
	h, err := c.hostIn(0).castTo(c.b.prec.hostDT(castTarget(c)))
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func convCastLike(c *opCtx) error {
	return castTo(c, c.dtype(1))
}

func hostCastLike(c *opCtx) error {
	if to := c.dtype(1); isNarrow(to) {
		h, err := hostCastNarrow(c, c.hostIn(0), to)
		if err != nil {
			return err
		}
		c.setHost(0, h)
		return nil
	}
	h, err := c.hostIn(0).castTo(c.b.prec.hostDT(c.dtype(1)))
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

// convConstantOfShape produces the filled tensor on the host when a
// consumer needs its value or it is small, and as a broadcast scalar in the
// graph otherwise.
func convConstantOfShape(c *opCtx) error {
	shape := c.constInts(0)
	for _, d := range shape {
		if d < 0 {
			c.fail("negative dimension in shape %v", shape)
		}
	}
	dims := toInts(shape)
	if err := checkHostSize(dims); err != nil && (c.outputNeeded(0) || c.g == nil) {
		return err
	}
	val := c.attrTensor("value")
	if val == nil {
		val = newHostFloats(ir.Float32, []int{}, []float64{0})
	}
	if val.size() != 1 {
		c.fail("value must have one element, got shape %v", val.dims)
	}
	if err := val.decode(); err != nil {
		return err
	}
	n := numElems(dims)
	if n <= 1<<16 || c.outputNeeded(0) || c.g == nil {
		if err := checkHostSize(dims); err != nil {
			return err
		}
		h, err := (&hostTensor{dt: val.dt, dims: []int{1}, f: val.f, i: val.i}).gatherFlat(dims, make([]int, n))
		if err != nil {
			return err
		}
		c.setHost(0, h)
		return nil
	}
	scalar, err := val.reshaped([]int{})
	if err != nil {
		return err
	}
	node := constNode(c.g, scalar)
	c.setDT(0, graph.BroadcastToDims(node, dims...), val.dt)
	return nil
}

// outputNeeded says whether output k's value is needed at build time.
func (c *opCtx) outputNeeded(k int) bool {
	return c.wantsOutput(k) && c.b.m.needConst[c.outs[k].name]
}

func hostRange(c *opCtx) error {
	start, limit, delta := c.hostIn(0), c.hostIn(1), c.hostIn(2)
	dt := start.dt
	if isFloatDT(dt) {
		s, err := start.scalarFloat()
		if err != nil {
			return err
		}
		l, err := limit.scalarFloat()
		if err != nil {
			return err
		}
		d, err := delta.scalarFloat()
		if err != nil {
			return err
		}
		if d == 0 {
			return fmt.Errorf("delta is 0")
		}
		n := int(max(math.Ceil((l-s)/d), 0))
		if n > maxHostElems {
			return fmt.Errorf("range of %d elements is too large", n)
		}
		out := make([]float64, n)
		for k := range out {
			out[k] = s + float64(k)*d
		}
		c.setHost(0, newHostFloats(dt, []int{n}, out))
		return nil
	}
	s, err := start.scalarInt()
	if err != nil {
		return err
	}
	l, err := limit.scalarInt()
	if err != nil {
		return err
	}
	d, err := delta.scalarInt()
	if err != nil {
		return err
	}
	if d == 0 {
		return fmt.Errorf("delta is 0")
	}
	var n int64
	if d > 0 && l > s {
		n = (l - s + d - 1) / d
	} else if d < 0 && l < s {
		n = (s - l + (-d) - 1) / (-d)
	}
	if n > maxHostElems {
		return fmt.Errorf("range of %d elements is too large", n)
	}
	out := make([]int64, n)
	for k := range out {
		out[k] = s + int64(k)*d
	}
	c.setHost(0, newHostInts(dt, []int{int(n)}, out))
	return nil
}

// convDropout is the identity at inference time; the optional mask output
// is all true.
func convDropout(c *opCtx) error {
	if c.opset >= 12 && c.has(2) {
		training, err := c.hostIn(2).scalarInt()
		if err != nil {
			return err
		}
		ratio := 0.5
		if c.has(1) {
			if ratio, err = c.hostIn(1).scalarFloat(); err != nil {
				return err
			}
		}
		if training != 0 && ratio != 0 {
			c.fail("training-mode Dropout (random) is not supported")
		}
	}
	v := c.input(0)
	if v.host != nil {
		c.setHost(0, v.host)
	} else {
		c.setDT(0, v.node, v.dt)
	}
	if c.wantsOutput(1) {
		dims := c.dims(0)
		h := &hostTensor{dt: ir.Bool, dims: append([]int{}, dims...), i: make([]int64, numElems(dims))}
		for k := range h.i {
			h.i[k] = 1
		}
		c.setHost(1, h)
	}
	return nil
}

func convEyeLike(c *opCtx) error {
	dims := c.dims(0)
	if len(dims) != 2 {
		c.fail("expects a rank-2 input, got %v", dims)
	}
	dt := c.dtype(0)
	if c.hasAttr("dtype") {
		var err error
		if dt, err = dtypeFromONNX(onnxpb.DataType(c.attrInt("dtype", 0))); err != nil {
			return err
		}
	}
	k := int(c.attrInt("k", 0))
	if err := checkHostSize(dims); err != nil {
		return err
	}
	h := hostZeros(dt, dims)
	for r := range dims[0] {
		col := r + k
		if col >= 0 && col < dims[1] {
			if h.isFloat() {
				h.f[r*dims[1]+col] = 1
			} else {
				h.i[r*dims[1]+col] = 1
			}
		}
	}
	c.setHost(0, h)
	return nil
}

// convOneHot compares the indices with an iota along the new axis.
func convOneHot(c *opCtx) error {
	idx := c.in(0)
	depthV := c.constFloats(1)
	if len(depthV) != 1 {
		c.fail("depth must have one element")
	}
	depth := int(depthV[0])
	values := c.in(2)
	r := idx.Rank() + 1
	axis := c.normAxis(c.attrInt("axis", -1), r)
	if !idx.DType().IsInt() {
		idx = graph.ConvertDType(idx, ir.Int64)
	} else if idx.DType() != ir.Int64 {
		idx = graph.ConvertDType(idx, ir.Int64)
	}
	// Negative indices count from the end.
	idx = normalizeIndices(idx, depth)
	dims := append([]int{}, idx.Shape().Dimensions...)
	outDims := append(append(append([]int{}, dims[:axis]...), depth), dims[axis:]...)
	exp := append(append(append([]int{}, dims[:axis]...), 1), dims[axis:]...)
	idxE := broadcastNodeTo(graph.Reshape(idx, exp...), outDims)
	iota := graph.Iota(c.g, ir.MakeShape(ir.Int64, outDims...), axis)
	on := graph.Equal(idxE, iota)
	off := graph.BroadcastToDims(graph.Reshape(sliceAxis(graph.Reshape(values, 2), 0, 0, 1, 1)), outDims...)
	onV := graph.BroadcastToDims(graph.Reshape(sliceAxis(graph.Reshape(values, 2), 0, 1, 2, 1)), outDims...)
	c.set(0, graph.Where(on, onV, off))
	return nil
}

// convTrilu keeps the lower (upper=0) or upper triangle of the last two
// axes, offset by k.
func convTrilu(c *opCtx) error {
	x := c.in(0)
	k := 0
	if c.has(1) {
		v := c.constInts(1)
		if len(v) != 1 {
			c.fail("k must have one element")
		}
		k = int(v[0])
	}
	dims := x.Shape().Dimensions
	r := len(dims)
	if r < 2 {
		c.fail("expects rank >= 2, got %v", dims)
	}
	if numElems(dims) == 0 {
		c.setHost(0, hostZeros(c.dtype(0), dims))
		return nil
	}
	rows := graph.Iota(c.g, ir.MakeShape(ir.Int64, dims...), r-2)
	cols := graph.Iota(c.g, ir.MakeShape(ir.Int64, dims...), r-1)
	diff := graph.Sub(cols, rows) // j - i
	kk := filled(c.g, ir.Int64, dims, float64(k))
	var keep *graph.Node
	if c.attrInt("upper", 1) != 0 {
		keep = graph.GreaterOrEqual(diff, kk)
	} else {
		keep = graph.LessOrEqual(diff, kk)
	}
	c.set(0, graph.Where(keep, x, scalarLikeB(x, 0)))
	return nil
}

func init() {
	register("HannWindow", 17, nil).withHost(hostWindow([]float64{0.5, -0.5})).needsAll()
	// Hamming coefficients 25/46 and 21/46 as the ONNX specification gives them.
	register("HammingWindow", 17, nil).withHost(hostWindow([]float64{25.0 / 46, -21.0 / 46})).needsAll()
	register("BlackmanWindow", 17, nil).withHost(hostWindow([]float64{0.42, -0.5, 0.08})).needsAll()
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("BlackmanWindow", "HammingWindow", "HannWindow")
}

// hostWindow builds a generalised cosine window sum_k a_k·cos(2πkn/N'),
// with N' = size (periodic, the default) or size-1 (symmetric).
func hostWindow(coef []float64) converterFunc {
	return func(c *opCtx) error {
		size, err := c.hostIn(0).scalarInt()
		if err != nil {
			return err
		}
		if size < 0 || size > 1<<26 {
			return fmt.Errorf("invalid window size %d", size)
		}
		dt := ir.Float32
		if c.hasAttr("output_datatype") {
			if dt, err = dtypeFromONNX(onnxpb.DataType(c.attrInt("output_datatype", 1))); err != nil {
				return err
			}
		}
		denom := float64(size)
		if c.attrInt("periodic", 1) == 0 {
			denom = float64(size - 1)
		}
		out := make([]float64, size)
		for n := range out {
			for k, a := range coef {
				out[n] += a * math.Cos(2*math.Pi*float64(k)*float64(n)/denom)
			}
		}
		h, err := newHostFloats(ir.Float64, []int{int(size)}, out).castTo(dt)
		if err != nil {
			return err
		}
		c.setHost(0, h)
		return nil
	}
}

// padConstantRule: a Constant holds no padded dimension; its value is known
// (Reshape targets, Range limits and masks are read from it).
func padConstantRule(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	if a := attrs["value"]; a != nil && a.T != nil {
		h, err := r.m.tensorToHost(a.T, "")
		if err == nil {
			if t, err := h.toIR(); err == nil {
				return []*pval{constVal(t, h.dt)}
			}
		}
	}
	for _, k := range []string{"value_int", "value_float"} {
		if a := attrs[k]; a != nil {
			v := &pval{rank: 0, fc: []float64{float64(a.F)}}
			if k == "value_int" {
				v.fc = []float64{float64(a.I)}
				v.elems = []sdim{cdim(a.I)}
			}
			return []*pval{v}
		}
	}
	if a := attrs["value_ints"]; a != nil {
		v := &pval{rank: 1, dims: []sdim{cdim(int64(len(a.Ints)))}}
		for _, x := range a.Ints {
			v.fc = append(v.fc, float64(x))
			v.elems = append(v.elems, cdim(x))
		}
		return []*pval{v}
	}
	return []*pval{{rank: -1}}
}

// padCast is the rule of Cast and CastLike: positions stay apart; a
// constant fill at padded positions goes through the conversion (to bool,
// truncated to an integer type). CastLike forgets the values it knows.
func padCast(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	out := x.clone()
	to := attrI(attrs, "to", 0)
	if n.OpType == "CastLike" {
		out.fc, out.padc = nil, nil
	}
	if to == int64(onnxpb.Bool) {
		out.padc = mapPadc(x.padc, func(f float64) float64 { return b2f(f != 0) })
		if x.fc != nil {
			out.fc = mapF(x.fc, func(f float64) float64 { return b2f(f != 0) })
		}
	} else if dt, err := dtypeFromONNX(onnxpb.DataType(to)); err == nil && !isFloatDT(dt) {
		out.padc = mapPadc(x.padc, math.Trunc)
		if x.fc != nil {
			out.fc = mapF(x.fc, math.Trunc)
		}
	}
	return []*pval{out}
}

// padConstantOfShape: the output carries the padded dimension where the
// shape it is given holds it; a shape computed from it is refused.
func padConstantOfShape(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.elems == nil {
		return fail("takes a shape the analysis does not know")
	}
	dims, ok := r.shapeDims(x.elems)
	if !ok {
		return fail("takes a shape computed from its size")
	}
	return []*pval{{rank: len(dims), dims: dims}}
}

// padRange: Range(0, D, 1) is the positions along the padded dimension
// (its padded run counts on past the real size, a row per position); any
// other start or step to D, or a limit computed from D, is refused.
func padRange(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	start, limit, delta := padIn(ins, 0), padIn(ins, 1), padIn(ins, 2)
	if r.sizeDep(start) || r.sizeDep(delta) {
		return fail("starts or steps by a value computed from its size")
	}
	if limit != nil && len(limit.elems) == 1 {
		e := limit.elems[0]
		if e.k == sSym && e.s == r.dim {
			if start != nil && start.fc != nil && delta != nil && len(delta.fc) == 1 && delta.fc[0] == 1 && len(start.fc) == 1 && start.fc[0] == 0 {
				return []*pval{{rank: 1, dims: []sdim{symd(r.dim)}}}
			}
			return fail("counts to its size from a start or step other than 0 and 1")
		}
		if r.isD(e) {
			return fail("counts to a value computed from its size")
		}
	}
	return []*pval{{rank: 1, dims: []sdim{rangeDim(start, limit, delta)}}}
}
