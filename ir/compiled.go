package ir

import (
	"reflect"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
)

// executableField is the offset of GoMLX v0.26.0's Graph.executable, the
// backend executable a compiled graph runs, or ok false when the field is
// not there as expected (a GoMLX upgrade: Compiled then reports nothing,
// and TestCompiledFindsTheExecutable fails).
var executableField = func() (off uintptr, ok bool) {
	f, found := reflect.TypeFor[Graph]().FieldByName("executable")
	if !found || f.Type != reflect.TypeFor[backends.Executable]() {
		return 0, false
	}
	return f.Offset, true
}

var execOffset, execOK = executableField()

// Compiled returns the backend executable g was compiled to, or nil when g
// is not compiled. GoMLX keeps it unexported; a backend that can run its
// own executables without GoMLX's per-call wrappers (driver.DirectRunner)
// reaches it through this. The caller must not use the executable after g
// is finalized, which frees it.
func Compiled(g *Graph) backends.Executable {
	if g == nil || !execOK || !g.IsCompiled() {
		return nil
	}
	return *(*backends.Executable)(unsafe.Add(unsafe.Pointer(g), execOffset))
}

// LocalBytes returns a view of t's elements as bytes (row-major, the
// machine's byte order) when t holds them in ordinary host memory, and ok
// false otherwise (t lives only on a device, or in a backend's shared
// memory). The view aliases t's storage: it must only be read, and only
// while t is neither mutated nor finalized.
func LocalBytes(t *Tensor) (raw []byte, ok bool) {
	if t == nil || t.CheckValid() != nil || t.IsShared() || !t.HasLocal() || t.Shape().IsTuple() {
		return nil, false
	}
	if t.Shape().Size() == 0 {
		return []byte{}, true
	}
	if err := t.ConstBytes(func(data []byte) { raw = data }); err != nil {
		return nil, false
	}
	return raw, true
}

// NewHostTensorBytes returns a zero-filled host tensor of shape s and a
// view of its storage as bytes (row-major, the machine's byte order) for
// the caller to fill before it hands the tensor to anyone.
func NewHostTensorBytes(s Shape) (t *Tensor, raw []byte, err error) {
	t, err = NewHostTensor(s.DType, s.Dimensions...)
	if err != nil {
		return nil, nil, err
	}
	if s.Size() == 0 {
		return t, []byte{}, nil // GoMLX's MutableBytes panics on zero-size tensors
	}
	if err := t.MutableBytes(func(data []byte) { raw = data }); err != nil {
		return nil, nil, err
	}
	return t, raw, nil
}
