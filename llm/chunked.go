package llm

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Chunked prefill (EngineOptions.PrefillChunk > 0).
//
// A prompt of n tokens is not prefilled by one program run any more: its
// positions [0, n-1) go into its cache slot in chunks of S = PrefillChunk
// positions, between the decode steps of the running sequences; then its
// last token is fed by the ordinary decode step, which samples the first
// generated token (with the running sequences, in the same batch). A long
// prompt thus delays each running stream's next token by one chunk (or
// the few that fit in the pace, below), instead of by its whole prefill.
//
// A chunk program takes S tokens (padded) at positions [p, p+S) of one
// sequence and its block table (paged.go): each layer writes the chunk's
// keys and values into the sequence's blocks first (whole blocks: S is a
// multiple of the block size) and then attends to the table's positions
// [0, W*blockSize), W*blockSize >= maxContext, causally (the decode
// path's in-place write-then-read, graph.go).
//
// Exactness across runs: the chunks lie on a fixed grid, [kS, (k+1)S),
// always run at the one size S and read the whole context. A position's
// keys and values are then computed by the same program, at the same row,
// over the same reduction lengths, whatever came before it in the engine:
// measured on cpu and xla-cpu, a 100-token prompt prefilled in chunks of
// 16 and of 32 or 64 gives logprobs that differ in the last bits (XLA's
// dot does not give a row the same bits at every M), so a variable chunk
// size would make answers depend on timing and on the prefix cache. The
// prefix cache (prefix.go) reuses whole grid chunks, so its answers are
// bitwise those without it. The grid's last chunk may pass the context's
// end: its positions past the sequence's blocks go to the null block.
//
// Pace: with nothing decoding, a prompt's chunks run back to back; while
// sequences decode, each turn of the loop runs chunks while their measured
// time stays within paceFactor decode steps (at least one). A smaller S
// keeps the running streams smoother, a larger one fills faster: the
// measurements are in BENCHMARKS.md.
//
// Requests with PromptLogprobs, and n-choice requests, keep the
// whole-prompt prefill program.

// AutoPrefillChunk, as EngineOptions.PrefillChunk, chunks prompts by
// DefaultPrefillChunk (serve's default).
const AutoPrefillChunk = -1

// DefaultPrefillChunk is the chunk size serve uses unless told: 64
// positions, or 32 or 16 where the context is not longer than that; 0 (each
// prompt whole) for a context of at most 16. Measured on the 100M Llama,
// 2 vCPUs (BENCHMARKS.md, "Chunked prefill by default"): on cpu chunks of
// 64 keep the p99 gap between tokens of 8 running streams at 2.2x its
// steady value while a 1,000-token prompt arrives (whole prompts: 19-24x)
// for 12% more time to a cold 900-token prompt's first token; chunks of
// 16 give 1.5-1.6x for 60% more.
func DefaultPrefillChunk(maxContext int) int {
	for _, s := range []int{64, 32, 16} {
		if s < maxContext {
			return s
		}
	}
	return 0
}

// chunker is the engine's chunked-prefill state.
type chunker struct {
	size   int // S, PrefillChunk: the chunk grid and size
	prog   *tensorbridge.Executable
	prefix bool // EngineOptions.PrefixCache (prefix.go)
	pace   chunkPace
}

// chunkPace holds the moving averages, in seconds, of a chunk run and of
// a step run between chunks (decode steps), and the engine's stepTotals
// after the last chunk.
type chunkPace struct {
	chunk, decode float64
	last          stepTotals
}

// paceFactor: the chunks of one turn may take up to this many decode
// steps' time (the target: the p99 gap between tokens at most 3x
// its steady value while a long prompt arrives).
const paceFactor = 1.5

// paceAlpha is the moving averages' weight of a new measurement.
const paceAlpha = 0.3

func (p *chunkPace) note(avg *float64, d time.Duration) {
	if *avg == 0 {
		*avg = d.Seconds()
		return
	}
	*avg += paceAlpha * (d.Seconds() - *avg)
}

// fillState is a sequence's prefill progress: the next prompt position
// to write into its slot.
type fillState struct{ next int }

// newChunker checks the chunking options; it returns nil when chunking is
// off.
func newChunker(o EngineOptions, maxContext int) (*chunker, error) {
	if o.PrefillChunk == 0 {
		if o.PrefixCache {
			return nil, fmt.Errorf("llm: EngineOptions.PrefixCache needs PrefillChunk > 0 (the prefix cache resumes prompts by chunked prefill): %w", errs.ErrInvalidInput)
		}
		return nil, nil
	}
	if o.PrefillChunk < 0 || o.PrefillChunk >= maxContext {
		return nil, fmt.Errorf("llm: EngineOptions.PrefillChunk %d outside 1..%d (below the context length): %w", o.PrefillChunk, maxContext-1, errs.ErrInvalidInput)
	}
	return &chunker{size: o.PrefillChunk, prefix: o.PrefixCache}, nil
}

// chunkable says whether r is prefilled in chunks.
func (e *Engine) chunkable(r Request) bool {
	// A constrained request's first token needs the mask the chunk
	// programs do not take: it is prefilled whole.
	return e.chunks != nil && !r.PromptLogprobs && r.NewConstraint == nil
}

// fitsPrefill refuses a prompt longer than every prefill bucket that
// takes the whole-prompt path all the same (an n-choice request: Generate
// lets long prompts through when chunking is on).
func (e *Engine) fitsPrefill(s *seq) error {
	if n, p := len(s.req.Prompt), e.pBuckets[len(e.pBuckets)-1]; n > p {
		return &RequestError{Problem: fmt.Sprintf("prompt of %d tokens: n-choice requests and prompt logprobs are prefilled whole, in at most %d tokens (the largest prefill bucket)", n, p)}
	}
	return nil
}

// plan places the next chunk of a prompt whose positions [p, end) are
// still to write (p on the grid): it runs at positions [p, p+S) and
// leaves next positions to write from.
func (c *chunker) plan(p, end int) (next int) { return min(p+c.size, end) }

// tableWidth is the chunk program's block table width: the blocks of
// the grid's chunks that cover the context.
func (e *Engine) chunkTableWidth() int {
	s := e.chunks.size
	return blocksFor((e.m.maxContext+s-1)/s*s, e.pool.size)
}

// compileChunk compiles the chunk program of bucket t: tokens [1, t],
// start [1], slot [1], block table [1, chunkTableWidth] and the plain
// sampling inputs (unused: it samples nothing); it returns zero as token
// and logprob, then the caches.
func (e *Engine) compileChunk(ctx context.Context, t int) (*tensorbridge.Executable, error) {
	c := e.m.Config
	nw := numWeightParams(c)
	shapes := append(e.m.weightShapes(), e.cacheShape, e.cacheShape,
		ir.MakeShape(ir.Int32, 1, t), ir.MakeShape(ir.Int32, 1), ir.MakeShape(ir.Int32, 1), ir.MakeShape(ir.Int32, 1, e.chunkTableWidth()))
	shapes = append(shapes, sampleShapes(1)[:numPlainSampleInputs]...)
	return e.compile(ctx, fmt.Sprintf("llm-prefill-chunk-%d", t), cacheDonation(nw), 0, func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		w := newNetWeights(c, in)
		tokens, start, slot := in[nw+2], in[nw+3], in[nw+4]
		pos := Add(Iota(g, ir.MakeShape(ir.Int32, 1, t), 1), BroadcastToDims(Reshape(start, 1, 1), 1, t))
		_, nk, nv := step(c, w, tokens, pos, &cacheIO{k: in[nw], v: in[nw+1], slots: slot, table: in[nw+5], chunk: true, scatter: e.scatter})
		return []*ir.Node{Zeros(g, ir.MakeShape(ir.Int32, 1)), Zeros(g, ir.MakeShape(ir.Float32, 1)), nk, nv}, nil
	}, shapes...)
}

// warmChunks compiles the chunk program and runs it on the null block,
// so that Compiles does not change after NewEngine.
func (e *Engine) warmChunks(ctx context.Context) error {
	if e.chunks == nil {
		return nil
	}
	exe, err := e.compileChunk(ctx, e.chunks.size)
	if err != nil {
		return err
	}
	e.chunks.prog = exe
	for range 2 { // the second run's time seeds the pace
		start := time.Now()
		if err := e.runChunk(ctx, exe, make([]int, e.chunks.size), 0, row{slot: e.slots}); err != nil {
			return fmt.Errorf("llm: warming prefill chunk %d: %w", e.chunks.size, err)
		}
		e.chunks.pace.chunk = time.Since(start).Seconds()
	}
	return nil
}

// runChunk runs chunk program exe on ids at positions from start of
// r's slot and block table.
func (e *Engine) runChunk(ctx context.Context, exe *tensorbridge.Executable, ids []int, start int, r row) error {
	var blocks []*ir.Tensor
	w := e.chunkTableWidth()
	for _, mk := range []func() (*ir.Tensor, error){
		func() (*ir.Tensor, error) { return int32Tensor([]int{1, len(ids)}, ids) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{1}, []int{start}) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{1}, []int{r.slot}) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{1, w}, tableRow(r.blocks, w)) },
	} {
		t, err := mk()
		if err != nil {
			freeAll(blocks)
			return err
		}
		blocks = append(blocks, t)
	}
	_, err := e.runStep(ctx, exe, blocks, []row{r}, 1, false)
	return err
}

// fillStep runs the chunks of this turn (all of them with nothing
// decoding, else as many as the pace allows, at least one) for the
// sequences of active being prefilled, oldest first, and returns active
// without the sequences it ended (finish: the loop's). A sequence whose
// prompt is all written but its last token becomes a decoding one.
func (e *Engine) fillStep(ctx context.Context, active []*seq, finish func(*seq, string, error)) []*seq {
	pace := &e.chunks.pace
	decoding := slices.ContainsFunc(active, func(s *seq) bool { return s.fill == nil })
	if now := e.totals(); decoding && pace.last.Steps > 0 && now.Steps > pace.last.Steps {
		pace.note(&pace.decode, (now.Total-pace.last.Total)/time.Duration(now.Steps-pace.last.Steps))
	}
	spent := 0.0
	for {
		i := slices.IndexFunc(active, func(s *seq) bool { return s.fill != nil })
		if i < 0 || (decoding && spent > 0 && spent+pace.chunk > paceFactor*pace.decode) {
			return active
		}
		before := e.totals().Total
		err := e.runFill(ctx, active[i])
		pace.last = e.totals()
		if err != nil {
			return e.fillFailed(active, i, err, finish)
		}
		d := pace.last.Total - before
		pace.note(&pace.chunk, d)
		spent += d.Seconds()
	}
}

// runFill runs s's next chunk.
func (e *Engine) runFill(ctx context.Context, s *seq) error {
	prompt := s.req.Prompt
	end := len(prompt) - 1
	w := s.fill.next
	next := e.chunks.plan(w, end)
	ids := make([]int, e.chunks.size)
	copy(ids, prompt[w:next])
	if err := e.runChunk(ctx, e.chunks.prog, ids, w, s.row()); err != nil {
		return err
	}
	s.fill.next = next
	if next >= end {
		e.filled(s)
	}
	return nil
}

// fillFailed ends active[i] after its chunk failed with err, and every
// sequence when the run lost the cache.
func (e *Engine) fillFailed(active []*seq, i int, err error, finish func(*seq, string, error)) []*seq {
	if e.cacheLost { // every sequence's blocks are gone
		for _, a := range active {
			finish(a, "error", err)
		}
		e.cacheLost = false
		e.pool.forgetAll()
		return nil
	}
	finish(active[i], "error", err)
	return slices.Delete(active, i, i+1)
}

// filled turns s, whose prompt positions [0, n-1) are in its blocks,
// into a decoding sequence feeding the prompt's last token, and offers
// its prompt's full blocks to the prefix cache.
func (e *Engine) filled(s *seq) {
	n := len(s.req.Prompt)
	s.fill = nil
	s.pos, s.last = n-1, s.req.Prompt[n-1]
	if e.chunks.prefix {
		e.pool.register(s.blocks, s.req.Prompt[:n-1], s.adapter)
	}
}

// splitFilling separates the sequences still being prefilled from the
// decoding ones; both are new slices.
func splitFilling(active []*seq) (decoding, filling []*seq) {
	for _, s := range active {
		if s.fill != nil {
			filling = append(filling, s)
		} else {
			decoding = append(decoding, s)
		}
	}
	return decoding, filling
}

// admitChunked gives s (its blocks reserved, the first reuse positions
// from the prefix cache: prefix.go) a slot and starts its chunked
// prefill after the reused positions.
func (e *Engine) admitChunked(s *seq, free []int, reuse int) ([]int, error) {
	s.slot, free = free[len(free)-1], free[:len(free)-1]
	s.fill = &fillState{next: reuse}
	if err := e.bindAdapter(s.slot, s.adapter); err != nil {
		return free, err
	}
	if reuse >= len(s.req.Prompt)-1 {
		e.filled(s)
	}
	return free, nil
}

// releaseChunks frees the chunk program.
func (e *Engine) releaseChunks() {
	if e.chunks == nil {
		return
	}
	if e.chunks.prog != nil {
		_ = e.chunks.prog.Close()
		e.chunks.prog = nil
	}
}
