package llm

import (
	"context"
	"fmt"
	"maps"
	"slices"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/shard"
)

// Embeddings (the OpenAI API's /v1/embeddings): a prompt's final hidden
// states (after the final norm, what step returns), pooled into one
// vector and L2-normalised, as sentence-transformers computes a decoder
// embedding model's output
// (https://sbert.net/docs/package_reference/sentence_transformer/models.html#sentence_transformers.models.Pooling).
//
// An Embedder runs its own programs, one per prompt bucket, with the
// model's weight buffers as their first inputs (shared, never copied) and
// no KV cache: it never goes through the engine's goroutine, so a batch
// of embeddings does not stall the running decodes beyond sharing the
// device. Its runs are serialised (one at a time), so embeddings take at
// most one program's share of the device.
//
// Padding is exact: a batch's prompts are right-padded to the bucket, and
// attention is causal, so a real position never attends to a padded one;
// the pooling reads only real positions (the last one, the first one, or
// the mean over the prompt's length).

// Pooling is how the hidden states of a prompt's tokens become one vector.
type Pooling string

// The poolings: the last token's state (sentence-transformers'
// "lasttoken"), the mean over the tokens ("mean_tokens") and the first
// token's ("cls_token").
const (
	PoolLast Pooling = "last"
	PoolMean Pooling = "mean"
	PoolCLS  Pooling = "cls"
)

// ParsePooling reads a --pooling value: last, mean or cls, or "" (take
// the checkpoint's, ResolvePooling).
func ParsePooling(s string) (Pooling, error) {
	switch p := Pooling(s); p {
	case "", PoolLast, PoolMean, PoolCLS:
		return p, nil
	}
	return "", &PoolingError{Field: "pooling", Value: s, Expected: "last, mean or cls", Err: errs.ErrInvalidInput}
}

// EmbedOptions size an Embedder.
type EmbedOptions struct {
	// Pooling: "" takes the checkpoint's (ResolvePooling).
	Pooling Pooling
	// Buckets are the prompt lengths programs are compiled for (each at
	// most the context length; a longer input is refused); nil: powers of
	// two from 16 up to the context length, the engine's default
	// (Engine.PromptBuckets gives an engine's own).
	Buckets []int
	// BatchTokens bounds the tokens of one run (rows times bucket): a
	// bucket of p tokens runs max(1, min(MaxEmbedRows, BatchTokens/p))
	// prompts at a time; 0: 4096 or the largest bucket if less. With
	// that default, a run's attention scores (rows × p² per head) never
	// exceed those of one prompt of the largest bucket, which the
	// engine's own prefill of that bucket already needs.
	BatchTokens int
}

// MaxEmbedRows is the most prompts one embedding run takes.
const MaxEmbedRows = 8

// Embedder computes embeddings of prompts on a Model (see the top of this
// file). It is safe for concurrent use; runs are serialised. Close it
// before the Model: a run lends the model's weights.
type Embedder struct {
	m         *Model
	pool      Pooling
	buckets   []int
	batchToks int
	// sem holds the right to compile and run (one at a time); the
	// programs and closed are read and written while holding it.
	sem    chan struct{}
	progs  map[int]*tensorbridge.Executable
	closed bool
}

// NewEmbedder checks o and returns an Embedder of m. Programs are compiled
// the first time a bucket is needed.
func NewEmbedder(m *Model, o EmbedOptions) (*Embedder, error) {
	pool, err := ResolvePooling(m.Dir, o.Pooling)
	if err != nil {
		return nil, err
	}
	buckets := slices.Sorted(slices.Values(o.Buckets))
	if len(buckets) == 0 {
		buckets = pow2Buckets(min(16, m.maxContext), m.maxContext)
	}
	for _, p := range buckets {
		if p < 1 || p > m.maxContext {
			return nil, fmt.Errorf("llm: embedding bucket %d outside 1..%d: %w", p, m.maxContext, errs.ErrInvalidInput)
		}
	}
	bt := o.BatchTokens
	if bt <= 0 {
		bt = min(4096, buckets[len(buckets)-1])
	}
	return &Embedder{m: m, pool: pool, buckets: slices.Compact(buckets), batchToks: bt,
		sem: make(chan struct{}, 1), progs: map[int]*tensorbridge.Executable{}}, nil
}

// PromptBuckets are the engine's prompt buckets, for EmbedOptions.Buckets.
func (e *Engine) PromptBuckets() []int { return slices.Clone(e.pBuckets) }

// Pooling is the embedder's pooling.
func (em *Embedder) Pooling() Pooling { return em.pool }

// Dimensions is the length of each embedding: the hidden size.
func (em *Embedder) Dimensions() int { return em.m.Config.Hidden }

// MaxTokens is the longest prompt the embedder takes: its largest bucket.
func (em *Embedder) MaxTokens() int { return em.buckets[len(em.buckets)-1] }

// Close frees the programs, after the run in progress (if any). It is
// idempotent; Embed afterwards returns tensorbridge.ErrClosed.
func (em *Embedder) Close() error {
	em.sem <- struct{}{}
	defer func() { <-em.sem }()
	for _, x := range em.progs {
		_ = x.Close()
	}
	em.progs, em.closed = nil, true
	return nil
}

// Embed returns the embedding of each prompt (token ids, 1..MaxTokens of
// them, each inside the vocabulary; anything else is a *RequestError):
// float32 vectors of Dimensions values with an L2 norm of 1. Prompts of
// one bucket run together, rows at a time; ctx is checked between runs
// and while waiting for one.
func (em *Embedder) Embed(ctx context.Context, prompts [][]int) ([][]float32, error) {
	if err := em.check(prompts); err != nil {
		return nil, err
	}
	byBucket := map[int][]int{} // bucket -> prompt indices
	for i, p := range prompts {
		b := em.bucketFor(len(p))
		byBucket[b] = append(byBucket[b], i)
	}
	out := make([][]float32, len(prompts))
	for _, b := range slices.Sorted(maps.Keys(byBucket)) {
		idx := byBucket[b]
		rows := em.rowsFor(b)
		for start := 0; start < len(idx); start += rows {
			part := idx[start:min(start+rows, len(idx))]
			vecs, err := em.run(ctx, b, rows, prompts, part)
			if err != nil {
				return nil, err
			}
			for j, i := range part {
				out[i] = vecs[j]
			}
		}
	}
	return out, nil
}

// check refuses an empty batch, an empty or too long prompt and an id
// outside the vocabulary, naming the prompt.
func (em *Embedder) check(prompts [][]int) error {
	if len(prompts) == 0 {
		return &RequestError{Problem: "no input to embed"}
	}
	for i, p := range prompts {
		if len(p) == 0 || len(p) > em.MaxTokens() {
			return &RequestError{Problem: fmt.Sprintf("input %d has %d tokens: want 1..%d (the context)", i, len(p), em.MaxTokens())}
		}
		for _, id := range p {
			if id < 0 || id >= em.m.Config.Vocab {
				return &RequestError{Problem: fmt.Sprintf("input %d: token id %d outside the vocabulary (%d)", i, id, em.m.Config.Vocab)}
			}
		}
	}
	return nil
}

func (em *Embedder) bucketFor(n int) int {
	for _, b := range em.buckets {
		if b >= n {
			return b
		}
	}
	return em.buckets[len(em.buckets)-1]
}

// rowsFor is how many prompts a run of bucket b takes.
func (em *Embedder) rowsFor(b int) int { return max(1, min(MaxEmbedRows, em.batchToks/b)) }

// run embeds prompts[part] (at most rows of them, all within bucket p)
// in one run of the bucket's program, waiting its turn under ctx.
func (em *Embedder) run(ctx context.Context, p, rows int, prompts [][]int, part []int) ([][]float32, error) {
	select {
	case em.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-em.sem }()
	if em.closed {
		return nil, tensorbridge.ErrClosed
	}
	exe, err := em.program(ctx, p, rows)
	if err != nil {
		return nil, err
	}
	ids, lens := make([]int, rows*p), make([]int, rows)
	for r := range rows {
		lens[r] = 1 // padding rows: one token (id 0), read back by nobody
		if r < len(part) {
			lens[r] = copy(ids[r*p:(r+1)*p], prompts[part[r]])
		}
	}
	tok, err := int32Tensor([]int{rows, p}, ids)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tok.FinalizeAll() }()
	ln, err := int32Tensor([]int{rows}, lens)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ln.FinalizeAll() }()
	flat, err := em.exec(ctx, exe, tok, ln)
	if err != nil {
		return nil, err
	}
	h := em.m.Config.Hidden
	if len(flat) != rows*h {
		return nil, fmt.Errorf("llm: the embedding program returned %d values, want %d", len(flat), rows*h)
	}
	out := make([][]float32, len(part))
	for r := range part {
		out[r] = flat[r*h : (r+1)*h : (r+1)*h]
	}
	return out, nil
}

// exec runs exe on the model's weights (lent, on one device or each of a
// mesh's) and the host inputs, and reads the embeddings back.
func (em *Embedder) exec(ctx context.Context, exe *tensorbridge.Executable, in ...*ir.Tensor) ([]float32, error) {
	m := em.m
	if m.tp != nil {
		extra := make([][]*ir.Tensor, len(m.tp.devices))
		for d := range extra {
			extra[d] = in // host tensors: copied to each device for the run
		}
		outs, err := m.runMesh(ctx, exe, extra)
		if err != nil {
			return nil, err
		}
		defer func() {
			for _, o := range outs {
				freeAll(o)
			}
		}()
		return float32s(outs[0][0])
	}
	m.mu.Lock()
	ws := m.weights
	m.mu.Unlock()
	if ws == nil {
		return nil, tensorbridge.ErrClosed
	}
	outs, err := exe.Run(ctx, append(slices.Clone(ws), in...)...)
	if err != nil {
		return nil, err
	}
	defer freeAll(outs)
	return float32s(outs[0])
}

// program returns bucket p's program, compiling it the first time. The
// caller holds sem.
func (em *Embedder) program(ctx context.Context, p, rows int) (*tensorbridge.Executable, error) {
	if exe := em.progs[p]; exe != nil {
		return exe, nil
	}
	m := em.m
	name := fmt.Sprintf("llm-embed-%s-%dx%d", em.pool, rows, p)
	extra := []ir.Shape{ir.MakeShape(ir.Int32, rows, p), ir.MakeShape(ir.Int32, rows)}
	fn := embedGraph(m.Config, em.pool, rows, p)
	var exe *tensorbridge.Executable
	var err error
	if m.tp != nil {
		exe, err = m.compileMesh(ctx, name, fn, extra, nil, []shard.Plan{nil})
	} else {
		exe, err = m.b.Compile(ctx, name, fn, append(m.weightShapes(), extra...)...)
	}
	if err != nil {
		return nil, err
	}
	em.progs[p] = exe
	return exe, nil
}

// embedGraph is the embedding program of rows prompts padded to p tokens:
// inputs the weights, tokens [rows, p] and lengths [rows]; output the
// pooled, L2-normalised final hidden states [rows, hidden] in float32.
func embedGraph(c *Config, pool Pooling, rows, p int) tensorbridge.Func {
	return func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		n := len(in)
		w := newNetWeights(c, in[:n-2])
		tokens, lengths := in[n-2], in[n-1]
		pos := Iota(g, ir.MakeShape(ir.Int32, rows, p), 1)
		h, _, _ := step(c, w, tokens, pos, nil)
		h = Reshape(ConvertDType(h, ir.Float32), rows, p, c.Hidden)
		var v *Node
		switch pool {
		case PoolCLS:
			v = Reshape(Slice(h, AxisRange(), AxisRange(0, 1)), rows, c.Hidden)
		case PoolMean:
			v = meanPool(h, lengths)
		default:
			last := Sub(lengths, ConstAsDType(g, ir.Int32, 1))
			v = Gather(h, Stack([]*Node{Iota(g, ir.MakeShape(ir.Int32, rows), 0), last}, -1))
		}
		return []*ir.Node{l2Normalize(v)}, nil
	}
}

// meanPool is the mean of h [rows, p, H] over each row's first lengths[r]
// positions. Padded positions are selected away (not multiplied by 0, so
// that whatever they hold cannot leak in).
func meanPool(h, lengths *Node) *Node {
	g := h.Graph()
	dims := h.Shape().Dimensions
	rows, p, hid := dims[0], dims[1], dims[2]
	inside := LessThan(Iota(g, ir.MakeShape(ir.Int32, rows, p), 1), BroadcastToDims(Reshape(lengths, rows, 1), rows, p))
	inside = BroadcastToDims(Reshape(inside, rows, p, 1), rows, p, hid)
	sum := ReduceSum(Where(inside, h, ZerosLike(h)), 1)
	n := BroadcastToDims(Reshape(ConvertDType(lengths, ir.Float32), rows, 1), rows, hid)
	return Div(sum, n)
}

// l2Normalize divides each row of v [rows, H] by its L2 norm, at least
// 1e-12 (torch.nn.functional.normalize's eps, so a zero vector stays 0).
func l2Normalize(v *Node) *Node {
	norm := Sqrt(ReduceAndKeep(Square(v), ReduceSum, -1))
	norm = Max(norm, ConstAsDType(v.Graph(), ir.Float32, 1e-12))
	return Div(v, BroadcastToDims(norm, v.Shape().Dimensions...))
}
