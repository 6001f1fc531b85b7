package llm

// Serving LoRA adapters beside the base model. Load reads each adapter
// (PEFT's files, package peft) and stacks, per adapted projection, the
// adapters' A [K+1, r, in] and B·scale [K+1, out, r] (entry 0 all zero:
// the base model; a smaller rank padded with zeros, which add nothing),
// placed after the other weights, and a table [slots+1] int32 of each
// cache slot's adapter. Every program gathers its rows' adapters by slot,
// so one decode step may mix sequences of different adapters and of the
// base model; each row computes W x + B(A x) with its own A and B, which
// equals its adapter merged (W + scale·B·A) up to float rounding. The
// engine writes a slot's entry when it admits a sequence (bindAdapter).

import (
	"context"
	"fmt"
	"slices"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/llm/peft"
)

// PEFTModules lists the decoder's projections as package peft matches
// and checks adapters against them.
func (c *Config) PEFTModules() []peft.Module {
	var out []peft.Module
	for _, m := range c.Modules() {
		out = append(out, peft.Module{Name: m.Name, In: m.In, Out: m.Out})
	}
	return out
}

// AdapterSource is a LoRA adapter directory (adapter_config.json and
// adapter_model.safetensors, as PEFT writes them) served under Name.
type AdapterSource struct {
	Name, Dir string
}

// adapterLayout is how a Model's weights hold its adapters.
type adapterLayout struct {
	names []string // adapter i+1's name
	keys  []int    // loraKey of each stacked projection, in weight order
	rank  int      // the stacks' rank: the largest adapter's
}

// numAdapterParams is the stacks (A and B per projection) and the table.
func numAdapterParams(c *Config) int {
	if c.adapt == nil {
		return 0
	}
	return 2*len(c.adapt.keys) + 1
}

// Adapters names the adapters the model serves, in index order (index 0
// is the base model).
func (m *Model) Adapters() []string {
	if m.Config.adapt == nil {
		return nil
	}
	return slices.Clone(m.Config.adapt.names)
}

// adapterIndex is name's index: 0 for "" (the base model).
func (m *Model) adapterIndex(name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	if a := m.Config.adapt; a != nil {
		if i := slices.Index(a.names, name); i >= 0 {
			return i + 1, nil
		}
	}
	return 0, &errs.InputError{Name: "adapter", Problem: "name", Expected: fmt.Sprintf("one of the adapters loaded %v", m.Adapters()), Got: name}
}

// readAdapters reads srcs against c's projections and returns the layout
// and the host stacks, in weight order.
func readAdapters(c *Config, dt ir.DType, srcs []AdapterSource) (*adapterLayout, []*ir.Tensor, error) {
	mods := c.PEFTModules()
	byName := map[string]Module{}
	for _, m := range c.Modules() {
		byName[m.Name] = m
	}
	lay := &adapterLayout{}
	var ads []*peft.Adapter
	used := map[int]Module{}
	for _, s := range srcs {
		if s.Name == "" || slices.Contains(lay.names, s.Name) {
			return nil, nil, &errs.InputError{Name: "adapter", Problem: "name", Expected: "a unique non-empty name", Got: fmt.Sprintf("%q", s.Name)}
		}
		a, err := peft.Read(s.Dir, mods)
		if err != nil {
			return nil, nil, fmt.Errorf("adapter %s: %w", s.Name, err)
		}
		lay.names = append(lay.names, s.Name)
		lay.rank = max(lay.rank, a.Config.R)
		ads = append(ads, a)
		for _, l := range a.Layers {
			m := byName[l.Name]
			used[loraKey(m.layer, m.slot)] = m
		}
	}
	for k := range used {
		lay.keys = append(lay.keys, k)
	}
	slices.Sort(lay.keys)
	k1, r := len(ads)+1, lay.rank
	var out []*ir.Tensor
	for _, key := range lay.keys {
		m := used[key]
		as, bs := make([]float32, k1*r*m.In), make([]float32, k1*m.Out*r)
		for i, a := range ads {
			scale := float32(a.Config.Scale())
			for _, l := range a.Layers {
				if l.Name != m.Name {
					continue
				}
				ra := a.Config.R
				for j := range ra { // A [ra, in] into rows 0..ra-1 of [r, in]
					copy(as[(i+1)*r*m.In+j*m.In:], l.A[j*m.In:(j+1)*m.In])
				}
				for o := range m.Out { // B [out, ra] into columns 0..ra-1 of [out, r], times scale
					for j := range ra {
						bs[(i+1)*m.Out*r+o*r+j] = l.B[o*ra+j] * scale
					}
				}
			}
		}
		for _, st := range []struct {
			v    []float32
			dims []int
		}{{as, []int{k1, r, m.In}}, {bs, []int{k1, m.Out, r}}} {
			t, err := ir.TensorFromFlat(st.v, st.dims...)
			if err == nil && dt != ir.Float32 {
				t, err = convertHost(t, dt)
			}
			if err != nil {
				return nil, nil, err
			}
			out = append(out, t)
		}
	}
	return lay, out, nil
}

// placeAdapters reads srcs and appends their stacks and a one-slot table
// to the model's weights (the engine sizes the table).
func (m *Model) placeAdapters(ctx context.Context, srcs []AdapterSource) error {
	if len(srcs) == 0 {
		return nil
	}
	if m.tp != nil {
		return &errs.UnsupportedError{What: "feature", Name: "adapters on a mesh", Detail: "load the model on one device to serve adapters"}
	}
	lay, host, err := readAdapters(m.Config, m.dtype, srcs)
	if err != nil {
		return err
	}
	table, err := ir.TensorFromFlat([]int32{0}, 1)
	if err != nil {
		return err
	}
	host = append(host, table)
	for _, h := range host {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := ir.ToDevice(h, m.b.Engine(), 0)
		if err != nil {
			return fmt.Errorf("placing adapters: %w", err)
		}
		m.weights = append(m.weights, d)
	}
	m.Config.adapt = lay
	return nil
}

// slotTable is the engine's host copy of each cache slot's adapter.
type slotTable struct {
	idx []int32
}

// sizeAdapterTable gives the model's slot table n entries, all the base
// model; the engine calls it once it knows its slots.
func (m *Model) sizeAdapterTable(n int) (*slotTable, error) {
	if m.Config.adapt == nil {
		return nil, nil
	}
	st := &slotTable{idx: make([]int32, n)}
	return st, m.setTable(st.idx)
}

// setTable uploads idx as the slot table, replacing the old one.
func (m *Model) setTable(idx []int32) error {
	h, err := ir.TensorFromFlat(slices.Clone(idx), len(idx))
	if err != nil {
		return err
	}
	d, err := ir.ToDevice(h, m.b.Engine(), 0)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.weights == nil {
		_ = d.FinalizeAll()
		return fmt.Errorf("llm: model closed")
	}
	last := len(m.weights) - 1
	old := m.weights[last]
	m.weights[last] = d
	_ = old.FinalizeAll()
	return nil
}

// bindAdapter records that slot now generates with adapter a.
func (e *Engine) bindAdapter(slot, a int) error {
	st := e.adapterSlots
	if st == nil || st.idx[slot] == int32(a) {
		return nil
	}
	st.idx[slot] = int32(a)
	return e.m.setTable(st.idx)
}

// adapterWeights indexes the stacks and the table among a program's
// weight parameters (p, after the scales).
func (w *netWeights) adapterWeights(c *Config, p []*Node) {
	if c.adapt == nil {
		return
	}
	w.rowLoRA = map[int][2]*Node{}
	for i, k := range c.adapt.keys {
		w.rowLoRA[k] = [2]*Node{p[2*i], p[2*i+1]}
	}
	w.table = p[2*len(c.adapt.keys)]
}

// rowLoRA is each row's adapter on x [N, in] (N = B·T, rows of T tokens):
// B_b (A_b x) for A [K+1, r, in] and B [K+1, out, r] gathered by idx [B].
func rowLoRA(x, a, b, idx *Node) *Node {
	bs := idx.Shape().Dimensions[0]
	n, in := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	out := b.Shape().Dimensions[1]
	at := Reshape(idx, bs, 1)
	xa := Einsum("bti,bri->btr", Reshape(x, bs, n/bs, in), Gather(a, at))
	return Reshape(Einsum("btr,bor->bto", xa, Gather(b, at)), n, out)
}

// convertHost converts a float32 host tensor to dt.
func convertHost(t *ir.Tensor, dt ir.DType) (*ir.Tensor, error) {
	var raw []byte
	err := t.ConstFlatData(func(flat any) {
		f := flat.([]float32)
		raw = make([]byte, len(f)*dt.Size())
		for i, v := range f {
			putFloat(raw, i, v, dt)
		}
	})
	if err != nil {
		return nil, err
	}
	return ir.TensorFromBytes(dt, t.Shape().Dimensions, raw)
}
