package peft

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/errs"
)

// Merge adds an adapter's product to a base weight in place:
// w += scale·B·A, where w is [out, in], a (A) is [r, in] and b (B) is
// [out, r], all row-major, as PEFT's merge_and_unload folds a LoRA module
// into its linear layer (W + scaling·(B @ A)). Each element's sum over
// the rank is accumulated in float64 in rank order, multiplied by scale
// and added to w's value in float64, then rounded once to float32; PEFT
// computes B @ A in float32, so the results agree to float32 rounding.
// Slices of the wrong length are an errs.ErrInvalidInput error and w is
// left unchanged.
func Merge(w []float32, out, in int, a, b []float32, r int, scale float64) error {
	if out <= 0 || in <= 0 || r <= 0 || len(w) != out*in || len(a) != r*in || len(b) != out*r {
		return &errs.InputError{Name: "lora merge", Problem: "shape",
			Expected: fmt.Sprintf("W [%d, %d], A [%d, %d], B [%d, %d] with positive sizes", out, in, r, in, out, r),
			Got:      fmt.Sprintf("%d, %d and %d values", len(w), len(a), len(b))}
	}
	for o := range out {
		brow := b[o*r : (o+1)*r]
		wrow := w[o*in : (o+1)*in]
		for i := range in {
			var s float64
			for k, bk := range brow {
				s += float64(bk) * float64(a[k*in+i])
			}
			wrow[i] = float32(float64(wrow[i]) + scale*s)
		}
	}
	return nil
}

// Merge folds every layer of the adapter into the base weights: weights
// maps a module name to its [Out, In] weight, changed in place. A module
// missing from weights, or a weight of the wrong size, is an
// errs.ErrInvalidInput error, found before any weight changes.
func (a *Adapter) Merge(weights map[string][]float32) error {
	if err := a.check(); err != nil {
		return err
	}
	for _, l := range a.Layers {
		if w, ok := weights[l.Name]; !ok || len(w) != l.Out*l.In {
			return &errs.InputError{Name: "lora merge " + l.Name, Problem: "shape",
				Expected: fmt.Sprintf("a base weight [%d, %d]", l.Out, l.In), Got: fmt.Sprintf("%d values (present: %v)", len(w), ok)}
		}
	}
	scale := a.Config.Scale()
	for _, l := range a.Layers {
		if err := Merge(weights[l.Name], l.Out, l.In, l.A, l.B, a.Config.R, scale); err != nil {
			return err
		}
	}
	return nil
}
