package onnx

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Padding analysis.
//
// Padding a symbolic dimension D (running a model at a bucket size larger
// than the real one and slicing the outputs back) is exact only if no
// padded position can reach a real position of an output. PadSafety proves
// that per dimension by following D through the graph: every value carries
// its symbolic shape (constants, symbolic names, or unknown sizes), and an
// op either keeps positions along D independent (element-wise ops,
// contractions and convolutions over other axes, gathers by index along
// other axes...) or makes the value "dirty": its real positions may differ
// from an exact-shape run. A dirty value reaching an output makes D exact.
// Ops the analysis does not know are dirty as soon as they touch D.
//
// One exception is proved rather than assumed: an attention mask. When an
// input padded with a constant reaches, through Cast/Sub/Mul/Where/...,
// an additive bias that is at most -1e9 (or -inf) at padded positions, and
// that bias is added to scores just before a Softmax over the padded axis,
// the padded positions get zero weight; the Softmax output is then exactly
// zero there, and a MatMul contracting over that axis stays exact.

// FillKind says what padded positions of an input hold.
type FillKind int

const (
	FillZeros FillKind = iota // zeros
	FillEdge                  // a copy of the last real position along the axis
	FillValue                 // a constant (a mask's masked-out value)
)

func (k FillKind) String() string {
	switch k {
	case FillEdge:
		return "copy of the last real row"
	case FillValue:
		return "constant"
	}
	return "zeros"
}

// DimSafety is the analysis' verdict on one symbolic dimension.
type DimSafety struct {
	Dim    string
	Safe   bool   // padding along Dim provably leaves real outputs unchanged
	Reason string // why, or which op makes it unsafe
	// Fill is what padded positions of the inputs hold; Masks overrides it
	// for the mask inputs, with their masked-out value.
	Fill  FillKind
	Masks map[string]float64
	Ops   int // ops that touch the dimension
}

// FillFor returns the fill of input name along the dimension.
func (d DimSafety) FillFor(input string) (FillKind, float64) {
	if v, ok := d.Masks[input]; ok {
		return FillValue, v
	}
	return d.Fill, 0
}

// FillString describes the fill in words ("copy of the last real row";
// "zeros; attention_mask: 0 (masked out)").
func (d DimSafety) FillString() string {
	if !d.Safe {
		return ""
	}
	s := d.Fill.String()
	var names []string
	for n := range d.Masks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s += fmt.Sprintf("; %s: %g (masked out)", n, d.Masks[n])
	}
	return s
}

// maskBias is the most a bias may be at padded positions for the analysis
// to accept it as masking them: exp(score - 1e9 - max) is 0 in every
// floating-point format for any realistic score.
const maskBias = -1e9

// PadSafety analyses every symbolic dimension of the model's inputs, in the
// order they first appear.
func (m *Model) PadSafety() []DimSafety {
	var out []DimSafety
	seen := map[string]bool{}
	for _, in := range m.inputs {
		for _, d := range in.Dims {
			if d.Param == "" || seen[d.Param] {
				continue
			}
			seen[d.Param] = true
			out = append(out, m.padSafety(d.Param))
		}
	}
	return out
}

func (m *Model) padSafety(dim string) DimSafety {
	for _, v := range m.valueInputs {
		for _, in := range m.inputs {
			if in.Name != v {
				continue
			}
			for _, d := range in.Dims {
				if d.Param == dim {
					return DimSafety{Dim: dim, Reason: fmt.Sprintf("input %q sets shapes from its values", v)}
				}
			}
		}
	}
	// Pass 1: no assumption about what padded positions hold, so any fill
	// works; a copy of a real row is the safer one.
	a := m.runPad(dim, nil, false)
	if a.err == "" {
		return DimSafety{Dim: dim, Safe: true, Fill: FillEdge, Ops: a.ops,
			Reason: fmt.Sprintf("rows along it are independent through all %d ops that touch it", a.ops)}
	}
	first := a.err
	// Pass 2: inputs padded with a constant, to find a mask. 0 is the usual
	// masked-out value; -1e9 also covers the "(1 - mask) * -10000" form,
	// whose bias for a 0 is no lower than a masked real key's.
	for _, c := range []float64{0, -1e9} {
		// First find candidate masks, assuming every input padded with c
		// (and nothing extreme there); then check again with only those
		// padded with c and every other input with zeros, as pad will.
		fills := map[string]float64{}
		for _, in := range m.inputs {
			fills[in.Name] = c
		}
		cand := m.runPad(dim, fills, false)
		if cand.err != "" || len(cand.masks) == 0 {
			continue
		}
		for name := range fills {
			if !cand.masks[name] {
				fills[name] = 0
			}
		}
		b := m.runPad(dim, fills, true)
		if b.err != "" || len(b.masks) == 0 {
			continue
		}
		masks := map[string]float64{}
		var names []string
		for n := range b.masks {
			masks[n] = fills[n]
			names = append(names, fmt.Sprintf("%q", n))
		}
		sort.Strings(names)
		return DimSafety{Dim: dim, Safe: true, Fill: FillZeros, Masks: masks, Ops: b.ops,
			Reason: fmt.Sprintf("positions along it are independent through %d ops, and masked by input %s (padded with %g) before %s",
				b.ops, strings.Join(names, ", "), c, strings.Join(b.softmaxes, ", "))}
	}
	return DimSafety{Dim: dim, Reason: first, Ops: a.ops}
}

// Symbolic sizes: a constant, a named symbolic dimension, a size unknown
// but the same with and without padding (opaque), or a size that depends on
// the padded dimension in an unknown way (taint).
type sdimKind uint8

const (
	sOpaque sdimKind = iota
	sConst
	sSym
	sTaint
	sMerge // an axis that merges D with other sizes (padmerge.go)
	sProd  // a size element D times other sizes (padmerge.go)
)

type sdim struct {
	k sdimKind
	c int64
	s string
}

func cdim(c int64) sdim  { return sdim{k: sConst, c: c} }
func symd(s string) sdim { return sdim{k: sSym, s: s} }

// pval is what the analysis knows of one value.
type pval struct {
	rank  int    // -1: unknown
	dims  []sdim // len rank when known
	elems []sdim // the elements of a small integer tensor (rank <= 1), when tracked
	fc    []float64
	dirty string // non-empty: real positions may differ from an exact run, and why
	// Facts about padded positions, by axis: padc, the exact constant held
	// where that axis is padded (origin: the padded input it comes from);
	// neg, at most maskBias there; zero, exactly zero there.
	padc map[int]float64
	orig string
	neg  map[int]string // axis -> mask input name
	zero map[int]bool
	mask bool // derived from a mask-candidate input (padded values may be extreme)
	// idiom: padc went through a masking idiom (Where choosing a constant,
	// or a product with a constant of at most -1e4, as in "(1 - mask) *
	// -10000"), so real positions hold either 0 or that bias: only such a
	// value may mask. A raw input padded with a constant may not: its real
	// values are the caller's, and could be as low as the padding.
	idiom bool
}

type padRun struct {
	m         *Model
	dim       string
	fills     map[string]float64 // constant each input is padded with, when known
	vals      map[string]*pval
	ops       int
	err       string
	masks     map[string]bool
	softmaxes []string
}

// runPad runs the analysis for dim. fills gives the constant inputs are
// padded with (nil: unknown); extreme says whether a non-zero constant
// may make padded positions extreme (false only to find candidates).
func (m *Model) runPad(dim string, fills map[string]float64, extreme bool) *padRun {
	r := &padRun{m: m, dim: dim, fills: fills, vals: map[string]*pval{}, masks: map[string]bool{}}
	for name, t := range m.inits {
		r.vals[name] = constVal(t, m.initDT[name])
	}
	for _, in := range m.inputs {
		v := &pval{rank: -1}
		if in.RankKnown {
			v.rank = len(in.Dims)
			for _, d := range in.Dims {
				switch {
				case d.Value >= 0:
					v.dims = append(v.dims, cdim(int64(d.Value)))
				case d.Param != "":
					v.dims = append(v.dims, symd(d.Param))
				default:
					v.dims = append(v.dims, sdim{})
				}
			}
		}
		if c, ok := fills[in.Name]; ok && v.rank > 0 && canHold(in.DType, c) {
			for _, a := range v.dAxes(dim) {
				if v.padc == nil {
					v.padc = map[int]float64{}
				}
				v.padc[a] = c
				v.orig = in.Name
				// Zeros are as benign as a zero fill; another constant may
				// make padded positions extreme.
				v.mask = extreme && c != 0
			}
		}
		r.vals[in.Name] = v
	}
	for k, n := range m.nodes {
		outs := r.node(n, m.attrs[k])
		for i, name := range n.Output {
			if name == "" {
				continue
			}
			if i < len(outs) && outs[i] != nil {
				r.vals[name] = outs[i]
			} else {
				r.vals[name] = &pval{rank: -1, dirty: r.dirtyIfInvolved(n)}
			}
		}
	}
	for _, o := range m.outputs {
		v := r.vals[o.Name]
		if v == nil {
			continue
		}
		if v.dirty != "" {
			r.err = v.dirty
			break
		}
		if r.sizeDep(v) {
			r.err = fmt.Sprintf("output %q holds a value computed from its size", o.Name)
			break
		}
		if r.mergedOutput(v) {
			r.err = fmt.Sprintf("output %q carries it merged with other sizes, so padding could not be sliced off", o.Name)
			break
		}
		if len(v.dAxes(dim)) == 0 {
			continue
		}
		if !o.RankKnown || v.rank != len(o.Dims) {
			r.err = fmt.Sprintf("output %q does not declare which axis carries it, so padding could not be sliced off", o.Name)
			break
		}
		for i, d := range v.dims {
			if (d.k == sSym && d.s == dim) != (o.Dims[i].Param == dim) {
				r.err = fmt.Sprintf("output %q does not declare %s on axis %d where the graph carries it, so padding could not be sliced off", o.Name, dim, i)
				break
			}
			if d.k == sTaint {
				r.err = fmt.Sprintf("output %q has a size that depends on it", o.Name)
				break
			}
		}
		if r.err != "" {
			break
		}
	}
	return r
}

// canHold says whether dtype dt can hold the fill value c exactly.
func canHold(dt ir.DType, c float64) bool {
	if c == 0 {
		return true
	}
	switch dt {
	case ir.Float32, ir.Float64, ir.Int32, ir.Int64:
		return true
	}
	return false
}

func constVal(t *ir.Tensor, dt ir.DType) *pval {
	dims := t.Shape().Dimensions
	v := &pval{rank: len(dims)}
	for _, d := range dims {
		v.dims = append(v.dims, cdim(int64(d)))
	}
	if t.Shape().Size() <= 64 {
		h := hostFromIR(t, dt)
		if f, err := h.floats(); err == nil {
			v.fc = f
			if !isFloatDT(dt) && len(dims) <= 1 {
				for _, x := range f {
					v.elems = append(v.elems, cdim(int64(x)))
				}
			}
		}
	}
	return v
}

// dAxes lists the axes of v that carry dim.
func (v *pval) dAxes(dim string) []int {
	var out []int
	for i, d := range v.dims {
		if d.k == sSym && d.s == dim {
			out = append(out, i)
		}
	}
	return out
}

// sizeDep says whether v holds a value computed from the padded size. v is
// nil for an optional input left empty (Clip(x, "", max)): nothing.
func (r *padRun) sizeDep(v *pval) bool {
	if v == nil {
		return false
	}
	for _, e := range v.elems {
		if r.isD(e) {
			return true
		}
	}
	return false
}

// involved says whether v has anything to do with the padded dimension.
func (r *padRun) involved(v *pval) bool {
	if v == nil {
		return false
	}
	if v.dirty != "" || r.sizeDep(v) {
		return true
	}
	for _, d := range v.dims {
		if r.isD(d) {
			return true
		}
	}
	return false
}

func padNodeName(n *onnxpb.Node) string {
	if n.Name != "" {
		return fmt.Sprintf("%s node %q", n.OpType, n.Name)
	}
	if len(n.Output) > 0 {
		return fmt.Sprintf("%s node (output %q)", n.OpType, n.Output[0])
	}
	return n.OpType + " node"
}

// dirtyIfInvolved is the verdict for an op the analysis cannot follow.
func (r *padRun) dirtyIfInvolved(n *onnxpb.Node) string {
	for _, in := range r.nodeInputs(n) {
		v := r.vals[in]
		if v != nil && v.dirty != "" {
			return v.dirty
		}
		if r.involved(v) {
			return fmt.Sprintf("%s is not known to the padding analysis", padNodeName(n))
		}
	}
	return ""
}

// nodeInputs lists the node's inputs and the outer values its subgraphs read.
func (r *padRun) nodeInputs(n *onnxpb.Node) []string {
	out := append([]string(nil), n.Input...)
	var walk func(g *onnxpb.Graph)
	walk = func(g *onnxpb.Graph) {
		for i := range g.Node {
			out = append(out, g.Node[i].Input...)
			for a := range g.Node[i].Attribute {
				at := &g.Node[i].Attribute[a]
				if at.G != nil {
					walk(at.G)
				}
				for gi := range at.Graphs {
					walk(&at.Graphs[gi])
				}
			}
		}
	}
	for a := range n.Attribute {
		at := &n.Attribute[a]
		if at.G != nil {
			walk(at.G)
		}
		for gi := range at.Graphs {
			walk(&at.Graphs[gi])
		}
	}
	return out
}

func attrI(attrs map[string]*onnxpb.Attribute, name string, def int64) int64 {
	if a := attrs[name]; a != nil {
		return a.I
	}
	return def
}

func attrIs(attrs map[string]*onnxpb.Attribute, name string) ([]int64, bool) {
	if a := attrs[name]; a != nil {
		return a.Ints, true
	}
	return nil, false
}

func normAxis(a int64, rank int) (int, bool) {
	if a < 0 {
		a += int64(rank)
	}
	return int(a), a >= 0 && int(a) < rank
}

// constInts returns the constant integer elements of input i.
func (r *padRun) constInts(n *onnxpb.Node, i int) ([]int64, bool) {
	if i >= len(n.Input) || n.Input[i] == "" {
		return nil, false
	}
	v := r.vals[n.Input[i]]
	if v == nil || v.fc == nil {
		return nil, false
	}
	out := make([]int64, len(v.fc))
	for k, f := range v.fc {
		out[k] = clampInt64(f)
	}
	return out, true
}

// node applies one op's rule, then two guards: a value computed from the
// padded size may only flow where the rule keeps track of it (shape
// arithmetic, Reshape targets, Range limits...: the input the op's
// registration declares with takesSize, or every input of an op
// registered readsShapes), and "may be extreme at padded positions" (mask)
// flows from every other input to every output (but those of an op
// registered bounded).
func (r *padRun) node(n *onnxpb.Node, attrs map[string]*onnxpb.Attribute) []*pval {
	outs := r.rule(n, attrs)
	constElems(outs)
	d := padRules[n.OpType]
	if d == nil {
		d = &padRuleDef{sizeIn: -1}
	}
	var mask bool
	for i, name := range n.Input {
		v := r.vals[name]
		if name == "" || v == nil {
			continue
		}
		if d.sizeIn == i || d.shapesOnly {
			continue
		}
		mask = mask || v.mask
		if !r.sizeDep(v) {
			continue
		}
		for _, o := range outs {
			if o != nil && o.dirty == "" && o.elems == nil {
				o.dirty = padNodeName(n) + " uses its size as a value"
			}
		}
	}
	for _, o := range outs {
		if o != nil {
			o.mask = (o.mask || mask) && !d.bounded
		}
	}
	return outs
}

// rule applies op's padding rule, registered beside its converter
// (registerPadRule, registerPadNotAnalysed), and returns its outputs'
// states. An op without one (another domain's; the importer refuses an
// unregistered default-domain op at load) is not analysed: its outputs are
// dirty as soon as it touches the padded dimension.
func (r *padRun) rule(n *onnxpb.Node, attrs map[string]*onnxpb.Attribute) []*pval {
	ins := make([]*pval, len(n.Input))
	anyInv := false
	for i, name := range n.Input {
		if name == "" {
			continue
		}
		ins[i] = r.vals[name]
		if ins[i] == nil {
			ins[i] = &pval{rank: -1}
		}
		if ins[i].dirty != "" {
			// A dirty input makes every output dirty, with the first cause.
			return r.all(n, &pval{rank: -1, dirty: ins[i].dirty})
		}
		anyInv = anyInv || r.involved(ins[i])
	}
	for _, name := range r.nodeInputs(n)[len(n.Input):] {
		if v := r.vals[name]; v != nil && (v.dirty != "" || r.involved(v)) {
			return r.all(n, &pval{rank: -1, dirty: r.dirtyIfInvolved(n)})
		}
	}
	if anyInv {
		r.ops++
	}
	fail := func(format string, args ...any) []*pval {
		if !anyInv {
			return r.all(n, &pval{rank: -1})
		}
		return r.all(n, &pval{rank: -1, dirty: padNodeName(n) + " " + fmt.Sprintf(format, args...)})
	}
	unknown := func() []*pval {
		if anyInv {
			return r.all(n, &pval{rank: -1, dirty: fmt.Sprintf("%s is not known to the padding analysis", padNodeName(n))})
		}
		return r.all(n, &pval{rank: -1})
	}
	op := n.OpType
	if n.Domain != "" && n.Domain != "ai.onnx" {
		return unknown()
	}
	if !anyInv {
		if outs := r.foldConst(op, attrs, ins); outs != nil {
			return outs
		}
	}
	d := padRules[op]
	if d == nil {
		return unknown()
	}
	if padIn(ins, 0) == nil && !d.noInputs {
		return fail("has no first input")
	}
	return d.f(r, n, attrs, ins, anyInv, fail)
}

// padRuleFunc is one op's padding rule, kept in the ops_*.go file beside
// the op's converter (registerPadRule in its init): from the states of the
// node's inputs (ins[0] present unless the rule is registered
// withoutInputs, ins[i] nil for an empty optional input; none dirty), the
// states of its outputs. anyInv says whether any input has to do with the
// padded dimension. fail refuses: the outputs become dirty, naming the
// node, when an input carries the padded dimension (and are merely
// unknown when none does).
type padRuleFunc func(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(format string, args ...any) []*pval) []*pval

// padRuleDef is one op's registered padding rule.
type padRuleDef struct {
	f padRuleFunc
	// noInputs: the rule also runs for a node without a first input
	// (Constant has none); otherwise such a node is refused.
	noInputs bool
	// sizeIn is the input that may hold a value computed from the padded
	// size (a shape, a Range limit, Gather indices), which the rule
	// follows itself; -1 for none. It brings no mask either.
	sizeIn int
	// shapesOnly: the op reads its inputs' shapes only (Shape, Size).
	shapesOnly bool
	// bounded: the outputs are bounded whatever the inputs (Softmax's are
	// in [0, 1]), so never extreme at padded positions.
	bounded bool
}

// withoutInputs lets the rule run for a node that has no first input.
func (d *padRuleDef) withoutInputs() *padRuleDef { d.noInputs = true; return d }

// takesSize declares input i as one that may hold a value computed from
// the padded size, followed by the rule (node's guards skip it).
func (d *padRuleDef) takesSize(i int) *padRuleDef { d.sizeIn = i; return d }

// readsShapes declares that the op reads only its inputs' shapes.
func (d *padRuleDef) readsShapes() *padRuleDef { d.shapesOnly = true; return d }

// boundedOutputs declares the op's outputs bounded whatever its inputs.
func (d *padRuleDef) boundedOutputs() *padRuleDef { d.bounded = true; return d }

// padRules are the rules registered beside their converters, one per op
// (padUnanalysed for the ops registered not analysed). An importer op
// without one fails TestPadRulesDecided.
var padRules = map[string]*padRuleDef{}

// registerPadRule records op's padding rule; called from init functions
// beside the op's converter. Twice for one op is a programming error and
// panics at program start.
func registerPadRule(op string, f padRuleFunc) *padRuleDef {
	if padRules[op] != nil {
		panic(fmt.Sprintf("onnx: padding rule for %s registered twice", op))
	}
	d := &padRuleDef{f: f, sizeIn: -1}
	padRules[op] = d
	return d
}

// registerPadRules records one rule for several ops (a family: element-wise
// ops, reductions...).
func registerPadRules(f padRuleFunc, ops ...string) {
	for _, op := range ops {
		registerPadRule(op, f)
	}
}

// padIn returns input i's state, nil when the input is absent or empty.
func padIn(ins []*pval, i int) *pval {
	if i < len(ins) {
		return ins[i]
	}
	return nil
}

func (r *padRun) all(n *onnxpb.Node, v *pval) []*pval {
	out := make([]*pval, len(n.Output))
	for i := range out {
		c := *v
		out[i] = &c
	}
	return out
}

// isD says whether d carries the padded dimension: D itself, a size
// computed from it, or D merged with other sizes (padmerge.go).
func (r *padRun) isD(d sdim) bool {
	return d.k == sTaint || d.k == sMerge || d.k == sProd || d.k == sSym && d.s == r.dim
}

func (v *pval) clone() *pval {
	c := *v
	return &c
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func mapF(f []float64, fn func(float64) float64) []float64 {
	out := make([]float64, len(f))
	for i, x := range f {
		out[i] = fn(x)
	}
	return out
}

func mapPadc(p map[int]float64, fn func(float64) float64) map[int]float64 {
	if p == nil {
		return nil
	}
	out := map[int]float64{}
	for a, v := range p {
		out[a] = fn(v)
	}
	return out
}

// remapFacts moves the padded-position facts of x to new axis numbers.
func remapFacts(x *pval, remap map[int]int) (map[int]float64, map[int]string, map[int]bool) {
	var padc map[int]float64
	var neg map[int]string
	var zero map[int]bool
	for a, v := range x.padc {
		if b, ok := remap[a]; ok {
			if padc == nil {
				padc = map[int]float64{}
			}
			padc[b] = v
		}
	}
	for a, v := range x.neg {
		if b, ok := remap[a]; ok {
			if neg == nil {
				neg = map[int]string{}
			}
			neg[b] = v
		}
	}
	for a := range x.zero {
		if b, ok := remap[a]; ok {
			if zero == nil {
				zero = map[int]bool{}
			}
			zero[b] = true
		}
	}
	return padc, neg, zero
}

func clampAxis(a int64, rank int) (int, bool) {
	if a < 0 {
		a += int64(rank)
	}
	if a < 0 {
		return 0, false
	}
	if a > int64(rank) {
		return rank, false
	}
	return int(a), true
}

// merge is the size of several axes merged into one: the padded dimension
// survives a merge only with axes of size 1.
func (r *padRun) merge(ds []sdim) (sdim, bool) {
	var d *sdim
	prod := int64(1)
	allConst := true
	for i := range ds {
		switch {
		case r.isD(ds[i]):
			if d != nil {
				return sdim{}, false
			}
			d = &ds[i]
		case ds[i].k == sConst:
			prod *= ds[i].c
		default:
			allConst = false
		}
	}
	if d != nil {
		if !allConst || prod != 1 {
			return sdim{}, false
		}
		return *d, true
	}
	if allConst {
		return cdim(prod), true
	}
	return sdim{}, true
}

// broadcast returns the broadcast shape of operands, or why the padded
// dimension cannot be followed through it.
func (r *padRun) broadcast(vs []*pval) ([]sdim, string) {
	rank := 0
	for _, v := range vs {
		if v == nil {
			continue
		}
		if v.rank < 0 {
			return nil, "broadcasts an operand of unknown rank"
		}
		rank = max(rank, v.rank)
	}
	out := make([]sdim, rank)
	for i := range out {
		out[i] = cdim(1)
	}
	for _, v := range vs {
		if v == nil {
			continue
		}
		off := rank - v.rank
		for i, d := range v.dims {
			o := &out[i+off]
			switch {
			case d.k == sConst && d.c == 1:
			case o.k == sConst && o.c == 1:
				*o = d
			case r.isD(d) || r.isD(*o):
				if *o != d {
					return nil, fmt.Sprintf("broadcasts it against a dimension of another size (%v)", dimWords(*o, d))
				}
			case d.k == sConst && o.k == sConst:
				if d.c != o.c {
					return nil, "broadcasts mismatched sizes"
				}
			case o.k == sOpaque || d.k == sOpaque:
				*o = sdim{}
			case *o != d:
				*o = sdim{}
			}
		}
	}
	return out, ""
}

func dimWords(a, b sdim) string {
	w := func(d sdim) string {
		switch d.k {
		case sConst:
			return fmt.Sprint(d.c)
		case sSym:
			return d.s
		case sTaint:
			return "a size computed from it"
		}
		return "?"
	}
	return w(a) + " and " + w(b)
}

// padPointwise is the rule of a unary element-wise op: positions stay
// apart. facts, when not nil, carries what is known of the padded
// positions' values from x to out (Neg negates a constant fill).
func padPointwise(facts func(x, out *pval)) padRuleFunc {
	return func(r *padRun, n *onnxpb.Node, _ map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
		x := ins[0]
		if r.sizeDep(x) || x.rank < 0 && anyInv {
			return fail("uses its size as a value")
		}
		out := &pval{rank: x.rank, dims: x.dims, mask: x.mask}
		if facts != nil {
			facts(x, out)
		}
		return []*pval{out}
	}
}

// padUnary is the rule of a unary element-wise op that keeps no facts
// about padded positions' values (Relu, Exp, Sigmoid...).
var padUnary = padPointwise(nil)

// padElementwise is the rule of the element-wise ops of several operands
// (Add, Mul, Where, Clip, comparisons...): broadcasting keeps positions
// apart, so the padded dimension passes through unless it is broadcast
// against another size. It also follows what padded positions hold (a
// constant, an additive mask bias) for the attention-mask proof, and
// integer arithmetic on shape elements.
func padElementwise(r *padRun, n *onnxpb.Node, _ map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	op := n.OpType
	// Integer arithmetic on shape elements (rank <= 1).
	small := true
	for _, v := range ins {
		if v != nil && (v.elems == nil || v.rank > 1) {
			small = false
		}
	}
	if small && len(ins) == 2 && (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
		a, b := ins[0].elems, ins[1].elems
		if len(a) == len(b) || len(a) == 1 || len(b) == 1 {
			nOut := max(len(a), len(b))
			out := &pval{rank: max(ins[0].rank, ins[1].rank)}
			if out.rank == 1 {
				out.dims = []sdim{cdim(int64(nOut))}
			}
			for i := 0; i < nOut; i++ {
				x, y := a[min(i, len(a)-1)], b[min(i, len(b)-1)]
				var e sdim
				switch {
				case x.k == sConst && y.k == sConst:
					e = cdim(intArith(op, x.c, y.c))
				case r.isD(x) || r.isD(y):
					e = r.prodArith(op, x, y)
				}
				out.elems = append(out.elems, e)
			}
			if ins[0].fc != nil && ins[1].fc != nil {
				for _, e := range out.elems {
					out.fc = append(out.fc, float64(e.c))
				}
			}
			return []*pval{out}
		}
	}
	for _, v := range ins {
		if r.sizeDep(v) {
			return fail("uses its size as a value")
		}
	}
	dims, why := r.broadcast(ins)
	if why != "" {
		if !anyInv {
			return []*pval{{rank: -1}}
		}
		return fail("%s", why)
	}
	out := &pval{rank: len(dims), dims: dims}
	for _, v := range ins {
		if v != nil && v.mask {
			out.mask = true
		}
	}
	// Facts about padded positions, per output axis.
	axisOf := func(v *pval, a int) int { return a + len(dims) - v.rank }
	scalar := func(v *pval) (float64, bool) {
		if v == nil || v.fc == nil || len(v.fc) != 1 {
			return 0, false
		}
		return v.fc[0], true
	}
	switch {
	case op == "Where" && len(ins) == 3:
		cond, a, b := ins[0], ins[1], ins[2]
		for ax, c := range cond.padc {
			oa := axisOf(cond, ax)
			pick := b
			if c != 0 {
				pick = a
			}
			if s, ok := scalar(pick); ok {
				out.setPadc(oa, s, cond.orig)
				out.idiom = true
				if s <= maskBias {
					out.setNeg(oa, cond.orig)
				}
			}
		}
	case len(ins) == 2 && ins[0] != nil && ins[1] != nil:
		a, b := ins[0], ins[1]
		for _, pair := range [][2]*pval{{a, b}, {b, a}} {
			v, other := pair[0], pair[1]
			s, isConst := scalar(other)
			for ax, c := range v.padc {
				oa := axisOf(v, ax)
				if isConst {
					var res float64
					switch {
					case op == "Sub" && v == a:
						res = c - s
					case op == "Sub":
						res = s - c
					case op == "Div" && v == a:
						res = c / s
					case op == "Div":
						res = s / c
					case op == "Add":
						res = c + s
					case op == "Mul":
						res = c * s
					case op == "Equal":
						res = b2f(c == s)
					default:
						continue
					}
					out.setPadc(oa, res, v.orig)
					out.idiom = v.idiom || op == "Mul" && s <= -1e4
				} else if op == "Add" && (c <= maskBias || math.IsInf(c, -1)) && v.idiom && !other.mask {
					// scores + bias: at most maskBias plus a finite score.
					out.setNeg(oa, v.orig)
				}
			}
		}
		// A bias already added stays a bias through a further addition
		// of an unmasked value.
		if op == "Add" {
			for _, pair := range [][2]*pval{{a, b}, {b, a}} {
				for ax, o := range pair[0].neg {
					if !pair[1].mask {
						out.setNeg(axisOf(pair[0], ax), o)
					}
				}
			}
		}
	}
	return []*pval{out}
}

func (v *pval) setPadc(a int, c float64, orig string) {
	if v.padc == nil {
		v.padc = map[int]float64{}
	}
	v.padc[a] = c
	v.orig = orig
}

func (v *pval) setNeg(a int, orig string) {
	if v.neg == nil {
		v.neg = map[int]string{}
	}
	v.neg[a] = orig
}

func intArith(op string, a, b int64) int64 {
	switch op {
	case "Add":
		return a + b
	case "Sub":
		return a - b
	case "Mul":
		return a * b
	case "Div":
		if b == 0 {
			return 0
		}
		q := a / b
		if (a%b != 0) && ((a < 0) != (b < 0)) {
			q--
		}
		return q
	}
	return 0
}

// remaining resolves a -1 in target at position i from the input dims.
func (r *padRun) remaining(in, target []sdim, i int) (sdim, bool) {
	num := map[string]int{}
	prod := int64(1)
	for _, d := range in {
		switch d.k {
		case sConst:
			prod *= d.c
		case sSym:
			num[d.s]++
		default:
			return sdim{}, false
		}
	}
	den := int64(1)
	for j, d := range target {
		if j == i {
			continue
		}
		switch d.k {
		case sConst:
			den *= d.c
		case sSym:
			if num[d.s] == 0 {
				return sdim{}, false
			}
			num[d.s]--
		default:
			return sdim{}, false
		}
	}
	var syms []string
	for s, c := range num {
		for ; c > 0; c-- {
			syms = append(syms, s)
		}
	}
	switch {
	case den == 0 || prod%den != 0:
		return sdim{}, false
	case len(syms) == 0:
		return cdim(prod / den), true
	case len(syms) == 1 && prod/den == 1:
		return symd(syms[0]), true
	}
	return sdim{}, false
}

// sameProduct says whether two lists of sizes provably multiply to the
// same value: equal constant products and the same symbolic names.
func sameProduct(a, b []sdim) bool {
	key := func(ds []sdim) (int64, string, bool) {
		p := int64(1)
		var s []string
		for _, d := range ds {
			switch d.k {
			case sConst:
				p *= d.c
			case sSym:
				s = append(s, d.s)
			default:
				return 0, "", false
			}
		}
		sort.Strings(s)
		return p, strings.Join(s, "*"), true
	}
	pa, sa, ok1 := key(a)
	pb, sb, ok2 := key(b)
	return ok1 && ok2 && pa == pb && sa == sb
}

// padSpatial is the rule of convolutions, pools and normalisations over
// the spatial axes of an NC... input: positions mix along every axis from
// 1 on (BatchNormalization in inference mode, InstanceNormalization along
// channels excepted), so the padded dimension may only be the batch axis.
func padSpatial(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	op := n.OpType
	x := ins[0]
	if x.rank < 2 {
		return fail("has an input of a rank the analysis does not know")
	}
	for i := 2; i < x.rank; i++ {
		if r.isD(x.dims[i]) {
			if op == "BatchNormalization" {
				continue // per channel: spatial positions stay independent
			}
			return fail("mixes positions along it")
		}
	}
	if r.isD(x.dims[1]) && op != "InstanceNormalization" {
		return fail("mixes channels along it")
	}
	if op == "BatchNormalization" && (attrI(attrs, "training_mode", 0) != 0 || len(n.Output) > 1) {
		return fail("normalises over it (training mode)")
	}
	chanD := op == "InstanceNormalization" && r.isD(x.dims[1])
	for _, p := range ins[1:] {
		if chanD {
			// Channels are independent; the per-channel scale and bias
			// must be padded with them, or the padded run cannot match
			// their sizes (the differential test found this: a scale of
			// static size C beside a padded channel axis failed to run).
			if p == nil || p.rank != 1 || p.dims[0] != x.dims[1] {
				return fail("normalises channels along it with a scale or bias that does not carry it")
			}
			continue
		}
		if r.involved(p) {
			return fail("takes a weight along it")
		}
	}
	out := &pval{rank: x.rank, dims: append([]sdim{}, x.dims...)}
	switch op {
	case "Conv", "ConvInteger", "ConvTranspose":
		if len(ins) > 1 && ins[1] != nil && ins[1].rank == x.rank {
			out.dims[1] = ins[1].dims[0]
			if op == "ConvTranspose" {
				out.dims[1] = sdim{}
			}
		} else {
			out.dims[1] = sdim{}
		}
		fallthrough
	case "MaxPool", "AveragePool", "LpPool", "QLinearConv":
		for i := 2; i < x.rank; i++ {
			out.dims[i] = sdim{}
		}
	case "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool":
		for i := 2; i < x.rank; i++ {
			out.dims[i] = cdim(1)
		}
	}
	if op == "QLinearConv" {
		out.dims[1] = sdim{}
	}
	outs := []*pval{out}
	for i := 1; i < len(n.Output); i++ {
		outs = append(outs, &pval{rank: -1, dirty: map[bool]string{true: padNodeName(n) + " has an extra output the analysis does not follow"}[anyInv]})
	}
	return outs
}

// padSoftmax is the rule of Softmax, LogSoftmax and Hardmax: exact along
// axes they do not normalise over; over the padded axis only a Softmax
// whose input carries an additive mask bias there (the attention-mask
// proof), whose output is then exactly zero at padded positions.
func padSoftmax(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	op, x := n.OpType, ins[0]
	if x.rank < 0 {
		return fail("has an input of unknown rank")
	}
	def := int64(-1)
	if r.m.opset < 13 {
		def = 1
	}
	a, ok := normAxis(attrI(attrs, "axis", def), x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	// Before opset 13 the op normalises over all axes from axis on.
	last := a
	if r.m.opset < 13 {
		last = x.rank - 1
	}
	out := &pval{rank: x.rank, dims: x.dims}
	for i := a; i <= last; i++ {
		if !r.isD(x.dims[i]) {
			continue
		}
		orig, masked := x.neg[i]
		if !masked || a != last || op == "Hardmax" {
			return fail("normalises over it")
		}
		r.masks[orig] = true
		r.softmaxes = append(r.softmaxes, padNodeName(n))
		if op == "Softmax" {
			out.zero = map[int]bool{i: true}
		}
	}
	return []*pval{out}
}

// padReduce is the rule of the reductions (Reduce*, ArgMax, ArgMin):
// exact unless they reduce over the padded axis.
func padReduce(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	op, x := n.OpType, ins[0]
	if x.rank < 0 {
		return fail("has an input of unknown rank")
	}
	keep := attrI(attrs, "keepdims", 1) != 0
	var axes []int64
	if op == "ArgMax" || op == "ArgMin" {
		axes = []int64{attrI(attrs, "axis", 0)}
	} else if a, ok := attrIs(attrs, "axes"); ok {
		axes = a
	} else if len(n.Input) > 1 && n.Input[1] != "" {
		a, ok := r.constInts(n, 1)
		if !ok {
			return fail("reduces over axes the analysis does not know")
		}
		axes = a
	}
	red := map[int]bool{}
	if len(axes) == 0 {
		if attrI(attrs, "noop_with_empty_axes", 0) != 0 {
			return []*pval{x.clone()}
		}
		for i := 0; i < x.rank; i++ {
			red[i] = true
		}
	}
	for _, a := range axes {
		k, ok := normAxis(a, x.rank)
		if !ok {
			return fail("has an axis out of range")
		}
		red[k] = true
	}
	out := &pval{}
	for i, d := range x.dims {
		if red[i] {
			if r.isD(d) {
				return fail("reduces over it")
			}
			if keep {
				out.dims = append(out.dims, cdim(1))
			}
			continue
		}
		out.dims = append(out.dims, d)
	}
	out.rank = len(out.dims)
	return []*pval{out}
}

// registerPadNotAnalysed records ops the padding analysis deliberately
// does not follow, called beside their converters: a node of one of them
// that touches the padded dimension makes it exact ("... is not known to
// the padding analysis").
func registerPadNotAnalysed(ops ...string) {
	for _, op := range ops {
		registerPadRule(op, padUnanalysed).withoutInputs()
	}
}

// padUnanalysed is the rule of an op the analysis does not follow: its
// outputs are dirty when an input has to do with the padded dimension,
// unknown otherwise.
func padUnanalysed(r *padRun, n *onnxpb.Node, _ map[string]*onnxpb.Attribute, _ []*pval, anyInv bool, _ func(string, ...any) []*pval) []*pval {
	if anyInv {
		return r.all(n, &pval{rank: -1, dirty: fmt.Sprintf("%s is not known to the padding analysis", padNodeName(n))})
	}
	return r.all(n, &pval{rank: -1})
}
