package onnxpb

import (
	"bytes"

	"github.com/tensorbridge/tensorbridge/ir"
)

// Decoding is zero-copy for `bytes` fields: a Tensor's RawData and
// StringData, an Attribute's S and Strings point into the buffer the model
// was decoded from, so any one of them keeps the whole file (a model's
// weights) alive. An importer that has converted the initializers it needs
// releases their payloads (ReleaseData) and then detaches the rest
// (DetachBytes), so the file's bytes can be freed.

// ReleaseData drops the tensor's element payload (raw and typed) for
// converted, the ir tensor an importer made of it (its ToIR result, which
// must not be modified afterwards): ToIR returns converted from then on,
// so a model built again from the same proto (a rewritten copy, a plan by
// shape) reads the same values. Name, dtype, dims and external data
// references stay. It does nothing to a STRING tensor (no ir form).
func (t *Tensor) ReleaseData(converted *ir.Tensor) {
	if converted == nil || t.DataType == String {
		return
	}
	t.converted = converted
	t.RawData, t.StringData = nil, nil
	t.FloatData, t.Int32Data, t.Int64Data, t.DoubleData, t.Uint64Data = nil, nil, nil, nil, nil
}

// DetachBytes copies every `bytes` field still set in the model into its
// own allocation, so the model holds nothing of the buffer it was decoded
// from.
func (m *Model) DetachBytes() {
	if m.Graph != nil {
		m.Graph.detach()
	}
	for i := range m.Functions {
		f := &m.Functions[i]
		for k := range f.AttributeProto {
			f.AttributeProto[k].detach()
		}
		for k := range f.Node {
			f.Node[k].detach()
		}
	}
	for i := range m.TrainingInfo {
		ti := &m.TrainingInfo[i]
		if ti.Initialization != nil {
			ti.Initialization.detach()
		}
		if ti.Algorithm != nil {
			ti.Algorithm.detach()
		}
	}
}

func (g *Graph) detach() {
	for k := range g.Node {
		g.Node[k].detach()
	}
	for k := range g.Initializer {
		g.Initializer[k].detach()
	}
	for k := range g.SparseInitializer {
		g.SparseInitializer[k].detach()
	}
}

func (n *Node) detach() {
	for k := range n.Attribute {
		n.Attribute[k].detach()
	}
}

func (a *Attribute) detach() {
	a.S = clone(a.S)
	a.Strings = cloneAll(a.Strings)
	if a.T != nil {
		a.T.detach()
	}
	if a.G != nil {
		a.G.detach()
	}
	if a.SparseTensor != nil {
		a.SparseTensor.detach()
	}
	for k := range a.Tensors {
		a.Tensors[k].detach()
	}
	for k := range a.Graphs {
		a.Graphs[k].detach()
	}
	for k := range a.SparseTensors {
		a.SparseTensors[k].detach()
	}
}

func (t *Tensor) detach() {
	t.RawData = clone(t.RawData)
	t.StringData = cloneAll(t.StringData)
}

func (s *SparseTensor) detach() {
	if s.Values != nil {
		s.Values.detach()
	}
	if s.Indices != nil {
		s.Indices.detach()
	}
}

// clone copies b, keeping nil nil and empty empty (a present but empty
// field stays present).
func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

func cloneAll(bs [][]byte) [][]byte {
	if bs == nil {
		return nil
	}
	out := make([][]byte, len(bs))
	for i, b := range bs {
		out[i] = clone(b)
	}
	return out
}
