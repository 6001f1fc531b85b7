package onnx

import (
	"math"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Recurrent ops: RNN, GRU and LSTM (one layer, forward, reverse or
// bidirectional). The sequence length is static once shapes are
// specialised, so the time loop is unrolled into the graph: the input
// projection X·Wᵀ is one matrix product over all time steps, and every step
// adds one H·Rᵀ product and the gate arithmetic.
//
// sequence_lens, when given, masks each batch entry past its length: the
// hidden (and cell) state stops changing and Y is zero there, so Y_h/Y_c
// hold the state after the entry's last valid step. For the reverse
// direction the steps past the length come first and leave the initial
// state untouched, so the reverse pass effectively starts at the entry's
// own last element. This is what onnxruntime does; the ONNX reference
// implementation ignores sequence_lens.
//
// clip bounds the input of every gate activation (f and g), not the cell
// state fed to h, as onnxruntime does. LSTM input_forget couples the gates
// as f = 1 - i.

func init() {
	// Versions 1, 3 and 7 differ only in attributes this converter either
	// ignores (output_sequence, removed in 7) or reads with its default
	// (linear_before_reset, added to GRU in 3); 14 added layout; 22 only
	// widened the types.
	for _, k := range []rnnKind{rnnPlain, rnnGRU, rnnLSTM} {
		register(k.op(), 1, rnnConv(k, false))
		register(k.op(), 14, rnnConv(k, true))
	}
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("GRU", "LSTM", "RNN")
}

// rnnKind says which recurrent cell an op computes.
type rnnKind int

const (
	rnnPlain rnnKind = iota
	rnnGRU
	rnnLSTM
)

func (k rnnKind) op() string { return [...]string{"RNN", "GRU", "LSTM"}[k] }

// gates is the number of stacked gate blocks in W and R.
func (k rnnKind) gates() int { return [...]int{1, 3, 4}[k] }

// defaultActs are the per-direction activations when the model gives none.
func (k rnnKind) defaultActs() []string {
	switch k {
	case rnnGRU:
		return []string{"Sigmoid", "Tanh"}
	case rnnLSTM:
		return []string{"Sigmoid", "Tanh", "Tanh"}
	}
	return []string{"Tanh"}
}

// rnnAct is one activation function with its resolved alpha and beta.
type rnnAct struct {
	name        string // lower case
	alpha, beta float64
}

// rnnActUsage says which activations read alpha and beta (in that order
// they consume activation_alpha and activation_beta), and rnnActDefaults
// gives the values used when the lists run out: those of the ONNX operator
// of the same name (LeakyRelu 0.01, ThresholdedRelu 1, HardSigmoid 0.2 and
// 0.5, Elu 1); Affine and ScaledTanh, which have no operator left, default
// to the identity scaling (alpha 1, beta 0 and alpha 1, beta 1).
var rnnActUsage = map[string][2]bool{
	"relu": {false, false}, "tanh": {false, false}, "sigmoid": {false, false},
	"affine": {true, true}, "leakyrelu": {true, false}, "thresholdedrelu": {true, false},
	"scaledtanh": {true, true}, "hardsigmoid": {true, true}, "elu": {true, false},
	"softsign": {false, false}, "softplus": {false, false},
}

var rnnActDefaults = map[string][2]float64{
	"affine": {1, 0}, "leakyrelu": {0.01, 0}, "thresholdedrelu": {1, 0},
	"scaledtanh": {1, 1}, "hardsigmoid": {0.2, 0.5}, "elu": {1, 0},
}

// apply computes the activation on x.
func (a rnnAct) apply(x *graph.Node) *graph.Node {
	s := func(v float64) *graph.Node { return scalarLikeB(x, v) }
	switch a.name {
	case "relu":
		return graph.Max(x, s(0))
	case "tanh":
		return graph.Tanh(x)
	case "sigmoid":
		return graph.Sigmoid(x)
	case "affine":
		return graph.Add(graph.Mul(x, s(a.alpha)), s(a.beta))
	case "leakyrelu":
		return graph.Where(graph.GreaterOrEqual(x, s(0)), x, graph.Mul(x, s(a.alpha)))
	case "thresholdedrelu":
		return graph.Where(graph.GreaterOrEqual(x, s(a.alpha)), x, s(0))
	case "scaledtanh":
		return graph.Mul(s(a.alpha), graph.Tanh(graph.Mul(x, s(a.beta))))
	case "hardsigmoid":
		y := graph.Add(graph.Mul(x, s(a.alpha)), s(a.beta))
		return graph.Min(graph.Max(y, s(0)), s(1))
	case "elu":
		return graph.Where(graph.GreaterOrEqual(x, s(0)), x, graph.Mul(s(a.alpha), graph.Expm1(x)))
	case "softsign":
		return graph.Div(x, graph.Add(graph.Abs(x), s(1)))
	case "softplus":
		return softplus(x)
	}
	panic(errorf("unknown activation %q", a.name)) // rnnActivations validated the name
}

// rnnActivations resolves the activations attribute into per-direction
// lists of n functions each. A list of n functions for a bidirectional op
// is used for both directions. activation_alpha and activation_beta are
// consumed in list order, each only by the functions that take it.
func rnnActivations(c *opCtx, k rnnKind, dirs int) [][]rnnAct {
	n := len(k.defaultActs())
	names := k.defaultActs()
	if a := c.attr("activations"); a != nil {
		names = make([]string, len(a.Strings))
		for i, s := range a.Strings {
			names[i] = string(s)
		}
	}
	if len(names) != n && len(names) != n*dirs {
		c.fail("activations %v: expected %d names (or %d for both directions), got %d", names, n, n*dirs, len(names))
	}
	alphas := c.attrFloats("activation_alpha", nil)
	betas := c.attrFloats("activation_beta", nil)
	acts := make([]rnnAct, len(names))
	for i, name := range names {
		a := rnnAct{name: strings.ToLower(name)}
		use, ok := rnnActUsage[a.name]
		if !ok {
			c.fail("activation %q is not one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus", name)
		}
		def := rnnActDefaults[a.name]
		a.alpha, a.beta = def[0], def[1]
		if use[0] && len(alphas) > 0 {
			a.alpha, alphas = alphas[0], alphas[1:]
		}
		if use[1] && len(betas) > 0 {
			a.beta, betas = betas[0], betas[1:]
		}
		acts[i] = a
	}
	out := make([][]rnnAct, dirs)
	for d := range dirs {
		if len(acts) == n {
			out[d] = acts
		} else {
			out[d] = acts[d*n : (d+1)*n]
		}
	}
	return out
}

// rnnConv returns the converter for one recurrent op; withLayout says the
// opset has the layout attribute (14 and later).
func rnnConv(k rnnKind, withLayout bool) converterFunc {
	return func(c *opCtx) error {
		x := c.in(0)
		if x.Rank() != 3 {
			c.fail("input X must have rank 3, got %s", x.Shape())
		}
		layout := int64(0)
		if withLayout {
			layout = c.attrInt("layout", 0)
			if layout != 0 && layout != 1 {
				c.fail("layout must be 0 or 1, got %d", layout)
			}
		}
		if layout == 1 {
			x = graph.Transpose(x, 0, 1) // [batch, seq, input] -> [seq, batch, input]
		}
		xd := x.Shape().Dimensions
		steps, batch, inSize := xd[0], xd[1], xd[2]

		dirs := 1
		direction := c.attrString("direction", "forward")
		switch direction {
		case "forward", "reverse":
		case "bidirectional":
			dirs = 2
		default:
			c.fail("direction must be forward, reverse or bidirectional, got %q", direction)
		}

		w, r := c.in(1), c.in(2)
		g := k.gates()
		rd := r.Shape().Dimensions
		if len(rd) != 3 {
			c.fail("input R must have rank 3, got %s", r.Shape())
		}
		hidden := rd[2]
		if c.hasAttr("hidden_size") {
			if hs := int(c.attrInt("hidden_size", 0)); hs != hidden {
				c.fail("hidden_size %d does not match R %s (expected [%d, %d, %d])", hs, r.Shape(), dirs, g*hs, hs)
			}
		}
		if !equalInts(rd, []int{dirs, g * hidden, hidden}) {
			c.fail("input R: expected shape [%d, %d, %d] (%s %s), got %s", dirs, g*hidden, hidden, k.op(), direction, r.Shape())
		}
		if wd := w.Shape().Dimensions; !equalInts(wd, []int{dirs, g * hidden, inSize}) {
			c.fail("input W: expected shape [%d, %d, %d], got %s", dirs, g*hidden, inSize, w.Shape())
		}
		dt := x.DType()
		if w.DType() != dt || r.DType() != dt {
			c.fail("X, W and R must share a dtype, got %s, %s and %s", dt, w.DType(), r.DType())
		}

		var bias *graph.Node
		if c.has(3) {
			bias = c.in(3)
			if !equalInts(bias.Shape().Dimensions, []int{dirs, 2 * g * hidden}) {
				c.fail("input B: expected shape [%d, %d], got %s", dirs, 2*g*hidden, bias.Shape())
			}
		}
		var seqLens *graph.Node
		if c.has(4) {
			seqLens = c.in(4)
			if !equalInts(seqLens.Shape().Dimensions, []int{batch}) || !seqLens.DType().IsInt() {
				c.fail("input sequence_lens: expected an integer tensor of shape [%d], got %s", batch, seqLens.Shape())
			}
			seqLens = graph.ConvertDType(seqLens, ir.Int64)
			if c.isHost(4) {
				if v := c.constInts(4); rnnAllEqual(v, int64(steps)) {
					seqLens = nil // every entry is full length: no masking
				}
			}
		}
		state := func(k int, what string) *graph.Node {
			if !c.has(k) {
				return nil
			}
			s := c.in(k)
			want := []int{dirs, batch, hidden}
			if layout == 1 {
				want = []int{batch, dirs, hidden}
			}
			if !equalInts(s.Shape().Dimensions, want) {
				c.fail("input %s: expected shape %v, got %s", what, want, s.Shape())
			}
			if layout == 1 {
				s = graph.Transpose(s, 0, 1)
			}
			return s
		}
		initH := state(5, "initial_h")
		var initC, peep *graph.Node
		if k == rnnLSTM {
			initC = state(6, "initial_c")
			if c.has(7) {
				peep = c.in(7)
				if !equalInts(peep.Shape().Dimensions, []int{dirs, 3 * hidden}) {
					c.fail("input P: expected shape [%d, %d], got %s", dirs, 3*hidden, peep.Shape())
				}
			}
		}

		cell := rnnCell{
			kind: k, hidden: hidden, batch: batch,
			linearBeforeReset: k == rnnGRU && c.attrInt("linear_before_reset", 0) != 0,
			inputForget:       k == rnnLSTM && c.attrInt("input_forget", 0) != 0,
		}
		if c.hasAttr("clip") {
			clip := c.attrFloat("clip", 0)
			if !(clip > 0) || math.IsInf(clip, 0) {
				c.fail("clip must be a positive finite threshold, got %v", clip)
			}
			cell.clip = clip
		}
		acts := rnnActivations(c, k, dirs)

		ys := make([]*graph.Node, dirs)
		hs := make([]*graph.Node, dirs)
		cs := make([]*graph.Node, dirs)
		for d := range dirs {
			cell.acts = acts[d]
			pick := func(n *graph.Node, dims ...int) *graph.Node {
				if n == nil {
					return nil
				}
				return graph.Reshape(sliceAxis(n, 0, d, d+1, 1), dims...)
			}
			cell.w = pick(w, g*hidden, inSize)
			cell.r = pick(r, g*hidden, hidden)
			cell.bias = pick(bias, 2*g*hidden)
			cell.peep = pick(peep, 3*hidden)
			h0 := pick(initH, batch, hidden)
			if h0 == nil {
				h0 = filled(c.g, dt, []int{batch, hidden}, 0)
			}
			var c0 *graph.Node
			if k == rnnLSTM {
				c0 = pick(initC, batch, hidden)
				if c0 == nil {
					c0 = filled(c.g, dt, []int{batch, hidden}, 0)
				}
			}
			reverse := direction == "reverse" || d == 1
			ys[d], hs[d], cs[d] = cell.run(x, h0, c0, seqLens, reverse, c.wantsOutput(0))
		}

		if c.wantsOutput(0) {
			y := graph.Stack(ys, 1) // [seq, dirs, batch, hidden]
			if layout == 1 {
				y = graph.TransposeAllAxes(y, 2, 0, 1, 3)
			}
			c.set(0, y)
		}
		final := func(parts []*graph.Node) *graph.Node {
			s := graph.Stack(parts, 0) // [dirs, batch, hidden]
			if layout == 1 {
				s = graph.Transpose(s, 0, 1)
			}
			return s
		}
		if c.wantsOutput(1) {
			c.set(1, final(hs))
		}
		if k == rnnLSTM && c.wantsOutput(2) {
			c.set(2, final(cs))
		}
		return nil
	}
}

// rnnAllEqual says whether every element of v is want (and v is not empty).
func rnnAllEqual(v []int64, want int64) bool {
	for _, e := range v {
		if e != want {
			return false
		}
	}
	return len(v) > 0
}

// rnnCell is one direction of a recurrent op: its weights (already sliced
// to the direction), activations and options.
type rnnCell struct {
	kind                           rnnKind
	hidden, batch                  int
	w, r                           *graph.Node // [gates·hidden, input], [gates·hidden, hidden]
	bias                           *graph.Node // [2·gates·hidden] (Wb then Rb), or nil
	peep                           *graph.Node // [3·hidden] (LSTM i, o, f), or nil
	acts                           []rnnAct
	clip                           float64 // 0: no clipping
	linearBeforeReset, inputForget bool
}

// gate returns block k (of width hidden) of the last axis of n.
func (cl *rnnCell) gate(n *graph.Node, k int) *graph.Node {
	return sliceAxis(n, n.Rank()-1, k*cl.hidden, (k+1)*cl.hidden, 1)
}

// act applies activation k after clipping its input.
func (cl *rnnCell) act(k int, x *graph.Node) *graph.Node {
	if cl.clip > 0 {
		x = graph.Min(graph.Max(x, scalarLikeB(x, -cl.clip)), scalarLikeB(x, cl.clip))
	}
	return cl.acts[k].apply(x)
}

// rnnVecTo broadcasts a vector of length n onto dims (the vector on the last
// axis).
func rnnVecTo(v *graph.Node, dims []int) *graph.Node {
	ones := make([]int, len(dims))
	for k := range ones {
		ones[k] = 1
	}
	ones[len(ones)-1] = v.Shape().Dimensions[0]
	return broadcastNodeTo(graph.Reshape(v, ones...), dims)
}

// rnnTimesT is a·bᵀ for matrices a [m, k] and b [n, k].
func rnnTimesT(a, b *graph.Node) *graph.Node {
	return dotGeneral(a, []int{1}, nil, b, []int{1}, nil)
}

// run unrolls the recurrence over x [seq, batch, input] from h0 (and c0 for
// LSTM) and returns Y [seq, batch, hidden] in time order (nil unless
// wantY), the final hidden state and, for LSTM, the final cell state.
// seqLens ([batch], Int64) masks steps past each entry's length.
func (cl *rnnCell) run(x, h0, c0, seqLens *graph.Node, reverse, wantY bool) (y, h, c *graph.Node) {
	xd := x.Shape().Dimensions
	steps, batch, inSize := xd[0], xd[1], xd[2]
	gh := cl.kind.gates() * cl.hidden
	h, c = h0, c0
	if steps == 0 {
		if wantY {
			y = graph.Reshape(h0, 1, batch, cl.hidden)
			y = sliceAxis(y, 0, 0, 0, 1)
		}
		return y, h, c
	}

	// Input projection of every step at once, with the biases that do not
	// depend on the state folded in. GRU keeps Rbh apart: it sits inside
	// the reset gate's product.
	xw := rnnTimesT(graph.Reshape(x, steps*batch, inSize), cl.w)
	xw = graph.Reshape(xw, steps, batch, gh)
	var rbh *graph.Node
	if cl.bias != nil {
		wb := sliceAxis(cl.bias, 0, 0, gh, 1)
		rb := sliceAxis(cl.bias, 0, gh, 2*gh, 1)
		b := graph.Add(wb, rb)
		if cl.kind == rnnGRU {
			rbh = cl.gate(rb, 2)
			b = graph.Concatenate([]*graph.Node{sliceAxis(b, 0, 0, 2*cl.hidden, 1), cl.gate(wb, 2)}, 0)
		}
		xw = graph.Add(xw, rnnVecTo(b, xw.Shape().Dimensions))
	}
	var rzr, rh *graph.Node
	if cl.kind == rnnGRU && !cl.linearBeforeReset {
		rzr = sliceAxis(cl.r, 0, 0, 2*cl.hidden, 1)
		rh = sliceAxis(cl.r, 0, 2*cl.hidden, 3*cl.hidden, 1)
	}
	bh := []int{batch, cl.hidden}
	var zeros *graph.Node
	if seqLens != nil && wantY {
		zeros = filled(x.Graph(), x.DType(), bh, 0)
	}

	ys := make([]*graph.Node, steps)
	for i := range steps {
		t := i
		if reverse {
			t = steps - 1 - i
		}
		xt := graph.Reshape(sliceAxis(xw, 0, t, t+1, 1), batch, gh)
		var hNew, cNew *graph.Node
		switch cl.kind {
		case rnnPlain:
			hNew = cl.act(0, graph.Add(xt, rnnTimesT(h, cl.r)))
		case rnnGRU:
			hNew = cl.gruStep(xt, h, rzr, rh, rbh)
		case rnnLSTM:
			hNew, cNew = cl.lstmStep(xt, h, c)
		}
		yt := hNew
		if seqLens != nil {
			tt := filled(x.Graph(), ir.Int64, []int{batch}, float64(t))
			valid := graph.LessThan(tt, seqLens)
			valid = broadcastNodeTo(graph.Reshape(valid, batch, 1), bh)
			hNew = graph.Where(valid, hNew, h)
			if cNew != nil {
				cNew = graph.Where(valid, cNew, c)
			}
			if wantY {
				yt = graph.Where(valid, yt, zeros)
			}
		}
		h, c = hNew, cNew
		ys[t] = yt
	}
	if wantY {
		y = graph.Stack(ys, 0)
	}
	return y, h, c
}

// gruStep computes one GRU step from the projected input xt [batch,
// 3·hidden] (biases folded in except Rbh) and the previous state h.
func (cl *rnnCell) gruStep(xt, h, rzr, rh, rbh *graph.Node) *graph.Node {
	var hrZR, hrH *graph.Node // recurrent products for z|r and for the hidden gate
	if cl.linearBeforeReset {
		hr := rnnTimesT(h, cl.r)
		hrZR = sliceAxis(hr, 1, 0, 2*cl.hidden, 1)
		hrH = cl.gate(hr, 2)
		if rbh != nil {
			hrH = graph.Add(hrH, rnnVecTo(rbh, hrH.Shape().Dimensions))
		}
	} else {
		hrZR = rnnTimesT(h, rzr)
	}
	zr := graph.Add(sliceAxis(xt, 1, 0, 2*cl.hidden, 1), hrZR)
	z := cl.act(0, cl.gate(zr, 0))
	r := cl.act(0, cl.gate(zr, 1))
	var pre *graph.Node
	if cl.linearBeforeReset {
		pre = graph.Add(cl.gate(xt, 2), graph.Mul(r, hrH))
	} else {
		rec := rnnTimesT(graph.Mul(r, h), rh)
		if rbh != nil {
			rec = graph.Add(rec, rnnVecTo(rbh, rec.Shape().Dimensions))
		}
		pre = graph.Add(cl.gate(xt, 2), rec)
	}
	hh := cl.act(1, pre)
	one := scalarLikeB(z, 1)
	return graph.Add(graph.Mul(graph.Sub(one, z), hh), graph.Mul(z, h))
}

// lstmStep computes one LSTM step (gates i, o, f, c in W and R; peepholes
// i, o, f in P) and returns the new hidden and cell states.
func (cl *rnnCell) lstmStep(xt, h, c *graph.Node) (*graph.Node, *graph.Node) {
	pre := graph.Add(xt, rnnTimesT(h, cl.r))
	peep := func(k int, state *graph.Node) *graph.Node {
		if cl.peep == nil {
			return nil
		}
		return graph.Mul(rnnVecTo(cl.gate(cl.peep, k), state.Shape().Dimensions), state)
	}
	withPeep := func(x, p *graph.Node) *graph.Node {
		if p == nil {
			return x
		}
		return graph.Add(x, p)
	}
	i := cl.act(0, withPeep(cl.gate(pre, 0), peep(0, c)))
	var f *graph.Node
	if cl.inputForget {
		f = graph.Sub(scalarLikeB(i, 1), i)
	} else {
		f = cl.act(0, withPeep(cl.gate(pre, 2), peep(2, c)))
	}
	cc := cl.act(1, cl.gate(pre, 3))
	cNew := graph.Add(graph.Mul(f, c), graph.Mul(i, cc))
	o := cl.act(0, withPeep(cl.gate(pre, 1), peep(1, cNew)))
	hNew := graph.Mul(o, cl.acts[2].apply(cNew))
	return hNew, cNew
}
