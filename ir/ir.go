// Package ir holds the project's names for its computation IR, the GoMLX
// v0.26.0 graph.
//
// They are aliases of GoMLX's graph, node, tensor, shape and dtype types,
// and the few helpers (tensors from bytes, device buffers, the
// ephemeral-graph convention) that the portable API and the tools share.
//
// It is not the only place that imports GoMLX. The ONNX importer's op
// converters, the root package's run path, shard and parts of the CLI
// call GoMLX's graph functions directly (about fifty files), because a
// wrapper for each of its hundreds of functions would be a second copy of
// its API; and the backends (packages cpu and pjrt) implement GoMLX's
// backend interface. What ir does give a reader is one vocabulary for the
// types that cross package boundaries: a public API signature names
// ir.Tensor or ir.Graph, never a GoMLX package.
package ir

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

type (
	// Graph is a computation under construction or compiled.
	Graph = graph.Graph
	// Node is one value in a Graph.
	Node = graph.Node
	// Tensor is a host or device array with a shape.
	Tensor = tensors.Tensor
	// Shape is a dtype and dimensions.
	Shape = shapes.Shape
	// DType is an element type.
	DType = dtypes.DType
	// Engine is the GoMLX backend a graph is built and run on.
	Engine = backends.Backend
)

// Element types, re-exported.
const (
	Bool         = dtypes.Bool
	Int8         = dtypes.Int8
	Int16        = dtypes.Int16
	Int32        = dtypes.Int32
	Int64        = dtypes.Int64
	Uint8        = dtypes.Uint8
	Uint16       = dtypes.Uint16
	Uint32       = dtypes.Uint32
	Uint64       = dtypes.Uint64
	Float16      = dtypes.Float16
	BFloat16     = dtypes.BFloat16
	Float32      = dtypes.Float32
	Float64      = dtypes.Float64
	Complex64    = dtypes.Complex64
	Complex128   = dtypes.Complex128
	InvalidDType = dtypes.InvalidDType
)

// MakeShape returns a shape of the given dtype and dimensions.
func MakeShape(dt DType, dims ...int) Shape { return shapes.Make(dt, dims...) }

// EphemeralPrefix starts the name of a graph that is compiled for one use
// at build time (folding a value, probing an engine): backends with a disk
// compile cache do not store such programs, and their compiles are not the
// model's.
const EphemeralPrefix = "tensorbridge-ephemeral:"

// IsEphemeral reports whether a graph of this name is ephemeral.
func IsEphemeral(name string) bool { return strings.HasPrefix(name, EphemeralPrefix) }

// NewGraph starts a graph on an engine.
func NewGraph(e Engine, name string) *Graph { return graph.NewGraph(e, name) }

// Parameter declares a graph input.
func Parameter(g *Graph, name string, s Shape) *Node { return graph.Parameter(g, name, s) }

// TensorFromBytes returns a new host tensor of dtype dt and the given
// dimensions whose elements are copied from raw: row-major, little-endian,
// dt.Size() bytes per element (one byte per Bool). It is the dtype-agnostic
// way to build a tensor (Float16 and BFloat16 included) without naming
// GoMLX's element types.
func TensorFromBytes(dt DType, dims []int, raw []byte) (t *Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("ir: building a %s%v tensor: %v", dt, dims, r)
		}
	}()
	s := shapes.Make(dt, dims...)
	if want := s.Size() * dt.Size(); len(raw) != want {
		return nil, fmt.Errorf("ir: %s%v tensor needs %d bytes, got %d", dt, dims, want, len(raw))
	}
	t = tensors.FromShape(s)
	if len(raw) == 0 {
		return t, nil // GoMLX's MutableBytes panics on zero-size tensors
	}
	if err := t.MutableBytes(func(data []byte) { copy(data, raw) }); err != nil {
		return nil, err
	}
	return t, nil
}

// TensorBytes returns a copy of t's elements as raw bytes: row-major,
// little-endian, t.DType().Size() bytes per element. It brings the tensor
// to the host if it lives on a device.
func TensorBytes(t *Tensor) (raw []byte, err error) {
	if t == nil {
		return nil, fmt.Errorf("ir: nil tensor")
	}
	defer func() {
		if r := recover(); r != nil {
			raw, err = nil, fmt.Errorf("ir: reading tensor bytes: %v", r)
		}
	}()
	if t.Shape().Size() == 0 {
		return []byte{}, nil
	}
	err = t.ConstBytes(func(data []byte) { raw = append([]byte(nil), data...) })
	return raw, err
}
