package onnx

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Padding-analysis rules shared by op families: element-wise, spatial
// (convolution, pooling), Softmax, reductions, and the rule of ops not
// analysed.

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
