package capi

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"unsafe"
)

// ElementType is a PJRT_Buffer_Type: the element type of an array.
type ElementType int32

// PJRT_Buffer_Type values, in header order.
const (
	Invalid ElementType = iota
	Pred
	S8
	S16
	S32
	S64
	U8
	U16
	U32
	U64
	F16
	F32
	F64
	BF16
	C64
	C128
	F8E5M2
	F8E4M3FN
	F8E4M3B11FNUZ
	F8E5M2FNUZ
	F8E4M3FNUZ
	S4
	U4
	Token
	S2
	U2
	F8E4M3
	F8E3M4
	F8E8M0FNU
	F4E2M1FN
)

var elementTypeNames = [...]string{
	"invalid", "pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64",
	"f16", "f32", "f64", "bf16", "c64", "c128", "f8e5m2", "f8e4m3fn",
	"f8e4m3b11fnuz", "f8e5m2fnuz", "f8e4m3fnuz", "s4", "u4", "token", "s2",
	"u2", "f8e4m3", "f8e3m4", "f8e8m0fnu", "f4e2m1fn",
}

// String is the StableHLO-style name: "f32", "bf16", "pred", ...
func (t ElementType) String() string {
	if t >= 0 && int(t) < len(elementTypeNames) {
		return elementTypeNames[t]
	}
	return fmt.Sprintf("type%d", int32(t))
}

// Bits is the element's width in bits, 0 for Invalid and Token.
func (t ElementType) Bits() int {
	switch t {
	case Pred, S8, U8, F8E5M2, F8E4M3FN, F8E4M3B11FNUZ, F8E5M2FNUZ, F8E4M3FNUZ, F8E4M3, F8E3M4, F8E8M0FNU:
		return 8
	case S16, U16, F16, BF16:
		return 16
	case S32, U32, F32:
		return 32
	case S64, U64, F64, C64:
		return 64
	case C128:
		return 128
	case S4, U4, F4E2M1FN:
		return 4
	case S2, U2:
		return 2
	}
	return 0
}

// HostBufferSemantics is PJRT_HostBufferSemantics: how long the plugin may
// use the host memory of a host-to-device transfer.
type HostBufferSemantics int32

// The semantics this binding accepts for Go memory. The zero-copy
// semantics of the header (kImmutableZeroCopy, kMutableZeroCopy) would let
// the plugin alias Go memory for the life of the buffer and are refused.
const (
	// ImmutableOnlyDuringCall: the plugin copies the data before
	// PJRT_Client_BufferFromHostBuffer returns.
	ImmutableOnlyDuringCall HostBufferSemantics = 0
	// ImmutableUntilTransferCompletes: the plugin may read the data until its
	// "done with host buffer" event fires; BufferFromHost waits for it.
	ImmutableUntilTransferCompletes HostBufferSemantics = 1
	immutableZeroCopy               HostBufferSemantics = 2
	mutableZeroCopy                 HostBufferSemantics = 3
)

// event is a PJRT_Event owned by the binding.
type event struct {
	p *Plugin
	h uintptr
}

// await blocks until the event fires, destroys it and returns its error.
func (e event) await() error {
	if e.h == 0 {
		return nil
	}
	a := newArgs[cEventArgs]()
	a.event = e.h
	err := e.p.call(fnEventAwait, unsafe.Pointer(a))
	a.event = e.h // the same arguments destroy it
	_ = e.p.call(fnEventDestroy, unsafe.Pointer(a))
	return err
}

func (e event) destroy() {
	if e.h == 0 {
		return
	}
	a := newArgs[cEventArgs]()
	a.event = e.h
	_ = e.p.call(fnEventDestroy, unsafe.Pointer(a)) // destroy reports no meaningful error
}

// Buffer is a PJRT_Buffer: an array on a device. Its owner frees it with
// Destroy. The client knows its buffers by handle only, so a *Buffer that
// its owner drops is not kept alive; a cleanup then frees the device memory
// when the garbage collector finds it (Client.LostBuffers counts those), as
// a safety net, not as the way buffers are meant to be freed. Client.Close
// frees whatever is left.
type Buffer struct {
	c       *Client
	mu      sync.Mutex
	h       uintptr // 0 once destroyed
	cleanup runtime.Cleanup
	// hostSize is the byte size of the buffer's dense host copy when the
	// binding knows it without asking the plugin (it made the buffer from
	// host data of that size, or it is an output of a program whose output
	// shapes it read), -1 otherwise. A buffer's shape never changes.
	hostSize int
}

func (c *Client) newBuffer(h uintptr) *Buffer {
	b := &Buffer{c: c, h: h, hostSize: -1}
	c.mu.Lock()
	c.buffers[h] = struct{}{}
	if traceLost {
		c.origins[h] = string(debug.Stack())
	}
	c.mu.Unlock()
	b.cleanup = runtime.AddCleanup(b, c.freeLost, h)
	return b
}

// freeLost is the safety net for a buffer dropped without Destroy.
func (c *Client) freeLost(h uintptr) {
	c.mu.Lock()
	_, owned := c.buffers[h]
	if owned {
		c.lost++
		if traceLost {
			fmt.Fprintf(os.Stderr, "pjrt: a buffer was dropped without Destroy; it was created at:\n%s\n", c.origins[h])
		}
	}
	c.mu.Unlock()
	_ = c.destroyBuffer(h)
}

// traceLost (TENSORBRIDGE_TRACE_LOST_BUFFERS=1) records where each buffer
// was created and prints it when the safety net frees a dropped one: the
// way to find the owner that forgot to free it.
var traceLost = os.Getenv("TENSORBRIDGE_TRACE_LOST_BUFFERS") == "1"

// destroyBuffer frees h if the client still owns it (it is open and has not
// freed h already).
func (c *Client) destroyBuffer(h uintptr) error {
	if !c.hold() {
		return nil // closing: the client's destruction frees h
	}
	defer c.release()
	c.mu.Lock()
	_, owned := c.buffers[h]
	delete(c.buffers, h)
	delete(c.origins, h)
	open := c.h != 0
	c.mu.Unlock()
	if !owned || !open {
		return nil
	}
	return c.p.destroyBuffer(h)
}

func (p *Plugin) destroyBuffer(h uintptr) error {
	a := newArgs[cBufferArgs]()
	a.buffer = h
	return p.call(fnBufferDestroy, unsafe.Pointer(a))
}

// handle returns the PJRT_Buffer* or an ErrClosed error naming op, also when
// the client was closed (which freed the buffer).
func (b *Buffer) handle(op string) (uintptr, error) {
	if b == nil {
		return 0, argError(op, "nil buffer")
	}
	b.mu.Lock()
	h := b.h
	b.mu.Unlock()
	if h != 0 {
		b.c.mu.Lock()
		_, owned := b.c.buffers[h]
		b.c.mu.Unlock()
		if owned {
			return h, nil
		}
	}
	return 0, fmt.Errorf("pjrt: %s: buffer: %w", op, ErrClosed)
}

// Destroy frees the buffer and its device memory. Calling it again does
// nothing.
func (b *Buffer) Destroy() error {
	b.mu.Lock()
	h := b.h
	b.h = 0
	b.mu.Unlock()
	if h == 0 {
		return nil
	}
	b.cleanup.Stop()
	return b.c.destroyBuffer(h)
}

// denseSize is the byte size of a dense array of t with dims, or an error for
// element types whose host layout this binding does not handle.
func denseSize(fn string, t ElementType, dims []int64) (int, error) {
	bits := t.Bits()
	if bits < 8 {
		return 0, argError(fn, "element type %s has no byte-addressed host layout; sub-byte and token types are not supported", t)
	}
	n := int64(1)
	for i, d := range dims {
		if d < 0 {
			return 0, argError(fn, "dimension %d is %d; dimensions must be ≥ 0", i, d)
		}
		if d != 0 && n > (1<<62)/d {
			return 0, argError(fn, "shape %v overflows int64", dims)
		}
		n *= d
	}
	if n > (1<<62)/int64(bits/8) {
		return 0, argError(fn, "shape %v of %s overflows int64 bytes", dims, t)
	}
	return int(n * int64(bits/8)), nil
}

// BufferFromHost copies a dense, row-major (major-to-minor) host array to a
// new buffer on dev and waits until the plugin is done with data. data must
// hold exactly the array's bytes in the machine's byte order.
func (c *Client) BufferFromHost(ctx context.Context, dev *Device, t ElementType, dims []int64, data []byte, sem HostBufferSemantics) (*Buffer, error) {
	const op = "PJRT_Client_BufferFromHostBuffer"
	if dev == nil || dev.c != c {
		return nil, argError(op, "device is nil or belongs to another client")
	}
	if sem == immutableZeroCopy || sem == mutableZeroCopy {
		return nil, argError(op, "zero-copy host buffer semantics (%d) would let the runtime alias Go memory; use ImmutableOnlyDuringCall or ImmutableUntilTransferCompletes", sem)
	}
	if sem != ImmutableOnlyDuringCall && sem != ImmutableUntilTransferCompletes {
		return nil, argError(op, "unknown host buffer semantics %d", sem)
	}
	want, err := denseSize(op, t, dims)
	if err != nil {
		return nil, err
	}
	if len(data) != want {
		return nil, argError(op, "data has %d bytes; a %s array of shape %v needs %d", len(data), t, dims, want)
	}
	ch, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	dimsCopy := append([]int64(nil), dims...)
	return blocking(ctx, op, func() (*Buffer, error) {
		var pin runtime.Pinner
		defer pin.Unpin()
		a := newArgs[cClientBufferFromHostBufferArgs]()
		a.client = ch
		a.data = pinBytes(&pin, data)
		if a.data == nil {
			// A zero-element array still needs a non-null pointer for some
			// plugins; point at a pinned scratch byte.
			a.data = pinBytes(&pin, make([]byte, 1))
		}
		a.typ = int32(t)
		a.dims = pinInt64s(&pin, dimsCopy)
		a.numDims = uintptr(len(dimsCopy))
		a.hostBufferSemantics = int32(sem)
		a.device = dev.h
		if err := c.p.call(fnClientBufferFromHostBuffer, unsafe.Pointer(a)); err != nil {
			return nil, err
		}
		// data stays pinned until the plugin is done reading it.
		doneErr := event{c.p, a.doneWithHostBuffer}.await()
		b := c.newBuffer(a.buffer)
		b.hostSize = want
		if doneErr != nil {
			_ = b.Destroy()
			return nil, doneErr
		}
		return b, nil
	}, func(b *Buffer) { _ = b.Destroy() })
}

// ElementType returns the buffer's element type.
func (b *Buffer) ElementType() (ElementType, error) {
	h, err := b.handle("PJRT_Buffer_ElementType")
	defer runtime.KeepAlive(b) // b must outlive the plugin call: its cleanup frees h
	if err != nil {
		return Invalid, err
	}
	a := newArgs[cBufferElementTypeArgs]()
	a.buffer = h
	if err := b.c.p.call(fnBufferElementType, unsafe.Pointer(a)); err != nil {
		return Invalid, err
	}
	return ElementType(a.typ), nil
}

// Dims returns the buffer's dimensions.
func (b *Buffer) Dims() ([]int64, error) {
	h, err := b.handle("PJRT_Buffer_Dimensions")
	defer runtime.KeepAlive(b) // b must outlive the plugin call: its cleanup frees h
	if err != nil {
		return nil, err
	}
	a := newArgs[cBufferDimensionsArgs]()
	a.buffer = h
	if err := b.c.p.call(fnBufferDimensions, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	out := make([]int64, a.numDims)
	if a.numDims > 0 {
		copy(out, unsafe.Slice((*int64)(a.dims), a.numDims))
	}
	return out, nil
}

// OnDeviceSize is the number of bytes the buffer occupies on its device.
func (b *Buffer) OnDeviceSize() (int64, error) {
	h, err := b.handle("PJRT_Buffer_OnDeviceSizeInBytes")
	defer runtime.KeepAlive(b) // b must outlive the plugin call: its cleanup frees h
	if err != nil {
		return 0, err
	}
	a := newArgs[cBufferOnDeviceSizeArgs]()
	a.buffer = h
	if err := b.c.p.call(fnBufferOnDeviceSizeInBytes, unsafe.Pointer(a)); err != nil {
		return 0, err
	}
	return int64(a.size), nil
}

// Device returns the device holding the buffer.
func (b *Buffer) Device() (*Device, error) {
	h, err := b.handle("PJRT_Buffer_Device")
	defer runtime.KeepAlive(b) // b must outlive the plugin call: its cleanup frees h
	if err != nil {
		return nil, err
	}
	a := newArgs[cBufferHandleOutArgs]()
	a.buffer = h
	if err := b.c.p.call(fnBufferDevice, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	return b.c.device(a.out)
}

// IsDeleted reports whether the runtime dropped the buffer's memory (it was
// donated to an execution or deleted).
func (b *Buffer) IsDeleted() (bool, error) {
	h, err := b.handle("PJRT_Buffer_IsDeleted")
	defer runtime.KeepAlive(b) // b must outlive the plugin call: its cleanup frees h
	if err != nil {
		return false, err
	}
	a := newArgs[cBufferIsDeletedArgs]()
	a.buffer = h
	if err := b.c.p.call(fnBufferIsDeleted, unsafe.Pointer(a)); err != nil {
		return false, err
	}
	return a.isDeleted, nil
}

// Ready waits until the buffer's data is computed (or failed to be).
func (b *Buffer) Ready(ctx context.Context) error {
	const op = "PJRT_Buffer_ReadyEvent"
	h, err := b.handle(op)
	defer runtime.KeepAlive(b) // b must outlive the plugin call: its cleanup frees h
	if err != nil {
		return err
	}
	a := newArgs[cBufferHandleOutArgs]()
	a.buffer = h
	if err := b.c.p.call(fnBufferReadyEvent, unsafe.Pointer(a)); err != nil {
		return err
	}
	ev := event{b.c.p, a.out}
	_, err = blocking(ctx, op, func() (struct{}, error) { return struct{}{}, ev.await() }, nil)
	return err
}

// CopyToDevice copies the buffer to another device of the same client.
func (b *Buffer) CopyToDevice(ctx context.Context, dst *Device) (*Buffer, error) {
	const op = "PJRT_Buffer_CopyToDevice"
	h, err := b.handle(op)
	defer runtime.KeepAlive(b) // b must outlive the plugin call: its cleanup frees h
	if err != nil {
		return nil, err
	}
	if dst == nil || dst.c != b.c {
		return nil, argError(op, "destination device is nil or belongs to another client")
	}
	a := newArgs[cBufferCopyToDeviceArgs]()
	a.buffer, a.dstDevice = h, dst.h
	if err := b.c.p.call(fnBufferCopyToDevice, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	nb := b.c.newBuffer(a.dstBuffer)
	if err := nb.Ready(ctx); err != nil {
		_ = nb.Destroy()
		return nil, err
	}
	return nb, nil
}

// HostSize is the number of bytes ToHost writes: the size of the buffer's
// array in its own (dense) layout.
func (b *Buffer) HostSize() (int, error) {
	h, err := b.handle("PJRT_Buffer_ToHostBuffer")
	defer runtime.KeepAlive(b) // b must outlive the plugin call: its cleanup frees h
	if err != nil {
		return 0, err
	}
	a := newArgs[cBufferToHostBufferArgs]()
	a.src = h
	if err := b.c.p.call(fnBufferToHostBuffer, unsafe.Pointer(a)); err != nil {
		return 0, err
	}
	return int(a.dstSize), nil
}

// ToHost copies the buffer into dst, which must be exactly HostSize bytes,
// and waits for the copy. If ctx ends first, the copy goes on into a staging
// slice that is dropped, so dst is never written after ToHost returns.
func (b *Buffer) ToHost(ctx context.Context, dst []byte) error {
	const op = "PJRT_Buffer_ToHostBuffer"
	need := -1
	if b != nil {
		need = b.hostSize
	}
	if need < 0 {
		var err error
		if need, err = b.HostSize(); err != nil {
			return err
		}
	}
	if len(dst) != need {
		return argError(op, "destination has %d bytes; the buffer needs %d", len(dst), need)
	}
	h, err := b.handle(op)
	defer runtime.KeepAlive(b) // b must outlive the plugin call: its cleanup frees h
	if err != nil {
		return err
	}
	if ok, err := b.readInPlace(ctx, h, dst); ok || err != nil {
		return err
	}
	target := dst
	if ctx.Done() != nil {
		target = make([]byte, need)
	}
	_, err = blocking(ctx, op, func() (struct{}, error) {
		var pin runtime.Pinner
		defer pin.Unpin()
		a := newArgs[cBufferToHostBufferArgs]()
		a.src = h
		a.dst = pinBytes(&pin, target)
		if a.dst == nil {
			a.dst = pinBytes(&pin, make([]byte, 1))
		}
		a.dstSize = uintptr(len(target))
		if err := b.c.p.call(fnBufferToHostBuffer, unsafe.Pointer(a)); err != nil {
			return struct{}{}, err
		}
		return struct{}{}, event{b.c.p, a.event}.await()
	}, nil)
	if err != nil {
		return err
	}
	if ctx.Done() != nil {
		copy(dst, target)
	}
	return nil
}

// ToHostBytes copies the buffer into a new slice.
func (b *Buffer) ToHostBytes(ctx context.Context) ([]byte, error) {
	n, err := b.HostSize()
	if err != nil {
		return nil, err
	}
	out := make([]byte, n)
	if err := b.ToHost(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Bytes reinterprets a slice of fixed-size numbers as its bytes in machine
// order, without copying: the form BufferFromHost takes.
func Bytes[T ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// FromBytes copies bytes in machine order into a new slice of T; a trailing
// partial element is an error.
func FromBytes[T ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64](b []byte) ([]T, error) {
	var z T
	size := int(unsafe.Sizeof(z))
	if len(b)%size != 0 {
		return nil, fmt.Errorf("pjrt: FromBytes: %d bytes is not a multiple of the element size %d", len(b), size)
	}
	out := make([]T, len(b)/size)
	copy(Bytes(out), b)
	return out, nil
}
