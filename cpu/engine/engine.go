// Package engine is tensorbridge's own CPU execution engine behind GoMLX's
// backends.Backend interface: the engine of the embedded cpu backend.
//
// # How it runs a graph
//
// Its Builder records the graph (each op as a node, its parameters kept)
// while a shadow builder of the inner engine infers and checks every
// shape. Compile turns the recorded graph into a static plan:
//   - dead ops (not reaching an output) are dropped;
//   - ops with a native kernel here (matrix products, convolutions, ...)
//     become native steps: packed, cache-blocked kernels with per-ISA
//     assembly micro-kernels (packages cpu/gemm and cpu/conv), parallel
//     inside the op;
//   - every maximal run of other ops becomes one segment, compiled once by
//     the inner engine (GoMLX's simplego with tensorbridge's added ops),
//     so every op and dtype simplego executes keeps working, exactly as
//     before, while kernels move here op by op;
//   - each value gets a last use, after which its buffer is freed for the
//     next value, and a segment is handed (donated) the heap buffers it
//     reads last so it can work in place. Values of 64 KiB or more live in
//     the arena (arena.go: one best-fit allocator over memory mapped outside
//     the Go heap, shared by every shape and dtype); smaller ones, outputs
//     and segments' values are inner-engine buffers on the heap, kept on
//     per-shape free lists (bufpool.go).
//
// Native steps and segments share one buffer type, the inner engine's, so
// nothing is copied between them.
//
// # Rounding
//
// Native kernels accumulate float32 products in float32 with fused
// multiply-adds, in an order that differs from simplego's: results agree
// within float32 rounding, not bit for bit. Fused element-wise regions
// (fuse.go) round every op as simplego does, so no Mul+Add is contracted
// into one rounding; the one exception is Erf, one ulp off simplego's
// rounding for a few inputs in 10⁹ (package vec's Erf). A 1×1 or
// depthwise convolution's bias and ReLU or clip run inside the
// convolution, on each block of its output while it is in cache
// (convpost.go), still as three roundings in the graph's order: no fusion
// here contracts two ops into one rounding.
//
// float16 and bfloat16 are storage types (f16.go, bf16.go): every op that
// reads them computes in float32 (a matrix product accumulates in float32)
// and its result is rounded once to the 16-bit type, to nearest even, as
// XLA's CPU backend and PyTorch do; simplego's own bfloat16 ops, which
// truncate, never run.
//
// # Faults
//
// A panic inside a kernel or its workers is recovered and returned as the
// run's error naming the op (*OpError); the executable stays usable.
package engine

import (
	"fmt"
	"reflect"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// Name names the engine in errors and descriptions.
const Name = "tensorbridge-cpu"

// Engine is the CPU engine: a backends.Backend whose buffers are those of
// inner, which also runs the segments of ops with no native kernel.
type Engine struct {
	backends.DataInterface
	inner backends.Backend
	fuse  bool
	pool  bufPool // the buffers runs freed (bufpool.go)
	ar    *arena  // large intermediate values (arena.go); nil: on the heap
}

var _ backends.Backend = (*Engine)(nil)

// New returns an engine over inner (a simplego engine, possibly wrapped).
// The engine owns inner: Finalize finalizes it.
func New(inner backends.Backend) *Engine {
	return &Engine{DataInterface: inner, inner: inner, fuse: true, ar: newArena(inner)}
}

// Name returns the engine's name.
func (e *Engine) Name() string { return Name }

// String returns the engine's name.
func (e *Engine) String() string { return Name }

// Description says what the engine is.
func (e *Engine) Description() string {
	return fmt.Sprintf("%s (pure Go, %s kernels; other ops through %s)", Name, KernelName(), e.inner.Name())
}

// NumDevices returns 1.
func (e *Engine) NumDevices() int { return 1 }

// DeviceDescription describes the one device.
func (e *Engine) DeviceDescription(deviceNum backends.DeviceNum) string { return "cpu:0" }

// Capabilities are the inner engine's (every op runs, natively or in a
// segment) and the ops only this engine runs.
func (e *Engine) Capabilities() backends.Capabilities {
	c := e.inner.Capabilities().Clone()
	c.Operations[backends.OpTypeDynamicSlice] = true
	c.Operations[backends.OpTypeDynamicUpdateSlice] = true
	c.DTypes[dtypes.Float16] = true  // stored as float16, computed in float32 (f16.go)
	c.DTypes[dtypes.BFloat16] = true // stored as bfloat16, computed in float32 (bf16.go)
	return c
}

// Builder starts recording a computation.
func (e *Engine) Builder(name string) backends.Builder {
	return &Builder{e: e, name: name, shadow: e.inner.Builder(name)}
}

// Finalize releases the pooled buffers and the inner engine.
func (e *Engine) Finalize() {
	e.drain()
	if e.ar != nil {
		e.ar.close()
	}
	e.inner.Finalize()
}

// IsFinalized reports whether Finalize was called.
func (e *Engine) IsFinalized() bool { return e.inner.IsFinalized() }

// Inner returns the engine that runs segments (the differential tests'
// oracle).
func (e *Engine) Inner() backends.Backend { return e.inner }

// sliceInfo returns the dtype and length of a flat slice.
func sliceInfo(flat any) (dtypes.DType, int, bool) {
	v := reflect.ValueOf(flat)
	if v.Kind() != reflect.Slice {
		return dtypes.InvalidDType, 0, false
	}
	return dtypes.FromGoType(v.Type().Elem()), v.Len(), true
}
