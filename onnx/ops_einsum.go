package onnx

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Einsum: the equation is parsed into integer labels per operand axis,
// then each operand has its repeated labels reduced to diagonals (a strided
// slice of the two axes flattened together) and the labels no one else
// needs summed out, and operands are combined left to right with
// DotGeneral: labels shared and still needed later are batch axes, labels
// shared and needed no more are contracted. A final transpose gives the
// output order.
//
// Ellipsis dimensions are aligned from the right across operands, as numpy
// broadcasting does, and a size-1 ellipsis dimension broadcasts against a
// larger one. Ellipsis dimensions that the explicit output leaves out are
// summed. Letter labels must have equal sizes everywhere they appear.

func init() {
	register("Einsum", 12, convEinsum)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("Einsum")
}

// einsumEllipsisBase is the first label given to ellipsis dimensions; letter
// labels are their ASCII codes (below 128), so sorting labels sorts letters
// in ASCII order.
const einsumEllipsisBase = 1000

// einsumSpec is a parsed equation.
type einsumSpec struct {
	inputs [][]int // labels of each operand's axes
	output []int   // labels of the output's axes
}

// einsumTerm is one term of an equation before ellipsis expansion.
type einsumTerm struct {
	before, after []int // letter labels before and after "..."
	ellipsis      bool
}

// parseEinsumTerm parses one term (letters and at most one "...").
func parseEinsumTerm(s string) (einsumTerm, error) {
	var t einsumTerm
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '.':
			if t.ellipsis || !strings.HasPrefix(s[i:], "...") {
				return t, fmt.Errorf("term %q: '.' must appear only as a single \"...\"", s)
			}
			t.ellipsis = true
			i += 2
		case ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z':
			if t.ellipsis {
				t.after = append(t.after, int(ch))
			} else {
				t.before = append(t.before, int(ch))
			}
		default:
			return t, fmt.Errorf("term %q: unexpected character %q (only letters and \"...\" are allowed)", s, ch)
		}
	}
	return t, nil
}

// parseEinsum parses equation for operands of the given ranks, expanding
// ellipses and working out the implicit output.
func parseEinsum(equation string, ranks []int) (*einsumSpec, error) {
	eq := strings.ReplaceAll(equation, " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	if explicit && strings.Contains(rhs, "->") {
		return nil, fmt.Errorf("equation %q has more than one \"->\"", equation)
	}
	termStrs := strings.Split(lhs, ",")
	if len(termStrs) != len(ranks) {
		return nil, fmt.Errorf("equation %q has %d input terms for %d inputs", equation, len(termStrs), len(ranks))
	}
	terms := make([]einsumTerm, len(termStrs))
	nEll := 0 // dimensions covered by the ellipsis (the most of any term)
	for k, s := range termStrs {
		t, err := parseEinsumTerm(s)
		if err != nil {
			return nil, err
		}
		letters := len(t.before) + len(t.after)
		switch {
		case !t.ellipsis && letters != ranks[k]:
			return nil, fmt.Errorf("term %q has %d labels for input %d of rank %d", s, letters, k, ranks[k])
		case t.ellipsis && letters > ranks[k]:
			return nil, fmt.Errorf("term %q has %d labels besides \"...\" for input %d of rank %d", s, letters, k, ranks[k])
		case t.ellipsis:
			nEll = max(nEll, ranks[k]-letters)
		}
		terms[k] = t
	}
	spec := &einsumSpec{inputs: make([][]int, len(terms))}
	count := map[int]int{}
	for k, t := range terms {
		labels := append([]int{}, t.before...)
		if t.ellipsis {
			e := ranks[k] - len(t.before) - len(t.after)
			for j := nEll - e; j < nEll; j++ {
				labels = append(labels, einsumEllipsisBase+j)
			}
		}
		labels = append(labels, t.after...)
		for _, l := range labels {
			count[l]++
		}
		spec.inputs[k] = labels
	}
	if !explicit {
		for j := range nEll {
			spec.output = append(spec.output, einsumEllipsisBase+j)
		}
		var once []int
		for l, n := range count {
			if n == 1 && l < einsumEllipsisBase {
				once = append(once, l)
			}
		}
		sort.Ints(once)
		spec.output = append(spec.output, once...)
		return spec, nil
	}
	t, err := parseEinsumTerm(rhs)
	if err != nil {
		return nil, fmt.Errorf("output %w", err)
	}
	out := append([]int{}, t.before...)
	if t.ellipsis {
		for j := range nEll {
			out = append(out, einsumEllipsisBase+j)
		}
	}
	out = append(out, t.after...)
	seen := map[int]bool{}
	for _, l := range out {
		if seen[l] {
			return nil, fmt.Errorf("output term %q repeats label %q", rhs, rune(l))
		}
		seen[l] = true
		if count[l] == 0 {
			return nil, fmt.Errorf("output label %q does not appear in any input term", rune(l))
		}
	}
	spec.output = out
	return spec, nil
}

// einsumLabelName formats a label for error messages.
func einsumLabelName(l int) string {
	if l >= einsumEllipsisBase {
		return fmt.Sprintf("ellipsis dimension %d", l-einsumEllipsisBase)
	}
	return fmt.Sprintf("%q", rune(l))
}

// einsumOperand is an operand with the label of each axis.
type einsumOperand struct {
	x      *graph.Node
	labels []int
}

// diagonals reduces repeated labels to their diagonal: the two axes are
// moved last, flattened together and sliced with stride n+1.
func (o einsumOperand) diagonals() einsumOperand {
	for {
		p, q := -1, -1
		for i := 0; i < len(o.labels) && p < 0; i++ {
			for j := i + 1; j < len(o.labels); j++ {
				if o.labels[i] == o.labels[j] {
					p, q = i, j
					break
				}
			}
		}
		if p < 0 {
			return o
		}
		d := o.x.Shape().Dimensions
		if d[p] != d[q] {
			panic(fmt.Errorf("label %s has sizes %d and %d in the same input", einsumLabelName(o.labels[p]), d[p], d[q]))
		}
		n := d[p]
		perm := make([]int, 0, len(d))
		var labels, dims []int
		for a := range d {
			if a != p && a != q {
				perm = append(perm, a)
				labels = append(labels, o.labels[a])
				dims = append(dims, d[a])
			}
		}
		perm = append(perm, p, q)
		x := graph.TransposeAllDims(o.x, perm...)
		x = graph.Reshape(x, append(append([]int{}, dims...), n*n)...)
		if n > 0 {
			x = sliceAxis(x, len(dims), 0, n*n, n+1)
		}
		o = einsumOperand{x: x, labels: append(labels, o.labels[p])}
	}
}

// sumExcept sums out the axes whose labels keep says are not needed.
func (o einsumOperand) sumExcept(keep func(l int) bool) einsumOperand {
	var axes []int
	var labels []int
	for a, l := range o.labels {
		if keep(l) {
			labels = append(labels, l)
		} else {
			axes = append(axes, a)
		}
	}
	if len(axes) == 0 {
		return o
	}
	return einsumOperand{x: graph.ReduceSum(o.x, axes...), labels: labels}
}

// axisOf returns the axis carrying label l, or -1.
func (o einsumOperand) axisOf(l int) int {
	for a, m := range o.labels {
		if m == l {
			return a
		}
	}
	return -1
}

// broadcastAxis grows o's size-1 axis a to n.
func (o einsumOperand) broadcastAxis(a, n int) einsumOperand {
	d := append([]int{}, o.x.Shape().Dimensions...)
	d[a] = n
	return einsumOperand{x: broadcastNodeTo(o.x, d), labels: o.labels}
}

func convEinsum(c *opCtx) error {
	eq := c.attrString("equation", "")
	if !c.hasAttr("equation") {
		c.fail("attribute equation is required")
	}
	n := c.numInputs()
	if n == 0 {
		c.fail("Einsum needs at least one input")
	}
	ranks := make([]int, n)
	for k := range n {
		ranks[k] = c.rank(k)
	}
	spec, err := parseEinsum(eq, ranks)
	if err != nil {
		return err
	}
	// Sizes: letters must agree; ellipsis dimensions broadcast from 1.
	size := map[int]int{}
	for k, labels := range spec.inputs {
		d := c.dims(k)
		for a, l := range labels {
			s, ok := size[l]
			switch {
			case !ok || s == 1 && l >= einsumEllipsisBase:
				size[l] = d[a]
			case s == d[a] || d[a] == 1 && l >= einsumEllipsisBase:
			default:
				c.fail("label %s has size %d in input %d but %d elsewhere", einsumLabelName(l), d[a], k, s)
			}
		}
	}
	outDims := make([]int, len(spec.output))
	for j, l := range spec.output {
		outDims[j] = size[l]
	}
	dt := c.dtype(0)
	for k := 1; k < n; k++ {
		if c.dtype(k) != dt {
			c.fail("input %d has dtype %s, input 0 %s: they must be equal", k, c.dtype(k), dt)
		}
	}
	if !dt.IsFloat() && !dt.IsInt() {
		c.fail("Einsum takes numeric tensors, got %s", dt)
	}
	inOutput := map[int]bool{}
	for _, l := range spec.output {
		inOutput[l] = true
	}
	// neededAfter says whether label l is read by the output or by an
	// operand from position from on.
	neededAfter := func(l, from int) bool {
		if inOutput[l] {
			return true
		}
		for k := from; k < n; k++ {
			for _, m := range spec.inputs[k] {
				if m == l {
					return true
				}
			}
		}
		return false
	}
	ops := make([]einsumOperand, n)
	for k := range n {
		ops[k] = einsumOperand{x: c.in(k), labels: spec.inputs[k]}.diagonals()
	}
	acc := ops[0].sumExcept(func(l int) bool { return neededAfter(l, 1) })
	for k := 1; k < n; k++ {
		b := ops[k].sumExcept(func(l int) bool { return acc.axisOf(l) >= 0 || neededAfter(l, k+1) })
		acc = acc.sumExcept(func(l int) bool { return b.axisOf(l) >= 0 || neededAfter(l, k+1) })
		var accBatch, bBatch, accCon, bCon []int
		var batchLabels []int
		for a, l := range acc.labels {
			j := b.axisOf(l)
			if j < 0 {
				continue
			}
			da, db := acc.x.Shape().Dimensions[a], b.x.Shape().Dimensions[j]
			if da != db {
				if da == 1 {
					acc = acc.broadcastAxis(a, db)
				} else {
					b = b.broadcastAxis(j, da)
				}
			}
			if neededAfter(l, k+1) {
				accBatch, bBatch = append(accBatch, a), append(bBatch, j)
				batchLabels = append(batchLabels, l)
			} else {
				accCon, bCon = append(accCon, a), append(bCon, j)
			}
		}
		labels := append([]int{}, batchLabels...)
		for _, l := range acc.labels {
			if b.axisOf(l) < 0 {
				labels = append(labels, l)
			}
		}
		for _, l := range b.labels {
			if acc.axisOf(l) < 0 {
				labels = append(labels, l)
			}
		}
		acc = einsumOperand{x: dotGeneral(acc.x, accCon, accBatch, b.x, bCon, bBatch), labels: labels}
	}
	acc = acc.sumExcept(func(l int) bool { return inOutput[l] })
	perm := make([]int, len(spec.output))
	identity := true
	for j, l := range spec.output {
		perm[j] = acc.axisOf(l)
		if perm[j] != j {
			identity = false
		}
	}
	x := acc.x
	if !identity {
		x = graph.TransposeAllDims(x, perm...)
	}
	if !equalInts(x.Shape().Dimensions, outDims) {
		// An ellipsis dimension of size 1 everywhere it survived, but
		// larger in an operand combined away: broadcast it.
		x = broadcastNodeTo(x, outDims)
	}
	c.set(0, x)
	return nil
}
