package sft

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/errs"
)

// Batch is one training step's input: Tokens and Labels are [B, T]
// row-major. Labels[r*T+t] is the token position t of row r predicts
// (Tokens[r*T+t+1]) when that token is a target, and -1 elsewhere: for
// non-target tokens, the row's last token and padding. Targets counts the
// labels that are not -1; the batch's loss is the sum of their
// cross-entropies divided by Targets (transformers' causal-LM loss with
// ignore_index elsewhere, not a mean of per-row means).
type Batch struct {
	Tokens, Labels []int32
	B, T           int
	Targets        int
}

// MakeBatch lays out step step (1-based) with b rows per step: rows
// (step-1)·b … step·b-1 of ex in order, wrapping around the end of ex,
// right-padded with padID to the longest of them or to padTo if that is
// larger. Right padding stays out of every real token's view under causal
// attention, and its labels are -1, so it changes neither the loss nor
// the gradients.
func MakeBatch(ex []Example, step, b, padTo int, padID int32) (Batch, error) {
	switch {
	case len(ex) == 0:
		return Batch{}, fmt.Errorf("sft: batch of no examples: %w", errs.ErrInvalidInput)
	case step < 1 || b < 1:
		return Batch{}, fmt.Errorf("sft: step %d, batch size %d: expected both at least 1: %w", step, b, errs.ErrInvalidInput)
	}
	n := len(ex)
	first := (step - 1) % n * (b % n) % n // (step-1)·b mod n without overflow
	rows := make([]Example, b)
	t := padTo
	for r := range rows {
		rows[r] = ex[(first+r)%n]
		if len(rows[r].Targets) != len(rows[r].IDs) {
			return Batch{}, fmt.Errorf("sft: example has %d ids and %d target flags: %w", len(rows[r].IDs), len(rows[r].Targets), errs.ErrInvalidInput)
		}
		t = max(t, len(rows[r].IDs))
	}
	out := Batch{Tokens: make([]int32, b*t), Labels: make([]int32, b*t), B: b, T: t}
	for r, row := range rows {
		for j := range t {
			out.Tokens[r*t+j], out.Labels[r*t+j] = padID, -1
			if j < len(row.IDs) {
				out.Tokens[r*t+j] = int32(row.IDs[j])
			}
			if j+1 < len(row.IDs) && row.Targets[j+1] {
				out.Labels[r*t+j] = int32(row.IDs[j+1])
				out.Targets++
			}
		}
	}
	return out, nil
}
