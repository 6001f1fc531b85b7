package onnx

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// DeformConv (opset 19, https://onnx.ai/onnx/operators/onnx__DeformConv.html):
// a convolution whose kernel taps are moved by learned offsets and scaled by
// an optional mask; a moved tap reads the input by bilinear interpolation,
// zero outside the image. 2-D inputs only (the form the operator's reference
// defines).

func init() {
	register("DeformConv", 19, convDeformConv)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("DeformConv")
}

// convDeformConv: X (N, C, H, W), W (OC, C/group, kH, kW), offset
// (N, offset_group·kH·kW·2, OH, OW) holding (dh, dw) per tap, optional B
// (OC) and mask (N, offset_group·kH·kW, OH, OW). Tap (a, b) of output
// position (i, j) samples X at (i·sh − pad_top + a·dh + off_h,
// j·sw − pad_left + b·dw + off_w); input channel c uses offset group
// c / (C / offset_group).
func convDeformConv(c *opCtx) error {
	x, w, off := c.in(0), c.in(1), c.in(2)
	xd, wd, od := x.Shape().Dimensions, w.Shape().Dimensions, off.Shape().Dimensions
	if len(xd) != 4 || len(wd) != 4 || len(od) != 4 {
		c.fail("only 2-D DeformConv is supported: X %v, W %v and offset %v must be 4-D", xd, wd, od)
	}
	n, ic, ih, iw := xd[0], xd[1], xd[2], xd[3]
	oc, icg, kh, kw := wd[0], wd[1], wd[2], wd[3]
	if ks := c.attrInts("kernel_shape", nil); len(ks) != 0 && (len(ks) != 2 || int(ks[0]) != kh || int(ks[1]) != kw) {
		c.fail("kernel_shape %v differs from W's %v", ks, wd[2:])
	}
	group := int(c.attrInt("group", 1))
	ogroups := int(c.attrInt("offset_group", 1))
	if group <= 0 || ic != icg*group || oc%group != 0 {
		c.fail("X %v and W %v do not agree with group %d", xd, wd, group)
	}
	if ogroups <= 0 || ic%ogroups != 0 {
		c.fail("%d input channels are not a multiple of offset_group %d", ic, ogroups)
	}
	two := func(name string, def int) [2]int {
		v := c.attrInts(name, nil)
		if len(v) == 0 {
			return [2]int{def, def}
		}
		if len(v) != 2 {
			c.fail("%s must have 2 values, got %v", name, v)
		}
		return [2]int{int(v[0]), int(v[1])}
	}
	dil, str := two("dilations", 1), two("strides", 1)
	pads := c.attrInts("pads", nil)
	if len(pads) == 0 {
		pads = []int64{0, 0, 0, 0}
	}
	if len(pads) != 4 {
		c.fail("pads must have 4 values, got %v", pads)
	}
	oh := (ih+int(pads[0]+pads[2])-(kh-1)*dil[0]-1)/str[0] + 1
	ow := (iw+int(pads[1]+pads[3])-(kw-1)*dil[1]-1)/str[1] + 1
	k := kh * kw
	if od[0] != n || od[1] != ogroups*k*2 || od[2] != oh || od[3] != ow {
		c.fail("offset must be (%d, %d, %d, %d), got %v", n, ogroups*k*2, oh, ow, od)
	}
	dt := x.DType()
	g := x.Graph()
	conv := func(v *graph.Node) *graph.Node {
		if v.DType() != dt {
			return graph.ConvertDType(v, dt)
		}
		return v
	}
	off = graph.Reshape(conv(off), n, ogroups, k, 2, oh, ow)
	var mask *graph.Node
	if c.has(4) {
		mask = conv(c.in(4))
		if md := mask.Shape().Dimensions; len(md) != 4 || md[0] != n || md[1] != ogroups*k || md[2] != oh || md[3] != ow {
			c.fail("mask must be (%d, %d, %d, %d), got %v", n, ogroups*k, oh, ow, md)
		}
		mask = graph.Reshape(mask, n, ogroups, k, oh, ow)
	}
	// Base sampling positions (k, oh, ow) per axis, from the host.
	baseH := make([]float64, k*oh*ow)
	baseW := make([]float64, k*oh*ow)
	for t := 0; t < k; t++ {
		a, b := t/kw, t%kw
		for i := 0; i < oh; i++ {
			for j := 0; j < ow; j++ {
				baseH[(t*oh+i)*ow+j] = float64(i*str[0] - int(pads[0]) + a*dil[0])
				baseW[(t*oh+i)*ow+j] = float64(j*str[1] - int(pads[1]) + b*dil[1])
			}
		}
	}
	hostConst := func(v []float64) *graph.Node {
		return constNode(g, newHostFloats(dt, []int{1, k, oh, ow}, v))
	}
	full := []int{n, k, oh, ow}
	bH, bW := broadcastNodeTo(hostConst(baseH), full), broadcastNodeTo(hostConst(baseW), full)
	// X as rows (N·H·W, C) for gathers of all channels at once.
	rows := graph.Reshape(graph.TransposeAllDims(x, 0, 2, 3, 1), n*ih*iw, ic)
	nbase := make([]int64, n)
	for b := range nbase {
		nbase[b] = int64(b * ih * iw)
	}
	batchOff := broadcastNodeTo(int64Const(g, nbase, n, 1, 1, 1), full)
	icOG := ic / ogroups
	var sampled []*graph.Node // per offset group: (N, K, OH, OW, C/offset_group)
	for og := 0; og < ogroups; og++ {
		grp := func(v *graph.Node, comp int) *graph.Node { // → (N, K, OH, OW)
			s := sliceAxis(sliceAxis(v, 1, og, og+1, 1), 3, comp, comp+1, 1)
			return graph.Reshape(s, full...)
		}
		ph, pw := graph.Add(bH, grp(off, 0)), graph.Add(bW, grp(off, 1))
		h0, w0 := graph.Floor(ph), graph.Floor(pw)
		fh, fw := graph.Sub(ph, h0), graph.Sub(pw, w0)
		xs := graph.Reshape(sliceAxis(rows, 1, og*icOG, (og+1)*icOG, 1), n*ih*iw, icOG)
		var acc *graph.Node
		for _, corner := range [4][2]int{{0, 0}, {0, 1}, {1, 0}, {1, 1}} {
			hc := graph.Add(h0, scalarLike(h0, float64(corner[0])))
			wc := graph.Add(w0, scalarLike(w0, float64(corner[1])))
			wt := fh
			if corner[0] == 0 {
				wt = graph.OneMinus(fh)
			}
			if corner[1] == 0 {
				wt = graph.Mul(wt, graph.OneMinus(fw))
			} else {
				wt = graph.Mul(wt, fw)
			}
			inside := graph.LogicalAnd(
				graph.LogicalAnd(graph.GreaterOrEqual(hc, scalarLike(hc, 0)), graph.LessThan(hc, scalarLike(hc, float64(ih)))),
				graph.LogicalAnd(graph.GreaterOrEqual(wc, scalarLike(wc, 0)), graph.LessThan(wc, scalarLike(wc, float64(iw)))))
			hi := graph.ConvertDType(graph.ClipScalar(hc, 0, float64(ih-1)), ir.Int64)
			wi := graph.ConvertDType(graph.ClipScalar(wc, 0, float64(iw-1)), ir.Int64)
			idx := graph.Add(graph.Add(graph.Mul(hi, scalarLike(hi, float64(iw))), wi), batchOff)
			v := gatherAxis(xs, idx, 0) // (N, K, OH, OW, C/og)
			cdims := append(append([]int{}, full...), icOG)
			wt = graph.Where(inside, wt, graph.ZerosLike(wt))
			term := graph.Mul(v, broadcastNodeTo(graph.Reshape(wt, append(append([]int{}, full...), 1)...), cdims))
			term = graph.Where(broadcastNodeTo(graph.Reshape(inside, append(append([]int{}, full...), 1)...), cdims), term, graph.ZerosLike(term))
			if acc == nil {
				acc = term
			} else {
				acc = graph.Add(acc, term)
			}
		}
		if mask != nil {
			m := graph.Reshape(sliceAxis(mask, 1, og, og+1, 1), append(append([]int{}, full...), 1)...)
			acc = graph.Mul(acc, broadcastNodeTo(m, acc.Shape().Dimensions))
		}
		sampled = append(sampled, acc)
	}
	s := sampled[0]
	if len(sampled) > 1 {
		s = graph.Concatenate(sampled, 4)
	} // (N, K, OH, OW, C)
	ocg := oc / group
	var outs []*graph.Node
	wk := graph.Reshape(conv(w), oc, icg, k)
	for gi := 0; gi < group; gi++ {
		sg := sliceAxis(s, 4, gi*icg, (gi+1)*icg, 1)  // (N, K, OH, OW, icg)
		wg := sliceAxis(wk, 0, gi*ocg, (gi+1)*ocg, 1) // (ocg, icg, K)
		outs = append(outs, graph.Einsum("nkhwc,ock->nohw", sg, wg))
	}
	out := outs[0]
	if group > 1 {
		out = graph.Concatenate(outs, 1)
	}
	if c.has(3) {
		b := conv(c.in(3))
		if bd := b.Shape().Dimensions; len(bd) != 1 || bd[0] != oc {
			c.fail("B must be (%d), got %v", oc, bd)
		}
		out = graph.Add(out, broadcastNodeTo(graph.Reshape(b, 1, oc, 1, 1), out.Shape().Dimensions))
	}
	c.set(0, out)
	return nil
}
