package llm

import (
	"context"
	"errors"
	"fmt"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// n choices from one prompt (OpenAI's n). The request is prefilled once,
// into the first choice's blocks (paged.go); the other n-1 choices take
// the full blocks of its prompt positions [0, n-1) into their block
// tables by reference, get a copy of the partial block after them (one
// small program, the cache donated, a DynamicSlice and
// DynamicUpdateSlice of one block per cache), and start one position
// back, on the prompt's last token: their first decode step recomputes
// that position's keys and values in their own block and samples their
// first token from its logits, batched with every other running
// sequence. The n slots and all the choices' blocks are taken at once: a
// request that does not find them free waits (and the requests behind
// it) until they are.
//
// Choice i draws from its own stream: the seed ChoiceSeed(seed, i), so
// choice 0 is the answer of the same request with n = 1, and the same
// seed gives the same n answers.

// MaxChoices is the most choices one request may ask for.
const MaxChoices = 16

// ChoiceSeed is the sampling seed of choice i of a request seeded with
// seed: seed + i·0x9E3779B9 (mod 2^32), the golden-ratio increment, so
// that nearby seeds of different requests do not share streams at small i.
func ChoiceSeed(seed uint32, i int) uint32 { return seed + uint32(i)*0x9E3779B9 }

// GenerateN queues n generations of one request (1 <= n <= MaxChoices,
// and at most the engine's slots) and returns their streams, choice i's
// drawn with ChoiceSeed(r.Sampling.Seed, i); the prompt is prefilled
// once. With n = 1 it is Generate. On a model split over a mesh, whose
// cache slots live on several devices, the choices are independent
// requests (each prefilled), with the same seeds.
func (e *Engine) GenerateN(ctx context.Context, r Request, n int) ([]<-chan Token, error) {
	if n < 1 || n > MaxChoices || n > e.slots {
		return nil, &RequestError{Problem: fmt.Sprintf("n = %d choices: must be in 1..%d (and at most the %d sequences the engine runs at once)", n, min(MaxChoices, e.slots), e.slots)}
	}
	seqs := make([]*seq, n)
	chans := make([]<-chan Token, n)
	for i := range seqs {
		ri := r
		ri.Sampling.Seed = ChoiceSeed(r.Sampling.Seed, i)
		s, err := e.newSeq(ctx, ri)
		if err != nil {
			return nil, err
		}
		seqs[i], chans[i] = s, s.out.ch
	}
	if err := e.checkBlocks(seqs[0], n); err != nil && e.m.tp == nil {
		return nil, err
	}
	if e.m.tp != nil {
		for i, s := range seqs {
			if err := e.enqueue(s); err != nil {
				for _, q := range seqs[:i] { // already queued: end them
					q.out.end(Token{ID: -1, Finish: "cancelled", Err: err})
				}
				return nil, err
			}
		}
		return chans, nil
	}
	seqs[0].group = seqs[1:]
	if err := e.enqueue(seqs[0]); err != nil {
		return nil, err
	}
	return chans, nil
}

// endGroup ends s and the other choices of its request with t.
func endGroup(s *seq, t Token) {
	s.out.end(t)
	endFollowers(s, t)
}

// endFollowers ends the other choices of s's request (not yet started)
// with t.
func endFollowers(s *seq, t Token) {
	for _, f := range s.group {
		f.out.end(t)
	}
}

// startGroup gives the other choices of s (just prefilled) their slots
// and block tables (s's full prompt blocks shared, a copy of the partial
// one, fresh blocks from s.groupBlocks), and sets them on the prompt's
// last token (their first decode step samples their first token). On an
// error the slots and blocks are given back and nothing is started.
func (e *Engine) startGroup(ctx context.Context, s *seq, free *[]int) ([]*seq, error) {
	taken := 0
	fail := func(err error) ([]*seq, error) {
		for _, f := range s.group[:taken] {
			*free = append(*free, f.slot)
			e.pool.release(f.blocks)
			f.blocks = nil
		}
		return nil, err
	}
	plen, shared := len(s.req.Prompt), e.sharedBlocks(s)
	for _, f := range s.group {
		f.slot, *free = (*free)[len(*free)-1], (*free)[:len(*free)-1]
		own := e.seqBlocks(f) - shared
		f.blocks = append(append([]int32(nil), s.blocks[:shared]...), s.groupBlocks[:own]...)
		e.pool.acquire(s.blocks[:shared])
		s.groupBlocks = s.groupBlocks[own:]
		taken++
		if err := e.bindAdapter(f.slot, f.adapter); err != nil {
			return fail(err)
		}
		if (plen-1)%e.pool.size != 0 { // positions [shared*bs, plen-1) of the partial block
			if err := e.copyKV(ctx, s.blocks[shared], f.blocks[shared]); err != nil {
				return fail(err)
			}
		}
		f.pos, f.last = plen-1, s.req.Prompt[plen-1]
	}
	return s.group, nil
}

// copyKV copies block src's K and V into block dst. When the run fails
// after consuming the caches, the engine gets new zeroed ones and
// cacheLost is set (as runStep does).
func (e *Engine) copyKV(ctx context.Context, src, dst int32) error {
	if e.copySlot == nil {
		exe, err := e.compileCopySlot(ctx)
		if err != nil {
			return err
		}
		e.copySlot = exe
	}
	st, err := int32Tensor([]int{1}, []int{int(src)})
	if err != nil {
		return err
	}
	dt, err := int32Tensor([]int{1}, []int{int(dst)})
	if err != nil {
		freeAll([]*ir.Tensor{st})
		return err
	}
	defer freeAll([]*ir.Tensor{st, dt})
	outs, err := e.copySlot.RunOnDevice(ctx, 0, e.kc, e.vc, st, dt)
	if err != nil {
		if e.kc.CheckValid() != nil || e.vc.CheckValid() != nil {
			e.cacheLost = true
			_ = e.kc.FinalizeAll()
			_ = e.vc.FinalizeAll()
			if aerr := e.allocCache(); aerr != nil {
				return errors.Join(err, aerr)
			}
		}
		return err
	}
	e.kc, e.vc = outs[0], outs[1] // the old ones were donated to the run
	return nil
}

// compileCopySlot compiles the block copy: (K, V, src [1], dst [1]) to
// the pools with block dst holding block src's positions, the pools
// donated. An engine without DynamicUpdateSlice writes the block by
// ScatterUpdate, as the cache writes do (paged.go).
func (e *Engine) compileCopySlot(ctx context.Context) (*tensorbridge.Executable, error) {
	idx := ir.MakeShape(ir.Int32, 1)
	return e.compile(ctx, "llm-copy-block", tensorbridge.Donation{0: 0, 1: 1}, 0, func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		src, dst := in[2], in[3]
		zero := ConstAsDType(g, ir.Int32, 0)
		copyRow := func(c *Node) *Node {
			row := Gather(c, Reshape(src, 1, 1)) // [1, blockSize, L, Hkv, D]
			if e.scatter {
				return ScatterUpdate(c, Reshape(dst, 1, 1), row, false, true)
			}
			return DynamicUpdateSlice(c, row, []*Node{Reshape(dst), zero, zero, zero, zero})
		}
		return []*ir.Node{copyRow(in[0]), copyRow(in[1])}, nil
	}, e.cacheShape, e.cacheShape, idx, idx)
}
