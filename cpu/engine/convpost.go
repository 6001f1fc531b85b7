package engine

import (
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tensorbridge/tensorbridge/cpu/conv"
	"github.com/tensorbridge/tensorbridge/cpu/gemm"
)

// Convolution epilogues: a convolution that package conv runs (1×1 and
// depthwise, constant kernel, channel-major output) followed by an Add of
// a per-channel constant (its bias), then a Max and a Min with scalar
// constants (ReLU, Clip, ReLU6), each the only reader of the one before,
// runs as one kernel: the bias and bounds are applied to each block of
// the product while it is in cache (gemm.Post), instead of as a fused
// element-wise region reading and writing every activation again. Each
// op still rounds on its own (no contraction into an FMA), in the order
// of the graph, so results are bit for bit those of the separate ops.

// convPosts finds those chains among the nodes that outs depend on and
// gives the last node of each the convolution's kernel with the epilogue,
// reading the convolution's input: the convolution and the ops between
// are then no longer read, and drop out of the plan.
func (c *compiler) convPosts(outs []*value) {
	if !c.fuse {
		return
	}
	live := c.reachable(outs)
	readers := make(map[*node][]*node)
	for _, n := range c.b.nodes {
		if !live[n.id] {
			continue
		}
		for _, v := range c.reads[n.id] {
			readers[v.n] = append(readers[v.n], n)
		}
	}
	for _, o := range outs {
		readers[o.n] = append(readers[o.n], nil) // an output is read outside the plan
	}
	for _, n := range c.b.nodes {
		if live[n.id] && n.op == backends.OpTypeConvGeneral && c.kernels[n.id] != nil {
			c.convPost(n, readers)
		}
	}
}

// convPost fuses the epilogue chain after convolution n, if there is one.
func (c *compiler) convPost(n *node, readers map[*node][]*node) {
	a := n.attr.(convAttr)
	k := n.in[1].n
	if !directConv(n, a) || k.konst == nil || !channelMajorOut(n, a) {
		return
	}
	post, end := &gemm.Post{}, n
	cout := n.shapes[0].Dimensions[a.axes.OutputChannels]
	// Stages in order, each optional: 0 Add(bias), 1 Max(lo), 2 Min(hi).
	for stage := 0; stage < 3; {
		r := readers[end]
		if len(r) != 1 || r[0] == nil || !c.epilogueOp(r[0], end) {
			break
		}
		m, ok := r[0], false
		switch {
		case m.op == backends.OpTypeAdd && stage == 0:
			post.Bias, ok = c.perChannel(m.in[1], a.axes.OutputChannels, cout)
			stage = 1
		case m.op == backends.OpTypeMax && stage <= 1:
			post.Lo, ok = c.scalarConst(m.in[1])
			post.HasLo, stage = ok, 2
		case m.op == backends.OpTypeMin:
			post.Hi, ok = c.scalarConst(m.in[1])
			post.HasHi, stage = ok, 3
		}
		if !ok {
			break
		}
		end = m
	}
	if end == n {
		return
	}
	flat, err := c.b.e.inner.BufferData(k.konst)
	if err != nil {
		return
	}
	p := convParamsPkg(n, a)
	p.Post, p.Cache = post, new(conv.KernelCache)
	packed, err := conv.PackKernel(p, flat.([]float32))
	if err != nil {
		return
	}
	out := end.shapes[0]
	c.kernels[end.id] = func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
		return runConvPkg(r, ins[0], nil, packed, p, out)
	}
	c.reads[end.id] = n.in[:1]
}

// epilogueOp reports whether m is a float32 binary op of prev's output
// (first operand) and another value of the same shape.
func (c *compiler) epilogueOp(m, prev *node) bool {
	return allFloat32(m) && len(m.in) == 2 && m.in[0].n == prev && m.in[0].i == 0 &&
		m.shapes[0].Equal(prev.shapes[0]) && m.in[1].shape().Equal(m.shapes[0])
}

// channelMajorOut reports whether convolution n writes each output
// channel's positions contiguously, in order (its spatial axes last):
// where package conv applies an epilogue as it writes.
func channelMajorOut(n *node, a convAttr) bool {
	rank, sp := n.shapes[0].Rank(), a.axes.OutputSpatial
	for i, ax := range sp {
		if ax != rank-len(sp)+i {
			return false
		}
	}
	return a.axes.OutputChannels < rank-len(sp)
}

// perChannel returns v's values by output channel when v, of the
// convolution's output shape, varies only along axis ch: a BroadcastInDim
// of a constant (a bias), or such a constant already broadcast.
func (c *compiler) perChannel(v *value, ch, cout int) ([]float32, bool) {
	src, strides, ok := c.constView(v)
	if !ok {
		return nil, false
	}
	out := make([]float32, cout)
	dims := v.shape().Dimensions
	if strides != nil {
		for ax, s := range strides {
			if ax != ch && s != 0 && dims[ax] > 1 {
				return nil, false
			}
		}
		for o := range out {
			out[o] = src[o*strides[ch]]
		}
		return out, true
	}
	vs := rowMajorStrides(dims)
	seen := make([]bool, cout)
	for i, x := range src {
		o := i / vs[ch] % cout
		if seen[o] && math.Float32bits(out[o]) != math.Float32bits(x) {
			return nil, false
		}
		out[o], seen[o] = x, true
	}
	return out, true
}

// scalarConst returns the value of v when it is a constant with every
// element the same (a broadcast scalar), not NaN.
func (c *compiler) scalarConst(v *value) (float32, bool) {
	src, strides, ok := c.constView(v)
	if !ok || len(src) == 0 {
		return 0, false
	}
	x := src[0]
	if strides != nil {
		for _, s := range strides {
			if s != 0 {
				return 0, false
			}
		}
	} else {
		for _, y := range src {
			if math.Float32bits(y) != math.Float32bits(x) {
				return 0, false
			}
		}
	}
	return x, x == x
}

// constView returns the float32 data under v: v's own constant (nil
// strides), or the constant a BroadcastInDim v reads with the strides of
// each of v's axes into it.
func (c *compiler) constView(v *value) ([]float32, []int, bool) {
	n, strides := v.n, []int(nil)
	if n.op == backends.OpTypeBroadcastInDim && n.konst == nil {
		strides, n = adapterStrides(n), n.in[0].n
	}
	if n.konst == nil || n.shapes[0].DType != dtypes.Float32 {
		return nil, nil, false
	}
	flat, err := c.b.e.inner.BufferData(n.konst)
	if err != nil {
		return nil, nil, false
	}
	return flat.([]float32), strides, true
}
