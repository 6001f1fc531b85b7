// Package onnxpb decodes the ONNX protobuf format (onnx.proto and the test
// data messages of onnx-data.proto) into plain Go structs, without generated
// code: the wire format is read field by field with protowire.
//
// Decoding follows protobuf rules: unknown fields are skipped, repeated
// scalars are accepted packed or unpacked, a repeated singular message is
// merged. Malformed input never panics; it yields a *DecodeError whose
// message names the field path, e.g.
//
//	onnxpb: ModelProto.graph.node[3].attribute[1]: truncated length-delimited field ... (at byte 1234)
//
// Byte fields of decoded messages (Tensor.RawData, Attribute.S, ...) alias
// the input buffer to avoid copying large weights: do not modify the buffer
// passed to Decode while the result is in use.
//
// Tensor payloads are read with Tensor.Values (Go slices) or Tensor.ToIR
// (tensorbridge ir tensors); external data is resolved against
// Tensor.BaseDir, which ReadModel sets to the model file's directory.
package onnxpb

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
)

// MaxFileSize is the largest file ReadModel and ReadTensor accept: protobuf
// messages are limited to 2 GiB, which is why ONNX moves larger weights to
// external data files.
const MaxFileSize = 2<<30 - 1

// Decode decodes a serialized ModelProto. Input that is not an ONNX model at
// all (an image, text, an empty buffer) gives an error wrapping ErrNotONNX.
// External data is not touched; see ReadModel.
func Decode(b []byte) (*Model, error) {
	m := &Model{}
	d := &decoder{top: b}
	if err := d.model(b, m); err != nil {
		if !m.sawKnownField() {
			return nil, fmt.Errorf("onnxpb: input is %w (it does not decode as a ModelProto: %w)", ErrNotONNX, err)
		}
		return nil, prefix(err, "ModelProto")
	}
	if !m.sawKnownField() || m.IRVersion <= 0 || (m.Graph == nil && len(m.Functions) == 0) {
		return nil, fmt.Errorf("onnxpb: input is %w: no ir_version, or no graph and no functions (%d bytes decoded)",
			ErrNotONNX, len(b))
	}
	return m, nil
}

// sawKnownField reports whether decoding filled in any ModelProto field, the
// test Decode uses to tell "not an ONNX model" from "damaged ONNX model".
func (m *Model) sawKnownField() bool {
	return m.IRVersion != 0 || len(m.OpsetImport) != 0 || m.ProducerName != "" || m.Graph != nil ||
		m.ProducerVersion != "" || m.Domain != "" || m.DocString != "" || len(m.Functions) != 0
}

// ReadModel reads and decodes an .onnx file. It sets Model.Dir and the
// BaseDir of every tensor in the model (graph initializers, attribute
// tensors, subgraphs, functions, training info) to the file's directory, so
// that external data resolves relative to the model file as the ONNX spec
// requires. External files themselves are opened only when a tensor's
// payload is read.
func ReadModel(path string) (*Model, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	// The digest (the key of a warm start) is taken while the file
	// decodes: both only read b, and on a large model each costs tens of
	// milliseconds.
	digest := make(chan [32]byte, 1)
	go func() { digest <- sha256.Sum256(b) }()
	m, err := Decode(b)
	sum := <-digest
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Dir = filepath.Dir(path)
	m.walkTensors(func(t *Tensor) { t.BaseDir = m.Dir })
	m.SourceDigest = sum
	return m, nil
}

func readFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("onnxpb: %w", err)
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("onnxpb: %s: file is %d bytes, over the 2 GiB protobuf limit: %w",
			path, st.Size(), ErrTooLarge)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("onnxpb: %w", err)
	}
	return b, nil
}

// DecodeTensor decodes a serialized TensorProto, the format of the ONNX test
// data's input_N.pb / output_N.pb files for tensor-typed values.
func DecodeTensor(b []byte) (*Tensor, error) {
	t := &Tensor{}
	d := &decoder{top: b}
	if err := d.tensor(b, t); err != nil {
		return nil, prefix(err, "TensorProto")
	}
	return t, nil
}

// ReadTensor reads a serialized TensorProto file and sets its BaseDir to the
// file's directory.
func ReadTensor(path string) (*Tensor, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	t, err := DecodeTensor(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.BaseDir = filepath.Dir(path)
	return t, nil
}

// DecodeSequence decodes a serialized SequenceProto (test data for
// sequence-typed values). Which message a .pb test file holds is not
// recorded in the file: choose by the model's input/output type.
func DecodeSequence(b []byte) (*Sequence, error) {
	s := &Sequence{}
	d := &decoder{top: b}
	if err := d.sequence(b, s); err != nil {
		return nil, prefix(err, "SequenceProto")
	}
	return s, nil
}

// DecodeOptional decodes a serialized OptionalProto (test data for
// optional-typed values).
func DecodeOptional(b []byte) (*Optional, error) {
	o := &Optional{}
	d := &decoder{top: b}
	if err := d.optional(b, o); err != nil {
		return nil, prefix(err, "OptionalProto")
	}
	return o, nil
}

// DecodeMap decodes a serialized MapProto.
func DecodeMap(b []byte) (*Map, error) {
	m := &Map{}
	d := &decoder{top: b}
	if err := d.mapValue(b, m); err != nil {
		return nil, prefix(err, "MapProto")
	}
	return m, nil
}

// ReadSequence reads a SequenceProto file; tensors in it get the file's
// directory as BaseDir.
func ReadSequence(path string) (*Sequence, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	s, err := DecodeSequence(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dir := filepath.Dir(path)
	s.walkTensors(func(t *Tensor) { t.BaseDir = dir })
	return s, nil
}

// ReadOptional reads an OptionalProto file; tensors in it get the file's
// directory as BaseDir.
func ReadOptional(path string) (*Optional, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	o, err := DecodeOptional(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dir := filepath.Dir(path)
	o.walkTensors(func(t *Tensor) { t.BaseDir = dir })
	return o, nil
}

// Opset returns the version of the operator set the model imports for
// domain, or 0 if it imports none. "" and "ai.onnx" name the same default
// domain. If a domain is imported more than once, the highest version wins.
func (m *Model) Opset(domain string) int64 {
	var v int64
	for _, o := range m.OpsetImport {
		if sameDomain(o.Domain, domain) && o.Version > v {
			v = o.Version
		}
	}
	return v
}

func sameDomain(a, b string) bool {
	norm := func(s string) string {
		if s == "ai.onnx" {
			return ""
		}
		return s
	}
	return norm(a) == norm(b)
}

// walkTensors calls fn for every dense tensor reachable from the model,
// including sparse tensor parts, subgraph initializers and function bodies.
func (m *Model) walkTensors(fn func(*Tensor)) {
	if m.Graph != nil {
		m.Graph.walkTensors(fn)
	}
	for i := range m.Functions {
		walkNodes(m.Functions[i].Node, fn)
		walkAttrs(m.Functions[i].AttributeProto, fn)
	}
	for i := range m.TrainingInfo {
		if g := m.TrainingInfo[i].Initialization; g != nil {
			g.walkTensors(fn)
		}
		if g := m.TrainingInfo[i].Algorithm; g != nil {
			g.walkTensors(fn)
		}
	}
}

func (g *Graph) walkTensors(fn func(*Tensor)) {
	for i := range g.Initializer {
		fn(&g.Initializer[i])
	}
	for i := range g.SparseInitializer {
		g.SparseInitializer[i].walkTensors(fn)
	}
	walkNodes(g.Node, fn)
}

func walkNodes(nodes []Node, fn func(*Tensor)) {
	for i := range nodes {
		walkAttrs(nodes[i].Attribute, fn)
	}
}

func walkAttrs(attrs []Attribute, fn func(*Tensor)) {
	for i := range attrs {
		a := &attrs[i]
		if a.T != nil {
			fn(a.T)
		}
		for j := range a.Tensors {
			fn(&a.Tensors[j])
		}
		if a.SparseTensor != nil {
			a.SparseTensor.walkTensors(fn)
		}
		for j := range a.SparseTensors {
			a.SparseTensors[j].walkTensors(fn)
		}
		if a.G != nil {
			a.G.walkTensors(fn)
		}
		for j := range a.Graphs {
			a.Graphs[j].walkTensors(fn)
		}
	}
}

func (s *SparseTensor) walkTensors(fn func(*Tensor)) {
	if s.Values != nil {
		fn(s.Values)
	}
	if s.Indices != nil {
		fn(s.Indices)
	}
}

func (s *Sequence) walkTensors(fn func(*Tensor)) {
	for i := range s.TensorValues {
		fn(&s.TensorValues[i])
	}
	for i := range s.SparseTensorValues {
		s.SparseTensorValues[i].walkTensors(fn)
	}
	for i := range s.SequenceValues {
		s.SequenceValues[i].walkTensors(fn)
	}
	for i := range s.MapValues {
		if v := s.MapValues[i].Values; v != nil {
			v.walkTensors(fn)
		}
	}
	for i := range s.OptionalValues {
		s.OptionalValues[i].walkTensors(fn)
	}
}

func (o *Optional) walkTensors(fn func(*Tensor)) {
	if o.TensorValue != nil {
		fn(o.TensorValue)
	}
	if o.SparseTensorValue != nil {
		o.SparseTensorValue.walkTensors(fn)
	}
	if o.SequenceValue != nil {
		o.SequenceValue.walkTensors(fn)
	}
	if o.MapValue != nil && o.MapValue.Values != nil {
		o.MapValue.Values.walkTensors(fn)
	}
	if o.OptionalValue != nil {
		o.OptionalValue.walkTensors(fn)
	}
}

// DecodeValue decodes a test-data value (.pb file contents) according to
// the ONNX type it should have, as declared by the model's graph input or
// output: a *Tensor for tensor types, a *Sequence, *Optional or *Map for
// those types. The test data stores each kind as a different message
// (TensorProto, SequenceProto, OptionalProto, MapProto) and the file itself
// does not say which, hence the type argument. A nil or empty type is read
// as a tensor.
func DecodeValue(b []byte, typ *TypeProto) (any, error) {
	switch {
	case typ == nil || typ.TensorType != nil:
		return DecodeTensor(b)
	case typ.SequenceType != nil:
		return DecodeSequence(b)
	case typ.OptionalType != nil:
		return DecodeOptional(b)
	case typ.MapType != nil:
		return DecodeMap(b)
	case typ.SparseTensorType != nil:
		return nil, fmt.Errorf("onnxpb: sparse tensor test values are not supported: %w", ErrUnsupported)
	case typ.OpaqueType != nil:
		return nil, fmt.Errorf("onnxpb: opaque-typed values are not supported: %w", ErrUnsupported)
	}
	return DecodeTensor(b)
}

// ReadValue reads a test-data .pb file with DecodeValue and sets the
// BaseDir of the tensors in it to the file's directory.
func ReadValue(path string, typ *TypeProto) (any, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	v, err := DecodeValue(b, typ)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dir := filepath.Dir(path)
	setDir := func(t *Tensor) { t.BaseDir = dir }
	switch v := v.(type) {
	case *Tensor:
		v.BaseDir = dir
	case *Sequence:
		v.walkTensors(setDir)
	case *Optional:
		v.walkTensors(setDir)
	case *Map:
		if v.Values != nil {
			v.Values.walkTensors(setDir)
		}
	}
	return v, nil
}
