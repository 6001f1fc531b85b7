package llm

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// EngineOptions size an Engine.
type EngineOptions struct {
	// KVCacheBytes sizes the paged KV cache's block pool (paged.go):
	// as many blocks as fit. 0: 512 MiB on CPU backends, else what the
	// memory budget leaves after the weights, in both cases at most the
	// blocks of MaxSequences whole contexts.
	KVCacheBytes int64
	// MaxSequences caps the concurrent sequences (the batch); 0: 16.
	MaxSequences int
	// MaxQueue bounds the requests waiting for a slot; 0: 64.
	MaxQueue int
	// MinPrefill is the smallest prompt bucket; 0: 16. Buckets are powers
	// of two from it up to the context length.
	MinPrefill int
	// PrefillBuckets, when set, are the prompt buckets instead (each at
	// most the context length; a longer prompt is refused).
	PrefillBuckets []int
	// MinDecodeContext is the smallest context bucket of the decode
	// programs; 0: 128. A decode step attends to cache positions [0, C),
	// C the smallest bucket above every row's position; buckets are
	// powers of two from it up to the context length, one program per
	// (batch bucket, context bucket), all compiled before NewEngine
	// returns unless BackgroundCompile.
	MinDecodeContext int
	// BackgroundCompile makes NewEngine return once the programs a short
	// request needs are compiled (the smallest prompt bucket's prefill,
	// the decode of batch 1 in the smallest context bucket); the other
	// buckets' programs compile in the background, a step whose bucket is
	// not compiled yet running in a larger compiled one (coldstart.go).
	// Ignored over a mesh: there every program compiles before ready.
	BackgroundCompile bool
	// Logger, when set, gets a line per program compiled and a summary
	// ("compiled k of n programs in T s"); nil: no log.
	Logger *slog.Logger
	// NewDetokenizer makes a detokenizer per request (for Token.Text and
	// stop strings); nil: no text.
	NewDetokenizer func() Detokenizer
	// PrefillChunk > 0 prefills prompts in chunks of that many positions
	// between decode steps, so that a long prompt never stalls the running
	// sequences (chunked.go); prompts may then be as long as the context
	// allows, whatever the prefill buckets. 0: each prompt in one prefill
	// run. AutoPrefillChunk: DefaultPrefillChunk of the model's context,
	// and then PrefixCache only where that chunks.
	PrefillChunk int
	// beforeCompile, when set (tests), runs before each plain program
	// compiles (coldstart.go); an error fails that compile.
	beforeCompile func(ctx context.Context, k progKey, background bool) error
	// PrefixCache (needs PrefillChunk) reuses the cached blocks of
	// earlier prompts' leading whole chunks for a later prompt starting
	// with the same tokens (prefix.go).
	PrefixCache bool
}

// Engine runs generations on a Model with continuous batching: one
// goroutine owns the KV cache and the programs, prefills new requests
// between decode steps and runs every active sequence in one decode step.
type Engine struct {
	m     *Model
	opts  EngineOptions
	slots int
	// adapterSlots: each cache slot's adapter (adapters.go); nil without.
	adapterSlots *slotTable
	cacheShape   ir.Shape // the block pool [numBlocks, blockSize, L, Hkv, D]
	kc, vc       *ir.Tensor
	pool         *blockPool // the blocks' bookkeeping (paged.go)
	// progs: the plain prefill and decode programs (coldstart.go).
	progs    *progTable
	bgCancel context.CancelFunc // stops the background compiles
	bgWG     sync.WaitGroup
	pBuckets []int
	// decode: the decode programs with penalties or a mask, compiled on
	// first need.
	decode    map[decodeKey]*tensorbridge.Executable
	decodeLP  map[decodeKey]*tensorbridge.Executable // with top logprobs (logprobs.go), compiled on first need
	prefillLP map[prefillKey]*tensorbridge.Executable
	// copySlot copies a cache block to another (choices.go), compiled
	// on first need.
	copySlot  *tensorbridge.Executable
	dBuckets  []int // batch buckets
	cBuckets  []int // context buckets
	compiles  atomic.Int64
	stats     stepStats
	streamCap int       // tokens a stream's channel holds (stream.go)
	scatter   bool      // cache writes by ScatterUpdate (cpu backend)
	tp        *engineTP // the other devices' cache shares with a mesh (mesh.go)
	// cacheLost is set by a failed run that consumed the caches (see
	// runStep); the loop ends every running sequence and clears it.
	cacheLost bool
	chunks    *chunker // chunked prefill and the prefix cache (chunked.go); nil when off

	queue   chan *seq
	closing chan struct{}
	done    chan struct{}
	once    sync.Once
}

// seq is one request in the engine.
type seq struct {
	ctx     context.Context
	req     Request
	out     *stream
	slot    int     // its sequence slot (the batch limit; its adapter's entry)
	blocks  []int32 // its block table (paged.go)
	adapter int     // the adapter's index (0: the base model)
	pos     int     // position of the next token to feed
	last    int     // the token to feed next
	n       int     // tokens generated
	max     int
	detok   Detokenizer
	text    strings.Builder // text not yet sent (stop-string hold-back)
	stopAll []int
	hist    []int // prompt and generated tokens (penalties)
	biasIDs []int // the logit_bias ids, sorted
	// fill: chunked prefill in progress (chunked.go), else nil.
	fill *fillState
	// Constrained decoding (constrain.go): the constraint, its mask, and
	// the error of a token it refused.
	con     Constraint
	maskBuf []uint32
	conErr  error
	// group: the other choices of an n-choice request, on its first
	// (choices.go).
	group []*seq
	// groupBlocks: the fresh blocks reserved for the other choices, on
	// the first until startGroup hands them out.
	groupBlocks []int32
}

// NewEngine sizes the KV cache, compiles and warms every program, and
// starts the engine. It reports its capacity through Capacity.
func NewEngine(ctx context.Context, m *Model, o EngineOptions) (e *Engine, err error) {
	if o.PrefillChunk == AutoPrefillChunk {
		o.PrefillChunk = DefaultPrefillChunk(m.maxContext)
		o.PrefixCache = o.PrefixCache && o.PrefillChunk > 0
	}
	c := m.Config
	perTok := int64(2 * c.Layers * c.KVHeads * c.HeadDim * m.dtype.Size())
	bs := blockSizeFor(o.PrefillChunk)
	perBlock, perSeq := perTok*int64(bs), blocksFor(m.maxContext, bs)
	budget := o.KVCacheBytes
	if budget == 0 {
		budget = 512 << 20
		if !isCPU(m.b) {
			bud, err := m.b.Budget(ctx)
			if err != nil {
				return nil, err
			}
			budget = int64(bud.Available) * int64(m.Mesh().Model) // over a mesh each device holds 1/M of the cache
		}
	}
	maxSeq := o.MaxSequences
	if maxSeq <= 0 {
		maxSeq = 16
	}
	nBlocks := budget / perBlock
	if o.KVCacheBytes == 0 {
		nBlocks = min(nBlocks, int64(1+maxSeq*perSeq))
	}
	if nBlocks < 2 {
		return nil, fmt.Errorf("llm: the KV cache budget (%d bytes) holds no block of %d positions (%d bytes each, plus the null block): %w", budget, bs, perBlock, errs.ErrInvalidInput)
	}
	slots := int(min(int64(maxSeq), nBlocks-1)) // plus one scratch slot for padding rows' adapter
	if o.MaxQueue <= 0 {
		o.MaxQueue = 64
	}
	if o.MinPrefill <= 0 {
		o.MinPrefill = 16
	}
	if o.MinDecodeContext <= 0 {
		o.MinDecodeContext = 128
	}
	en := &Engine{m: m, opts: o, slots: slots, streamCap: streamCap, decode: map[decodeKey]*tensorbridge.Executable{},
		decodeLP: map[decodeKey]*tensorbridge.Executable{}, prefillLP: map[prefillKey]*tensorbridge.Executable{},
		queue: make(chan *seq, o.MaxQueue), closing: make(chan struct{}), done: make(chan struct{})}
	en.cacheShape = ir.MakeShape(m.dtype, int(nBlocks), bs, c.Layers, c.KVHeads, c.HeadDim)
	en.pool = newBlockPool(int(nBlocks), bs)
	// An engine without DynamicUpdateSlice (GoMLX's simplego, under
	// cpu:engine=simplego) writes the cache by ScatterUpdate, a pass over
	// the whole cache; the others update the donated cache in place.
	en.scatter = !m.b.Engine().Capabilities().Operations[backends.OpTypeDynamicUpdateSlice]
	defer func() {
		if err != nil {
			en.release()
		}
	}()
	e = en
	if err := en.allocCache(); err != nil {
		return nil, err
	}
	if en.adapterSlots, err = m.sizeAdapterTable(slots + 1); err != nil {
		return nil, err
	}
	for _, p := range o.PrefillBuckets {
		if p < 1 || p > m.maxContext {
			return nil, fmt.Errorf("llm: prefill bucket %d outside 1..%d", p, m.maxContext)
		}
	}
	en.pBuckets = slices.Sorted(slices.Values(o.PrefillBuckets))
	for p := o.MinPrefill; len(o.PrefillBuckets) == 0; p *= 2 {
		if p > m.maxContext {
			p = m.maxContext
		}
		en.pBuckets = append(en.pBuckets, p)
		if p == m.maxContext {
			break
		}
	}
	for b := 1; ; b *= 2 {
		if b > slots {
			b = slots
		}
		en.dBuckets = append(en.dBuckets, b)
		if b == slots {
			break
		}
	}
	en.cBuckets = pow2Buckets(o.MinDecodeContext, m.maxContext)
	if en.chunks, err = newChunker(o, m.maxContext); err != nil {
		return nil, err
	}
	en.progs = newProgTable(coldOrder(en.pBuckets, en.dBuckets, en.cBuckets))
	if err := en.warmUp(ctx); err != nil {
		return nil, err
	}
	if err := en.warmChunks(ctx); err != nil {
		return nil, err
	}
	en.logSummary("ready")
	if rest := en.progs.all[len(en.warmNow()):]; len(rest) > 0 {
		en.startBackground(rest)
	}
	go en.loop()
	return en, nil
}

func isCPU(b *tensorbridge.Backend) bool {
	n := b.Name()
	return n == "cpu" || n == "xla-cpu"
}

// allocCache places zeroed K and V caches on the device.
func (e *Engine) allocCache() error {
	e.pool.forgetAll() // new caches: the cached blocks are gone
	if e.m.tp != nil {
		return e.allocCacheMesh()
	}
	for _, p := range []**ir.Tensor{&e.kc, &e.vc} {
		h, err := ir.NewHostTensor(e.cacheShape.DType, e.cacheShape.Dimensions...)
		if err != nil {
			return err
		}
		t, err := ir.ToDevice(h, e.m.b.Engine(), 0)
		_ = h.FinalizeAll()
		if err != nil {
			return fmt.Errorf("llm: placing the KV cache %s: %w", e.cacheShape, err)
		}
		*p = t
	}
	return nil
}

// warmUp compiles the plain programs NewEngine waits for (warmNow) and
// runs each once on the scratch slot.
func (e *Engine) warmUp(ctx context.Context) error {
	scratch := e.slots
	for _, k := range e.warmNow() {
		exe, err := e.ensure(ctx, k, false)
		if err != nil {
			return err
		}
		if k.isPrefill() {
			if _, err := e.runPrefill(ctx, exe, k.p, []int{0}, scratch, row{}); err != nil {
				return fmt.Errorf("llm: warming prefill %d: %w", k.p, err)
			}
			continue
		}
		if _, _, err := e.runDecode(ctx, exe, k.batch, k.context, nil, false); err != nil {
			return fmt.Errorf("llm: warming decode %d (context %d): %w", k.batch, k.context, err)
		}
	}
	return nil
}

// warmNow is the plain programs compiled before NewEngine returns: all of
// them, or with BackgroundCompile (off a mesh) the first readyCount.
func (e *Engine) warmNow() []progKey {
	if e.opts.BackgroundCompile && e.m.tp == nil {
		return e.progs.all[:min(readyCount, len(e.progs.all))]
	}
	return e.progs.all
}

// decodeKey names a decode program: its batch and context buckets, and
// whether it applies penalties (compiled on first need: warm-up compiles
// the programs without, the plain ones of coldstart.go).
type decodeKey struct {
	batch, context int
	pen            bool
	mask           bool // with the constraint mask input (constrain.go)
}

// decodeProgram returns the decode program of key k, with top logprobs
// when lp (logprobs.go), compiling it the first time one is needed, and
// the batch and context buckets it runs in: a plain one (no penalties,
// mask or logprobs) may run in larger buckets (routeDecode).
func (e *Engine) decodeProgram(ctx context.Context, k decodeKey, lp bool) (*tensorbridge.Executable, int, int, error) {
	if !k.pen && !k.mask && !lp {
		return e.routeDecode(ctx, k.batch, k.context)
	}
	exe, err := e.decodeVariant(ctx, k, lp)
	return exe, k.batch, k.context, err
}

// decodeVariant returns the decode program of key k with penalties, a
// mask or logprobs, compiling it the first time one is needed.
func (e *Engine) decodeVariant(ctx context.Context, k decodeKey, lp bool) (*tensorbridge.Executable, error) {
	progs := e.decode
	if lp {
		progs = e.decodeLP
	}
	if exe := progs[k]; exe != nil {
		return exe, nil
	}
	exe, err := e.compileDecodeVariant(ctx, k, lp)
	if err != nil {
		return nil, err
	}
	progs[k] = exe
	return exe, nil
}

// prefillKey names a prefill program: its prompt bucket, and whether it
// returns the first token's top logprobs (lp) and the prompt's (echo).
// The plain ones (lp and echo false) are compiled by warm-up, the others
// on first need.
type prefillKey struct {
	p        int
	lp, echo bool
	mask     bool // with the constraint mask input (constrain.go)
}

// prefillProgram returns the prefill program of key k, compiling it the
// first time one is needed, and the prompt bucket it runs in: a plain one
// may run in a larger bucket (routePrefill).
func (e *Engine) prefillProgram(ctx context.Context, k prefillKey) (*tensorbridge.Executable, int, error) {
	if !k.lp && !k.echo && !k.mask {
		return e.routePrefill(ctx, k.p)
	}
	if exe := e.prefillLP[k]; exe != nil {
		return exe, k.p, nil
	}
	exe, err := e.compilePrefillVariant(ctx, k)
	if err != nil {
		return nil, 0, err
	}
	e.prefillLP[k] = exe
	return exe, k.p, nil
}

// pow2Buckets is lo, 2lo, 4lo, ... up to max, ending with max itself
// (just max when lo >= max).
func pow2Buckets(lo, max int) []int {
	var out []int
	for c := lo; c < max; c *= 2 {
		out = append(out, c)
	}
	return append(out, max)
}

// Capacity reports the KV cache's size: concurrent sequences (the batch
// limit) and tokens per sequence (the context), and the block pool's
// bytes (K and V, the null block included). How many sequences fit at
// once also depends on their lengths: KVBlocks.
func (e *Engine) Capacity() (sequences, tokensPerSequence int, bytes int64) {
	return e.slots, e.m.maxContext, 2 * int64(e.cacheShape.Size()) * int64(e.cacheShape.DType.Size())
}

// KVBlocks reports the paged KV cache's pool (paged.go): the blocks
// sequences may hold (the null block excluded) and the positions per
// block.
func (e *Engine) KVBlocks() (blocks, blockSize int) { return e.pool.usable(), e.pool.size }

// compileCount counts the programs the engine compiled (tests): without
// BackgroundCompile it does not change after NewEngine returns unless a
// request needs penalties, a mask or logprobs.
func (e *Engine) compileCount() int64 { return e.compiles.Load() }

// Ready reports whether the engine takes requests (always true once
// NewEngine returned, until Close; with BackgroundCompile, programs may
// still be compiling: Progress).
func (e *Engine) Ready() bool {
	select {
	case <-e.closing:
		return false
	default:
		return true
	}
}

// Generate queues a request and returns its token stream, which ends
// with an event whose Finish is set, then is closed. Cancelling ctx ends
// the sequence and frees its slot at the next step. The engine never
// waits for a slow reader (stream.go): read the stream to its end or
// cancel ctx, else its undelivered tokens stay in memory.
func (e *Engine) Generate(ctx context.Context, r Request) (<-chan Token, error) {
	s, err := e.newSeq(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := e.enqueue(s); err != nil {
		return nil, err
	}
	return s.out.ch, nil
}

// newSeq checks a request and makes its sequence.
func (e *Engine) newSeq(ctx context.Context, r Request) (*seq, error) {
	if len(r.Prompt) == 0 {
		return nil, &RequestError{Problem: "empty prompt"}
	}
	if (len(r.Prompt) > e.pBuckets[len(e.pBuckets)-1] && !e.chunkable(r)) || len(r.Prompt) >= e.m.maxContext {
		return nil, &RequestError{Problem: fmt.Sprintf("prompt of %d tokens leaves no room in the %d-token context", len(r.Prompt), e.m.maxContext)}
	}
	if r.MaxTokens < 0 {
		return nil, &RequestError{Problem: "max_tokens is negative"}
	}
	for _, id := range append(slices.Clone(r.Prompt), r.StopIDs...) {
		if id < 0 || id >= e.m.Config.Vocab {
			return nil, &RequestError{Problem: fmt.Sprintf("token id %d outside the vocabulary (%d)", id, e.m.Config.Vocab)}
		}
	}
	if err := checkPenalties(r.Sampling, r, e.m.Config.Vocab); err != nil {
		return nil, err
	}
	if err := checkLogprobs(r); err != nil {
		return nil, err
	}
	if len(r.StopStrings) > 0 && e.opts.NewDetokenizer == nil {
		return nil, &RequestError{Problem: fmt.Sprintf("%d stop string(s) given, but the engine has no detokenizer (EngineOptions.NewDetokenizer) to match them on the text", len(r.StopStrings)), Err: ErrNoDetokenizer}
	}
	room := e.m.maxContext - len(r.Prompt)
	if r.MaxTokens > room {
		return nil, &RequestError{Problem: fmt.Sprintf("max_tokens %d exceeds the %d tokens the context leaves after a %d-token prompt", r.MaxTokens, room, len(r.Prompt))}
	}
	max := r.MaxTokens
	if max == 0 {
		max = room
	}
	ad, err := e.m.adapterIndex(r.Adapter)
	if err != nil {
		return nil, &RequestError{Problem: err.Error(), Err: err}
	}
	s := &seq{ctx: ctx, req: r, out: newStream(ctx, min(max, e.streamCap)), max: max, adapter: ad}
	if err := e.checkBlocks(s, 1); err != nil {
		return nil, err
	}
	s.stopAll = slices.Clone(r.StopIDs)
	if !r.IgnoreEOS {
		s.stopAll = append(s.stopAll, e.m.Config.EOS...)
	}
	s.hist = slices.Clone(r.Prompt)
	s.biasIDs = sortedBiasIDs(r.Sampling.LogitBias)
	if e.opts.NewDetokenizer != nil {
		s.detok = e.opts.NewDetokenizer()
	}
	e.startConstraint(s)
	return s, nil
}

// enqueue queues s (and its group) for the engine's loop.
func (e *Engine) enqueue(s *seq) error {
	select {
	case <-e.closing:
		return ErrEngineClosed
	default:
	}
	select {
	case e.queue <- s:
		return nil
	default:
		return ErrQueueFull
	}
}

// Close stops the engine: running and queued sequences end with
// "cancelled", the background compiles stop, then programs and the cache
// are freed.
func (e *Engine) Close() error {
	e.once.Do(func() {
		close(e.closing)
		if e.bgCancel != nil {
			e.bgCancel()
		}
		<-e.done
		e.release()
	})
	return nil
}

func (e *Engine) release() {
	e.stopBackground()
	if e.progs != nil {
		e.progs.closeProgs()
	}
	for _, x := range e.decode {
		_ = x.Close()
	}
	for _, x := range e.decodeLP {
		_ = x.Close()
	}
	for _, x := range e.prefillLP {
		_ = x.Close()
	}
	if e.copySlot != nil {
		_ = e.copySlot.Close()
	}
	e.decode, e.decodeLP, e.prefillLP = nil, nil, nil
	for _, t := range []*ir.Tensor{e.kc, e.vc} {
		if t != nil {
			_ = t.FinalizeAll()
		}
	}
	e.kc, e.vc = nil, nil
	e.releaseMesh()
	e.releaseChunks()
}

// loop is the engine's goroutine.
func (e *Engine) loop() {
	defer close(e.done)
	free := make([]int, 0, e.slots)
	for i := e.slots - 1; i >= 0; i-- {
		free = append(free, i)
	}
	var active []*seq
	var held *seq // an n-choice request waiting for n free slots (choices.go)
	ctx := context.Background()
	finish := func(s *seq, why string, err error) {
		text := ""
		if s.detok != nil && why != "cancelled" && why != "error" {
			text = s.text.String() + s.detok.Flush()
			text = cutStop(text, s.req.StopStrings)
		}
		if err == nil {
			err = s.conErr
		}
		s.out.end(Token{ID: -1, Text: text, Finish: why, Err: err})
		free = append(free, s.slot)
		e.pool.release(s.blocks)
		s.blocks = nil
	}
	for {
		// Admit waiting requests while slots are free.
		for len(free) > 0 {
			var s *seq
			if held != nil {
				if len(free) <= len(held.group) {
					break
				}
				s, held = held, nil
			} else if len(active) == 0 {
				select {
				case s = <-e.queue:
				case <-e.closing:
					e.drain(active)
					return
				}
			} else {
				select {
				case s = <-e.queue:
				default:
				}
			}
			if s == nil {
				break
			}
			if s.ctx.Err() != nil {
				endGroup(s, Token{ID: -1, Finish: "cancelled", Err: s.ctx.Err()})
				continue
			}
			chunked := e.chunkable(s.req) && len(s.group) == 0 // chunked.go
			if err := e.fitsPrefill(s); err != nil && !chunked {
				endGroup(s, Token{ID: -1, Finish: "error", Err: err})
				continue
			}
			// An n-choice request takes its n slots at once; every
			// request waits for the blocks it can need (paged.go).
			reuse, ok := 0, len(free) > len(s.group)
			if ok {
				reuse, ok = e.reserve(s, chunked)
			}
			if !ok {
				held = s
				break
			}
			if chunked {
				var err error
				if free, err = e.admitChunked(s, free, reuse); err != nil {
					finish(s, "error", err)
					if e.cacheLost {
						for _, a := range active {
							finish(a, "error", err)
						}
						active, e.cacheLost = nil, false
					}
					continue
				}
				active = append(active, s)
				continue
			}
			s.slot, free = free[len(free)-1], free[:len(free)-1]
			p := e.bucketFor(len(s.req.Prompt))
			err := e.bindAdapter(s.slot, s.adapter)
			var exe *tensorbridge.Executable
			if err == nil {
				exe, p, err = e.prefillProgram(ctx, prefillKey{p: p, lp: s.req.TopLogprobs > 0 || s.req.PromptLogprobs, echo: s.req.PromptLogprobs, mask: s.con != nil})
			}
			var out stepOut
			if err == nil {
				out, err = e.runPrefill(ctx, exe, p, s.req.Prompt, s.slot, s.row())
			}
			var group []*seq
			if err == nil && len(s.group) > 0 {
				group, err = e.startGroup(ctx, s, &free)
			}
			if err != nil {
				e.pool.release(s.groupBlocks) // the followers' reservation
				s.groupBlocks = nil
				endFollowers(s, Token{ID: -1, Finish: "error", Err: err})
				finish(s, "error", err)
				if e.cacheLost { // the running sequences' cache rows are gone too
					for _, a := range active {
						finish(a, "error", err)
					}
					active, e.cacheLost = nil, false
				}
				continue
			}
			active = append(active, group...)
			s.pos = len(s.req.Prompt)
			first := out.token(0, s.req.TopLogprobs)
			first.Prompt = out.prompt(s.req.Prompt, s.req.TopLogprobs)
			if why := e.emit(s, first); why != "" {
				finish(s, why, nil)
				continue
			}
			active = append(active, s)
		}
		select {
		case <-e.closing:
			e.drain(active)
			if held != nil {
				endGroup(held, Token{ID: -1, Finish: "cancelled", Err: ErrEngineClosed})
			}
			return
		default:
		}
		// Drop cancelled sequences.
		kept := active[:0]
		for _, s := range active {
			if s.ctx.Err() != nil {
				finish(s, "cancelled", s.ctx.Err())
				continue
			}
			kept = append(kept, s)
		}
		active = kept
		var filling []*seq // chunked prefill: this turn's chunks, then the decode step without them
		if e.chunks != nil {
			active, filling = splitFilling(e.fillStep(ctx, active, finish))
		}
		if len(active) == 0 {
			active = filling
			continue
		}
		b := e.decodeBucket(len(active))
		rows := make([]row, len(active))
		top, pen, lp := 0, false, false
		for i, s := range active {
			rows[i] = s.row()
			top = max(top, s.pos)
			pen = pen || rows[i].needsPenalties()
			lp = lp || s.req.TopLogprobs > 0
		}
		cb := e.contextBucket(top)
		exe, b, cb, err := e.decodeProgram(ctx, decodeKey{batch: b, context: cb, pen: pen, mask: anyMask(rows)}, lp)
		var out stepOut
		if err == nil {
			out, err = e.runDecodeOut(ctx, exe, b, cb, rows, pen)
		}
		e.cacheLost = false // every active sequence ends on err
		kept = active[:0]
		for i, s := range active {
			if err != nil {
				finish(s, "error", err)
				continue
			}
			s.pos++
			if why := e.emit(s, out.token(i, s.req.TopLogprobs)); why != "" {
				finish(s, why, nil)
				continue
			}
			kept = append(kept, s)
		}
		active = kept
		if err != nil && e.chunks != nil { // the cache may be lost: theirs too
			for _, s := range filling {
				finish(s, "error", err)
			}
			filling = nil
		}
		active = append(active, filling...)
	}
}

// row is the sequence's inputs to its next program run.
func (s *seq) row() row {
	return row{token: s.last, pos: s.pos, slot: s.slot, blocks: s.blocks, s: s.req.Sampling, index: s.n,
		hist: s.hist, plen: len(s.req.Prompt), biasIDs: s.biasIDs, stops: s.stopAll, mask: s.nextMask()}
}

// drain ends every running and queued sequence on Close.
func (e *Engine) drain(active []*seq) {
	for _, s := range active {
		s.out.end(Token{ID: -1, Finish: "cancelled", Err: ErrEngineClosed})
	}
	for {
		select {
		case s := <-e.queue:
			endGroup(s, Token{ID: -1, Finish: "cancelled", Err: ErrEngineClosed})
		default:
			return
		}
	}
}

func (e *Engine) bucketFor(n int) int {
	for _, p := range e.pBuckets {
		if p >= n {
			return p
		}
	}
	return e.pBuckets[len(e.pBuckets)-1]
}

func (e *Engine) decodeBucket(n int) int {
	for _, b := range e.dBuckets {
		if b >= n {
			return b
		}
	}
	return e.dBuckets[len(e.dBuckets)-1]
}

// contextBucket is the smallest context bucket above position pos (the
// last when none is: emit ends a sequence before its position reaches the
// context length). Strictly above: a row writes its key at pos and then
// reads positions [0, bucket). Injected fault: `c >= pos` makes the rows
// at a bucket's edge miss their own key, and TestAgainstTransformers and
// TestContinuousBatching fail on xla-cpu and on cpu, whose engine takes
// the same in-place path (only an engine without DynamicUpdateSlice, such
// as cpu:engine=simplego, concatenates the new key and passes either way).
func (e *Engine) contextBucket(pos int) int {
	for _, c := range e.cBuckets {
		if c > pos {
			return c
		}
	}
	return e.cBuckets[len(e.cBuckets)-1]
}
