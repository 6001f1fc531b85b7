package onnx

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// The padding-rule registry (each op's rule is registered beside its
// converter) and the helpers the rules share.

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
