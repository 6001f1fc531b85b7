package llm

import (
	"context"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// runPrefill runs prompt (padded to p) into r's blocks (the null block
// when it has none: warm-up), with slot's adapter, and samples its first
// token.
func (e *Engine) runPrefill(ctx context.Context, exe *tensorbridge.Executable, p int, prompt []int, slot int, r row) (stepOut, error) {
	ids := make([]int, p)
	copy(ids, prompt)
	k := e.biasWidth()
	pb := buildPenalties([]row{r}, 1, 0, k)
	var blocks []*ir.Tensor
	for _, mk := range []func() (*ir.Tensor, error){
		func() (*ir.Tensor, error) { return int32Tensor([]int{1, p}, ids) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{1}, []int{len(prompt)}) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{1}, []int{slot}) },
		func() (*ir.Tensor, error) {
			return int32Tensor([]int{1, e.tableWidth(p)}, tableRow(r.blocks, e.tableWidth(p)))
		},
		func() (*ir.Tensor, error) { return int32Tensor([]int{1, k}, pb.biasIDs) },
		func() (*ir.Tensor, error) { return float32Tensor([]int{1, k}, pb.biasVals) },
		func() (*ir.Tensor, error) { return maskTensor([]row{r}, 1, e.maskWords()) },
	}[:6+boolInt(r.mask != nil)] {
		t, err := mk()
		if err != nil {
			freeAll(blocks)
			return stepOut{}, err
		}
		blocks = append(blocks, t)
	}
	return e.runStep(ctx, exe, blocks, []row{r}, 1, true)
}

// runDecode runs one decode step of rows padded to b (padding rows take
// the scratch slot's adapter and write to the null block) with the
// program of context bucket cb, which every row's position is below.
func (e *Engine) runDecode(ctx context.Context, exe *tensorbridge.Executable, b, cb int, rows []row, pen bool) ([]int, []float32, error) {
	out, err := e.runDecodeOut(ctx, exe, b, cb, rows, pen)
	return out.toks, out.lps, err
}

// runDecodeOut is runDecode with the program's logprob outputs, if any.
func (e *Engine) runDecodeOut(ctx context.Context, exe *tensorbridge.Executable, b, cb int, rows []row, pen bool) (stepOut, error) {
	tok, pos, slot := make([]int, b), make([]int, b), make([]int, b)
	w := e.tableWidth(cb)
	table := make([]int, 0, b*w)
	for i := range b {
		slot[i], pos[i] = e.slots, i%cb // padding rows: scratch positions inside the bucket
		var blocks []int32
		if i < len(rows) {
			tok[i], pos[i], slot[i], blocks = rows[i].token, rows[i].pos, rows[i].slot, rows[i].blocks
		}
		table = append(table, tableRow(blocks, w)...)
	}
	makers := []func() (*ir.Tensor, error){
		func() (*ir.Tensor, error) { return int32Tensor([]int{b, 1}, tok) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{b, 1}, pos) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{b}, slot) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{b, w}, table) },
	}
	if pen {
		k := e.biasWidth()
		pb := buildPenalties(rows, b, cb, k)
		makers = append(makers,
			func() (*ir.Tensor, error) { return int32Tensor([]int{b, k}, pb.biasIDs) },
			func() (*ir.Tensor, error) { return float32Tensor([]int{b, k}, pb.biasVals) },
			func() (*ir.Tensor, error) { return int32Tensor([]int{b, cb}, pb.hist) },
			func() (*ir.Tensor, error) { return int32Tensor([]int{b}, pb.plen) })
	}
	if anyMask(rows) {
		makers = append(makers, func() (*ir.Tensor, error) { return maskTensor(rows, b, e.maskWords()) })
	}
	var blocks []*ir.Tensor
	for _, mk := range makers {
		t, err := mk()
		if err != nil {
			freeAll(blocks)
			return stepOut{}, err
		}
		blocks = append(blocks, t)
	}
	return e.runStep(ctx, exe, blocks, rows, b, pen)
}
