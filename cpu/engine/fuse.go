package engine

import (
	"math"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
	"github.com/tensorbridge/tensorbridge/cpu/vec"
)

// Element-wise fusion: a region of float32 element-wise ops over one
// output shape runs as one loop over tiles of the output, each op applied
// to a tile held in a small buffer, so intermediate values never go to
// memory. Every op rounds to float32 exactly as GoMLX's reference engine
// does (the same formula per element; Erf within one ulp, see unaryOps),
// so fusion changes no result: no Mul and Add are contracted into one FMA.

// fusable reports whether n can be a member of an element-wise region:
// a float32 op of this file, or a BroadcastInDim (which reads its input
// through strides).
func fusable(n *node) bool {
	if len(n.shapes) != 1 {
		return false
	}
	if _, ok := compareOps[n.op]; ok {
		return n.in[0].shape().DType == dtypes.Float32 && n.shapes[0].DType == dtypes.Bool
	}
	if n.op == backends.OpTypeConvertDType {
		from, to := n.in[0].shape().DType, n.shapes[0].DType
		return (from == dtypes.Float32 && to == dtypes.Bool) || (from == dtypes.Bool && to == dtypes.Float32) || isRoundBF16(n)
	}
	if n.op == backends.OpTypeWhere {
		return n.in[0].shape().DType == dtypes.Bool && n.shapes[0].DType == dtypes.Float32 &&
			n.in[1].shape().DType == dtypes.Float32 && n.in[2].shape().DType == dtypes.Float32
	}
	if !allFloat32(n) {
		return false
	}
	if adapter(n) {
		return true
	}
	_, un := unaryOps[n.op]
	_, bin := binaryOps[n.op]
	return un || bin
}

// Comparisons write 1 or 0 into a float32 register (a bool output is
// converted when written); Go's comparisons give IEEE results for NaN, as
// simplego's do.
var compareOps = map[backends.OpType]func(d, a, b []float32){
	backends.OpTypeEqual:          cmp(vec.CmpEQ),
	backends.OpTypeNotEqual:       cmp(vec.CmpNE),
	backends.OpTypeGreaterThan:    cmp(vec.CmpGT),
	backends.OpTypeGreaterOrEqual: cmp(vec.CmpGE),
	backends.OpTypeLessThan:       cmp(vec.CmpLT),
	backends.OpTypeLessOrEqual:    cmp(vec.CmpLE),
}

func cmp(op vec.CmpOp) func(d, a, b []float32) {
	return func(d, a, b []float32) { vec.Compare(op, d, a, b) }
}

// toBool is ConvertDType float32 → bool (x != 0, so NaN is true, as Go's
// comparison and simplego give); bool → float32 is a copy, the register
// holding 1 or 0 already.
func toBool(d, a []float32) { vec.NonZero(d, a) }

func copyReg(d, a []float32) { copy(d, a[:len(d)]) }

// where selects a or b by the condition register c (1 or 0).
func where(d, c, a, b []float32) { vec.Select(d, c, a, b) }

// The vector ops (package vec: AVX-512, AVX2 or Go) give the bits of the
// plain Go loops, which are simplego's formulas; the others apply the
// float64 function per element and round, as simplego does. Exp,
// Logistic and Erf (softmax, SiLU and GELU's hot loops) do so on float64
// vector lanes (vec.Exp, vec.Logistic, vec.Erf), whose float64 values are
// within 3e-15 of the math package's: the same rounding, but for Erf's
// 4 inputs in 10⁹, one ulp off.
var unaryOps = map[backends.OpType]func(d, a []float32){
	backends.OpTypeNeg:      vec.Neg,
	backends.OpTypeAbs:      vec.Abs,
	backends.OpTypeSqrt:     vec.Sqrt, // float32(math.Sqrt(float64(x))) is the correctly rounded square root
	backends.OpTypeExp:      vec.Exp,
	backends.OpTypeLog:      mapF64(math.Log),
	backends.OpTypeTanh:     mapF64(math.Tanh),
	backends.OpTypeErf:      vec.Erf, // math.Erf's rounded value but for 4 in 10⁹ inputs, one ulp off
	backends.OpTypeRsqrt:    mapF64(func(x float64) float64 { return 1.0 / math.Sqrt(x) }),
	backends.OpTypeLogistic: vec.Logistic,
	backends.OpTypeSign:     sign,
}

// sign is simplego's Sign of float32: -1 below zero, 1 above, and 0 for
// zeros of either sign and NaN (ReLU's gradient).
func sign(d, a []float32) {
	// Branch-free (the ReLU gradients of a training step take signs of
	// activations whose signs are random, and the branches of a switch
	// mispredicted on half of them: 4.6 against 0.8 ns a value): the sign
	// bit over 1.0 where 0 < |x| ≤ +Inf, all zero bits for ±0 and NaN.
	for i, x := range a[:len(d)] {
		b := math.Float32bits(x)
		mag := b &^ (1 << 31)
		// All ones exactly when 1 ≤ mag ≤ 0x7f800000.
		keep := uint32(int32(mag-1-0x7f800000)>>31) & uint32(-int32(mag)>>31)
		d[i] = math.Float32frombits((b&(1<<31) | 0x3f800000) & keep)
	}
}

// mapF64 applies f in float64 and rounds to float32, as simplego does.
func mapF64(f func(float64) float64) func(d, a []float32) {
	return func(d, a []float32) {
		for i, x := range a[:len(d)] {
			d[i] = float32(f(float64(x)))
		}
	}
}

var binaryOps = map[backends.OpType]func(d, a, b []float32){
	backends.OpTypeAdd: vec.Add,
	backends.OpTypeSub: vec.Sub,
	backends.OpTypeMul: vec.Mul,
	backends.OpTypeDiv: vec.Div,
	backends.OpTypeMax: vec.Max,
	backends.OpTypeMin: vec.Min,
	backends.OpTypePow: pow,
}

// pow is float32(math.Pow(a, b)) per element. A square (the variance of
// a layer norm exported as Pow(x - mean, 2)) is a·a: the float64 square
// of a float32 is exact, so both round to the same float32; NaN bases
// keep math.Pow's NaN.
func pow(d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	for i, x := range a {
		if b[i] == 2 && x == x {
			d[i] = x * x
			continue
		}
		d[i] = float32(math.Pow(float64(x), float64(b[i])))
	}
}

// adapter reports whether n only moves values (a broadcast, reshape or
// transposition): in a region it becomes a strided read of its input,
// which must come from outside the region.
func adapter(n *node) bool {
	switch n.op {
	case backends.OpTypeBroadcastInDim, backends.OpTypeReshape, backends.OpTypeTranspose:
		return true
	}
	return false
}

// adapterStrides are the strides by which adapter n reads its input at
// each position of its output.
func adapterStrides(n *node) []int {
	in, out := n.in[0].shape(), n.shapes[0].Dimensions
	switch n.op {
	case backends.OpTypeBroadcastInDim:
		return broadcastStrides(in, out, n.attr.(axesAttr).axes)
	case backends.OpTypeTranspose:
		vs := rowMajorStrides(in.Dimensions)
		st := make([]int, len(out))
		for i, a := range n.attr.(axesAttr).axes {
			st[i] = vs[a]
		}
		return st
	}
	return rowMajorStrides(out) // Reshape: the same flat order
}

// region is an element-wise region being formed.
type region struct {
	shape   shapes.Shape
	members []*node
	in      map[*node]bool
}

// fusedLoad reads an external value into a register: element e of the
// output tile is src[Σ idx_a·strides[a]].
type fusedLoad struct {
	slot    int
	strides []int // per collapsed output axis
}

// fusedOp computes one member into register dst from registers a, b.
type fusedOp struct {
	un      func(d, a []float32)
	bin     func(d, a, b []float32)
	ter     func(d, c, a, b []float32)
	dst     int
	args    [3]int
	outputs []int // positions among the step's outputs written from dst
}

// fusedPlan is a compiled region.
type fusedPlan struct {
	dims      []int // collapsed output dimensions
	outSt     []int // output strides per collapsed axis
	loads     []fusedLoad
	ops       []fusedOp
	loadOut   [][]int // outputs that are loads (a BroadcastInDim output)
	nregs     int
	shape     shapes.Shape
	outDT     []dtypes.DType // dtype of each output (Float32 or Bool)
	outShapes []shapes.Shape
	spaces    sync.Pool // *space
	runs      sync.Pool // *fusedRun
	alias     int       // the load the output may be written over, or -1 (inPlaceLoad)
}

// tile is the number of elements of the innermost axis one step of the
// loop handles.
const tile = 512

// run executes the region.
func (f *fusedPlan) run(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
	t, _ := f.runs.Get().(*fusedRun)
	if t == nil {
		t = &fusedRun{f: f, srcs: make([]any, len(ins)), dsts: make([]any, len(f.outDT)), outs: make([]backends.Buffer, len(f.outDT))}
		t.tilesFn = t.tiles // bound once: a method value made per run would be allocated
		t.groupsFn = t.groups
	}
	defer func() {
		clear(t.srcs)
		clear(t.dsts)
		clear(t.outs)
		f.runs.Put(t)
	}()
	for i, b := range ins {
		v, err := r.data(b)
		if err != nil {
			return nil, err
		}
		t.srcs[i] = v
	}
	for i := range f.outDT {
		if f.alias >= 0 {
			if b := r.take(f.alias); b != nil {
				t.outs[i], t.dsts[i] = b, t.srcs[f.alias]
				continue
			}
		}
		b, flat, err := r.alloc(f.outShapes[i])
		if err != nil {
			return nil, err
		}
		t.outs[i], t.dsts[i] = b, flat
	}
	res := r.many(t.outs)
	if f.shape.Size() == 0 {
		return res, nil
	}
	inner := f.dims[len(f.dims)-1]
	t.perRow = (inner + tile - 1) / tile
	rows := f.shape.Size() / inner
	if g := tile / inner; g >= 2 && rows > 1 { // short rows: several per tile (fuserows.go)
		t.group, t.rows = g, rows
		return res, parallel.For((rows+g-1)/g, max(1, 16384/(g*inner)), r.threads, t.groupsFn)
	}
	grain := max(1, 16384/min(inner, tile))
	err := parallel.For(rows*t.perRow, grain, r.threads, t.tilesFn)
	return res, err
}

// space is one worker's registers.
type space struct {
	regs    [][]float32
	scratch []float32
	idx     []int
	idx2    []int // a second index, for reading rows (fuserows.go)
	// filled[i] is the value load i's register holds in every one of its
	// tile elements (a broadcast read), valid when hasFill[i]: the next
	// tile that broadcasts the same bits skips the fill (a bias along a
	// long row, a clip's bounds).
	filled  []uint32
	hasFill []bool
}

// workspace returns a worker's registers, reused across runs.
func (f *fusedPlan) workspace() *space {
	if w, ok := f.spaces.Get().(*space); ok {
		return w
	}
	return &space{regs: make([][]float32, f.nregs), scratch: make([]float32, f.nregs*tile), idx: make([]int, len(f.dims)), idx2: make([]int, len(f.dims)),
		filled: make([]uint32, len(f.loads)), hasFill: make([]bool, len(f.loads))}
}

// fusedRun is one run of a fused region.
type fusedRun struct {
	f          *fusedPlan
	srcs, dsts []any // []float32 or []bool
	outs       []backends.Buffer
	perRow     int // tiles per row of the innermost axis
	tilesFn    func(lo, hi int)
	// group rows of a short innermost axis go through the ops as one tile
	// (groups); rows is the count of rows.
	group, rows int
	groupsFn    func(lo, hi int)
}

// tiles computes tiles [lo, hi) (tile t is piece t%perRow of row t/perRow).
func (t *fusedRun) tiles(lo, hi int) {
	f, perRow := t.f, t.perRow
	w := f.workspace()
	defer f.spaces.Put(w)
	regs, scratch, idx := w.regs, w.scratch, w.idx
	inner := f.dims[len(f.dims)-1]
	for tt := lo; tt < hi; tt++ {
		row, piece := tt/perRow, tt%perRow
		rem := row
		for a := len(f.dims) - 2; a >= 0; a-- {
			idx[a], rem = rem%f.dims[a], rem/f.dims[a]
		}
		idx[len(idx)-1] = piece * tile
		n := min(tile, inner-idx[len(idx)-1])
		for i := range f.loads {
			regs[i] = f.loads[i].read(w, i, t.srcs[i], idx, n, scratch[i*tile:(i+1)*tile])
		}
		out := offset(idx, f.outSt)
		t.ops(regs, scratch, out, n)
	}
}

// ops runs the region's ops over the n values of a tile whose loads are
// in regs, writing at offset out of the outputs (tiles and groups).
func (t *fusedRun) ops(regs [][]float32, scratch []float32, out, n int) {
	f := t.f
	for _, op := range f.ops {
		d := scratch[op.dst*tile : op.dst*tile+n]
		if len(op.outputs) > 0 {
			if dst, ok := t.dsts[op.outputs[0]].([]float32); ok {
				d = dst[out : out+n]
			}
		}
		a := op.args
		switch {
		case op.un != nil:
			op.un(d, regs[a[0]])
		case op.bin != nil:
			op.bin(d, regs[a[0]], regs[a[1]])
		default:
			op.ter(d, regs[a[0]], regs[a[1]], regs[a[2]])
		}
		regs[op.dst] = d
		for _, o := range op.outputs {
			t.write(o, out, d)
		}
	}
	for i, os := range f.loadOut {
		for _, o := range os {
			t.write(o, out, regs[i][:n])
		}
	}
}

// write stores register values v into output o at offset out, converting
// to bool for a bool output. It does nothing when v is already there.
func (t *fusedRun) write(o, out int, v []float32) {
	switch dst := t.dsts[o].(type) {
	case []float32:
		d := dst[out : out+len(v)]
		if &d[0] != &v[0] {
			copy(d, v)
		}
	case []bool:
		vec.F32ToBool(dst[out:out+len(v)], v)
	}
}

// offset returns Σ idx[a]·st[a].
func offset(idx, st []int) int {
	o := 0
	for a, i := range idx {
		o += i * st[a]
	}
	return o
}

// read returns the n values of the tile at idx: a view of src when they
// are contiguous float32, else buf filled; a broadcast value (stride 0)
// is filled once into load i's register of workspace w and kept while the
// following tiles broadcast the same bits.
func (ld *fusedLoad) read(w *space, i int, src any, idx []int, n int, buf []float32) []float32 {
	o := offset(idx, ld.strides)
	s := ld.strides[len(ld.strides)-1]
	if v, ok := src.([]float32); ok && s == 0 {
		bits := math.Float32bits(v[o])
		if !w.hasFill[i] || w.filled[i] != bits {
			vec.Fill(buf, v[o])
			w.filled[i], w.hasFill[i] = bits, true
		}
		return buf[:n]
	}
	w.hasFill[i] = false
	buf = buf[:n]
	if b, ok := src.([]bool); ok {
		if s == 1 {
			vec.BoolToF32(buf, b[o:o+n])
			return buf
		}
		for i := range buf {
			var v float32
			if b[o+i*s] {
				v = 1
			}
			buf[i] = v
		}
		return buf
	}
	v := src.([]float32)
	switch s {
	case 1:
		return v[o : o+n]
	default:
		vec.Gather(buf, v[o:], s)
	}
	return buf
}

// compileRegion turns a region into a native step: its external inputs
// (loads) and its outputs (members read outside it, or graph outputs).
func (c *compiler) compileRegion(rg *region) step {
	f := &fusedPlan{shape: rg.shape}
	reg := map[int]int{} // slot of a member or external value -> register
	var loadStrides [][]int
	var loadSlots []int
	loadOf := func(slot int, st []int) int {
		for i, s := range loadSlots {
			if s == slot && slices.Equal(loadStrides[i], st) {
				return i
			}
		}
		loadSlots, loadStrides = append(loadSlots, slot), append(loadStrides, st)
		return len(loadSlots) - 1
	}
	dims := rg.shape.Dimensions
	type pending struct {
		n    *node
		args [3]int
	}
	var ops []pending
	for _, n := range rg.members {
		s := c.base[n.id]
		if adapter(n) {
			reg[s] = loadOf(c.slotOf(n.in[0]), adapterStrides(n))
			continue
		}
		var args [3]int
		for i, in := range n.in {
			if r, ok := reg[c.slotOf(in)]; ok && rg.in[c.root(in).n] {
				args[i] = r
				continue
			}
			args[i] = loadOf(c.slotOf(in), implicitStrides(in.shape(), dims))
		}
		reg[s] = -1 - len(ops) // op registers are numbered after the loads
		ops = append(ops, pending{n, args})
	}
	nl := len(loadSlots)
	fix := func(r int) int {
		if r < 0 {
			return nl + (-1 - r)
		}
		return r
	}
	st := step{name: "fused[", native: f.run}
	f.loadOut = make([][]int, nl)
	outputsOf := func(n *node) []int {
		s := c.base[n.id]
		if !c.usedOutside(s, rg.in) {
			return nil
		}
		st.outs = append(st.outs, s)
		f.outDT = append(f.outDT, n.shapes[0].DType)
		return []int{len(st.outs) - 1}
	}
	for _, n := range rg.members {
		st.name += n.op.String() + " "
		if adapter(n) {
			if o := outputsOf(n); o != nil {
				l := reg[c.base[n.id]]
				f.loadOut[l] = append(f.loadOut[l], o...)
			}
			continue
		}
	}
	for i, p := range ops {
		op := fusedOp{dst: nl + i, args: [3]int{fix(p.args[0]), fix(p.args[1]), fix(p.args[2])}, outputs: outputsOf(p.n)}
		if p.n.op == backends.OpTypeConvertDType {
			op.un = copyReg
			if p.n.shapes[0].DType == dtypes.Bool {
				op.un = toBool
			} else if isRoundBF16(p.n) {
				op.un = roundBF16Reg // bf16.go
			}
		} else if un, ok := unaryOps[p.n.op]; ok {
			op.un = un
		} else if c, ok := compareOps[p.n.op]; ok {
			op.bin = c
		} else if p.n.op == backends.OpTypeWhere {
			op.ter = where
		} else {
			op.bin = binaryOps[p.n.op]
		}
		f.ops = append(f.ops, op)
	}
	st.name = st.name[:len(st.name)-1] + "]"
	f.nregs = nl + len(ops)
	for _, dt := range f.outDT {
		f.outShapes = append(f.outShapes, shapes.Make(dt, rg.shape.Dimensions...))
	}
	st.ins = loadSlots
	f.dims, f.outSt, loadStrides = collapse(dims, rowMajorStrides(dims), loadStrides)
	for i, s := range loadSlots {
		f.loads = append(f.loads, fusedLoad{slot: s, strides: loadStrides[i]})
	}
	if f.alias = c.inPlaceLoad(f); f.alias >= 0 {
		st.name += " in place"
	}
	return st
}

// inPlaceLoad returns the load whose buffer the region may write its
// output into, or -1: the region has one float32 output, written by its
// last op (every other op writes into tile scratch), and the load reads a
// float32 value of the output's size element for element (the output's
// strides), so each tile reads its inputs before the last op overwrites
// them, at the same positions. Whether the run may take that buffer (it
// owns it and this step reads it last, once) is decided per run (run.take).
func (c *compiler) inPlaceLoad(f *fusedPlan) int {
	last := len(f.ops) - 1
	if len(f.outDT) != 1 || f.outDT[0] != dtypes.Float32 || last < 0 || !slices.Equal(f.ops[last].outputs, []int{0}) {
		return -1
	}
	for _, os := range f.loadOut {
		if len(os) > 0 {
			return -1
		}
	}
	for i, ld := range f.loads {
		sl := c.p.slots[ld.slot]
		// The buffer keeps its shape: it must be the output's, not only
		// its size (a [1] output over a scalar would change the shape).
		if sl.kind != slotComputed || sl.shape.DType != dtypes.Float32 || !slices.Equal(sl.shape.Dimensions, f.shape.Dimensions) || !slices.Equal(ld.strides, f.outSt) {
			continue
		}
		once := true
		for j, other := range f.loads {
			once = once && (j == i || other.slot != ld.slot)
		}
		if once {
			return i
		}
	}
	return -1
}

// implicitStrides are the strides reading v (of the output's rank with
// 1s broadcast, or a scalar) at each output position.
func implicitStrides(v shapes.Shape, out []int) []int {
	st := make([]int, len(out))
	if v.Rank() == 0 {
		return st
	}
	vs := rowMajorStrides(v.Dimensions)
	for a := range out {
		if v.Dimensions[a] != 1 || out[a] == 1 {
			st[a] = vs[a]
		}
	}
	return st
}

// broadcastStrides are the strides reading v, broadcast into out with v's
// axis i at out's axis axes[i].
func broadcastStrides(v shapes.Shape, out []int, axes []int) []int {
	st := make([]int, len(out))
	vs := rowMajorStrides(v.Dimensions)
	for i, a := range axes {
		if v.Dimensions[i] == out[a] {
			st[a] = vs[i]
		}
	}
	return st
}

// collapse drops axes of size 1 and merges neighbouring axes that every
// reader walks as one, so the innermost loop is as long as possible.
func collapse(dims, outSt []int, loads [][]int) ([]int, []int, [][]int) {
	var d []int
	keep := []int{}
	for a, n := range dims {
		if n != 1 {
			keep = append(keep, a)
		}
	}
	if len(keep) == 0 {
		keep = []int{len(dims) - 1}
		if len(dims) == 0 {
			return []int{1}, []int{0}, zeros(len(loads))
		}
	}
	pick := func(st []int) []int {
		r := make([]int, len(keep))
		for i, a := range keep {
			r[i] = st[a]
		}
		return r
	}
	for _, a := range keep {
		d = append(d, dims[a])
	}
	os := pick(outSt)
	ls := make([][]int, len(loads))
	for i := range loads {
		ls[i] = pick(loads[i])
	}
	for a := len(d) - 2; a >= 0; a-- {
		if !mergeable(a, d, os, ls) {
			continue
		}
		d[a] *= d[a+1]
		os[a] = os[a+1]
		d, os = slices.Delete(d, a+1, a+2), slices.Delete(os, a+1, a+2)
		for i := range ls {
			ls[i][a] = ls[i][a+1]
			ls[i] = slices.Delete(ls[i], a+1, a+2)
		}
	}
	return d, os, ls
}

// mergeable reports whether axes a and a+1 are one strided axis for every
// reader and the output.
func mergeable(a int, d, os []int, ls [][]int) bool {
	if os[a] != os[a+1]*d[a+1] {
		return false
	}
	for _, st := range ls {
		if st[a] != st[a+1]*d[a+1] {
			return false
		}
	}
	return true
}

func zeros(n int) [][]int {
	z := make([][]int, n)
	for i := range z {
		z[i] = []int{0}
	}
	return z
}
