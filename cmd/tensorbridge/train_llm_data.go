package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/llm/sft"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
	"github.com/tensorbridge/tensorbridge/train"
)

// llmData is a JSONL file's rows, tokenized (package sft), served as the
// training loop's batches: step s takes the rows after those of the steps
// before it, in file order (or a seeded permutation per epoch with
// --shuffle), wrapping at the end.
type llmData struct {
	rows   []sft.Example
	digest string
	seqLen int
	// dropout: each batch carries llm.DropoutSeed, a random-number state
	// derived from seed and the batch's position (the same on resume).
	dropout bool
	seed    uint64
}

// openLLMData reads and tokenizes path; every row's problem is found
// here, before step 1.
func openLLMData(ctx context.Context, path string, tok *tokenizer.Tokenizer, seqLen int, seed uint64) (*llmData, error) {
	rows, err := sft.Read(ctx, path, tok, seqLen)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	fmt.Fprintf(h, "\nseq-len %d\n", seqLen)
	return &llmData{rows: rows, digest: hex.EncodeToString(h.Sum(nil)), seqLen: seqLen, seed: seed}, nil
}

func (d *llmData) Len() int       { return len(d.rows) }
func (d *llmData) Digest() string { return d.digest }

func (d *llmData) Start(shuffle bool, seed int64) train.Position {
	return train.Position{Shuffle: shuffle, Seed: seed}
}

// Next returns b rows from p as input_ids and labels [b, T], T the
// longest row's length rounded up to a power of two (at least 16, at most
// --seq-len) so that few shapes compile; padding is exact: it follows
// each row's tokens, so causal attention keeps it out of their view, and
// its labels are -1.
func (d *llmData) Next(p train.Position, b int) (map[string]*ir.Tensor, train.Position, error) {
	n := len(d.rows)
	at := p // the position the dropout state derives from
	picked := make([]sft.Example, b)
	var perm []int
	for i := range b {
		if p.Shuffle && perm == nil {
			perm = train.Permutation(n, p.Seed, p.Epoch)
		}
		idx := p.Index
		if perm != nil {
			idx = perm[idx]
		}
		picked[i] = d.rows[idx]
		p.Index++
		if p.Index == n {
			p.Epoch, p.Index, perm = p.Epoch+1, 0, nil
		}
	}
	longest := 0
	for _, r := range picked {
		longest = max(longest, len(r.IDs))
	}
	t := 16
	for t < longest {
		t *= 2
	}
	bt, err := sft.MakeBatch(picked, 1, b, min(t, max(d.seqLen, longest)), 0)
	if err != nil {
		return nil, p, err
	}
	it, err := ir.TensorFromFlat(bt.Tokens, b, bt.T)
	if err != nil {
		return nil, p, err
	}
	lt, err := ir.TensorFromFlat(bt.Labels, b, bt.T)
	if err != nil {
		return nil, p, err
	}
	batch := map[string]*ir.Tensor{llm.InputIDs: it, llm.Labels: lt}
	if d.dropout {
		st := make([]uint64, 3*b)
		x := d.seed ^ uint64(at.Epoch)<<40 ^ uint64(at.Index)
		for i := range st {
			x = splitMix(x)
			st[i] = x
		}
		if batch[llm.DropoutSeed], err = ir.TensorFromFlat(st, b, 3); err != nil {
			return nil, p, err
		}
	}
	return batch, p, nil
}

// splitMix is one step of SplitMix64 (Steele, Lea and Flood, "Fast
// splittable pseudorandom number generators", OOPSLA 2014).
func splitMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	z := x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
