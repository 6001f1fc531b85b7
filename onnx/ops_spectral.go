package onnx

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Spectral ops: DFT (17, 20), STFT (17) and MelWeightMatrix (17)
// (https://onnx.ai/onnx/operators/onnx__DFT.html, onnx__STFT.html,
// onnx__MelWeightMatrix.html).
//
// Neither backend has an FFT the importer can rely on (GoMLX's pure-Go
// backend has none), so a DFT is a contraction with cosine and sine
// matrices built on the host in float64 from exact angles 2π·(nk mod N)/N,
// computed in Float64 and rounded once to the input's dtype: O(N²) per
// signal, which is what the sizes these ops see in models (audio frames of
// a few hundred samples) afford.

func init() {
	register("DFT", 17, convDFT(17)).needs(1)
	register("DFT", 20, convDFT(20)).needs(1, 2)
	register("STFT", 17, convSTFT).needs(1, 3)
	register("MelWeightMatrix", 17, nil).withHost(hostMelWeightMatrix).needsAll()
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("DFT", "MelWeightMatrix", "STFT")
}

// dftKind is the transform a DFT node asks for.
type dftKind int

const (
	dftForward dftKind = iota // complex or real to complex, K = N or N/2+1 (onesided)
	dftInverse                // complex to complex, divided by N
	dftIRFFT                  // one-sided complex to real (Hermitian), N outputs
)

// dftMatrices returns the [rows, K] matrices C and S of the transform of
// length n: rows input positions (those at or beyond the length used are
// zero rows, truncating the input), cos and sin of 2π·j·k/n, with the
// Hermitian weights and 1/n of an inverse folded in.
func dftMatrices(kind dftKind, rows, used, n, k int) (cm, sm []float64) {
	cm, sm = make([]float64, rows*k), make([]float64, rows*k)
	for j := range min(rows, used) {
		for q := range k {
			// j indexes input positions, q outputs; the phase is symmetric.
			ang := 2 * math.Pi * float64((j*q)%n) / float64(n)
			c, s := math.Cos(ang), math.Sin(ang)
			switch kind {
			case dftInverse:
				c, s = c/float64(n), s/float64(n)
			case dftIRFFT:
				w := 2.0
				if j == 0 || 2*j == n {
					w = 1
				}
				c, s = w*c/float64(n), w*s/float64(n)
			}
			cm[j*k+q], sm[j*k+q] = c, s
		}
	}
	return cm, sm
}

// dftLast applies the transform along the last axis of xr and xi (Float64
// nodes of equal shape; xi nil for a real signal) and returns the real
// and imaginary parts (imaginary nil for the inverse real transform).
func dftLast(g *graph.Graph, kind dftKind, xr, xi *graph.Node, n, k int) (yr, yi *graph.Node) {
	dims := xr.Shape().Dimensions
	rows := dims[len(dims)-1]
	used := n
	if kind == dftIRFFT {
		used = n/2 + 1
	}
	cm, sm := dftMatrices(kind, rows, used, n, k)
	C := constNode(g, newHostFloats(ir.Float64, []int{rows, k}, cm))
	S := constNode(g, newHostFloats(ir.Float64, []int{rows, k}, sm))
	r := len(dims) - 1
	dot := func(x, m *graph.Node) *graph.Node { return dotGeneral(x, []int{r}, nil, m, []int{0}, nil) }
	switch kind {
	case dftForward: // e^{-iθ}
		yr, yi = dot(xr, C), graph.Neg(dot(xr, S))
		if xi != nil {
			yr, yi = graph.Add(yr, dot(xi, S)), graph.Add(yi, dot(xi, C))
		}
	case dftInverse: // e^{+iθ}/n
		yr, yi = dot(xr, C), dot(xr, S)
		if xi != nil {
			yr, yi = graph.Sub(yr, dot(xi, S)), graph.Add(yi, dot(xi, C))
		}
	case dftIRFFT:
		yr = dot(xr, C)
		if xi != nil {
			yr = graph.Sub(yr, dot(xi, S))
		}
	}
	return yr, yi
}

// splitComplex returns the real and imaginary parts (Float64, the trailing
// axis of size 1 or 2 removed) of an ONNX real-or-complex signal.
func splitComplex(c *opCtx, x *graph.Node) (xr, xi *graph.Node) {
	dims := x.Shape().Dimensions
	r := len(dims)
	if r < 2 || dims[r-1] != 1 && dims[r-1] != 2 {
		c.fail("input: expected a last axis of size 1 (real) or 2 (complex), got shape %v", dims)
	}
	x = graph.ConvertDType(x, ir.Float64)
	xr = graph.Reshape(sliceAxis(x, r-1, 0, 1, 1), dims[:r-1]...)
	if dims[r-1] == 2 {
		xi = graph.Reshape(sliceAxis(x, r-1, 1, 2, 1), dims[:r-1]...)
	}
	return xr, xi
}

// joinComplex stacks real and imaginary parts on a new last axis (a
// single real part gives a last axis of 1) and converts to dt.
func joinComplex(yr, yi *graph.Node, dt ir.DType) *graph.Node {
	parts := []*graph.Node{graph.ExpandDims(yr, -1)}
	if yi != nil {
		parts = append(parts, graph.ExpandDims(yi, -1))
	}
	y := parts[0]
	if len(parts) == 2 {
		y = graph.Concatenate(parts, -1)
	}
	return graph.ConvertDType(y, dt)
}

// moveAxis moves axis from to position to.
func moveAxis(x *graph.Node, from, to int) *graph.Node {
	r := x.Rank()
	if from == to {
		return x
	}
	perm := make([]int, 0, r)
	for k := range r {
		if k != from {
			perm = append(perm, k)
		}
	}
	perm = append(perm[:to], append([]int{from}, perm[to:]...)...)
	return graph.TransposeAllDims(x, perm...)
}

func convDFT(opset int) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		dt := x.DType()
		if !dt.IsFloat() {
			c.fail("input: expected a float tensor, got %s", dt)
		}
		dims := x.Shape().Dimensions
		r := len(dims)
		axis := int64(1)
		if opset >= 20 {
			axis = -2
			if c.has(2) {
				axis = c.constInts(2)[0]
			}
		} else {
			axis = c.attrInt("axis", 1)
		}
		ax := c.normAxis(axis, r)
		if ax == r-1 || ax == 0 && r < 2 {
			c.fail("axis %d: the DFT axis cannot be the last (real/imaginary) axis", axis)
		}
		inverse, onesided := c.attrInt("inverse", 0) != 0, c.attrInt("onesided", 0) != 0
		kind := dftForward
		switch {
		case inverse && onesided:
			kind = dftIRFFT
		case inverse:
			kind = dftInverse
		}
		n := dims[ax]
		if kind == dftIRFFT {
			n = 2 * (dims[ax] - 1)
		}
		if c.has(1) {
			n = int(c.constInts(1)[0])
		}
		if n <= 0 {
			c.fail("dft_length %d: expected a positive length", n)
		}
		k := n
		if kind == dftForward && onesided {
			k = n/2 + 1
		}
		xr, xi := splitComplex(c, x)
		xr = moveAxis(xr, ax, r-2)
		if xi != nil {
			xi = moveAxis(xi, ax, r-2)
		}
		yr, yi := dftLast(c.g, kind, xr, xi, n, k)
		yr = moveAxis(yr, r-2, ax)
		if yi != nil {
			yi = moveAxis(yi, r-2, ax)
		}
		c.set(0, joinComplex(yr, yi, dt))
		return nil
	}
}

// convSTFT frames the signal [batch, length, 1 or 2] with frame_step,
// multiplies each frame by the window and transforms it:
// [batch, frames, bins, 2].
func convSTFT(c *opCtx) error {
	x := c.in(0)
	dt := x.DType()
	if !dt.IsFloat() {
		c.fail("signal: expected a float tensor, got %s", dt)
	}
	dims := x.Shape().Dimensions
	if len(dims) != 3 {
		c.fail("signal: expected [batch, length, 1 or 2], got shape %v", dims)
	}
	step := int(c.constInts(1)[0])
	if step <= 0 {
		c.fail("frame_step %d: expected a positive step", step)
	}
	length := dims[1]
	var window *graph.Node
	fl := length
	if c.has(2) {
		window = c.in(2)
		if window.Rank() != 1 {
			c.fail("window: expected a 1-D tensor, got %s", window.Shape())
		}
		fl = window.Shape().Dimensions[0]
	}
	if c.has(3) {
		fl = int(c.constInts(3)[0])
		if window != nil && window.Shape().Dimensions[0] != fl {
			c.fail("window of %d values for frame_length %d", window.Shape().Dimensions[0], fl)
		}
	}
	if fl <= 0 || fl > length {
		c.fail("frame_length %d: expected 1 to the signal length %d", fl, length)
	}
	frames := 1 + (length-fl)/step
	idx := make([]int, 0, frames*fl)
	for f := range frames {
		for j := range fl {
			idx = append(idx, f*step+j)
		}
	}
	xr, xi := splitComplex(c, x) // [batch, length]
	frame := func(v *graph.Node) *graph.Node {
		v = graph.Reshape(gatherConst(v, 1, idx), dims[0], frames, fl)
		if window != nil {
			v = graph.Mul(v, graph.Reshape(graph.ConvertDType(window, ir.Float64), 1, 1, fl))
		}
		return v
	}
	xr = frame(xr)
	if xi != nil {
		xi = frame(xi)
	}
	k := fl
	if c.attrInt("onesided", 1) != 0 {
		k = fl/2 + 1
	}
	yr, yi := dftLast(c.g, dftForward, xr, xi, fl, k)
	c.set(0, joinComplex(yr, yi, dt))
	return nil
}

// hostMelWeightMatrix builds the [dft_length/2+1, num_mel_bins] matrix of
// triangular mel filters as the specification's reference computes it:
// mel = 2595·log10(1 + hz/700), num_mel_bins+2 points spaced evenly in mel
// from the lower to the upper edge, each mapped back to a spectrogram bin
// floor((dft_length+1)·hz/sample_rate); filter i rises linearly from
// point i to point i+1 and falls to point i+2. The reference's first steps
// are float32 operations (its edge inputs are float32), so they are here.
func hostMelWeightMatrix(c *opCtx) error {
	bins := int(c.constInts(0)[0])
	dftLen := int(c.constInts(1)[0])
	rate := int(c.constInts(2)[0])
	lo, hi := c.constFloats(3)[0], c.constFloats(4)[0]
	if bins <= 0 || dftLen <= 0 || rate <= 0 {
		c.fail("num_mel_bins %d, dft_length %d and sample_rate %d must be positive", bins, dftLen, rate)
	}
	f32 := func(v float64) float64 { return float64(float32(v)) }
	mel := func(hz float64) float64 {
		return f32(2595*f32(math.Log1p(f32(hz/700)))) / math.Log(10)
	}
	lowMel, highMel := mel(lo), mel(hi)
	step := (highMel - lowMel) / float64(bins+2)
	points := make([]int, bins+2)
	for i := range points {
		m := float64(i)*step + lowMel
		hz := 700 * math.Expm1(m/2595*math.Log(10))
		points[i] = int(math.Floor(float64(dftLen+1) * hz / float64(rate)))
	}
	rows := dftLen/2 + 1
	out := make([]float64, rows*bins)
	set := func(j, i int, v float64) {
		if j < 0 || j >= rows {
			c.fail("mel filter %d reaches spectrogram bin %d, beyond the %d bins of dft_length %d", i, j, rows, dftLen)
		}
		out[j*bins+i] = v
	}
	for i := range bins {
		l, ctr, h := points[i], points[i+1], points[i+2]
		if ctr == l {
			set(ctr, i, 1)
		} else {
			for j := l; j <= ctr; j++ {
				set(j, i, float64(j-l)/float64(ctr-l))
			}
		}
		if h > ctr {
			for j := ctr; j < h; j++ {
				set(j, i, float64(h-j)/float64(h-ctr))
			}
		}
	}
	dt := ir.Float32
	if c.hasAttr("output_datatype") {
		d, err := dtypeFromONNX(onnxpb.DataType(c.attrInt("output_datatype", 1)))
		if err != nil {
			return err
		}
		dt = d
	}
	h, err := newHostFloats(ir.Float64, []int{rows, bins}, out).castTo(dt)
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}
