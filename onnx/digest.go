package onnx

import "github.com/tensorbridge/tensorbridge/onnx/onnxpb"

// SourceDigest returns the SHA-256 of the model file as it was read, for
// keys that must name the model before any graph is built (a warm start
// from a disk compile cache). ok is false when there is no such digest: the
// model was decoded from bytes, or some tensor keeps its data in an
// external file the digest does not cover.
func (m *Model) SourceDigest() (digest [32]byte, ok bool) {
	if m.pb.SourceDigest == ([32]byte{}) || m.pb.HasExternalData() {
		return digest, false
	}
	return m.pb.SourceDigest, true
}

// Proto returns the decoded file the model was built from, for reading
// (a tool's own analysis of the graph: FLOP counts, input ranges) without
// decoding the file a second time. It must not be modified.
func (m *Model) Proto() *onnxpb.Model { return m.pb }
