package engine

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
)

// Constant folding: an op whose inputs are all constants is computed once,
// at compile time, by the inner engine, and becomes a constant itself (a
// transposed or reshaped weight, a scale computed from constants). Ops
// that would make a much larger constant than their inputs (broadcasts,
// iotas) are left to run, as strided reads, so folding never multiplies
// the memory a model holds.

// foldLimit is the largest output, in elements, folded when it is larger
// than the op's inputs together.
const foldLimit = 1 << 16

// fold folds every foldable node, in order (so chains fold whole).
func (c *compiler) fold(live []bool) error {
	for _, n := range c.b.nodes {
		if !live[n.id] || n.param >= 0 || n.konst != nil || !c.foldable(n) {
			continue
		}
		buf, err := c.evalConst(n)
		if err != nil {
			return err
		}
		n.konst = buf
	}
	return nil
}

// foldable reports whether n's inputs are all constants and folding it
// is worth it.
func (c *compiler) foldable(n *node) bool {
	if len(n.shapes) != 1 || n.op == backends.OpTypeBroadcastInDim || n.op == backends.OpTypeRNGBitGenerator {
		return false
	}
	// The inner engine has no float16 (and rounds bfloat16 differently):
	// their conversions run natively, at run time (f16.go, bf16.go).
	if narrowFloat(n.shapes[0].DType) || (len(n.in) > 0 && isF16(n.in[0])) || isRoundBF16(n) {
		return false
	}
	in := 0
	for _, v := range n.in {
		if v.n.konst == nil {
			return false
		}
		in += v.shape().Size()
	}
	return n.shapes[0].Size() <= max(in, foldLimit)
}

// evalConst runs n on the inner engine over its constant inputs.
func (c *compiler) evalConst(n *node) (out backends.Buffer, err error) {
	sb := c.b.e.inner.Builder(fmt.Sprintf("%s#fold%d", c.b.name, n.id))
	args := make([]backends.Op, len(n.in))
	bufs := make([]backends.Buffer, len(n.in))
	for i, v := range n.in {
		if args[i], err = sb.Parameter(fmt.Sprint("c", i), v.shape(), nil); err != nil {
			return nil, err
		}
		bufs[i] = v.n.konst
	}
	res, err := shadowCall(n.op, func() ([]backends.Op, error) { return n.replay(sb, args) })
	if err != nil {
		return nil, err
	}
	exe, err := sb.Compile(res, nil)
	if err != nil {
		return nil, fmt.Errorf("folding %s: %w", n.op, err)
	}
	defer exe.Finalize()
	outs, err := exe.Execute(bufs, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("folding %s: %w", n.op, err)
	}
	return outs[0], nil
}
