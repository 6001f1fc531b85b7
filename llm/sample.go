package llm

import (
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck
	"github.com/tensorbridge/tensorbridge/ir"
)

// Sampling on the device, inside the decode and prefill programs.
//
// Each row carries its own settings, applied in transformers' order:
// temperature (0: greedy), top-k (0: off), top-p (1: off), min-p (0:
// off); and a seed and the index of the token being drawn. The random numbers are a hash of (seed, index, vocabulary
// entry) alone, so a request draws the same tokens whatever else shares
// its batch. The draw is the Gumbel-max trick: argmax(logits/T + G), G
// Gumbel noise, samples softmax(logits/T) over the entries the filters
// keep. Top-k and top-p thresholds are found by bisection (no sort):
// searchSteps halvings of the value range.

const searchSteps = 24

// sampleParams are a program's per-row sampling inputs, each [B], and
// the penalties' inputs (penalize).
type sampleParams struct {
	temp, topK, topP, minP, seed, index *Node
	pen                                 penaltyInputs
	mask                                *Node // [B, V] bool: the tokens allowed (constrain.go); nil: all
}

// sample returns the chosen token [B] int32 and its log-probability under
// the model's raw distribution (log-softmax of lg, before penalties,
// biases and filters, as vLLM reports by default) [B] float32. The
// penalties and biases (penalize) come first, then temperature and the
// filters; greedy is the argmax of the penalized logits.
func sample(lg *Node, sp sampleParams) (tok, logprob *Node) {
	tok, logprob, _ = sampleLSM(lg, sp)
	return tok, logprob
}

// sampleLSM is sample that also returns the log-softmax of the raw
// logits [B, V], from which the logprob programs take the top
// alternatives (logprobs.go).
func sampleLSM(lg *Node, sp sampleParams) (tok, logprob, lsm *Node) {
	g := lg.Graph()
	b, vsz := lg.Shape().Dimensions[0], lg.Shape().Dimensions[1]
	f32 := func(x float64) *Node { return ConstAsDType(g, ir.Float32, x) }
	col := func(x *Node) *Node { return BroadcastToDims(Reshape(x, b, 1), b, vsz) }
	negInf := BroadcastToDims(f32(math.Inf(-1)), b, vsz)

	pl := lg
	if sp.pen.on {
		pl = penalize(lg, sp.pen)
	}
	if sp.mask != nil {
		pl = Where(sp.mask, pl, negInf)
	}
	greedy := ArgMax(pl, -1, ir.Int32)

	temp := Max(sp.temp, f32(1e-6))
	x := Div(pl, col(temp))
	// top-k: keep values >= the k-th largest.
	// The count is summed in float32, exact below 2²⁴ entries (every
	// vocabulary), so that it fuses with the comparison on every backend
	// (the cpu engine's fused loops and reductions are float32's).
	// The search starts at the smallest finite value: entries masked to
	// -inf (min_tokens) would leave the bisection stuck at -inf.
	k := sp.topK
	kf := ConvertDType(k, ir.Float32)
	hi, lo := ReduceMax(x, -1), ReduceMin(x, -1)
	if sp.pen.on || sp.mask != nil {
		lo = ReduceMin(Where(GreaterThan(x, negInf), x, col(hi)), -1)
	}
	for range searchSteps {
		mid := Div(Add(lo, hi), f32(2))
		cnt := ReduceSum(ConvertDType(GreaterOrEqual(x, col(mid)), ir.Float32), -1)
		ok := GreaterOrEqual(cnt, kf)
		lo, hi = Where(ok, mid, lo), Where(ok, hi, mid)
	}
	useK := GreaterThan(k, ConstAsDType(g, ir.Int32, 0))
	x = Where(LogicalAnd(col(useK), LessThan(x, col(lo))), negInf, x)
	// top-p, then min-p: transformers' order (TemperatureLogitsWarper,
	// TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper in
	// GenerationMixin._get_logits_processor,
	// https://github.com/huggingface/transformers/blob/main/src/transformers/generation/utils.py).
	// The two do not commute: min-p first renormalises before top-p
	// measures its mass.
	// top-p: the largest threshold whose kept mass is still >= top_p.
	p := Softmax(x, -1)
	plo, phi := ZerosLike(ReduceMax(p, -1)), ReduceMax(p, -1)
	for range searchSteps {
		mid := Div(Add(plo, phi), f32(2))
		mass := ReduceSum(Where(GreaterOrEqual(p, col(mid)), p, ZerosLike(p)), -1)
		ok := GreaterOrEqual(mass, sp.topP)
		plo, phi = Where(ok, mid, plo), Where(ok, phi, mid)
	}
	useP := LessThan(sp.topP, f32(1))
	x = Where(LogicalAnd(col(useP), LessThan(p, col(plo))), negInf, x)
	// min-p: keep probabilities >= min_p × the largest.
	p = Softmax(x, -1)
	x = Where(LessThan(p, col(Mul(sp.minP, ReduceMax(p, -1)))), negInf, x)

	u := uniform(sp.seed, sp.index, b, vsz)
	gumbel := Neg(Log(Neg(Log(u))))
	drawn := ArgMax(Add(x, gumbel), -1, ir.Int32)
	tok = Where(LessOrEqual(sp.temp, f32(0)), greedy, drawn)

	lsm = LogSoftmax(lg, -1)
	onehot := Equal(Iota(g, ir.MakeShape(ir.Int32, b, vsz), 1), col(tok))
	logprob = ReduceSum(Where(onehot, lsm, ZerosLike(lsm)), -1)
	return tok, logprob, lsm
}

// uniform returns [B, V] numbers in (0, 1) from a hash of each row's seed
// and index and the column: murmur3's 32-bit finalizer over a mix of the
// three (shifts as divisions: the pure-Go backend lacks shift ops).
func uniform(seed, index *Node, b, v int) *Node {
	g := seed.Graph()
	u32 := func(x uint32) *Node { return ConstAsDType(g, ir.Uint32, x) }
	s := BroadcastToDims(Reshape(ConvertDType(seed, ir.Uint32), b, 1), b, v)
	i := BroadcastToDims(Reshape(ConvertDType(index, ir.Uint32), b, 1), b, v)
	c := ConvertDType(Iota(g, ir.MakeShape(ir.Int32, b, v), 1), ir.Uint32)
	h := BitwiseXor(BitwiseXor(Mul(s, u32(0x9E3779B1)), Mul(Add(i, u32(1)), u32(0x85EBCA77))), Mul(Add(c, u32(1)), u32(0xC2B2AE3D)))
	h = BitwiseXor(h, Div(h, u32(1<<16)))
	h = Mul(h, u32(0x85EBCA6B))
	h = BitwiseXor(h, Div(h, u32(1<<13)))
	h = Mul(h, u32(0xC2B2AE35))
	h = BitwiseXor(h, Div(h, u32(1<<16)))
	top := ConvertDType(Div(h, u32(1<<8)), ir.Float32) // 24 bits
	return Mul(Add(top, ConstAsDType(g, ir.Float32, 0.5)), ConstAsDType(g, ir.Float32, 1.0/(1<<24)))
}
