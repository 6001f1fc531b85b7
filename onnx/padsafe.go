package onnx

import (
	"fmt"
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
