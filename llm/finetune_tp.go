package llm

// How a fine-tune's tensors lie over a mesh's model axis for tensor
// parallelism (train --strategy tp): FineTune.TrainSplits, which the
// Trainer reads through tensorbridge.TrainSplitter.
//
// The base weights split as tensor-parallel generation splits them
// (meshRules in mesh.go: Megatron's pattern on [out, in] matrices). LoRA's
// adapters follow their projection so that no extra collective is
// needed where Megatron has none (https://arxiv.org/abs/1909.08053, §3):
//
//   - column-parallel projections (q, k, v, gate, up; W split by output
//     rows): B [out, r] split by its rows like W, A [r, in] replicated, so
//     each device computes its rows of W x + s·B(A x) from the whole x;
//   - row-parallel projections (o, down; W split by input columns): A
//     [r, in] split by its columns like W, B [out, r] replicated; A x is
//     then a partial sum over the devices, reduced ([tokens, r], small)
//     where W x's partial sums are.
//
// The rope tables and int8 scales (1-D, after the weights) are
// replicated. XLA's partitioner inserts the collectives, so any split
// gives the same values; the choice only decides the communication.

import (
	"github.com/tensorbridge/tensorbridge/shard"
)

// ReleaseConstants frees the checkpoint weights at TrainConstants indices
// idx (tensorbridge.ConstantReleaser): a tensor-parallel Trainer has
// placed each device's part of them, so device 0 no longer holds the
// whole base model beside its part. The model is then closed for
// everything else (generation answers tensorbridge.ErrClosed); its other
// weights stay with the Trainer until Model.Close.
func (f *FineTune) ReleaseConstants(idx []int) {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.weights == nil {
		return
	}
	widx := f.constantWeights()
	gone := map[int]bool{}
	for _, i := range idx {
		if i >= 0 && i < len(widx) {
			gone[widx[i]] = true
		}
	}
	for i, w := range m.weights {
		if gone[i] {
			_ = w.FinalizeAll()
		} else {
			m.kept = append(m.kept, w)
		}
	}
	m.weights = nil
}

// constantWeights maps TrainConstants indices to the model's weights.
func (f *FineTune) constantWeights() []int {
	if f.lora != nil {
		out := make([]int, len(f.m.weights))
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := append([]int(nil), f.frozenIdx...)
	for i := len(weightSpecs(f.m.Config)); i < len(f.m.weights); i++ {
		out = append(out, i)
	}
	return out
}

// loraMeshRules place the adapters (above), then the base weights as
// meshRules does.
var loraMeshRules = shard.Options{NamedOnly: true, Rules: append(mustRules(
	`(q_proj|k_proj|v_proj|gate_proj|up_proj)\.lora_B\.weight$=0`,
	`(o_proj|down_proj)\.lora_A\.weight$=1`,
	`\.lora_(A|B)\.weight$=r`,
), meshRules.Rules...)}

// TrainSplits says how each trained tensor (TrainParams order) and each
// constant (TrainConstants order) is split over a mesh whose model axis
// has model devices (see the comment at the top of this file). A
// dimension the axis does not divide stays whole; notes says which.
func (f *FineTune) TrainSplits(model int) (trained, constants []shard.Plan, notes []string) {
	add := func(out []shard.Plan, name string, dims []int) []shard.Plan {
		pl, note := shard.Weight(name, dims, model, loraMeshRules)
		if note != "" {
			notes = append(notes, note)
		}
		return append(out, pl)
	}
	for _, p := range f.params {
		trained = add(trained, p.Name, p.Shape.Dimensions)
	}
	specs := weightSpecs(f.m.Config)
	idx := f.frozenIdx
	if f.lora != nil {
		idx = make([]int, len(specs))
		for i := range idx {
			idx[i] = i
		}
	}
	for _, i := range idx {
		constants = add(constants, specs[i].name, specs[i].shape)
	}
	for _, c := range f.TrainConstants()[len(idx):] { // rope tables, int8 scales
		constants = append(constants, make(shard.Plan, c.Shape().Rank()))
	}
	return trained, constants, notes
}
