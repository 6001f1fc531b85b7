package onnx

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Padding analysis, continued: merged axes.
//
// nn.MultiheadAttention (and so nn.TransformerEncoder and
// nn.TransformerDecoder) reshapes [seq, batch, embed] to
// [seq, batch*heads, head_dim], runs attention with batch*heads as the batch
// of its MatMuls, and reshapes [seq*batch, embed] back to [seq, batch,
// embed]. The plain Reshape rule keeps the padded dimension D only where it
// stays an axis of its own, so these exports lost batching.
//
// A reshape that merges D with neighbouring sizes is still exact when
// nothing mixes positions along the merged axis and a later reshape splits
// it back: a row-major merge of sizes (a, D, b) into one axis puts the
// element at coordinates (i, d, j) at index i*D*b + d*b + j, and with D
// padded to D' at i*D'*b + d*b + j. Every position of the merged axis is
// one (i, d, j), real exactly when d is below the real size, in both runs;
// ops that treat positions along the axis independently (element-wise ops,
// the batch axes of MatMul, the rows of Gemm, Softmax over other axes)
// compute the same value at the same (i, d, j), and a reshape that splits
// the axis back into (..., D, ...) restores the real rows at their places.
// The merged axis is a sdim of kind sMerge whose key records a and b; an
// op that mixes positions along it (a reduction, a contraction, a Softmax,
// a Slice, a Concat over it) fails exactly as it does for D itself (isD).
// When a is 1, the merge is batch-major: real positions are a prefix of the
// axis (the form MultiheadAttention's [batch*heads] has), which a forward
// CumSum also needs.
//
// Sizes of merged axes travel through shape arithmetic as sProd elements
// (D times a constant and other symbolic sizes), as Shape, Gather and Mul
// produce them for the Reshape targets.

// sizeProd is a product of sizes that do not depend on the padded
// dimension: a constant times symbolic dimensions, kept sorted.
type sizeProd struct {
	c    int64
	syms []string
}

func (p sizeProd) mul(q sizeProd) sizeProd {
	s := append(append([]string{}, p.syms...), q.syms...)
	sort.Strings(s)
	return sizeProd{c: p.c * q.c, syms: s}
}

// div divides p by q exactly, or says it cannot.
func (p sizeProd) div(q sizeProd) (sizeProd, bool) {
	if q.c == 0 || p.c%q.c != 0 {
		return sizeProd{}, false
	}
	left := append([]string{}, p.syms...)
	for _, s := range q.syms {
		k := sort.SearchStrings(left, s)
		if k == len(left) || left[k] != s {
			return sizeProd{}, false
		}
		left = append(left[:k], left[k+1:]...)
	}
	return sizeProd{c: p.c / q.c, syms: left}, true
}

func (p sizeProd) one() bool { return p.c == 1 && len(p.syms) == 0 }

// key encodes p: the constant, then each name after a NUL (names cannot
// hold one: protobuf strings are UTF-8 and ONNX names are identifiers).
func (p sizeProd) key() string {
	s := strconv.FormatInt(p.c, 10)
	for _, n := range p.syms {
		s += "\x00" + n
	}
	return s
}

func parseProd(s string) sizeProd {
	parts := strings.Split(s, "\x00")
	c, _ := strconv.ParseInt(parts[0], 10, 64)
	return sizeProd{c: c, syms: parts[1:]}
}

// dim is p as a dimension: a constant, one symbolic name, or opaque.
func (p sizeProd) dim() sdim {
	switch {
	case len(p.syms) == 0:
		return cdim(p.c)
	case len(p.syms) == 1 && p.c == 1:
		return symd(p.syms[0])
	}
	return sdim{}
}

// A merged axis (a, D, b) is sdim{k: sMerge, s: layoutKey(a, b)}; a size
// element D*c is sdim{k: sProd, s: c's key + "\x01" + the layout key when
// it was read from a merged axis by Shape (else empty)}.
func layoutKey(outer, inner sizeProd) string {
	return outer.key() + "\x02" + inner.key()
}

func parseLayout(s string) (outer, inner sizeProd) {
	o, i, _ := strings.Cut(s, "\x02")
	return parseProd(o), parseProd(i)
}

func prodElem(cof sizeProd, layout string) sdim {
	return sdim{k: sProd, s: cof.key() + "\x01" + layout}
}

func parseProdElem(e sdim) (cof sizeProd, layout string) {
	c, l, _ := strings.Cut(e.s, "\x01")
	return parseProd(c), l
}

// prodOf multiplies sizes that do not carry the padded dimension.
func (r *padRun) prodOf(ds []sdim) (sizeProd, bool) {
	p := sizeProd{c: 1}
	for _, d := range ds {
		switch {
		case d.k == sConst:
			p.c *= d.c
		case d.k == sSym && d.s != r.dim:
			p = p.mul(sizeProd{c: 1, syms: []string{d.s}})
		default:
			return sizeProd{}, false
		}
	}
	return p, true
}

// mergedElems turns the merged axes among a Shape's elements into D*c
// elements that remember their layout.
func (r *padRun) mergedElems(elems []sdim) []sdim {
	for i, e := range elems {
		if e.k == sMerge {
			o, in := parseLayout(e.s)
			elems[i] = prodElem(o.mul(in), e.s)
		}
	}
	return elems
}

// prodArith is shape arithmetic on an element that carries the padded
// dimension: D*c times a size that does not is D*(c*size); anything else
// is a size computed from D in an unknown way.
func (r *padRun) prodArith(op string, x, y sdim) sdim {
	taint := sdim{k: sTaint}
	if op != "Mul" {
		return taint
	}
	if !r.isD(x) {
		x, y = y, x
	}
	var cof sizeProd
	switch {
	case x.k == sSym && x.s == r.dim:
		cof = sizeProd{c: 1}
	case x.k == sProd:
		cof, _ = parseProdElem(x)
	default:
		return taint
	}
	o, ok := r.prodOf([]sdim{y})
	if !ok {
		return taint
	}
	return prodElem(cof.mul(o), "")
}

// shapeDims turns shape elements into the dimensions of the value a
// ConstantOfShape or Expand creates: a D*c element read from a merged axis
// becomes that merged axis; one whose layout is unknown cannot be followed.
func (r *padRun) shapeDims(elems []sdim) ([]sdim, bool) {
	out := make([]sdim, len(elems))
	for i, e := range elems {
		switch e.k {
		case sTaint:
			return nil, false
		case sProd:
			_, layout := parseProdElem(e)
			if layout == "" {
				return nil, false
			}
			e = sdim{k: sMerge, s: layout}
		}
		out[i] = e
	}
	return out, true
}

// batchMajor says whether d is D itself or a merge (1, D, b): real
// positions along it are a prefix.
func (r *padRun) batchMajor(d sdim) bool {
	if d.k == sSym && d.s == r.dim {
		return true
	}
	if d.k != sMerge {
		return false
	}
	o, _ := parseLayout(d.s)
	return o.one()
}

// mergedOutput says why an output cannot carry a merged axis: the padding
// could not be sliced off it.
func (r *padRun) mergedOutput(v *pval) bool {
	for _, d := range v.dims {
		if d.k == sMerge {
			return true
		}
	}
	return false
}

// mergeReshape is the Reshape rule where the padded dimension is merged
// with other sizes, on either side: x holds it merged (sMerge), or the
// target holds it as D*c, or a -1 absorbs it. It returns nil where the
// plain rule (D an axis of its own on both sides) applies instead.
func (r *padRun) mergeReshape(x, t *pval, allowZero bool, fail func(string, ...any) []*pval) []*pval {
	if x.rank < 0 || t == nil || t.elems == nil {
		return nil
	}
	ci, carriers, merged := -1, 0, false
	for i, d := range x.dims {
		if r.isD(d) {
			ci, carriers = i, carriers+1
			merged = merged || d.k == sMerge || d.k == sTaint
		}
	}
	for _, e := range t.elems {
		merged = merged || e.k == sProd
	}
	if carriers > 1 && merged {
		// The plain rule does not know merged axes; this one follows one.
		return fail("reshapes a value that carries it on several axes, merged on one")
	}
	if carriers != 1 || x.dims[ci].k == sTaint {
		return nil
	}
	// The target's sizes, with 0 copying the input's.
	elems := append([]sdim{}, t.elems...)
	hasProd, hasNeg, hasD := false, false, false
	for i, e := range elems {
		if e.k == sConst && e.c == 0 && !allowZero && i < x.rank {
			elems[i] = r.mergedElems([]sdim{x.dims[i]})[0]
		}
		switch e := elems[i]; {
		case e.k == sProd:
			hasProd = true
		case e.k == sConst && e.c == -1:
			hasNeg = true
		case e.k == sSym && e.s == r.dim:
			hasD = true
		}
	}
	if x.dims[ci].k != sMerge && !hasProd && (hasD || !hasNeg) {
		return nil
	}
	type tsz struct {
		p        sizeProd // the size, for axes that do not carry D
		carrier  bool     // the axis that carries D
		cof      sizeProd // its size over D
		cofKnown bool
		rest     bool // -1
	}
	ts := make([]tsz, len(elems))
	j, neg := -1, -1
	for i, e := range elems {
		switch {
		case e.k == sConst && e.c == -1:
			if neg >= 0 {
				return fail("has two -1 sizes")
			}
			ts[i].rest, neg = true, i
			continue
		case e.k == sSym && e.s == r.dim:
			ts[i].cof, ts[i].cofKnown = sizeProd{c: 1}, true
		case e.k == sProd:
			ts[i].cof, _ = parseProdElem(e)
			ts[i].cofKnown = true
		default:
			p, ok := r.prodOf([]sdim{e})
			if !ok {
				return fail("reshapes to a size the analysis does not know")
			}
			ts[i].p = p
			continue
		}
		if j >= 0 {
			return fail("spreads it over two axes")
		}
		ts[i].carrier, j = true, i
	}
	if j < 0 {
		// A -1 is the only place D can go.
		if neg < 0 {
			return fail("merges it with sizes the analysis does not know")
		}
		j, neg = neg, -1
		ts[j].rest, ts[j].carrier = false, true
	}
	// The input as (sizes before D) * D * (sizes after D).
	before, ok1 := r.prodOf(x.dims[:ci])
	after, ok2 := r.prodOf(x.dims[ci+1:])
	if !ok1 || !ok2 {
		return fail("reshapes a value with sizes the analysis does not know")
	}
	if x.dims[ci].k == sMerge {
		o, in := parseLayout(x.dims[ci].s)
		before, after = before.mul(o), in.mul(after)
	}
	if neg >= 0 {
		others := ts[j].cof
		for i := range ts {
			if i != j && i != neg {
				others = others.mul(ts[i].p)
			}
		}
		p, ok := before.mul(after).div(others)
		if !ok || !ts[j].cofKnown {
			return fail("has a -1 the analysis cannot resolve")
		}
		ts[neg].p = p
	}
	pre, post := sizeProd{c: 1}, sizeProd{c: 1}
	for i := range ts {
		switch {
		case i < j:
			pre = pre.mul(ts[i].p)
		case i > j:
			post = post.mul(ts[i].p)
		}
	}
	a, ok1 := before.div(pre)
	b, ok2 := after.div(post)
	if !ok1 || !ok2 {
		return fail("moves it across other axes (the sizes before and after it do not divide)")
	}
	if ts[j].cofKnown && a.mul(b).key() != ts[j].cof.key() {
		return fail("reshapes it to a size that does not match the merge of its neighbours")
	}
	out := &pval{rank: len(ts), mask: x.mask}
	for i := range ts {
		switch {
		case i != j:
			out.dims = append(out.dims, ts[i].p.dim())
		case a.one() && b.one():
			out.dims = append(out.dims, symd(r.dim))
		default:
			out.dims = append(out.dims, sdim{k: sMerge, s: layoutKey(a, b)})
		}
	}
	return []*pval{out}
}

// foldConst computes small constant shape tensors the exporters build with
// ConstantOfShape, Equal and Where (PyTorch's expand(-1, heads, -1, -1)
// becomes Where(Equal(shape, -1), ones, shape)), so that an Expand to them
// has a known shape. It returns nil where the op is not such a fold.
func (r *padRun) foldConst(op string, attrs map[string]*onnxpb.Attribute, ins []*pval) []*pval {
	const most = 64
	small := func(v *pval) bool { return v != nil && v.fc != nil && v.rank <= 1 && len(v.fc) <= most }
	switch op {
	case "ConstantOfShape":
		if len(ins) != 1 || !small(ins[0]) || ins[0].rank != 1 {
			return nil
		}
		n := int64(1)
		for _, f := range ins[0].fc {
			n *= int64(f)
			if f < 0 || n > most {
				return nil
			}
		}
		val, isInt := 0.0, false
		if a := attrs["value"]; a != nil && a.T != nil {
			h, err := r.m.tensorToHost(a.T, "")
			if err != nil {
				return nil
			}
			f, err := h.floats()
			if err != nil || len(f) != 1 {
				return nil
			}
			val, isInt = f[0], !isFloatDT(h.dt)
		}
		out := &pval{rank: len(ins[0].fc)}
		for _, f := range ins[0].fc {
			out.dims = append(out.dims, cdim(int64(f)))
		}
		for k := int64(0); k < n; k++ {
			out.fc = append(out.fc, val)
			if isInt && out.rank <= 1 {
				out.elems = append(out.elems, cdim(int64(val)))
			}
		}
		return []*pval{out}
	case "Equal", "Where":
		want := map[string]int{"Equal": 2, "Where": 3}[op]
		if len(ins) != want {
			return nil
		}
		n := 1
		for _, v := range ins {
			if !small(v) {
				return nil
			}
			if len(v.fc) != 1 {
				if n != 1 && n != len(v.fc) {
					return nil
				}
				n = len(v.fc)
			}
		}
		at := func(v *pval, i int) float64 { return v.fc[min(i, len(v.fc)-1)] }
		out := &pval{rank: 0}
		for _, v := range ins {
			out.rank = max(out.rank, v.rank)
		}
		if out.rank == 1 {
			out.dims = []sdim{cdim(int64(n))}
		}
		ints := op == "Where" && ins[1].elems != nil && ins[2].elems != nil
		for i := 0; i < n; i++ {
			var f float64
			if op == "Equal" {
				f = b2f(at(ins[0], i) == at(ins[1], i))
			} else if at(ins[0], i) != 0 {
				f = at(ins[1], i)
			} else {
				f = at(ins[2], i)
			}
			out.fc = append(out.fc, f)
			if ints {
				out.elems = append(out.elems, cdim(int64(f)))
			}
		}
		return []*pval{out}
	}
	return nil
}

// constElems gives the outputs whose shape elements are all constants their
// values too, so that shape arithmetic read from a Shape (a Slice's bounds
// computed from an embedding size, say) counts as constant.
func constElems(outs []*pval) {
	for _, o := range outs {
		if o == nil || o.fc != nil || o.elems == nil {
			continue
		}
		fc := make([]float64, len(o.elems))
		for i, e := range o.elems {
			if e.k != sConst {
				fc = nil
				break
			}
			fc[i] = float64(e.c)
		}
		o.fc = fc
	}
}

// slicedDim is the size of a constant axis sliced by constant bounds (the
// k-th of starts, ends, steps), following ONNX Slice's clamping; opaque
// where any of them is unknown.
func slicedDim(d sdim, starts, ends, steps []int64, k int, known bool) sdim {
	if !known || d.k != sConst || k >= len(starts) || k >= len(ends) {
		return sdim{}
	}
	step := int64(1)
	if steps != nil {
		if k >= len(steps) || steps[k] == 0 {
			return sdim{}
		}
		step = steps[k]
	}
	n, s, e := d.c, starts[k], ends[k]
	if s < 0 {
		s += n
	}
	if e < 0 {
		e += n
	}
	if step > 0 {
		s, e = max(0, min(s, n)), max(0, min(e, n))
		if e <= s {
			return cdim(0)
		}
		return cdim((e - s + step - 1) / step)
	}
	s, e = max(-1, min(s, n-1)), max(-1, min(e, n-1))
	if s <= e {
		return cdim(0)
	}
	return cdim((s - e - step - 1) / -step)
}

// clampInt64 converts f to int64, saturating: INT64_MAX as a Slice end
// ("to the end", as PyTorch exports x[-1:]) is 2^63 as a float64, which a
// plain conversion turns into INT64_MIN.
func clampInt64(f float64) int64 {
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// rangeDim is the length of Range(start, limit, delta) where it is known
// without the padded dimension: a constant count, or another symbolic
// dimension counted from 0 by 1 (arange(seq) for position embeddings).
func rangeDim(start, limit, delta *pval) sdim {
	if start == nil || limit == nil || delta == nil || len(start.fc) != 1 || len(delta.fc) != 1 || len(limit.elems) != 1 {
		return sdim{}
	}
	s, d, e := start.fc[0], delta.fc[0], limit.elems[0]
	switch {
	case d == 0:
		return sdim{}
	case e.k == sSym && s == 0 && d == 1:
		return e
	case e.k == sConst:
		return cdim(max(0, int64(math.Ceil((float64(e.c)-s)/d))))
	}
	return sdim{}
}

// slicedToSym is the size of the k-th axis a Slice cuts from 0 to another
// symbolic dimension in steps of 1 (position_ids[:, :seq], as exporters
// write position embeddings), else opaque. Were the axis shorter than that
// size, the op broadcasting it against the dimension would fail, so the
// size is the dimension as long as the input stays within the sliced
// tensor (a sequence no longer than the position table): the assumption
// every such export makes, since a longer one fails where the slice meets
// the sequence.
func (r *padRun) slicedToSym(n *onnxpb.Node, k int) sdim {
	if len(n.Input) < 3 || n.Input[1] == "" || n.Input[2] == "" {
		return sdim{}
	}
	starts, end := r.vals[n.Input[1]], r.vals[n.Input[2]]
	if starts == nil || end == nil || k >= len(starts.fc) || k >= len(end.elems) || starts.fc[k] != 0 {
		return sdim{}
	}
	if len(n.Input) > 4 && n.Input[4] != "" {
		steps, ok := r.constInts(n, 4)
		if !ok || k >= len(steps) || steps[k] != 1 {
			return sdim{}
		}
	}
	if e := end.elems[k]; e.k == sSym && e.s != r.dim {
		return e
	}
	return sdim{}
}
