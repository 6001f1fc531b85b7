package onnx

// ReadsValues says whether running the model reads input name's values,
// not only its dtype: false when every node that takes it does so at a
// position its op reads for the dtype only (CastLike's target_type), no
// subgraph reads it and it is not itself an output. An empty tensor there
// then holds all the model needs, so an empty request there is not an
// empty batch (package tensorbridge's empty-input path).
func (m *Model) ReadsValues(name string) bool {
	for _, o := range m.outputs {
		if o.Name == name {
			return true
		}
	}
	for k, n := range m.nodes {
		for _, g := range nodeSubgraphs(n) {
			if outerRefs(g)[name] {
				return true
			}
		}
		for i, in := range n.Input {
			if in == name && (m.defs[k] == nil || !containsInt(m.defs[k].typeOnly, i)) {
				return true
			}
		}
	}
	return false
}
