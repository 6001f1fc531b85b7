package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// slotKind says who owns a value's buffer during a run.
type slotKind int

const (
	slotComputed slotKind = iota // produced by a step: the run owns it
	slotParam                    // an input: owned only when donated
	slotConst                    // a constant: the executable owns it
)

// slot is one value of the plan.
type slot struct {
	shape   shapes.Shape
	kind    slotKind
	param   int
	konst   backends.Buffer
	output  bool
	lastUse int // index of the last step reading it; -1 when none
}

// kernel runs one native step: it reads ins and returns new buffers for
// the step's outputs.
type kernel func(r *run, ins []backends.Buffer) ([]backends.Buffer, error)

// step is one unit of the plan: a native kernel or a segment of ops run by
// the inner engine.
type step struct {
	name    string // the op, or the ops of a segment, for errors
	ins     []int
	outs    []int
	native  kernel
	seg     backends.Executable
	release []int // slots whose last use is this step
	// outIndex maps each of outs to the segment's output holding it: the
	// inner engine may return one op for several (a no-op Reshape), and
	// takes each output once.
	outIndex []int
}

// plan is a compiled graph.
type plan struct {
	slots   []slot
	steps   []step
	params  []int // slot of each parameter
	outputs []int // slot of each output
}

// Compile turns the recorded graph into a plan.
func (b *Builder) Compile(outputs []backends.Op, shardings []*backends.ShardingSpec) (backends.Executable, error) {
	if len(shardings) != 0 {
		return nil, fmt.Errorf("Compile: sharding is not supported: the %s engine runs on one device", Name)
	}
	if b.compiled {
		return nil, fmt.Errorf("Compile: computation %q is already compiled", b.name)
	}
	outs := make([]*value, len(outputs))
	for i, o := range outputs {
		v, err := b.val("Compile", o)
		if err != nil {
			return nil, err
		}
		outs[i] = v
	}
	b.compiled = true
	c := &compiler{b: b, base: make([]int, len(b.nodes)), fuse: b.e.fuse}
	p, err := c.safeCompile(outs)
	b.shadow, b.nodes = nil, nil
	if err != nil {
		return nil, err
	}
	return newExecutable(b.e, b.name, b.params, p), nil
}

// compiler holds the state of one Compile.
type compiler struct {
	b       *Builder
	p       plan
	base    []int // first slot of each node, -1 when unreachable
	pending []*node
	uses    [][]*node  // consumers of each slot
	kernels []kernel   // native kernel of each node, nil for segment ops
	reads   [][]*value // the values each node's step reads
	alias   []bool     // nodes read in place of their input (findAliases)
	rg      *region    // the open element-wise region
	fuse    bool       // form element-wise regions
	nseg    int
}

func (c *compiler) compile(outs []*value) (*plan, error) {
	c.reads = make([][]*value, len(c.b.nodes))
	for _, n := range c.b.nodes {
		c.reads[n.id] = n.in
	}
	if err := c.fold(c.reachable(outs)); err != nil {
		return nil, err
	}
	c.choose()
	c.convPosts(outs)
	live := c.reachable(outs)
	for _, n := range c.b.nodes {
		c.base[n.id] = -1
		if !live[n.id] {
			continue
		}
		c.base[n.id] = len(c.p.slots)
		for _, s := range n.shapes {
			sl := slot{shape: s, kind: slotComputed, lastUse: -1}
			switch {
			case n.param >= 0:
				sl.kind, sl.param = slotParam, n.param
			case n.konst != nil:
				sl.kind, sl.konst = slotConst, n.konst
			}
			c.p.slots = append(c.p.slots, sl)
		}
	}
	c.p.params = make([]int, len(c.b.params))
	for i, pn := range c.b.params {
		c.p.params[i] = c.base[pn.id] // -1 when the parameter is unused
	}
	for _, o := range outs {
		s := c.slotOf(o)
		c.p.outputs = append(c.p.outputs, s)
		c.p.slots[s].output = true
	}
	c.countUses(live)
	c.findAliases(live)
	for _, n := range c.b.nodes {
		if !live[n.id] || n.param >= 0 || n.konst != nil || c.alias[n.id] {
			continue
		}
		if err := c.place(n); err != nil {
			return nil, err
		}
	}
	if err := c.closeRegion(); err != nil {
		return nil, err
	}
	if err := c.flush(); err != nil {
		return nil, err
	}
	c.liveness()
	// A copy: a pointer into c would keep the whole compiler alive with
	// the executable, and with it every kernel chosen, even those no step
	// runs (a convolution's unfused kernel, its packed weights beside the
	// fused one's: 46 MB of ResNet-50's 97 MB of weights, twice).
	p := c.p
	return &p, nil
}

// place adds node n to the plan: as a native step, as a member of the
// open element-wise region, or to the pending segment. A region is closed
// (emitted as a step) before anything outside it reads its values.
func (c *compiler) place(n *node) error {
	join := c.fuse && c.kernels[n.id] == nil && fusable(n)
	if c.rg != nil && (c.readsRegion(n) || join) && !(join && c.canJoin(n)) {
		if err := c.closeRegion(); err != nil {
			return err
		}
	}
	switch {
	case c.kernels[n.id] != nil:
		if err := c.flush(); err != nil {
			return err
		}
		c.p.steps = append(c.p.steps, step{name: n.op.String(), ins: c.slotsOf(c.reads[n.id]), outs: c.outSlots(n), native: c.kernels[n.id]})
	case join:
		if c.rg == nil {
			c.rg = &region{shape: n.shapes[0], in: map[*node]bool{}}
		}
		c.rg.members = append(c.rg.members, n)
		c.rg.in[n] = true
	default:
		c.pending = append(c.pending, n)
	}
	return nil
}

// readsRegion reports whether n reads a value of the open region.
func (c *compiler) readsRegion(n *node) bool {
	for _, v := range c.reads[n.id] {
		if c.rg.in[c.root(v).n] {
			return true
		}
	}
	return false
}

// root returns the value an alias chain ending at v reads (v itself when
// v is not an alias).
func (c *compiler) root(v *value) *value {
	for c.alias != nil && c.alias[v.n.id] {
		v = v.n.in[0]
	}
	return v
}

// canJoin reports whether fusable n can join the open region.
func (c *compiler) canJoin(n *node) bool {
	if !slices.Equal(n.shapes[0].Dimensions, c.rg.shape.Dimensions) {
		return false
	}
	return !adapter(n) || !c.rg.in[c.root(n.in[0]).n]
}

// closeRegion emits the open region, after the pending segment (which may
// compute its inputs).
func (c *compiler) closeRegion() error {
	if c.rg == nil {
		return nil
	}
	if err := c.flush(); err != nil {
		return err
	}
	c.p.steps = append(c.p.steps, c.compileRegion(c.rg))
	c.rg = nil
	return nil
}

// safeCompile is compile with a panic (a planning bug) returned as an
// error of the Compile, never one of the process.
func (c *compiler) safeCompile(outs []*value) (p *plan, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("%s: compiling %q: %v", Name, c.b.name, r)
		}
	}()
	return c.compile(outs)
}

// choose picks the native kernel of every node that has one, and the
// values it reads: a kernel may read fewer values than its node's inputs
// (a constant it prepared at compile time) or values further up (the int8
// weights under a ConvertDType it converts while reading).
func (c *compiler) choose() {
	c.kernels = make([]kernel, len(c.b.nodes))
	for _, n := range c.b.nodes {
		c.reads[n.id] = n.in
		if n.param >= 0 || n.konst != nil {
			c.reads[n.id] = nil
			continue
		}
		if k, ins := nativeKernel(c.b.e, n); k != nil {
			c.kernels[n.id], c.reads[n.id] = k, ins
		}
	}
}

// reachable marks the nodes some output depends on.
func (c *compiler) reachable(outs []*value) []bool {
	live := make([]bool, len(c.b.nodes))
	stack := make([]*node, 0, len(outs))
	for _, o := range outs {
		stack = append(stack, o.n)
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if live[n.id] {
			continue
		}
		live[n.id] = true
		for _, in := range c.reads[n.id] {
			stack = append(stack, in.n)
		}
	}
	return live
}

// slotOf returns the slot holding v: for a Reshape or Identity read in
// place (an alias), the slot of the value it reshapes.
func (c *compiler) slotOf(v *value) int {
	if c.alias != nil && c.alias[v.n.id] {
		return c.slotOf(v.n.in[0])
	}
	return c.base[v.n.id] + v.i
}

// findAliases marks the Reshape and Identity nodes whose every reader is a
// native kernel or an element-wise region: those read flat values, so the
// node needs no copy, and they read the buffer of its input instead. A
// node read by a segment of the inner engine (which checks each buffer's
// shape), or that is an output, keeps its own buffer.
func (c *compiler) findAliases(live []bool) {
	c.alias = make([]bool, len(c.b.nodes))
	for _, n := range c.b.nodes {
		if !live[n.id] || n.konst != nil || (n.op != backends.OpTypeReshape && n.op != backends.OpTypeIdentity) {
			continue
		}
		s := c.base[n.id]
		if c.p.slots[s].output {
			continue
		}
		ok := true
		for _, u := range c.uses[s] {
			if c.kernels[u.id] == nil && !(c.fuse && fusable(u)) && !(u.op == backends.OpTypeReshape || u.op == backends.OpTypeIdentity) {
				ok = false
			}
		}
		c.alias[n.id] = ok
	}
	// A chain of aliases is only valid if every link is one: unmark a
	// node read by an alias that is not one.
	for changed := true; changed; {
		changed = false
		for _, n := range c.b.nodes {
			if !c.alias[n.id] {
				continue
			}
			for _, u := range c.uses[c.base[n.id]] {
				if (u.op == backends.OpTypeReshape || u.op == backends.OpTypeIdentity) && !c.alias[u.id] && c.kernels[u.id] == nil && !(c.fuse && fusable(u)) {
					c.alias[n.id], changed = false, true
				}
			}
		}
	}
}

func (c *compiler) slotsOf(vs []*value) []int {
	s := make([]int, len(vs))
	for i, v := range vs {
		s[i] = c.slotOf(v)
	}
	return s
}

func (c *compiler) outSlots(n *node) []int {
	s := make([]int, len(n.shapes))
	for i := range s {
		s[i] = c.base[n.id] + i
	}
	return s
}

// countUses records the consumers of every slot.
func (c *compiler) countUses(live []bool) {
	c.uses = make([][]*node, len(c.p.slots))
	for _, n := range c.b.nodes {
		if !live[n.id] {
			continue
		}
		for _, v := range c.reads[n.id] {
			s := c.slotOf(v)
			c.uses[s] = append(c.uses[s], n)
		}
	}
}

// flush compiles the pending ops as one segment of the inner engine.
func (c *compiler) flush() error {
	if len(c.pending) == 0 {
		return nil
	}
	nodes := c.pending
	c.pending = nil
	in := map[*node]bool{}
	for _, n := range nodes {
		in[n] = true
	}
	sb := c.b.e.inner.Builder(fmt.Sprintf("%s#%d", c.b.name, c.nseg))
	c.nseg++
	ops := map[int]backends.Op{} // slot -> op in sb
	st := step{}
	// Parameters first: simplego only runs nodes up to its last output, so
	// a parameter created after that would be out of its range.
	for _, n := range nodes {
		for _, v := range n.in {
			s := c.slotOf(v)
			if _, ok := ops[s]; ok || in[v.n] {
				continue
			}
			p, err := sb.Parameter(fmt.Sprintf("in%d", len(st.ins)), c.p.slots[s].shape, nil)
			if err != nil {
				return fmt.Errorf("segment of %s: %w", n.op, err)
			}
			ops[s] = p
			st.ins = append(st.ins, s)
		}
	}
	var names []string
	for _, n := range nodes {
		args := make([]backends.Op, len(n.in))
		for i, v := range n.in {
			args[i] = ops[c.slotOf(v)]
		}
		res, err := shadowCall(n.op, func() ([]backends.Op, error) { return n.replay(sb, args) })
		if err != nil {
			return fmt.Errorf("segment op %s: %w", n.op, err)
		}
		for i, r := range res {
			ops[c.base[n.id]+i] = r
		}
		names = append(names, n.op.String())
	}
	params := map[backends.Op]int{} // the segment's parameters, by input position
	for j, sl := range st.ins {
		params[ops[sl]] = j
	}
	var segOuts []backends.Op
	for _, n := range nodes {
		for _, s := range c.outSlots(n) {
			if !c.usedOutside(s, in) {
				continue
			}
			st.outs = append(st.outs, s)
			if j, ok := params[ops[s]]; ok {
				// The op returned its input unchanged (a Pad of nothing):
				// the run copies the input; simplego would fail on a
				// program whose outputs are all parameters.
				st.outIndex = append(st.outIndex, -1-j)
				continue
			}
			dup := slices.Index(segOuts, ops[s])
			if dup < 0 {
				segOuts = append(segOuts, ops[s])
				dup = len(segOuts) - 1
			}
			st.outIndex = append(st.outIndex, dup)
		}
	}
	st.name = "[" + strings.Join(names, " ") + "]"
	if len(segOuts) == 0 {
		st.native = copyInputs(st.outIndex)
		c.p.steps = append(c.p.steps, st)
		return nil
	}
	exe, err := sb.Compile(segOuts, nil)
	if err != nil {
		return fmt.Errorf("compiling segment [%s]: %w", strings.Join(names, " "), err)
	}
	st.seg = exe
	c.p.steps = append(c.p.steps, st)
	return nil
}

// copyInputs is the kernel of a segment all of whose outputs are copies of
// its inputs (outIndex entries -1-j).
func copyInputs(outIndex []int) kernel {
	return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		res := make([]backends.Buffer, len(outIndex))
		for i, k := range outIndex {
			c, err := r.clone(ins[-1-k])
			if err != nil {
				return nil, err
			}
			res[i] = c
		}
		return res, nil
	}
}

// usedOutside reports whether slot s is read by a node outside seg or is
// an output.
func (c *compiler) usedOutside(s int, seg map[*node]bool) bool {
	if c.p.slots[s].output {
		return true
	}
	for _, u := range c.uses[s] {
		if !seg[u] {
			return true
		}
	}
	return false
}

// liveness sets each slot's last use and each step's release list.
func (c *compiler) liveness() {
	for i, st := range c.p.steps {
		for _, s := range st.ins {
			c.p.slots[s].lastUse = i
		}
	}
	for i, st := range c.p.steps {
		for _, s := range st.outs {
			if c.p.slots[s].lastUse < 0 && !c.p.slots[s].output {
				c.p.slots[s].lastUse = i // never read: released at once
			}
		}
	}
	for s, sl := range c.p.slots {
		if sl.kind == slotConst && sl.lastUse < 0 && !sl.output {
			// Read by no step (a kernel prepared from it at compile
			// time): its buffer is not needed.
			_ = c.b.e.inner.BufferFinalize(sl.konst)
			c.p.slots[s].konst = nil
			continue
		}
		if sl.lastUse >= 0 && !sl.output && sl.kind != slotConst {
			c.p.steps[sl.lastUse].release = append(c.p.steps[sl.lastUse].release, s)
		}
	}
	c.dropConstants()
}

// dropConstants lets go of the constants the plan does not hold: those no
// step reads (finalized above) and those no output depends on (folded
// away, or dead). The builder's nodes stay reachable after Compile (GoMLX's
// graph holds its ops), so a node still pointing at such a buffer would
// keep it, and the weights it holds, alive as long as the executable: a
// ResNet-50's packed convolution kernels and their originals both.
func (c *compiler) dropConstants() {
	for _, n := range c.b.nodes {
		if n.konst == nil || n.param >= 0 {
			continue
		}
		if s := c.base[n.id]; s >= 0 && c.p.slots[s].konst != nil {
			continue // the plan owns it
		}
		if s := c.base[n.id]; s < 0 {
			_ = c.b.e.inner.BufferFinalize(n.konst)
		}
		n.konst = nil
	}
}
