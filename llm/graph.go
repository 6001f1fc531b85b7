package llm

import (
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge/ir"
)

// The decoder as GoMLX graphs. One function, step, runs the layers over a
// [B, T] block of tokens whose keys and values go into the KV cache:
// prefill is B = 1, T = the prompt bucket (attending to the block's own
// keys), decode is T = 1 over B sequences (attending to their cache rows).
// Weights are graph parameters, passed as the device buffers the model
// owns, so every program shares one copy of them.

// netWeights indexes the weight parameters of a program.
type netWeights struct {
	c        *Config
	p        []*Node
	cos, sin *Node
	scales   []*Node // int8 projections' scales (quant.go), else empty
	// lora: the adapters being trained (finetune.go), A [r, in] and B
	// [out, r] by loraKey(layer, projection); nil when generating.
	lora      map[int][2]*Node
	loraScale float64
	drop      *loraDropout // LoRA dropout in training (finetune.go); nil without
	// remat: the trained nodes when the layers are rematerialised in
	// training (remat.go); nil otherwise.
	remat map[*Node]bool
	// rowLoRA: served adapters (adapters.go), stacked A and B by loraKey;
	// table: each cache slot's adapter; rowIdx [B]: each row's, set by
	// step from its slots (nil without a cache: the base model).
	rowLoRA       map[int][2]*Node
	table, rowIdx *Node
}

func newNetWeights(c *Config, p []*Node) netWeights {
	n := len(weightSpecs(c))
	s := n + 2 + numScaleParams(c)
	w := netWeights{c: c, p: p[:n], cos: p[n], sin: p[n+1], scales: p[n+2 : s]}
	w.adapterWeights(c, p[s:numWeightParams(c)])
	return w
}

// numWeightParams is the count of weight parameters including the rope
// tables and, with int8 projections, their scales.
func numWeightParams(c *Config) int {
	return len(weightSpecs(c)) + 2 + numScaleParams(c) + numAdapterParams(c)
}

func (w netWeights) embed() *Node { return w.p[0] }
func (w netWeights) layer(l, i int) *Node {
	return w.p[1+l*w.c.perLayer()+i]
}
func (w netWeights) norm() *Node { return w.p[1+w.c.Layers*w.c.perLayer()] }
func (w netWeights) head() *Node {
	if w.c.TiedEmbeddings {
		return w.embed()
	}
	return w.p[2+w.c.Layers*w.c.perLayer()]
}

// Layer weight indices, in weightSpecs' order.
const (
	wInNorm = iota
	wQ
	wK
	wV
	wO
	wPostNorm
	wGate
	wUp
	wDown
	wQBias // with QKVBias: q, k, v biases; then q_norm, k_norm with QKNorm
)

func (w netWeights) qkNorm(l int) (q, k *Node) {
	base := wQBias
	if w.c.QKVBias {
		base += 3
	}
	return w.layer(l, base), w.layer(l, base+1)
}

// rmsNorm is transformers' LlamaRMSNorm: in float32, then scaled by the
// weight in the activations' dtype.
func rmsNorm(x, weight *Node, eps float64) *Node {
	dt := x.DType()
	x32 := ConvertDType(x, ir.Float32)
	ms := ReduceAndKeep(Square(x32), ReduceMean, -1)
	y := Mul(x32, Rsqrt(Add(ms, ConstAsDType(x.Graph(), ir.Float32, eps))))
	return Mul(ConvertDType(y, dt), bcastLast(weight, x))
}

// bcastLast broadcasts v [n] to x's shape, whose last axis is n.
func bcastLast(v, x *Node) *Node {
	dims := x.Shape().Dimensions
	ones := make([]int, len(dims))
	for i := range ones {
		ones[i] = 1
	}
	ones[len(ones)-1] = dims[len(dims)-1]
	return BroadcastToDims(Reshape(v, ones...), dims...)
}

// linear is x [N, in] times W [out, in] transposed, plus bias when given.
func linear(x, w, bias *Node) *Node {
	y := Einsum("ni,oi->no", x, w)
	if bias != nil {
		y = Add(y, bcastLast(bias, y))
	}
	return y
}

// rope rotates x [B, T, heads, D] by the angles at positions [B, T]
// (transformers' rotate_half convention).
func rope(x, cos, sin, positions *Node) *Node {
	dt := x.DType()
	b, t := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	half := x.Shape().Dimensions[3] / 2
	idx := Reshape(positions, b*t, 1)
	c := Reshape(Gather(cos, idx), b, t, 1, half)
	s := Reshape(Gather(sin, idx), b, t, 1, half)
	x32 := ConvertDType(x, ir.Float32)
	x1 := Slice(x32, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, half))
	x2 := Slice(x32, AxisRange(), AxisRange(), AxisRange(), AxisRange(half))
	c = BroadcastToDims(c, b, t, x.Shape().Dimensions[2], half)
	s = BroadcastToDims(s, b, t, x.Shape().Dimensions[2], half)
	r1 := Sub(Mul(x1, c), Mul(x2, s))
	r2 := Add(Mul(x2, c), Mul(x1, s))
	return ConvertDType(Concatenate([]*Node{r1, r2}, -1), dt)
}

// attention is grouped-query attention of q [B, T, Hkv, G, D] over keys and
// values [B, S, Hkv, D], query positions [B, T] and key positions [B, S]:
// causal, and within the sliding window when the config has one. A key
// position of noKey is never attended.
func attention(c *Config, q, k, v, qpos, kpos *Node) *Node {
	g := q.Graph()
	dims := q.Shape().Dimensions
	b, t, hkv, grp, d := dims[0], dims[1], dims[2], dims[3], dims[4]
	s := k.Shape().Dimensions[1]
	scores := Einsum("btkgd,bskd->bkgts", ConvertDType(q, ir.Float32), ConvertDType(k, ir.Float32))
	scores = Mul(scores, ConstAsDType(g, ir.Float32, 1/math.Sqrt(float64(d))))
	// The mask is made once per row, [B, 1, 1, T, S], and broadcast over
	// the heads where it is read: a training step's backward pass keeps it.
	qp := BroadcastToDims(Reshape(qpos, b, 1, 1, t, 1), b, 1, 1, t, s)
	kp := BroadcastToDims(Reshape(kpos, b, 1, 1, 1, s), b, 1, 1, t, s)
	mask := LessOrEqual(kp, qp)
	if c.SlidingWindow > 0 {
		mask = LogicalAnd(mask, GreaterThan(kp, Sub(qp, ConstAsDType(g, ir.Int32, c.SlidingWindow))))
	}
	mask = BroadcastToDims(mask, b, hkv, grp, t, s)
	scores = Where(mask, scores, BroadcastToDims(ConstAsDType(g, ir.Float32, math.Inf(-1)), b, hkv, grp, t, s))
	probs := Softmax(scores, -1)
	out := Einsum("bkgts,bskd->btkgd", probs, ConvertDType(v, ir.Float32))
	return ConvertDType(Reshape(out, b*t, hkv*grp*d), q.DType())
}

// noKey is a key position no query reaches.
const noKey = 1 << 30

// cacheIO says how a step reads and writes the paged KV cache (paged.go).
type cacheIO struct {
	// k, v: the block pools [numBlocks, blockSize, L, Hkv, D].
	k, v *Node
	// slots [B] int32: each row's sequence slot (its adapter's index in
	// the adapter table; the cache itself is reached through table).
	slots *Node
	// table [B, W] int32: each row's block table, block ids of its
	// positions [0, W*blockSize) (the null block past its own).
	table *Node
	// prefill: the block is a prompt at positions 0..T-1 attending to its
	// own keys; decode (T = 1): each row attends to its table's cached
	// positions below its own, and to its new key.
	prefill bool
	// ctx (decode, chunk): the positions [0, ctx) a step reads, ctx =
	// W*blockSize; every row's position is below it. Reading only the
	// live prefix (a context bucket rounded up to whole blocks) instead of
	// the whole context is what keeps a decode step's attention
	// proportional to the sequences' length (BENCHMARKS.md, "LLM
	// generation").
	ctx int
	// scatter writes the cache with ScatterUpdate (an engine without
	// DynamicUpdateSlice); otherwise DynamicUpdateSlice at a dynamic
	// block index, which XLA does in place in the donated pool.
	scatter bool
	// chunk (chunked.go): B = 1, a block of T prompt tokens at positions
	// [p, p+T), p and T multiples of the block size, written layer by
	// layer, then attending, like decode, to positions [0, ctx) causally.
	chunk bool
}

// step runs the decoder on tokens [B, T] at positions [B, T] and returns
// the final hidden states [B*T, H] (after the last norm) and the updated
// cache (nil nodes when cache is nil: no cache kept, as for prompt logits).
func step(c *Config, w netWeights, tokens, positions *Node, cache *cacheIO) (hidden, newK, newV *Node) {
	g := tokens.Graph()
	b, t := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	hkv, d := c.KVHeads, c.HeadDim
	x := Gather(w.embed(), Reshape(tokens, b*t, 1))
	if w.table != nil && cache != nil {
		w.rowIdx = Reshape(Gather(w.table, Reshape(cache.slots, b, 1)), b)
	}
	if cache != nil && cache.table != nil { // the read width: whole blocks of the table
		cache.ctx = cache.table.Shape().Dimensions[1] * cache.k.Shape().Dimensions[1]
	}
	var cachedK, cachedV, cachedPos *Node
	inPlace := cache != nil && !cache.prefill && (!cache.scatter || cache.chunk)
	kc, vc := (*Node)(nil), (*Node)(nil)
	if inPlace {
		kc, vc = cache.k, cache.v
		if cache.chunk { // attention masks causally: key positions as they are
			cachedPos = Iota(g, ir.MakeShape(ir.Int32, b, cache.ctx), 1)
		} else {
			cachedPos = livePositions(positions, cache.ctx)
		}
	} else if cache != nil && !cache.prefill {
		cachedK = readBlocks(cache.k, cache.table) // [B, ctx, L, Hkv, D]
		cachedV = readBlocks(cache.v, cache.table)
		mc := cachedK.Shape().Dimensions[1]
		iota := Iota(g, ir.MakeShape(ir.Int32, b, mc), 1)
		cachedPos = Where(LessThan(iota, BroadcastToDims(positions, b, mc)), iota, BroadcastToDims(ConstAsDType(g, ir.Int32, noKey), b, mc))
	}
	var ks, vs []*Node
	// attend is layer l's attention of its queries to its keys and values
	// and, with a cache, the cached ones.
	attend := func(l int, q5, k, v *Node) *Node {
		ks, vs = append(ks, k), append(vs, v)
		switch {
		case inPlace:
			kc, vc = writeLayer(cache, kc, k, l, positions), writeLayer(cache, vc, v, l, positions)
			return attention(c, q5, readLayer(kc, cache.table, l), readLayer(vc, cache.table, l), positions, cachedPos)
		case cachedK == nil:
			return attention(c, q5, k, v, positions, Iota(g, ir.MakeShape(ir.Int32, b, t), 1))
		}
		layerOf := func(x *Node) *Node {
			s := x.Shape().Dimensions[1]
			return Reshape(Slice(x, AxisRange(), AxisRange(), AxisRange(l, l+1)), b, s, hkv, d)
		}
		keys := Concatenate([]*Node{layerOf(cachedK), k}, 1)
		vals := Concatenate([]*Node{layerOf(cachedV), v}, 1)
		return attention(c, q5, keys, vals, positions, Concatenate([]*Node{cachedPos, positions}, 1))
	}
	for l := range c.Layers {
		if w.remat != nil && cache == nil {
			x = w.rematLayer(l, x, func(w netWeights, x *Node) *Node { return layer(c, w, l, x, positions, attend) })
			continue
		}
		x = layer(c, w, l, x, positions, attend)
	}
	hidden = rmsNorm(x, w.norm(), c.RMSEps)
	if cache == nil {
		return hidden, nil, nil
	}
	if inPlace {
		return hidden, kc, vc
	}
	kAll, vAll := Stack(ks, 2), Stack(vs, 2) // [B, T, L, Hkv, D]
	return hidden, writeCache(cache, cache.k, kAll, positions), writeCache(cache, cache.v, vAll, positions)
}

// layer is decoder layer l on x [B*T, H] at positions [B, T]: attention
// (through attend, which knows the cache) and the MLP, each residual.
func layer(c *Config, w netWeights, l int, x, positions *Node, attend func(l int, q5, k, v *Node) *Node) *Node {
	b, t := positions.Shape().Dimensions[0], positions.Shape().Dimensions[1]
	hq, hkv, d := c.Heads, c.KVHeads, c.HeadDim
	h := rmsNorm(x, w.layer(l, wInNorm), c.RMSEps)
	var qb, kb, vb *Node
	if c.QKVBias {
		qb, kb, vb = w.layer(l, wQBias), w.layer(l, wQBias+1), w.layer(l, wQBias+2)
	}
	q := Reshape(w.proj(l, wQ, h, qb), b, t, hq, d)
	k := Reshape(w.proj(l, wK, h, kb), b, t, hkv, d)
	v := Reshape(w.proj(l, wV, h, vb), b, t, hkv, d)
	if c.QKNorm {
		qn, kn := w.qkNorm(l)
		q = rmsNorm(q, qn, c.RMSEps)
		k = rmsNorm(k, kn, c.RMSEps)
	}
	q = rope(q, w.cos, w.sin, positions)
	k = rope(k, w.cos, w.sin, positions)
	att := attend(l, Reshape(q, b, t, hkv, hq/hkv, d), k, v)
	x = Add(x, w.proj(l, wO, att, nil))
	h = rmsNorm(x, w.layer(l, wPostNorm), c.RMSEps)
	gate := w.proj(l, wGate, h, nil)
	up := w.proj(l, wUp, h, nil)
	return Add(x, w.proj(l, wDown, Mul(Mul(gate, Sigmoid(gate)), up), nil))
}

// writeCache stores block [B, T, L, Hkv, D] (all layers) into the pool
// at each row's positions through its block table (paged.go).
func writeCache(io *cacheIO, cache, block, positions *Node) *Node {
	block = ConvertDType(block, cache.DType())
	blk, off := blockOf(io, positions)
	if io.scatter {
		return scatterRows(cache, block, blk, off, nil)
	}
	return updateBlocks(cache, block, blk, off, nil)
}

// In-place decode (XLA backends): each layer writes its new keys and
// values into the cache first (writeLayer) and then attends to its cache
// rows (readLayer), which now hold them. Every read of the cache thus
// comes after the write before it and feeds the next layer's write, so XLA
// can run the whole step in the donated cache's memory. Reading the cached
// rows before writing the block (as the cpu path does) leaves the last
// layer's read unordered against the write, and XLA then copies the whole
// cache, twice, to keep that read safe.

// livePositions is each row's key positions [B, mc] in a cache of mc
// positions: those up to the row's own (written this step), noKey beyond.
func livePositions(positions *Node, mc int) *Node {
	g := positions.Graph()
	b := positions.Shape().Dimensions[0]
	iota := Iota(g, ir.MakeShape(ir.Int32, b, mc), 1)
	return Where(LessOrEqual(iota, BroadcastToDims(positions, b, mc)), iota, BroadcastToDims(ConstAsDType(g, ir.Int32, noKey), b, mc))
}

// writeLayer stores layer l's block [B, T, Hkv, D] into the pool at
// each row's positions through its block table (T > 1: a prompt chunk,
// chunked.go), by DynamicUpdateSlice, or by ScatterUpdate on a backend
// without it.
func writeLayer(io *cacheIO, cache, block *Node, l int, positions *Node) *Node {
	g := cache.Graph()
	dims := block.Shape().Dimensions
	block = Reshape(ConvertDType(block, cache.DType()), dims[0], dims[1], 1, dims[2], dims[3])
	blk, off := blockOf(io, positions)
	layer := ConstAsDType(g, ir.Int32, l)
	if io.scatter {
		return scatterRows(cache, block, blk, off, layer)
	}
	return updateBlocks(cache, block, blk, off, layer)
}

// readLayer gathers layer l of each row's table blocks, positions
// [0, W*blockSize): [B, W*blockSize, Hkv, D], the layout of a contiguous
// row, so attention's arithmetic does not see the paging.
func readLayer(cache, table *Node, l int) *Node {
	dims := cache.Shape().Dimensions
	b, w := table.Shape().Dimensions[0], table.Shape().Dimensions[1]
	layer := Slice(cache, AxisRange(), AxisRange(), AxisRange(l, l+1))
	return Reshape(Gather(layer, Reshape(table, b*w, 1)), b, w*dims[1], dims[3], dims[4])
}

// readBlocks gathers every layer of each row's table blocks:
// [B, W*blockSize, L, Hkv, D].
func readBlocks(cache, table *Node) *Node {
	dims := cache.Shape().Dimensions
	b, w := table.Shape().Dimensions[0], table.Shape().Dimensions[1]
	return Reshape(Gather(cache, Reshape(table, b*w, 1)), b, w*dims[1], dims[2], dims[3], dims[4])
}

// logits is the LM head on hidden [N, H], in float32.
func logits(w netWeights, hidden *Node) *Node {
	return Einsum("nh,vh->nv", ConvertDType(hidden, ir.Float32), ConvertDType(w.head(), ir.Float32))
}
