package onnx

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// RoiAlign (opsets 10, 16, 22): pools X (N, C, H, W) over regions rois
// (R, 4, as x1, y1, x2, y2 in input-image coordinates) of the images
// batch_indices (R), giving (R, C, output_height, output_width). Each
// output bin averages (mode avg) or takes the maximum (mode max) of a grid
// of bilinearly interpolated samples. Opset 16 added
// coordinate_transformation_mode, whose default half_pixel shifts the
// scaled roi by -0.5; opset 10 behaves as output_half_pixel (no shift).
//
// The rois are run-time data, so the sampling is built in the graph: per
// roi, output row and sample the two row taps and their weights, likewise
// for columns, combined into flat indices gathered from X in one Gather.
// Following the ONNX reference implementation (and ONNX Runtime): a
// sample outside [-1, H] × [-1, W] contributes 0; coordinates below 0 are
// raised to 0 and the last row/column is not interpolated past; max mode
// takes the maximum of the four weighted taps of each sample, then of the
// samples.
//
// With sampling_ratio 0 the number of samples per bin, ceil(roi size /
// output size), depends on the rois. The graph is built for a fixed
// maximum and masks the samples beyond each roi's count: the maximum is
// exact when the rois are known at build time; for run-time rois it is
// ceil((H+1)/output_height)+1 rows (likewise columns), which covers every
// roi within the feature map; a larger roi is sampled with that many
// points per bin only (a known approximation).

func init() {
	register("RoiAlign", 10, convRoiAlign)
	register("RoiAlign", 16, convRoiAlign)
	register("RoiAlign", 22, convRoiAlign)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("RoiAlign")
}

// roiAlignAxis computes one axis' sample taps: for starts s and bin sizes
// bin (both (R)), out bins of up to g samples each (run-time count cnt, or
// nil when every bin has g), over an input axis of length size. It returns
// indices (R, out, g, 2) and weights (R, out, g, 2); the weights are 0 for
// samples outside [-1, size] and for samples beyond cnt.
func roiAlignAxis(s, bin, cnt *graph.Node, out, g, size int, idxDT ir.DType) (idx, w *graph.Node) {
	dt := s.DType()
	gr := s.Graph()
	r := s.Shape().Dimensions[0]
	shape := []int{r, out, g}
	bc := func(v *graph.Node) *graph.Node { return broadcastNodeTo(graph.Reshape(v, r, 1, 1), shape) }
	k := func(v float64) *graph.Node { return filled(gr, dt, shape, v) }
	p := graph.Iota(gr, ir.MakeShape(dt, shape...), 1) // output bin
	i := graph.Iota(gr, ir.MakeShape(dt, shape...), 2) // sample within the bin
	binB := bc(bin)
	n := k(float64(g))
	if cnt != nil {
		n = bc(cnt)
	}
	// start + p·bin + (i + 0.5)·bin / n, in the reference's order.
	pos := graph.Add(graph.Add(bc(s), graph.Mul(p, binB)), graph.Div(graph.Mul(graph.Add(i, k(0.5)), binB), n))
	valid := graph.LogicalAnd(graph.GreaterOrEqual(pos, k(-1)), graph.LessOrEqual(pos, k(float64(size))))
	if cnt != nil {
		valid = graph.LogicalAnd(valid, graph.LessThan(i, n))
	}
	pos = graph.Max(pos, k(0))
	pos = graph.Where(graph.IsNaN(pos), k(0), pos)
	low := graph.Floor(pos)
	last := graph.GreaterOrEqual(low, k(float64(size-1)))
	low = graph.Where(last, k(float64(size-1)), low)
	high := graph.Where(last, low, graph.Add(low, k(1)))
	pos = graph.Where(last, low, pos)
	frac := graph.Sub(pos, low)
	zero := k(0)
	wLow := graph.Where(valid, graph.Sub(k(1), frac), zero)
	wHigh := graph.Where(valid, frac, zero)
	idx = graph.Stack([]*graph.Node{graph.ConvertDType(low, idxDT), graph.ConvertDType(high, idxDT)}, 3)
	w = graph.Stack([]*graph.Node{wLow, wHigh}, 3)
	return idx, w
}

func convRoiAlign(c *opCtx) error {
	mode := c.attrString("mode", "avg")
	if mode != "avg" && mode != "max" {
		return fmt.Errorf("unknown mode %q (expected avg or max)", mode)
	}
	defCoord := "half_pixel"
	if c.def.since < 16 {
		defCoord = "output_half_pixel"
	}
	coord := c.attrString("coordinate_transformation_mode", defCoord)
	if coord != "half_pixel" && coord != "output_half_pixel" {
		return fmt.Errorf("unknown coordinate_transformation_mode %q (expected half_pixel or output_half_pixel)", coord)
	}
	halfPixel := coord == "half_pixel"
	oh, ow := int(c.attrInt("output_height", 1)), int(c.attrInt("output_width", 1))
	sampling := c.attrInt("sampling_ratio", 0)
	scale := c.attrFloat("spatial_scale", 1)
	if oh <= 0 || ow <= 0 || oh > 1<<20 || ow > 1<<20 {
		return fmt.Errorf("output_height %d and output_width %d must be positive", oh, ow)
	}
	if sampling < 0 || sampling > 1<<10 {
		return fmt.Errorf("sampling_ratio %d out of range (0 for adaptive, else 1 to %d)", sampling, 1<<10)
	}

	x, rois, bidx := c.in(0), c.in(1), c.in(2)
	xd, rd, bd := x.Shape().Dimensions, rois.Shape().Dimensions, bidx.Shape().Dimensions
	if len(xd) != 4 {
		return fmt.Errorf("X must be 4-D (N, C, H, W), got shape %v", xd)
	}
	if len(rd) != 2 || rd[1] != 4 {
		return fmt.Errorf("rois must have shape (num_rois, 4), got %v", rd)
	}
	if len(bd) != 1 || bd[0] != rd[0] {
		return fmt.Errorf("batch_indices must have shape (%d), got %v", rd[0], bd)
	}
	if !isFloatDT(c.dtype(0)) {
		return fmt.Errorf("X must be a float tensor, got %s", c.dtype(0))
	}
	n, ch, h, w := xd[0], xd[1], xd[2], xd[3]
	nr := rd[0]
	dt := x.DType()
	outDims := []int{nr, ch, oh, ow}
	if numElems(outDims) == 0 {
		c.set(0, filled(c.g, dt, outDims, 0))
		return nil
	}
	if n*h*w == 0 {
		return fmt.Errorf("cannot pool an empty feature map of shape %v", xd)
	}
	cdt := dt
	if cdt != ir.Float32 && cdt != ir.Float64 {
		cdt = ir.Float32
		x = graph.ConvertDType(x, cdt)
	}
	if rois.DType() != cdt {
		rois = graph.ConvertDType(rois, cdt)
	}
	idxDT := ir.Int32
	if n*h*w >= 1<<31-1 {
		idxDT = ir.Int64
	}

	// Samples per bin: fixed, or a build-time maximum with run-time counts.
	gh, gw := int(sampling), int(sampling)
	if sampling == 0 {
		gh, gw = (h+1+oh-1)/oh+1, (w+1+ow-1)/ow+1
		if c.isHost(1) {
			gh, gw = roiAlignHostGrid(c.constFloats(1), scale, halfPixel, oh, ow)
		}
	}
	if nr*oh*ow*gh*gw*4 > 1<<28 {
		return fmt.Errorf("%d rois of %dx%d bins with %dx%d samples each exceed the sampling limit", nr, oh, ow, gh, gw)
	}

	col := func(k int) *graph.Node { return graph.Reshape(sliceAxis(rois, 1, k, k+1, 1), nr) }
	sv := func(v float64) *graph.Node { return filled(c.g, cdt, []int{nr}, v) }
	offset := 0.0
	if halfPixel {
		offset = 0.5
	}
	startW := graph.Sub(graph.Mul(col(0), sv(scale)), sv(offset))
	startH := graph.Sub(graph.Mul(col(1), sv(scale)), sv(offset))
	endW := graph.Sub(graph.Mul(col(2), sv(scale)), sv(offset))
	endH := graph.Sub(graph.Mul(col(3), sv(scale)), sv(offset))
	roiW, roiH := graph.Sub(endW, startW), graph.Sub(endH, startH)
	if !halfPixel { // malformed rois become 1×1
		roiW, roiH = graph.Max(roiW, sv(1)), graph.Max(roiH, sv(1))
	}
	binH, binW := graph.Div(roiH, sv(float64(oh))), graph.Div(roiW, sv(float64(ow)))
	var cntH, cntW, count *graph.Node
	if sampling == 0 {
		cntH = graph.Min(graph.Ceil(graph.Div(roiH, sv(float64(oh)))), sv(float64(gh)))
		cntW = graph.Min(graph.Ceil(graph.Div(roiW, sv(float64(ow)))), sv(float64(gw)))
		count = graph.Max(graph.Mul(cntH, cntW), sv(1))
	} else {
		count = sv(float64(gh * gw))
	}
	yi, wy := roiAlignAxis(startH, binH, cntH, oh, gh, h, idxDT)
	xi, wx := roiAlignAxis(startW, binW, cntW, ow, gw, w, idxDT)

	// Combine to (R, oh, ow, gh, gw, 2, 2): rows taps × column taps.
	full := []int{nr, oh, ow, gh, gw, 2, 2}
	yB := func(v *graph.Node) *graph.Node {
		return broadcastNodeTo(graph.Reshape(v, nr, oh, 1, gh, 1, 2, 1), full)
	}
	xB := func(v *graph.Node) *graph.Node {
		return broadcastNodeTo(graph.Reshape(v, nr, 1, ow, 1, gw, 1, 2), full)
	}
	b := graph.ConvertDType(bidx, idxDT)
	b = graph.Min(graph.Max(b, scalarLikeB(b, 0)), scalarLikeB(b, float64(n-1)))
	b = broadcastNodeTo(graph.Reshape(b, nr, 1, 1, 1, 1, 1, 1), full)
	flat := graph.Add(graph.Add(graph.Mul(b, scalarLikeB(b, float64(h*w))), graph.Mul(yB(yi), scalarLikeB(b, float64(w)))), xB(xi))
	weight := graph.Mul(yB(wy), xB(wx))

	// X as rows of channels (N·H·W, C); the gather gives full + (C).
	xs := graph.Reshape(graph.TransposeAllDims(graph.Reshape(x, n, ch, h*w), 0, 2, 1), n*h*w, ch)
	m := nr * oh * ow * gh * gw * 4
	vals := gatherAxis(xs, graph.Reshape(flat, m), 0)
	vals = graph.Reshape(vals, append(append([]int{}, full...), ch)...)
	fullC := append(append([]int{}, full...), ch)
	weighted := graph.Mul(vals, broadcastNodeTo(graph.Reshape(weight, append(append([]int{}, full...), 1)...), fullC))

	var y *graph.Node // (R, oh, ow, C)
	if mode == "avg" {
		y = graph.ReduceSum(weighted, 3, 4, 5, 6)
		y = graph.Div(y, broadcastNodeTo(graph.Reshape(count, nr, 1, 1, 1), []int{nr, oh, ow, ch}))
	} else {
		perSample := graph.ReduceMax(weighted, 5, 6) // (R, oh, ow, gh, gw, C)
		if sampling == 0 {
			sDims := []int{nr, oh, ow, gh, gw, ch}
			inH := graph.LessThan(graph.Iota(c.g, ir.MakeShape(cdt, sDims...), 3), broadcastNodeTo(graph.Reshape(cntH, nr, 1, 1, 1, 1, 1), sDims))
			inW := graph.LessThan(graph.Iota(c.g, ir.MakeShape(cdt, sDims...), 4), broadcastNodeTo(graph.Reshape(cntW, nr, 1, 1, 1, 1, 1), sDims))
			in := graph.LogicalAnd(inH, inW)
			perSample = graph.Where(in, perSample, filled(c.g, cdt, sDims, math.Inf(-1)))
			y = graph.ReduceMax(perSample, 3, 4)
			// A roi with no samples pools to 0.
			none := graph.LogicalOr(graph.LessOrEqual(cntH, sv(0)), graph.LessOrEqual(cntW, sv(0)))
			yDims := []int{nr, oh, ow, ch}
			y = graph.Where(broadcastNodeTo(graph.Reshape(none, nr, 1, 1, 1), yDims), filled(c.g, cdt, yDims, 0), y)
		} else {
			y = graph.ReduceMax(perSample, 3, 4)
		}
	}
	y = graph.TransposeAllDims(y, 0, 3, 1, 2)
	if y.DType() != dt {
		y = graph.ConvertDType(y, dt)
	}
	c.set(0, y)
	return nil
}

// roiAlignHostGrid is the largest adaptive sample count per bin over rois
// known at build time, plus one to absorb rounding differences between
// this float64 estimate and the graph's arithmetic (the graph masks
// samples beyond each roi's own count).
func roiAlignHostGrid(rois []float64, scale float64, halfPixel bool, oh, ow int) (gh, gw int) {
	gh, gw = 1, 1
	for k := 0; k+3 < len(rois); k += 4 {
		rw := (rois[k+2] - rois[k]) * scale
		rh := (rois[k+3] - rois[k+1]) * scale
		if !halfPixel {
			rw, rh = max(rw, 1), max(rh, 1)
		}
		ch := math.Ceil(rh / float64(oh))
		cw := math.Ceil(rw / float64(ow))
		// NaN rois sample nothing useful; huge ones are refused later by
		// the sampling limit.
		if math.IsNaN(ch) {
			ch = 1
		}
		if math.IsNaN(cw) {
			cw = 1
		}
		ch, cw = min(ch, 1<<16), min(cw, 1<<16)
		gh, gw = max(gh, int(ch)), max(gw, int(cw))
	}
	return gh + 1, gw + 1
}
