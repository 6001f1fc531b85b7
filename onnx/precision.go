package onnx

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/precision"
)

// SpecializeOptions choose how a Plan computes the model's floating values.
// The zero value is the model's own precision (Float32 compute, Float16
// values computed as Float32: see the package documentation).
//
// With Compute set to BFloat16 or Float16 ("plain" 16-bit mode), every
// value the model declares FLOAT, FLOAT16 or BFLOAT16 is computed in that
// dtype: graph parameters for such inputs take it (Plan.PrepareInput
// rounds the caller's tensors), initializers and constants are rounded to
// it on the host, to nearest even (package precision; GoMLX's own Float32
// to BFloat16 conversion truncates), and casts to those types cast to it.
// DOUBLE stays Float64 and integer types are untouched. Build converts the
// outputs back in the graph to GraphDType of their declared dtype, which
// is exact, so callers convert results with ToModelDType as before.
//
// On a backend whose BFloat16 arithmetic truncates instead of rounding
// (GoMLX's pure-Go backend, found by a one-off probe per engine), each op
// of a BFloat16 plan computes in Float32 from its BFloat16 inputs and its
// results are rounded to nearest even in the graph (rneBFloat16), as XLA
// rounds each op's result; between ops every value is still BFloat16.
type SpecializeOptions struct {
	// Compute is the dtype FLOAT, FLOAT16 and BFLOAT16 values are computed
	// in: ir.Float32 (or ir.InvalidDType, the default), ir.BFloat16 (TPUs)
	// or ir.Float16 (GPUs). A dtype the engine cannot execute (Float16 on
	// the pure-Go backend) is an *errs.UnsupportedError from CheckEngine
	// and Build.
	Compute ir.DType
	// Mixed, with a 16-bit Compute, keeps initializers and constants in
	// Float32 and computes in Float32 wherever 16-bit rounding costs most:
	// contractions (MatMul, Gemm, Conv, ConvTranspose, Einsum) take their
	// operands rounded to Compute (on the host for initializers) and
	// accumulate, add their bias and return in Float32; normalisations,
	// softmax, reductions, average pooling, Exp, Log and Pow run in Float32
	// (see mixedClasses); any other op runs in Float32 when one of its
	// graph inputs is Float32 (type promotion), else in Compute. Inputs are
	// still rounded to Compute at the graph entry. Mixed is an error with
	// Float32 compute.
	Mixed bool
	// WeightsAsParams makes the model's weights graph parameters instead
	// of constants folded into the program (see Plan.Weights, weights.go).
	WeightsAsParams bool
	// Weights, with WeightsAsParams, names exactly the initializers that
	// become weight parameters, whatever their size, instead of every one
	// of at least WeightMinElements elements: a trainer needs its trainable
	// set as parameters (to differentiate and update them) and everything
	// else folded. A name that is not an initializer, or one the importer
	// needs as a value at build time (a Resize's scales...), is an
	// *errs.InputError naming it; names no node reads are skipped. nil
	// keeps the size rule.
	Weights []string
}

// precisionMode is a plan's resolved SpecializeOptions.
type precisionMode struct {
	compute ir.DType // Float32, BFloat16 or Float16
	mixed   bool
}

// mode checks the options and resolves the default.
func (o SpecializeOptions) mode() (precisionMode, error) {
	c := o.Compute
	if c == ir.InvalidDType {
		c = ir.Float32
	}
	switch c {
	case ir.Float32, ir.BFloat16, ir.Float16:
	default:
		return precisionMode{}, &errs.Error{Kind: errs.InvalidArgument, Op: "specialize",
			Err: fmt.Errorf("onnx: compute precision %s is not one of Float32, BFloat16, Float16", c)}
	}
	if o.Mixed && c == ir.Float32 {
		return precisionMode{}, &errs.Error{Kind: errs.InvalidArgument, Op: "specialize",
			Err: fmt.Errorf("onnx: mixed precision needs a 16-bit compute dtype (BFloat16 or Float16), got Float32")}
	}
	return precisionMode{compute: c, mixed: o.Mixed}, nil
}

// low says whether floating values are computed in a 16-bit dtype.
func (p precisionMode) low() bool { return p.compute == ir.BFloat16 || p.compute == ir.Float16 }

// lowerable says whether a value of dtype dt follows the compute dtype.
func lowerable(dt ir.DType) bool {
	return dt == ir.Float32 || dt == ir.Float16 || dt == ir.BFloat16
}

// nodeDT is the dtype graph values the model declares dt are computed in:
// the compute dtype for FLOAT, FLOAT16 and BFLOAT16 in a 16-bit mode;
// graphDType otherwise (Float16 as Float32).
func (p precisionMode) nodeDT(dt ir.DType) ir.DType {
	if p.low() && lowerable(dt) {
		return p.compute
	}
	if p.low() && !isNarrow(dt) {
		return dt
	}
	return graphDType(dt)
}

// logicalDT is the logical dtype of graph values the model declares dt:
// itself at Float32 compute (Float16 stays Float16), the node dtype in a
// 16-bit mode.
func (p precisionMode) logicalDT(dt ir.DType) ir.DType {
	if p.low() && !isNarrow(dt) {
		return p.nodeDT(dt)
	}
	return dt
}

// hostDT is the logical dtype of values known at build time (initializers,
// constants, value inputs) that the model declares dt: the compute dtype
// in a plain 16-bit mode, Float32 in mixed mode (parameters stay Float32),
// dt itself at Float32 compute.
func (p precisionMode) hostDT(dt ir.DType) ir.DType {
	switch {
	case !p.low() || !lowerable(dt):
		return dt
	case p.mixed:
		return ir.Float32
	}
	return p.compute
}

// constDT is the dtype a host value of logical dtype dt has as a graph
// constant.
func (p precisionMode) constDT(dt ir.DType) ir.DType {
	if p.low() && !isNarrow(dt) {
		return dt
	}
	return graphDType(dt)
}

// mixedClass says how an op runs in mixed mode.
type mixedClass int

const (
	classCompute  mixedClass = iota // in the compute dtype
	classFloat32                    // entirely in Float32
	classContract                   // 16-bit operands, Float32 accumulation and result
)

// mixedClasses lists the ops that leave the compute dtype in mixed mode.
// The Float32 list follows the usual automatic-mixed-precision practice:
// sums of many terms, exponentials and logarithms, and normalisation
// statistics lose most to 16-bit rounding.
var mixedClasses = map[string]mixedClass{
	"MatMul": classContract, "Gemm": classContract, "Conv": classContract,
	"ConvTranspose": classContract, "Einsum": classContract,

	"BatchNormalization": classFloat32, "InstanceNormalization": classFloat32,
	"LayerNormalization": classFloat32, "GroupNormalization": classFloat32,
	"LpNormalization": classFloat32, "MeanVarianceNormalization": classFloat32,
	"LRN": classFloat32, "Softmax": classFloat32, "LogSoftmax": classFloat32,
	"ReduceMean": classFloat32, "ReduceSum": classFloat32, "ReduceSumSquare": classFloat32,
	"ReduceLogSum": classFloat32, "ReduceLogSumExp": classFloat32, "ReduceL1": classFloat32,
	"ReduceL2": classFloat32, "ReduceProd": classFloat32, "CumSum": classFloat32,
	"AveragePool": classFloat32, "GlobalAveragePool": classFloat32, "LpPool": classFloat32,
	"GlobalLpPool": classFloat32, "Exp": classFloat32, "Log": classFloat32, "Pow": classFloat32,
	"Softplus": classFloat32, "SoftmaxCrossEntropyLoss": classFloat32,
	"NegativeLogLikelihoodLoss": classFloat32,
}

// viewKind names an adapted version of a value (see adaptInputs).
type viewKind int

const (
	viewCompute  viewKind = iota // rounded to the compute dtype
	viewFloat32                  // widened (or kept) Float32
	viewContract                 // rounded to the compute dtype, held as Float32
)

type viewKey struct {
	v    *value
	kind viewKind
}

// adaptInputs, in a 16-bit mode, replaces the node's floating inputs by
// versions in the dtype the op computes in. Plain mode: the compute dtype.
// Mixed mode: the ops of mixedClasses in Float32 (contraction operands
// rounded to the compute dtype first), and any other op in Float32 when
// one of its graph inputs is Float32 (type promotion, so the Float32
// results of contractions and normalisations are not rounded by the
// element-wise ops after them), in the compute dtype otherwise. Host
// values are rounded on the host (to nearest even), graph values in the
// graph (see roundNode), once per value and kind. Inputs read at build
// time (needs) and shape-only ops are left alone: a Resize's scales or a
// Range's limits keep their values.
//
// On a backend whose BFloat16 arithmetic truncates (b.emulate), an op that
// computes in BFloat16 gets Float32 inputs (exact widenings) instead and
// adaptOutputs rounds its results to nearest even, as XLA rounds each op's
// result. It returns whether the op's floating results are to be in the
// compute dtype (false for the Float32 ops of mixed mode).
func (b *builder) adaptInputs(c *opCtx) (computeOut bool) {
	if !b.prec.low() {
		return false
	}
	if c.def.shapeOnly || c.def.constAll {
		return true
	}
	kind := viewCompute
	if b.prec.mixed {
		switch mixedClasses[c.node.OpType] {
		case classFloat32:
			kind = viewFloat32
		case classContract:
			kind = viewContract
		default:
			for k, in := range c.inputs {
				if in != nil && in.host == nil && in.node != nil && in.dt == ir.Float32 && !b.isNeeded(c.def, k) {
					kind = viewFloat32
				}
			}
		}
	}
	computeOut = kind == viewCompute
	if computeOut && b.emulate {
		kind = viewFloat32
	}
	for k, in := range c.inputs {
		if in == nil || in.seq != nil || !lowerable(in.dt) || b.isNeeded(c.def, k) {
			continue
		}
		if kind == viewContract && k >= 2 && c.node.OpType != "Einsum" {
			c.inputs[k] = b.view(in, viewFloat32) // a bias, added in Float32
			continue
		}
		c.inputs[k] = b.view(in, kind)
	}
	return computeOut
}

func (b *builder) isNeeded(d *opDef, k int) bool {
	for _, i := range d.constInputs {
		if i == k {
			return true
		}
	}
	return false
}

// view returns v in the representation kind asks for, v itself when it
// already is.
func (b *builder) view(v *value, kind viewKind) *value {
	cd := b.prec.compute
	switch {
	case kind == viewCompute && v.dt == cd,
		kind == viewFloat32 && v.dt == ir.Float32:
		return v
	}
	key := viewKey{v, kind}
	if w := b.views[key]; w != nil {
		return w
	}
	w := &value{name: v.name}
	if v.host != nil {
		h := v.host
		switch kind {
		case viewCompute:
			h = roundHost(h, cd)
		case viewFloat32:
			h = widenHost(h)
		case viewContract:
			h = widenHost(roundHost(h, cd))
		}
		w.host, w.dt = h, h.dt
	} else {
		n := v.node
		switch kind {
		case viewCompute:
			n = b.roundNode(n, cd)
		case viewFloat32:
			n = graph.ConvertDType(n, ir.Float32)
		case viewContract:
			n = graph.ConvertDType(b.roundNode(n, cd), ir.Float32)
		}
		w.node, w.dt = n, n.DType()
	}
	if b.views == nil {
		b.views = map[viewKey]*value{}
	}
	b.views[key] = w
	return w
}

// roundNode converts the floating node n to dt (narrower or wider). Where
// dt is BFloat16 and the backend's conversion truncates (GoMLX's pure-Go
// backend does), the conversion is rounded to nearest even by rneBFloat16
// instead, so a graph conversion rounds as the host conversions and XLA do.
func (b *builder) roundNode(n *graph.Node, dt ir.DType) *graph.Node {
	if n.DType() == dt {
		return n
	}
	if dt == ir.BFloat16 && n.DType() == ir.Float32 && bf16ConvertTruncates(b.g.Backend()) {
		return rneBFloat16(n)
	}
	return graph.ConvertDType(n, dt)
}

// rneBFloat16 rounds a Float32 node to BFloat16, to nearest with ties to
// even, on a backend whose Float32 to BFloat16 conversion truncates, using
// only arithmetic every backend has. With t = x truncated, r = x - t and
// a = (x + r) truncated (which is x rounded half away from zero, since
// x + r = t + 2r): the result is a, except at a tie (2|r| equals the step
// a - t) with t even, where it is t. t's parity is that of |t|/step, an
// integer. All of it is exact in Float32. Zeros keep their sign (t);
// infinities keep the plain conversion, and NaNs are first quieted by
// x + x, so that truncating a signalling NaN cannot make it an infinity.
func rneBFloat16(x *graph.Node) *graph.Node {
	trunc := func(v *graph.Node) *graph.Node {
		return graph.ConvertDType(graph.ConvertDType(v, ir.BFloat16), ir.Float32)
	}
	t := trunc(x)
	r := graph.Sub(x, t)
	a := trunc(graph.Add(x, r))
	step := graph.Abs(graph.Sub(a, t))
	zero, one, two := graph.ZerosLike(x), graph.OnesLike(x), graph.Add(graph.OnesLike(x), graph.OnesLike(x))
	tie := graph.LogicalAnd(graph.NotEqual(step, zero), graph.Equal(graph.Mul(graph.Abs(r), two), step))
	q := graph.Div(graph.Abs(t), graph.Where(graph.Equal(step, zero), one, step))
	even := graph.Equal(q, graph.Mul(graph.Floor(graph.Div(q, two)), two))
	res := graph.Where(graph.LogicalOr(graph.LogicalAnd(tie, even), graph.Equal(step, zero)), t, a)
	res = graph.Where(graph.IsFinite(x), res, graph.Add(x, x))
	return graph.ConvertDType(res, ir.BFloat16)
}

// castDT is the graph dtype a Cast of x to the declared dtype to converts
// to: nodeDT(to), with two exceptions. In mixed mode a cast of a Float32
// value between floating types keeps Float32 (the value was promoted).
// On a backend whose BFloat16 conversions truncate (b.emulate), a cast to
// BFloat16 from anything but Float32 or BFloat16 goes to Float32, which
// adaptOutputs then rounds to nearest even.
func (b *builder) castDT(x *graph.Node, to ir.DType) ir.DType {
	gdt := b.prec.nodeDT(to)
	if b.prec.mixed && x.DType() == ir.Float32 && lowerable(to) {
		return ir.Float32
	}
	if b.emulate && gdt == ir.BFloat16 && x.DType() != ir.Float32 && x.DType() != ir.BFloat16 {
		return ir.Float32
	}
	return gdt
}

// truncProbe caches, per backend, whether its Float32 to BFloat16
// conversion truncates.
var truncProbe sync.Map

// bf16ConvertTruncates says whether engine converts Float32 to BFloat16 by
// truncation, found once per engine by converting 1+2^-8+2^-9 (nearest
// even 1+2^-7, truncated 1) and 1+2^-7+2^-8 (a tie: nearest even 1+2^-6,
// truncated 1+2^-7). Anything but a clean truncation (rounding, or a
// failure) answers false, leaving conversions to the backend.
func bf16ConvertTruncates(engine ir.Engine) bool {
	if engine == nil {
		return false
	}
	if v, ok := truncProbe.Load(engine); ok {
		return v.(bool)
	}
	truncates := func() (ok bool) {
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		g := graph.NewGraph(engine, ir.EphemeralPrefix+"onnx_bf16_probe")
		defer g.Finalize()
		in := graph.Const(g, []float32{math.Float32frombits(0x3f80c000), math.Float32frombits(0x3f818000)})
		res, err := compileAndRun(g, []*graph.Node{graph.ConvertDType(in, ir.BFloat16)}, nil)
		if err != nil {
			return false
		}
		raw, err := ir.TensorBytes(res[0])
		if err != nil || len(raw) != 4 {
			return false
		}
		le := binary.LittleEndian
		return le.Uint16(raw) == 0x3f80 && le.Uint16(raw[2:]) == 0x3f81
	}()
	truncProbe.Store(engine, truncates)
	return truncates
}

func mustHost(h *hostTensor, err error) *hostTensor {
	if err != nil {
		panic(err)
	}
	return h
}

// roundHost returns h in floating dtype dt, rounded to nearest even when
// dt is narrower. A tensor not yet decoded (an initializer) is relabelled:
// its Float32 data is converted by package precision when it becomes a
// constant (toIRAs), and decode rounds it the same way if read on the host.
func roundHost(h *hostTensor, dt ir.DType) *hostTensor {
	if h.dt == dt {
		return h
	}
	if h.src != nil && h.f == nil && h.i == nil {
		return &hostTensor{dt: dt, dims: h.dims, src: h.src}
	}
	return mustHost(h.castTo(dt))
}

// widenHost returns h as Float32 (exact). A tensor not yet decoded stays
// undecoded: its 16-bit form is made once (toIRAs, package precision for
// a relabelled Float32 initializer) and widened when it becomes a constant,
// so large weights are never expanded to float64.
func widenHost(h *hostTensor) *hostTensor {
	if h.dt == ir.Float32 {
		return h
	}
	if h.src != nil && h.f == nil && h.i == nil {
		t := mustTensor(h.toIRAs(h.dt))
		return &hostTensor{dt: ir.Float32, dims: h.dims, src: t}
	}
	return mustHost(h.castTo(ir.Float32))
}

func mustTensor(t *ir.Tensor, err error) *ir.Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

// widenTensor converts a BFloat16 or Float16 tensor to Float32 exactly.
func widenTensor(t *ir.Tensor) (*ir.Tensor, error) {
	raw, err := ir.TensorBytes(t)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	out := make([]byte, 2*len(raw))
	for k := 0; k+1 < len(raw); k += 2 {
		b := le.Uint16(raw[k:])
		var f uint32
		if t.DType() == ir.BFloat16 {
			f = uint32(b) << 16
		} else {
			f = math.Float32bits(precision.FromFloat16(b))
		}
		le.PutUint32(out[2*k:], f)
	}
	return ir.TensorFromBytes(ir.Float32, t.Shape().Dimensions, out)
}

// adaptOutputs, in a 16-bit mode, keeps the node's floating outputs in the
// mode's dtypes whatever the converter produced: graph outputs of an op
// computing in the compute dtype (computeOut, see adaptInputs) are rounded
// to it; those of mixed mode's Float32 ops stay Float32 (consumers round
// them where needed); host values take hostDT (rounded to nearest even on
// the host). The logical dtype of a graph output is its node's dtype.
func (b *builder) adaptOutputs(c *opCtx, computeOut bool) error {
	if !b.prec.low() {
		return nil
	}
	cd := b.prec.compute
	for _, o := range c.outs {
		if o == nil || o.seq != nil {
			continue
		}
		if o.node != nil {
			dt := o.node.DType()
			if lowerable(dt) && dt != cd && computeOut {
				o.node = b.roundNode(o.node, cd)
				dt = cd
			}
			if lowerable(dt) {
				o.dt = dt
			}
			continue
		}
		if o.host != nil && lowerable(o.host.dt) {
			want := b.prec.hostDT(o.host.dt)
			if o.host.dt != want {
				h, err := o.host.castTo(want)
				if err != nil {
					return err
				}
				o.host = h
			}
			o.dt = want
		}
	}
	return nil
}

// CheckEngine refuses, with an *errs.UnsupportedError, a plan whose 16-bit
// compute dtype the engine cannot execute (the pure-Go backend has no
// Float16): creating the parameters or building would fail, with a GoMLX
// panic, or fail at run time. Call it before creating the graph's
// parameters; Build calls it too.
func (p *Plan) CheckEngine(be ir.Engine) error {
	if !p.prec.low() || be == nil {
		return nil
	}
	if !be.Capabilities().DTypes[p.prec.compute] {
		return &errs.UnsupportedError{Backend: be.Name(), What: "dtype", Name: p.prec.compute.String(),
			Detail: fmt.Sprintf("compute precision %s requested for the ONNX model, but the backend cannot execute %s (use %s or Float32 there)",
				p.prec.compute, p.prec.compute, otherLow(p.prec.compute))}
	}
	return nil
}

func otherLow(dt ir.DType) ir.DType {
	if dt == ir.Float16 {
		return ir.BFloat16
	}
	return ir.Float16
}

// Options returns the precision options the plan was specialised with,
// the default resolved (Compute is never ir.InvalidDType).
func (p *Plan) Options() SpecializeOptions {
	return SpecializeOptions{Compute: p.prec.compute, Mixed: p.prec.mixed, WeightsAsParams: p.weightsAsParams, Weights: append([]string(nil), p.weightNames...)}
}

// PrepareInput converts a caller's tensor for the parameter name, given in
// the dtype the model declares, to the dtype the plan's graph takes it in
// (Param.Shape): Float32 to BFloat16 or Float16 rounded to nearest even on
// the host (package precision, the same rounding as the weights), Float16
// widened exactly to Float32 at Float32 compute. A tensor already in the
// parameter's dtype is returned as it is. Wrong names, dtypes or shapes
// are *errs.InputError values.
func (p *Plan) PrepareInput(name string, t *ir.Tensor) (*ir.Tensor, error) {
	var prm *Param
	for k := range p.params {
		if p.params[k].Name == name {
			prm = &p.params[k]
		}
	}
	if prm == nil {
		names := make([]ValueSpec, len(p.params))
		for k, q := range p.params {
			names[k] = ValueSpec{Name: q.Name}
		}
		return nil, &errs.InputError{Name: name, Problem: "name", Expected: "a graph parameter: one of " + inputNames(names), Got: quote(name)}
	}
	if t == nil {
		return nil, &errs.InputError{Name: name, Problem: "value", Expected: "a tensor " + prm.Shape.String(), Got: "nil"}
	}
	if !equalInts(t.Shape().Dimensions, prm.Shape.Dimensions) {
		return nil, &errs.InputError{Name: name, Problem: "shape", Expected: fmt.Sprint(prm.Shape.Dimensions), Got: fmt.Sprint(t.Shape().Dimensions)}
	}
	want := prm.Shape.DType
	if t.DType() == want {
		return t, nil
	}
	declared := want
	for _, in := range p.m.inputs {
		if in.Name == name {
			declared = in.DType
		}
	}
	if t.DType() != declared {
		return nil, &errs.InputError{Name: name, Problem: "dtype", Expected: declared.String(), Got: t.DType().String()}
	}
	out, err := convertTensor(t, want)
	if err != nil {
		return nil, &errs.InputError{Name: name, Problem: "value", Expected: want.String(), Got: err.Error()}
	}
	return out, nil
}

// convertTensor converts a floating host tensor to dtype to, rounding to
// nearest even: Float32 data to BFloat16 or Float16 goes through package
// precision directly, anything else through the host evaluator's
// conversion (exact widening, or rounding from the exact value).
func convertTensor(t *ir.Tensor, to ir.DType) (*ir.Tensor, error) {
	if t.DType() == to {
		return t, nil
	}
	if t.DType() == ir.Float32 && (to == ir.BFloat16 || to == ir.Float16) {
		return roundFloat32Tensor(t, to)
	}
	return hostFromIR(t, t.DType()).toIRAs(to)
}

// roundFloat32Tensor converts a Float32 tensor to BFloat16 or Float16 with
// package precision (round to nearest even; GoMLX's own conversion to
// BFloat16 truncates).
func roundFloat32Tensor(t *ir.Tensor, to ir.DType) (*ir.Tensor, error) {
	raw, err := ir.TensorBytes(t)
	if err != nil {
		return nil, err
	}
	n := len(raw) / 4
	src := make([]float32, n)
	le := binary.LittleEndian
	for k := range src {
		src[k] = math.Float32frombits(le.Uint32(raw[4*k:]))
	}
	var bits []uint16
	if to == ir.BFloat16 {
		bits = precision.BFloat16s(nil, src)
	} else {
		bits = precision.Float16s(nil, src)
	}
	out := make([]byte, 2*n)
	for k, v := range bits {
		le.PutUint16(out[2*k:], v)
	}
	return ir.TensorFromBytes(to, t.Shape().Dimensions, out)
}
