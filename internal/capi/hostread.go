package capi

import (
	"context"
	"fmt"
	"runtime"
	"unsafe"
)

// Reading a host-resident buffer in place.
//
// PJRT_Buffer_ToHostBuffer is asynchronous: the XLA CPU client hands the
// copy to a worker thread and the caller waits on an event, two thread
// handoffs that cost ~27 µs per output on a 2-vCPU VM, more than the
// rest of a small model's call (a 60-float add: 48 µs per call through
// ToHostBuffer, 21 µs reading in place; internal/capi BenchmarkReadBack).
// A buffer whose memory is host memory (PJRT_Buffer_IsOnCpu) in the dense
// row-major layout can instead be read where it lies once its ready event
// has fired: PJRT_Buffer_UnsafePointer gives its address. Every condition
// is checked per buffer; any other buffer, or a plugin without one of the
// functions, takes the ToHostBuffer path.

// cBufferMemoryLayout is PJRT_Buffer_MemoryLayout: a union of the tiled and
// strided descriptions (the tiled one spelled out, the larger of the two),
// then the type.
type cBufferMemoryLayout struct {
	structSize       uintptr
	ext              uintptr
	tiledStructSize  uintptr
	tiledExt         uintptr
	minorToMajor     uintptr // const int64_t*
	minorToMajorSize uintptr
	tileDims         uintptr
	tileDimSizes     uintptr
	numTiles         uintptr
	typ              int32 // PJRT_Buffer_MemoryLayout_Type: 0 tiled, 1 strides
	_                int32
}

type cBufferGetMemoryLayoutArgs struct {
	structSize uintptr
	ext        uintptr
	buffer     uintptr
	layout     cBufferMemoryLayout
}

type cBufferIsOnCpuArgs struct {
	structSize uintptr
	ext        uintptr
	buffer     uintptr
	isOnCPU    bool
}

// readInPlace copies the buffer h into dst from its memory when it is
// host-resident, dense and row-major, and reports whether it did. It
// returns an error only for a failure of the computation that produced
// the buffer (its ready event) or a cancelled ctx; a buffer it cannot read
// in place is (false, nil).
func (b *Buffer) readInPlace(ctx context.Context, h uintptr, dst []byte) (bool, error) {
	p := b.c.p
	if !p.has(fnBufferUnsafePointer) || !p.has(fnBufferGetMemoryLayout) || !p.has(fnBufferIsOnCpu) {
		return false, nil
	}
	// Hold the buffer while it is queried and its memory read: a Destroy
	// or a client Close from another goroutine waits for the copy
	// instead of freeing the memory under it (a race of the caller's, but
	// then not a crash).
	if !b.c.hold() {
		return true, fmt.Errorf("pjrt: PJRT_Buffer_ToHostBuffer: buffer: %w", ErrClosed)
	}
	defer b.c.release()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.c.mu.Lock()
	_, owned := b.c.buffers[h]
	b.c.mu.Unlock()
	if b.h != h || !owned {
		return true, fmt.Errorf("pjrt: PJRT_Buffer_ToHostBuffer: buffer: %w", ErrClosed)
	}
	on := newArgs[cBufferIsOnCpuArgs]()
	on.buffer = h
	if p.call(fnBufferIsOnCpu, unsafe.Pointer(on)) != nil || !on.isOnCPU {
		return false, nil
	}
	et := newArgs[cBufferElementTypeArgs]()
	et.buffer = h
	if p.call(fnBufferElementType, unsafe.Pointer(et)) != nil || ElementType(et.typ).Bits()%8 != 0 || ElementType(et.typ).Bits() == 0 {
		return false, nil
	}
	sz := newArgs[cBufferOnDeviceSizeArgs]()
	sz.buffer = h
	if p.call(fnBufferOnDeviceSizeInBytes, unsafe.Pointer(sz)) != nil || int(sz.size) != len(dst) {
		return false, nil
	}
	dims := newArgs[cBufferDimensionsArgs]()
	dims.buffer = h
	if p.call(fnBufferDimensions, unsafe.Pointer(dims)) != nil {
		return false, nil
	}
	rank := int(dims.numDims)
	lay := newArgs[cBufferGetMemoryLayoutArgs]()
	lay.buffer = h
	if p.call(fnBufferGetMemoryLayout, unsafe.Pointer(lay)) != nil {
		return false, nil
	}
	l := &lay.layout
	if l.typ != 0 || int(l.minorToMajorSize) != rank || (rank > 0 && l.minorToMajor == 0) {
		return false, nil
	}
	var m2m []int64
	if rank > 0 {
		m2m = unsafe.Slice((*int64)(cptr(l.minorToMajor)), rank) // the plugin's memory
	}
	if !denseRowMajor(l.typ, l.numTiles, m2m, rank) {
		return false, nil
	}
	// Wait for the data, then read it where it lies.
	ready := newArgs[cBufferHandleOutArgs]()
	ready.buffer = h
	if err := p.call(fnBufferReadyEvent, unsafe.Pointer(ready)); err != nil {
		return false, nil
	}
	if err := awaitEvent(ctx, p, ready.out, "PJRT_Buffer_ReadyEvent"); err != nil {
		return true, err
	}
	if len(dst) == 0 {
		return true, nil
	}
	ptr := newArgs[cBufferHandleOutArgs]()
	ptr.buffer = h
	if p.call(fnBufferUnsafePointer, unsafe.Pointer(ptr)) != nil || ptr.out == 0 {
		return false, nil
	}
	copy(dst, unsafe.Slice((*byte)(cptr(ptr.out)), len(dst)))
	runtime.KeepAlive(b)
	return true, nil
}

// awaitEvent waits for the event e and destroys it; an event that has
// already fired (the usual case after a synchronous execution) costs no
// goroutine even when ctx can be cancelled.
func awaitEvent(ctx context.Context, p *Plugin, e uintptr, op string) error {
	ev := event{p, e}
	if e == 0 {
		return nil
	}
	r := newArgs[cEventIsReadyArgs]()
	r.event = e
	if p.call(fnEventIsReady, unsafe.Pointer(r)) == nil && r.isReady {
		return ev.await()
	}
	_, err := blocking(ctx, op, func() (struct{}, error) { return struct{}{}, ev.await() }, nil)
	return err
}

// denseRowMajor reports whether a layout of the given type (0 tiled), tile
// count and minor_to_major describes the dense row-major layout of a
// rank-dimensional array: tiled, no tiles, minor_to_major rank-1, ..., 0.
func denseRowMajor(typ int32, numTiles uintptr, m2m []int64, rank int) bool {
	if typ != 0 || numTiles != 0 || len(m2m) != rank {
		return false
	}
	for i, d := range m2m {
		if d != int64(rank-1-i) {
			return false
		}
	}
	return true
}

// has reports whether the plugin sets function id.
func (p *Plugin) has(id fnID) bool {
	_, err := p.fn(id)
	return err == nil
}
