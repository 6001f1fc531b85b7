package onnx

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Resize family: Resize (opsets 10, 11, 13, 18, 19) and the deprecated
// Upsample (7, 9).
//
// Shapes, scales, sizes and roi are known at build time, so every resized
// axis is planned on the host: for each output position the source indices
// it reads ("taps") and their interpolation weights, computed in float64
// as the ONNX operator specification describes. The graph applies one plan
// per axis (interpolation is separable), as a Gather of the taps summed
// with constant weights, or as a product with the dense interpolation
// matrix (see resizeApply). Nearest mode needs a single tap with weight 1
// and is a pure Gather, so it is exact for every dtype. Linear and cubic
// on integer inputs are computed in float64, rounded half to even and
// saturated to the dtype's range, as the ONNX reference implementation
// does; a result that is exactly halfway in exact arithmetic may round
// either way, depending on the backend's summation order.
//
// Resize-10 and Upsample have asymmetric coordinates and no nearest_mode:
// nearest truncates when upsampling and rounds up when downsampling, as
// ONNX Runtime does (the ONNX Resize-10 test data agrees). From opset 11,
// conventions follow the ONNX reference implementation where the operator
// text is silent: "output_width" in the coordinate formulas is the
// fractional scale·input_length (onnx/onnx#2462), taps outside the input
// repeat its edge unless exclude_outside is set, and tf_crop_and_resize
// outputs whose source coordinate falls outside [0, length-1] take
// extrapolation_value. Where the text and the reference differ, the text
// (and ONNX Runtime) wins: pytorch_half_pixel maps an output of length 1
// to source coordinate 0, not -0.5; this matters for cubic and antialiased
// linear only.
//
// Attributes are read whatever the opset (axes, antialias and
// keep_aspect_ratio_policy appeared in 18, half_pixel_symmetric in 19,
// tf_half_pixel_for_nn existed in 11 and 12 only): a model that uses one
// early is honoured rather than refused.

func init() {
	register("Upsample", 7, convUpsample(false))
	register("Upsample", 9, convUpsample(true)).needs(1)
	register("Resize", 10, convResize10).needs(1)
	for _, v := range []int{11, 13, 18, 19} {
		register("Resize", v, convResize).needs(1, 2, 3)
	}
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("Resize", "Upsample")
}

// resizeParams are the interpolation settings of one Resize node.
type resizeParams struct {
	mode           string  // "nearest", "linear" or "cubic"
	coord          string  // coordinate_transformation_mode
	nearest        string  // nearest_mode; "simple" for Resize-10 and Upsample
	cubicA         float64 // cubic_coeff_a
	excludeOutside bool
	antialias      bool
	extrapolation  float64
}

// resizeAxis is the host plan for one resized axis: output position o reads
// the input at idx[o*taps+t] (already clamped into range) with weight
// w[o*taps+t]. w is nil for nearest mode (one tap, weight 1). extrap marks
// the outputs that take the extrapolation value (nil when none).
type resizeAxis struct {
	axis, in, out, taps int
	idx                 []int
	w                   []float64
	extrap              []bool
}

// resizeMaxTaps bounds the host plan of one axis (out·taps entries), so a
// model cannot make the importer allocate without bound.
const resizeMaxTaps = 1 << 26

// resizeSourceCoord maps output position y of an axis to a coordinate in
// the input, per coordinate_transformation_mode. in is the input length,
// out the integer output length, scale the axis scale and outW the
// fractional output length scale·in. roi0 and roi1 are the axis' region of
// interest (tf_crop_and_resize only).
func resizeSourceCoord(coord string, y, in, out int, scale, outW, roi0, roi1 float64) (float64, error) {
	fy, fin := float64(y), float64(in)
	switch coord {
	case "half_pixel":
		return (fy+0.5)/scale - 0.5, nil
	case "half_pixel_symmetric":
		adjustment := float64(out) / outW
		center := fin / 2
		offset := center * (1 - adjustment)
		return offset + (fy+0.5)/scale - 0.5, nil
	case "pytorch_half_pixel":
		if outW == 1 {
			return 0, nil
		}
		return (fy+0.5)/scale - 0.5, nil
	case "align_corners":
		if outW == 1 {
			return 0, nil
		}
		return fy * (fin - 1) / (outW - 1), nil
	case "asymmetric":
		return fy / scale, nil
	case "tf_half_pixel_for_nn":
		return (fy + 0.5) / scale, nil
	case "tf_crop_and_resize":
		if outW == 1 {
			return 0.5 * (roi0 + roi1) * (fin - 1), nil
		}
		return fy*(roi1-roi0)*(fin-1)/(outW-1) + roi0*(fin-1), nil
	}
	return 0, fmt.Errorf("unknown coordinate_transformation_mode %q", coord)
}

// resizeNearestIndex rounds a source coordinate to an input index per
// nearest_mode. "simple" is the rule of Resize-10 and Upsample, which have
// no nearest_mode: truncate when upsampling, round up when downsampling.
func resizeNearestIndex(mode string, x, scale float64) (int, error) {
	var r float64
	switch mode {
	case "round_prefer_floor":
		r = math.Ceil(x - 0.5)
	case "round_prefer_ceil":
		r = math.Floor(x + 0.5)
	case "floor":
		r = math.Floor(x)
	case "ceil":
		r = math.Ceil(x)
	case "simple":
		if scale < 1 {
			r = math.Ceil(x)
		} else {
			r = math.Trunc(x)
		}
	default:
		return 0, fmt.Errorf("unknown nearest_mode %q", mode)
	}
	if math.IsNaN(r) || math.Abs(r) > 1<<52 {
		return 0, fmt.Errorf("source coordinate %v is not finite", x)
	}
	return int(r), nil
}

// resizeKernel is the interpolation kernel at distance d: the triangle for
// linear, Keys' cubic convolution kernel with coefficient a for cubic
// (Horner form, as the operator's plain cubic coefficients are written).
func resizeKernel(mode string, a, d float64) float64 {
	d = math.Abs(d)
	if mode == "linear" {
		return max(0, 1-d)
	}
	switch {
	case d <= 1:
		return ((a+2)*d-(a+3))*d*d + 1
	case d < 2:
		return ((a*d-5*a)*d+8*a)*d - 4*a
	}
	return 0
}

// resizeKernelAA is the kernel of the antialiasing filters, the cubic one
// in power form: the same function as resizeKernel, evaluated as the ONNX
// reference does so that integer outputs round the same way at ties.
func resizeKernelAA(mode string, a, d float64) float64 {
	d = math.Abs(d)
	if mode == "linear" {
		return min(max(1-d, 0), 1)
	}
	d2 := d * d
	d3 := d * d2
	switch {
	case d <= 1:
		return (a+2)*d3 - (a+3)*d2 + 1
	case d < 2:
		return a*d3 - 5*a*d2 + 8*a*d - 4*a
	}
	return 0
}

// resizeWeights fills row with the weights of the taps at offsets
// start..start+len(row)-1 from the base index, for a source coordinate
// ratio in (0, 1] past the base. Without antialiasing these are the
// operator's fixed two (linear) or four (cubic) coefficients; with it, the
// kernel stretched by 1/kScale and normalised to sum 1.
func resizeWeights(p *resizeParams, row []float64, start int, ratio, kScale float64) {
	if !p.antialias {
		if p.mode == "linear" {
			row[0], row[1] = 1-ratio, ratio
			return
		}
		rc := 1 - ratio
		for t, d := range [4]float64{ratio + 1, ratio, rc, rc + 1} {
			row[t] = resizeKernel(p.mode, p.cubicA, d)
		}
		return
	}
	sum := 0.0
	for t := range row {
		row[t] = resizeKernelAA(p.mode, p.cubicA, kScale*(float64(start+t)-ratio))
		sum += row[t]
	}
	if sum != 0 {
		for t := range row {
			row[t] /= sum
		}
	}
}

// resizePlanAxis plans one axis of length in resized to out with the given
// scale and region of interest.
func resizePlanAxis(p *resizeParams, axis, in, out int, scale, roi0, roi1 float64) (*resizeAxis, error) {
	if in == 0 && out > 0 {
		return nil, fmt.Errorf("axis %d: cannot resize an empty axis to length %d", axis, out)
	}
	if out > 0 && !(scale > 0 && scale <= math.MaxFloat64) {
		return nil, fmt.Errorf("axis %d: scale %v must be positive and finite", axis, scale)
	}
	ax := &resizeAxis{axis: axis, in: in, out: out, taps: 1}
	outW := scale * float64(in)

	// Tap window of linear and cubic: offsets start..start+taps-1 from the
	// base index; antialiasing stretches the kernel by 1/scale when
	// downsampling, widening the window.
	kScale, support := 1.0, 1.0
	if p.mode == "cubic" {
		support = 2
	}
	start := 0
	if p.mode != "nearest" {
		if p.antialias && scale < 1 {
			kScale = scale
		}
		s := math.Floor(-support/kScale) + 1
		if s < -resizeMaxTaps {
			return nil, fmt.Errorf("axis %d: scale %v needs too wide an antialiasing filter", axis, scale)
		}
		start = int(s)
		ax.taps = 2 - 2*start
	}
	if out > 0 && ax.taps > resizeMaxTaps/out {
		return nil, fmt.Errorf("axis %d: output length %d with %d taps exceeds the %d-entry plan limit", axis, out, ax.taps, resizeMaxTaps)
	}
	ax.idx = make([]int, out*ax.taps)
	if p.mode != "nearest" {
		ax.w = make([]float64, out*ax.taps)
	}
	clamp := func(j int) int { return min(max(j, 0), in-1) }
	for y := range out {
		x, err := resizeSourceCoord(p.coord, y, in, out, scale, outW, roi0, roi1)
		if err != nil {
			return nil, err
		}
		if p.coord == "tf_crop_and_resize" && (x < 0 || x > float64(in-1)) {
			if ax.extrap == nil {
				ax.extrap = make([]bool, out)
			}
			ax.extrap[y] = true
			continue // idx stays 0, weights 0: the output is replaced
		}
		if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > 1<<52 {
			return nil, fmt.Errorf("axis %d: output %d maps to source coordinate %v", axis, y, x)
		}
		if p.mode == "nearest" {
			j, err := resizeNearestIndex(p.nearest, x, scale)
			if err != nil {
				return nil, err
			}
			ax.idx[y] = clamp(j)
			continue
		}
		// Base index: the input just left of x, or the one before x when x
		// is an integer, so that ratio = x - base lies in (0, 1].
		base := math.Floor(x)
		if base == x {
			base--
		}
		ratio := x - base
		row := ax.w[y*ax.taps : (y+1)*ax.taps]
		resizeWeights(p, row, start, ratio, kScale)
		if p.excludeOutside {
			sum := 0.0
			for t := range row {
				if j := int(base) + start + t; j < 0 || j >= in {
					row[t] = 0
				}
				sum += row[t]
			}
			if sum != 0 {
				for t := range row {
					row[t] /= sum
				}
			}
		}
		for t := range row {
			ax.idx[y*ax.taps+t] = clamp(int(base) + start + t)
		}
	}
	return ax, nil
}

// resizeApply resizes x along one planned axis. x has the compute dtype;
// extrap is the extrapolation value already converted to it.
func resizeApply(x *graph.Node, ax *resizeAxis, extrap float64) *graph.Node {
	dims := x.Shape().Dimensions
	a := ax.axis
	outDims := append([]int{}, dims...)
	outDims[a] = ax.out
	if ax.out == 0 || numElems(dims) == 0 {
		return filled(x.Graph(), x.DType(), outDims, 0)
	}
	// The lowering is chosen per backend, from measurements (1×3×224×224
	// and 1×3×512×512, ×2 linear and cubic): the pure-Go backend is
	// fastest gathering along the axis in place (2× faster than the
	// alternative); on XLA's CPU compiler that is 3-4× slower than moving
	// the axis to the front and gathering whole rows. (A product with the
	// dense interpolation matrix measured within 25% of the row gather on
	// XLA, but it would spread an Inf or NaN of the input along the whole
	// axis, through its zero weights.)
	var y *graph.Node
	if resizePureGo(x.Graph()) {
		y = resizeApplyInPlace(x, ax)
	} else {
		y = resizeApplyFront(x, ax)
	}
	if ax.extrap != nil {
		mask := make([]int64, ax.out)
		for k, e := range ax.extrap {
			if e {
				mask[k] = 1
			}
		}
		mDims := make([]int, len(outDims))
		for k := range mDims {
			mDims[k] = 1
		}
		mDims[a] = ax.out
		m := constNode(x.Graph(), newHostInts(ir.Bool, mDims, mask))
		m = broadcastNodeTo(m, outDims)
		y = graph.Where(m, filled(x.Graph(), x.DType(), outDims, extrap), y)
	}
	return y
}

// resizePureGo says whether g is built for GoMLX's pure-Go backend.
func resizePureGo(g *graph.Graph) bool {
	b := g.Backend()
	return b != nil && strings.HasPrefix(b.Name(), "SimpleGo")
}

// resizeApplyInPlace gathers the taps along the axis where it is and sums
// them with their weights.
func resizeApplyInPlace(x *graph.Node, ax *resizeAxis) *graph.Node {
	dims := x.Shape().Dimensions
	a := ax.axis
	y := gatherConst(x, a, ax.idx)
	if ax.w != nil {
		tapDims := append(append(append([]int{}, dims[:a]...), ax.out, ax.taps), dims[a+1:]...)
		y = graph.Reshape(y, tapDims...)
		w := constNode(x.Graph(), newHostFloats(x.DType(), []int{ax.out, ax.taps}, ax.w))
		wDims := make([]int, len(tapDims))
		for k := range wDims {
			wDims[k] = 1
		}
		wDims[a], wDims[a+1] = ax.out, ax.taps
		w = broadcastNodeTo(graph.Reshape(w, wDims...), tapDims)
		y = graph.ReduceSum(graph.Mul(y, w), a+1)
	}
	return y
}

// resizeAxisFront moves axis a of x to the front: the permutation and its
// inverse.
func resizeAxisFront(rank, a int) (perm, inv []int) {
	perm = append([]int{a}, complement([]int{a}, rank)...)
	inv = make([]int, rank)
	for k, p := range perm {
		inv[p] = k
	}
	return perm, inv
}

// resizeApplyFront moves the axis to the front, gathers whole rows of the
// flattened remainder, sums the taps and moves the axis back.
func resizeApplyFront(x *graph.Node, ax *resizeAxis) *graph.Node {
	dims := x.Shape().Dimensions
	a := ax.axis
	perm, inv := resizeAxisFront(len(dims), a)
	xt := x
	if a != 0 {
		xt = graph.TransposeAllDims(x, perm...)
	}
	rest := numElems(dims) / dims[a]
	xt = graph.Reshape(xt, dims[a], rest)
	y := gatherConst(xt, 0, ax.idx) // (out·taps, rest)
	if ax.w != nil {
		y = graph.Reshape(y, ax.out, ax.taps, rest)
		w := constNode(x.Graph(), newHostFloats(x.DType(), []int{ax.out, ax.taps, 1}, ax.w))
		y = graph.ReduceSum(graph.Mul(y, broadcastNodeTo(w, []int{ax.out, ax.taps, rest})), 1)
	}
	tdims := make([]int, len(dims))
	for k, p := range perm {
		tdims[k] = dims[p]
	}
	tdims[0] = ax.out
	y = graph.Reshape(y, tdims...)
	if a != 0 {
		y = graph.TransposeAllDims(y, inv...)
	}
	return y
}

// resizeIntRange is the range of an integer dtype, for saturating casts.
func resizeIntRange(dt ir.DType) (lo, hi float64, ok bool) {
	switch dt {
	case ir.Int8:
		return math.MinInt8, math.MaxInt8, true
	case ir.Int16:
		return math.MinInt16, math.MaxInt16, true
	case ir.Int32:
		return math.MinInt32, math.MaxInt32, true
	case ir.Int64:
		// The largest float64 below 2^63, so the bound converts back exactly.
		return math.MinInt64, math.Nextafter(1<<63, 0), true
	case ir.Uint8:
		return 0, math.MaxUint8, true
	case ir.Uint16:
		return 0, math.MaxUint16, true
	case ir.Uint32:
		return 0, math.MaxUint32, true
	case ir.Uint64:
		return 0, math.Nextafter(1<<64, 0), true
	}
	return 0, 0, false
}

// resizeRun resizes x (graph dtype) to outDims with one plan per axis
// whose length changes or whose mapping is not the identity, and returns
// the result in x's dtype.
func resizeRun(x *graph.Node, p *resizeParams, plans []*resizeAxis) (*graph.Node, error) {
	dt := x.DType()
	computeDT := dt
	isInt := false
	if p.mode != "nearest" {
		switch dt {
		case ir.Float32, ir.Float64:
		case ir.BFloat16, ir.Float16:
			computeDT = ir.Float32
		default:
			if _, _, ok := resizeIntRange(dt); !ok {
				return nil, fmt.Errorf("mode %q does not apply to %s inputs", p.mode, dt)
			}
			computeDT, isInt = ir.Float64, true
		}
	}
	extrap := p.extrapolation
	if lo, hi, ok := resizeIntRange(dt); ok && p.mode == "nearest" {
		extrap = min(max(math.RoundToEven(extrap), lo), hi)
	} else if dt == ir.Bool && extrap != 0 {
		extrap = 1
	}
	// An empty result is built directly: the pure-Go backend's Where
	// (used by the rounding below) fails on empty operands.
	outDims := append([]int{}, x.Shape().Dimensions...)
	for _, ax := range plans {
		outDims[ax.axis] = ax.out
	}
	if numElems(outDims) == 0 {
		return filled(x.Graph(), dt, outDims, 0), nil
	}
	// Shrinking axes first keeps the intermediates small. Integer results
	// keep the axis order of the ONNX reference, so that values rounded at
	// a tie round the same way.
	if !isInt {
		sort.SliceStable(plans, func(i, j int) bool {
			return float64(plans[i].out)*float64(plans[j].in) < float64(plans[j].out)*float64(plans[i].in)
		})
	}
	y := x
	if computeDT != dt {
		y = graph.ConvertDType(y, computeDT)
	}
	for _, ax := range plans {
		y = resizeApply(y, ax, extrap)
	}
	if isInt {
		lo, hi, _ := resizeIntRange(dt)
		y = roundHalfEven(y)
		y = graph.Max(graph.Min(y, scalarLikeB(y, hi)), scalarLikeB(y, lo))
	}
	if computeDT != dt {
		y = graph.ConvertDType(y, dt)
	}
	return y, nil
}

// resizeBuild plans and applies a resize of x given the per-axis output
// sizes, scales and roi (all of x's rank).
func resizeBuild(c *opCtx, p *resizeParams, outDims []int, scales, roi []float64) error {
	x := c.in(0)
	dims := x.Shape().Dimensions
	total := 1.0
	for a, d := range outDims {
		if d < 0 {
			return fmt.Errorf("output dimension %d is negative (%d)", a, d)
		}
		total *= float64(d)
	}
	if total > 1<<53 {
		return fmt.Errorf("output shape %v is too large", outDims)
	}
	var plans []*resizeAxis
	for a := range dims {
		r0, r1 := 0.0, 1.0
		if roi != nil {
			r0, r1 = roi[a], roi[a+len(dims)]
		}
		identity := scales[a] == 1 && outDims[a] == dims[a] &&
			(p.coord != "tf_crop_and_resize" || (r0 == 0 && r1 == 1))
		if identity {
			continue
		}
		ax, err := resizePlanAxis(p, a, dims[a], outDims[a], scales[a], r0, r1)
		if err != nil {
			return err
		}
		plans = append(plans, ax)
	}
	y, err := resizeRun(x, p, plans)
	if err != nil {
		return err
	}
	c.set(0, y)
	return nil
}

// resizeCheckScales refuses scales that are not positive finite numbers.
func resizeCheckScales(scales []float64) error {
	for a, s := range scales {
		if !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("scale %v for axis %d: scales must be positive and finite", s, a)
		}
	}
	return nil
}

// resizeOutDims is floor(scale·length) per axis, the output shape given
// scales (the roi does not enter it, as in the ONNX shape inference).
func resizeOutDims(dims []int, scales []float64) ([]int, error) {
	if err := resizeCheckScales(scales); err != nil {
		return nil, err
	}
	out := make([]int, len(dims))
	for a, d := range dims {
		v := math.Floor(scales[a] * float64(d))
		if v > 1<<40 {
			return nil, fmt.Errorf("axis %d: length %d times scale %v is too large", a, d, scales[a])
		}
		out[a] = int(v)
	}
	return out, nil
}

// resizeModeParams reads mode, normalising the old spellings "bilinear"
// and "trilinear" (Upsample-1, some exporters) to "linear".
func resizeModeParams(c *opCtx) (string, error) {
	mode := c.attrString("mode", "nearest")
	switch mode {
	case "nearest", "linear", "cubic":
		return mode, nil
	case "bilinear", "trilinear":
		return "linear", nil
	}
	return "", fmt.Errorf("unknown mode %q (expected nearest, linear or cubic)", mode)
}

// convUpsample converts Upsample: scales from an attribute (opset 7, or
// height_scale/width_scale of the experimental opset 1) or from input 1
// (opset 9), asymmetric coordinates.
func convUpsample(scalesInput bool) converterFunc {
	return func(c *opCtx) error {
		mode, err := resizeModeParams(c)
		if err != nil {
			return err
		}
		if mode == "cubic" {
			return fmt.Errorf("Upsample has no cubic mode")
		}
		dims := c.dims(0)
		var scales []float64
		switch {
		case scalesInput:
			scales = c.constFloats(1)
		case c.hasAttr("scales"):
			scales = c.attrFloats("scales", nil)
		case c.hasAttr("height_scale") || c.hasAttr("width_scale"):
			if len(dims) != 4 {
				return fmt.Errorf("height_scale/width_scale need a 4-D input, got rank %d", len(dims))
			}
			scales = []float64{1, 1, c.attrFloat("height_scale", 1), c.attrFloat("width_scale", 1)}
		default:
			return fmt.Errorf("missing the scales attribute")
		}
		return resizeByScales(c, &resizeParams{mode: mode, coord: "asymmetric", nearest: "simple"}, dims, scales)
	}
}

// convResize10 converts Resize-10: like Upsample-9, scales may be below 1.
func convResize10(c *opCtx) error {
	mode, err := resizeModeParams(c)
	if err != nil {
		return err
	}
	return resizeByScales(c, &resizeParams{mode: mode, coord: "asymmetric", nearest: "simple"}, c.dims(0), c.constFloats(1))
}

func resizeByScales(c *opCtx, p *resizeParams, dims []int, scales []float64) error {
	if len(scales) != len(dims) {
		return fmt.Errorf("scales has %d elements, expected the input rank %d", len(scales), len(dims))
	}
	outDims, err := resizeOutDims(dims, scales)
	if err != nil {
		return err
	}
	return resizeBuild(c, p, outDims, scales, nil)
}

// convResize converts Resize from opset 11: inputs X, roi, scales, sizes
// (exactly one of scales and sizes non-empty), the attributes of every
// version from 11 to 19.
func convResize(c *opCtx) error {
	mode, err := resizeModeParams(c)
	if err != nil {
		return err
	}
	p := &resizeParams{
		mode:           mode,
		coord:          c.attrString("coordinate_transformation_mode", "half_pixel"),
		nearest:        c.attrString("nearest_mode", "round_prefer_floor"),
		cubicA:         c.attrFloat("cubic_coeff_a", -0.75),
		excludeOutside: c.attrInt("exclude_outside", 0) != 0,
		antialias:      c.attrInt("antialias", 0) != 0,
		extrapolation:  c.attrFloat("extrapolation_value", 0),
	}
	if _, err := resizeSourceCoord(p.coord, 0, 2, 2, 1, 2, 0, 1); err != nil {
		return err
	}
	if p.mode == "nearest" {
		if _, err := resizeNearestIndex(p.nearest, 0, 1); err != nil {
			return err
		}
	}
	dims := c.dims(0)
	rank := len(dims)
	axes := make([]int, rank)
	for k := range axes {
		axes[k] = k
	}
	if c.hasAttr("axes") {
		axes = c.normAxes(c.attrInts("axes", nil), rank)
		seen := make([]bool, rank)
		for _, a := range axes {
			if seen[a] {
				return fmt.Errorf("axes %v repeats axis %d", c.attrInts("axes", nil), a)
			}
			seen[a] = true
		}
	}
	n := len(axes)
	var roi, scalesIn []float64
	var sizesIn []int64
	if c.has(1) {
		roi = c.constFloats(1)
	}
	if c.has(2) {
		scalesIn = c.constFloats(2)
	}
	if c.has(3) {
		sizesIn = c.constInts(3)
	}
	if len(scalesIn) > 0 && len(sizesIn) > 0 {
		return fmt.Errorf("both scales and sizes are given; exactly one must be")
	}
	if len(scalesIn) == 0 && len(sizesIn) == 0 {
		return fmt.Errorf("neither scales nor sizes is given; exactly one must be")
	}

	// Full-rank roi (only tf_crop_and_resize reads it).
	var fullROI []float64
	if p.coord == "tf_crop_and_resize" && len(roi) > 0 {
		if len(roi) != 2*n {
			return fmt.Errorf("roi has %d elements, expected %d (starts and ends of %d axes)", len(roi), 2*n, n)
		}
		fullROI = make([]float64, 2*rank)
		for a := range rank {
			fullROI[rank+a] = 1
		}
		for k, a := range axes {
			fullROI[a], fullROI[rank+a] = roi[k], roi[n+k]
		}
	}

	scales := make([]float64, rank)
	for a := range scales {
		scales[a] = 1
	}
	var outDims []int
	if len(scalesIn) > 0 {
		if len(scalesIn) != n {
			return fmt.Errorf("scales has %d elements, expected %d", len(scalesIn), n)
		}
		if policy := c.attrString("keep_aspect_ratio_policy", "stretch"); policy != "stretch" {
			return fmt.Errorf("keep_aspect_ratio_policy %q applies to sizes, not scales", policy)
		}
		for k, a := range axes {
			scales[a] = scalesIn[k]
		}
		if outDims, err = resizeOutDims(dims, scales); err != nil {
			return err
		}
	} else {
		if len(sizesIn) != n {
			return fmt.Errorf("sizes has %d elements, expected %d", len(sizesIn), n)
		}
		outDims = append([]int{}, dims...)
		for k, a := range axes {
			if sizesIn[k] < 0 || sizesIn[k] > 1<<40 {
				return fmt.Errorf("sizes[%d] = %d is out of range", k, sizesIn[k])
			}
			if dims[a] == 0 && sizesIn[k] != 0 {
				return fmt.Errorf("axis %d: cannot resize an empty axis to length %d", a, sizesIn[k])
			}
			outDims[a] = int(sizesIn[k])
			if dims[a] > 0 {
				scales[a] = float64(sizesIn[k]) / float64(dims[a])
			}
		}
		switch policy := c.attrString("keep_aspect_ratio_policy", "stretch"); policy {
		case "stretch":
		case "not_larger", "not_smaller":
			s := scales[axes[0]]
			for _, a := range axes[1:] {
				if policy == "not_larger" {
					s = min(s, scales[a])
				} else {
					s = max(s, scales[a])
				}
			}
			for _, a := range axes {
				scales[a] = s
				// round_int: nearest integer, halfway cases up.
				outDims[a] = int(math.Floor(s*float64(dims[a]) + 0.5))
			}
		default:
			return fmt.Errorf("unknown keep_aspect_ratio_policy %q (expected stretch, not_larger or not_smaller)", policy)
		}
	}
	return resizeBuild(c, p, outDims, scales, fullROI)
}
