package llm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// The compiled programs. Both take the weights, the K and V block pools
// [numBlocks, blockSize, L, Hkv, D] (paged.go), their block of tokens, each
// row's block table and the
// sampling parameters, and return the sampled token, its log-probability
// and the updated caches. The caches are donated to their updates
// (cacheDonation): each run writes its block into the cache's own memory
// instead of copying the whole cache into a new buffer.
//
// prefill(P): tokens [1, P] (padded), length [1], slot [1], block table
// [1, ceil(P/blockSize)], sampling [1] each. decode(B, C): tokens [B, 1],
// positions [B, 1] (each below C), slots [B], block tables
// [B, ceil(C/blockSize)], sampling [B] each; it attends to cache positions
// [0, C) (rounded up to whole blocks).
// Their logprob variants (logprobs.go) return, after the caches, each
// row's top alternatives [B, 20] (values and ids), and with the prompt's
// (echo) each prompt position's logprob [P] and top alternatives [P, 20].

// numSampleInputs is temperature, top-k, top-p, min-p, seed, index,
// and the repetition, frequency and presence penalties.
const numSampleInputs = 9

// numPlainSampleInputs are those of a program without penalties: the
// first six.
const numPlainSampleInputs = 6

func sampleShapes(b int) []ir.Shape {
	f, i := ir.MakeShape(ir.Float32, b), ir.MakeShape(ir.Int32, b)
	return []ir.Shape{f, i, f, f, i, i, f, f, f}
}

// sampleNodes reads the sampling inputs; pen carries the penalty blocks
// (history and bias), to which the per-row penalties are added.
func sampleNodes(in []*ir.Node, pen penaltyInputs) sampleParams {
	if pen.on {
		pen.rep, pen.freq, pen.pres = in[6], in[7], in[8]
	}
	return sampleParams{temp: in[0], topK: in[1], topP: in[2], minP: in[3], seed: in[4], index: in[5], pen: pen}
}

// biasShapes are the bias pairs' shapes for b rows of k pairs.
func biasShapes(b, k int) []ir.Shape {
	return []ir.Shape{ir.MakeShape(ir.Int32, b, k), ir.MakeShape(ir.Float32, b, k)}
}

// compilePrefill compiles the prefill program for prompts of up to p tokens.
func (e *Engine) compilePrefill(ctx context.Context, p int) (*tensorbridge.Executable, error) {
	return e.compilePrefillVariant(ctx, prefillKey{p: p})
}

// compilePrefillVariant compiles the prefill program of key k: with the
// first token's top logprobs when k.lp, and the prompt's when k.echo
// (logprobs.go), as extra outputs after the caches.
func (e *Engine) compilePrefillVariant(ctx context.Context, k prefillKey) (*tensorbridge.Executable, error) {
	c, p := e.m.Config, k.p
	nw := numWeightParams(c)
	shapes := append(e.m.weightShapes(), e.cacheShape, e.cacheShape,
		ir.MakeShape(ir.Int32, 1, p), ir.MakeShape(ir.Int32, 1), ir.MakeShape(ir.Int32, 1), ir.MakeShape(ir.Int32, 1, e.tableWidth(p)))
	shapes = append(shapes, biasShapes(1, e.biasWidth())...)
	name, extra := fmt.Sprintf("llm-prefill-%d", p), 0
	if k.mask {
		shapes, name = append(shapes, e.maskShape(1)), name+"-masked"
	}
	shapes = append(shapes, sampleShapes(1)...)
	if k.lp || k.echo {
		name, extra = name+"-logprobs", 2
	}
	if k.echo {
		name, extra = name+"-prompt", 5
	}
	return e.compile(ctx, name, cacheDonation(nw), extra, func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		w := newNetWeights(c, in)
		kc, vc := in[nw], in[nw+1]
		tokens, length, slot := in[nw+2], in[nw+3], in[nw+4]
		pos := Iota(g, ir.MakeShape(ir.Int32, 1, p), 1)
		h, nk, nv := step(c, w, tokens, pos, &cacheIO{k: kc, v: vc, slots: slot, table: in[nw+5], prefill: true, scatter: e.scatter})
		last := Sub(Reshape(length, 1, 1), ConstAsDType(g, ir.Int32, 1))
		hl := Gather(h, last) // [1, H]
		// The history is the prompt itself, all of it prompt tokens.
		pen := penaltyInputs{hist: tokens, plen: length, hlen: length, biasIDs: in[nw+6], biasVals: in[nw+7], on: true}
		si, mask := nw+8, (*ir.Node)(nil)
		if k.mask {
			si, mask = si+1, allowedNode(in[nw+8], c.Vocab)
		}
		sp := sampleNodes(in[si:], pen)
		sp.mask = mask
		tok, lp, lsm := sampleLSM(logits(w, hl), sp)
		outs := []*ir.Node{tok, lp, nk, nv}
		if k.lp || k.echo {
			tv, ti := topLogprobs(lsm, e.topWidth())
			outs = append(outs, tv, ti)
		}
		if k.echo {
			plp, pv, pi := promptLogprobs(w, h, tokens, e.topWidth())
			outs = append(outs, plp, pv, pi)
		}
		return outs, nil
	}, shapes...)
}

// compileDecode compiles the decode program for b sequences whose
// positions are all below the context bucket cb.
func (e *Engine) compileDecode(ctx context.Context, b, cb int, pen bool) (*tensorbridge.Executable, error) {
	return e.compileDecodeVariant(ctx, decodeKey{batch: b, context: cb, pen: pen}, false)
}

// compileDecodeVariant compiles the decode program of key k, with each
// row's top logprobs as extra outputs after the caches when lp
// (logprobs.go).
func (e *Engine) compileDecodeVariant(ctx context.Context, k decodeKey, lp bool) (*tensorbridge.Executable, error) {
	c, b, cb, pen := e.m.Config, k.batch, k.context, k.pen
	nw := numWeightParams(c)
	shapes := append(e.m.weightShapes(), e.cacheShape, e.cacheShape,
		ir.MakeShape(ir.Int32, b, 1), ir.MakeShape(ir.Int32, b, 1), ir.MakeShape(ir.Int32, b), ir.MakeShape(ir.Int32, b, e.tableWidth(cb)))
	name := fmt.Sprintf("llm-decode-%d-ctx%d", b, cb)
	if pen {
		shapes = append(shapes, biasShapes(b, e.biasWidth())...)
		shapes = append(shapes, ir.MakeShape(ir.Int32, b, cb), ir.MakeShape(ir.Int32, b))
	}
	if k.mask {
		shapes, name = append(shapes, e.maskShape(b)), name+"-masked"
	}
	if pen {
		shapes = append(shapes, sampleShapes(b)...)
		name += "-penalties"
	} else {
		shapes = append(shapes, sampleShapes(b)[:numPlainSampleInputs]...)
	}
	extra := 0
	if lp {
		name, extra = name+"-logprobs", 2
	}
	return e.compile(ctx, name, cacheDonation(nw), extra, func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		w := newNetWeights(c, in)
		kc, vc := in[nw], in[nw+1]
		tokens, pos, slots := in[nw+2], in[nw+3], in[nw+4]
		h, nk, nv := step(c, w, tokens, pos, &cacheIO{k: kc, v: vc, slots: slots, table: in[nw+5], scatter: e.scatter})
		withTop := func(tok, lp, lsm *ir.Node) []*ir.Node {
			outs := []*ir.Node{tok, lp, nk, nv}
			if extra > 0 {
				tv, ti := topLogprobs(lsm, e.topWidth())
				outs = append(outs, tv, ti)
			}
			return outs
		}
		// masked reads the mask input at in[i] (when k.mask) and the
		// sampling inputs after it.
		masked := func(i int, pi penaltyInputs) sampleParams {
			var mask *ir.Node
			if k.mask {
				i, mask = i+1, allowedNode(in[i], c.Vocab)
			}
			sp := sampleNodes(in[i:], pi)
			sp.mask = mask
			return sp
		}
		if !pen {
			return withTop(sampleLSM(logits(w, h), masked(nw+6, penaltyInputs{}))), nil
		}
		// The history holds positions [0, pos]: the token fed at pos is
		// the last one generated.
		hlen := Add(Reshape(pos, b), ConstAsDType(g, ir.Int32, 1))
		pi := penaltyInputs{biasIDs: in[nw+6], biasVals: in[nw+7], hist: in[nw+8], plen: in[nw+9], hlen: hlen, on: true}
		return withTop(sampleLSM(logits(w, h), masked(nw+10, pi))), nil
	}, shapes...)
}

// cacheDonation gives a program's K and V cache inputs (after the nw
// weight inputs) to its outputs 2 and 3, the updated caches.
func cacheDonation(nw int) tensorbridge.Donation {
	return tensorbridge.Donation{nw: 2, nw + 1: 3}
}

// compile compiles one program, with donate's inputs donated
// (Backend.CompileDonating), and counts it; extra is the number of its
// outputs after the token, its logprob and the caches (logprobs.go).
func (e *Engine) compile(ctx context.Context, name string, donate tensorbridge.Donation, extra int, fn tensorbridge.Func, shapes ...ir.Shape) (*tensorbridge.Executable, error) {
	e.compiles.Add(1)
	if e.m.tp != nil {
		return e.compileMeshProgram(ctx, name, fn, shapes, extra)
	}
	return e.m.b.CompileDonating(ctx, name, fn, donate, shapes...)
}

// row is one sequence's inputs to a program run.
type row struct {
	token, pos, slot int
	blocks           []int32 // the sequence's block table (paged.go)
	s                SamplingParams
	index            int   // tokens generated so far: the draw's index
	hist             []int // prompt and generated tokens
	plen             int   // prompt length
	biasIDs          []int // the logit_bias ids, sorted
	stops            []int // the ids min_tokens masks

	mask []uint32 // the tokens allowed next (constrain.go); nil: all
}

// sampleTensors builds the sampling inputs for rows (padded to n).
// sampleTensors builds the sampling inputs: the first
// numPlainSampleInputs, and the penalties too when pen.
func sampleTensors(rows []row, n int, pen bool) ([]*ir.Tensor, error) {
	temp, topP, minP := make([]float32, n), make([]float32, n), make([]float32, n)
	topK, seed, idx := make([]int, n), make([]int, n), make([]int, n)
	rep, freq, pres := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		topP[i], rep[i] = 1, 1
		if i >= len(rows) {
			continue
		}
		s := rows[i].s
		temp[i], topK[i], topP[i], minP[i], seed[i], idx[i] = s.Temperature, s.TopK, s.TopP, s.MinP, int(int32(s.Seed)), rows[i].index
		rep[i], freq[i], pres[i] = s.repetition(), s.FrequencyPenalty, s.PresencePenalty
		if s.TopP <= 0 || s.TopP > 1 {
			topP[i] = 1
		}
	}
	var out []*ir.Tensor
	add := func(t *ir.Tensor, err error) error {
		if err != nil {
			freeAll(out)
			return err
		}
		out = append(out, t)
		return nil
	}
	makers := []func() (*ir.Tensor, error){
		func() (*ir.Tensor, error) { return float32Tensor([]int{n}, temp) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{n}, topK) },
		func() (*ir.Tensor, error) { return float32Tensor([]int{n}, topP) },
		func() (*ir.Tensor, error) { return float32Tensor([]int{n}, minP) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{n}, seed) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{n}, idx) },
	}
	if pen {
		makers = append(makers,
			func() (*ir.Tensor, error) { return float32Tensor([]int{n}, rep) },
			func() (*ir.Tensor, error) { return float32Tensor([]int{n}, freq) },
			func() (*ir.Tensor, error) { return float32Tensor([]int{n}, pres) })
	}
	for _, f := range makers {
		if err := add(f()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runStep runs a program on the cache and rows' inputs; it replaces the
// engine's caches by the program's outputs and returns each row's token
// and log-probability. The run consumes the caches it is given (they are
// donated); when it fails after that, the engine gets new zeroed caches
// and cacheLost is set, so that every sequence holding state in them is
// ended with the error.
func (e *Engine) runStep(ctx context.Context, exe *tensorbridge.Executable, blocks []*ir.Tensor, rows []row, n int, pen bool) (out stepOut, err error) {
	if e.m.tp != nil {
		return e.runStepMesh(ctx, exe, blocks, rows, n, pen)
	}
	start := time.Now()
	var inProgram time.Duration
	defer func() { e.stats.add(time.Since(start), inProgram) }()
	st, err := sampleTensors(rows, n, pen)
	if err != nil {
		return stepOut{}, err
	}
	defer freeAll(st)
	defer freeAll(blocks)
	in := make([]*ir.Tensor, 0, len(e.m.weights)+2+len(blocks)+len(st))
	in = append(in, e.m.weights...)
	in = append(in, e.kc, e.vc)
	in = append(in, blocks...)
	in = append(in, st...)
	runStart := time.Now()
	outs, err := exe.RunOnDevice(ctx, 0, in...)
	if err != nil {
		if e.kc.CheckValid() != nil || e.vc.CheckValid() != nil {
			e.cacheLost = true
			_ = e.kc.FinalizeAll()
			_ = e.vc.FinalizeAll()
			if aerr := e.allocCache(); aerr != nil {
				return stepOut{}, errors.Join(err, aerr)
			}
		}
		return stepOut{}, err
	}
	defer freeAll(outs[:2])
	defer freeAll(outs[4:])
	// Reading the token waits for the program: it counts as in-program.
	err = out.read(outs[:2], outs[4:], e.topWidth())
	inProgram = time.Since(runStart)
	e.kc, e.vc = outs[2], outs[3] // the old ones were donated to the run
	return out, err
}

// stepOut is a program run's results: each row's token and its
// log-probability, and the logprob programs' extra outputs.
type stepOut struct {
	toks []int
	lps  []float32
	logprobOuts
}

// read reads the token and logprob outputs (first) and the extra ones.
func (o *stepOut) read(first, extra []*ir.Tensor, width int) error {
	var err error
	if o.toks, err = int32s(first[0]); err != nil {
		return err
	}
	if o.lps, err = float32s(first[1]); err != nil {
		return err
	}
	return o.logprobOuts.read(extra, width)
}

// token is row i's event: its id and logprob, and k alternatives.
func (o *stepOut) token(i, k int) Token {
	return Token{ID: o.toks[i], Logprob: o.lps[i], Top: o.top(i, k)}
}

// stepTotals are the engine's program runs (prefill and decode) since
// start: their count, their total wall time, and the part of it spent in
// RunOnDevice and reading the sampled tokens back (which waits for the
// program);
// the rest is the host's own work per step (building inputs, reading the
// sampled tokens, freeing the old cache).
type stepTotals struct {
	Steps     int64
	Total     time.Duration
	InProgram time.Duration
}

type stepStats struct {
	mu sync.Mutex
	s  stepTotals
}

func (s *stepStats) add(total, inProgram time.Duration) {
	s.mu.Lock()
	s.s.Steps++
	s.s.Total += total
	s.s.InProgram += inProgram
	s.mu.Unlock()
}

// totals returns the engine's step timings so far (chunked prefill's
// pace, and the benchmarks).
func (e *Engine) totals() stepTotals {
	e.stats.mu.Lock()
	defer e.stats.mu.Unlock()
	return e.stats.s
}
