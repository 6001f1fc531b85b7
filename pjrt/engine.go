package pjrt

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/pjrt/lower"
)

// Engine is the GoMLX backend over one PJRT client: it builds graphs into
// StableHLO (package lower), compiles them with the plugin and runs them on
// the client's addressable devices. It is safe for concurrent use.
type Engine struct {
	name     string // registered backend name: "xla-cpu", "tpu", ...
	client   *capi.Client
	platform string
	version  string
	devices  []*capi.Device // addressable devices; DeviceNum indexes this
	byID     map[int]int    // PJRT device id -> DeviceNum

	mu        sync.RWMutex
	finalized bool
	hook      CompileHook

	tune tuning // compile-time choices from the driver config (compile.go)

	shareMu sync.Mutex
	shared  map[string]*sharedExec // portable executables by program (share.go)
}

var _ backends.Backend = (*Engine)(nil)

// newEngine wraps an open client. It lists the addressable devices once:
// their order defines GoMLX's DeviceNum.
func newEngine(name string, client *capi.Client) (*Engine, error) {
	platform, err := client.PlatformName()
	if err != nil {
		return nil, wrap(name, "open", "", "reading the platform name", err)
	}
	version, err := client.PlatformVersion()
	if err != nil {
		return nil, wrap(name, "open", "", "reading the platform version", err)
	}
	devs, err := client.AddressableDevices()
	if err != nil {
		return nil, wrap(name, "open", "", "listing devices", err)
	}
	if len(devs) == 0 {
		return nil, &errs.UnavailableError{Name: name, Reason: fmt.Sprintf("the %s plugin reports no addressable device", platform)}
	}
	e := &Engine{name: name, client: client, platform: platform, version: version, devices: devs, byID: map[int]int{}}
	for i, d := range devs {
		e.byID[d.ID()] = i
	}
	return e, nil
}

// Name returns the registered backend name ("xla-cpu", "tpu", ...).
func (e *Engine) Name() string { return e.name }

// String returns Name.
func (e *Engine) String() string { return e.name }

// Description names the backend, the PJRT platform and version, and the
// device count.
func (e *Engine) Description() string {
	return fmt.Sprintf("%s (PJRT %s %s, plugin %s) [%d device(s)]", e.name, e.platform, e.version,
		e.client.Plugin().Path(), len(e.devices))
}

// Platform is the PJRT platform name ("cpu", "tpu", "cuda", "rocm").
func (e *Engine) Platform() string { return e.platform }

// NumDevices is the number of addressable devices.
func (e *Engine) NumDevices() int { return len(e.devices) }

// DeviceDescription describes device n as the plugin does.
func (e *Engine) DeviceDescription(n backends.DeviceNum) string {
	d, err := e.device(n)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s (kind %q, id %d)", d.String(), d.Kind(), d.ID())
}

// Client returns the PJRT client, for the driver and for tools that need
// the plugin directly (topologies, memory statistics).
func (e *Engine) Client() *capi.Client { return e.client }

// Device returns the PJRT device of DeviceNum n.
func (e *Engine) Device(n backends.DeviceNum) (*capi.Device, error) { return e.device(n) }

func (e *Engine) device(n backends.DeviceNum) (*capi.Device, error) {
	if n < 0 || int(n) >= len(e.devices) {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: "device",
			Err: fmt.Errorf("device number %d out of range [0, %d)", n, len(e.devices))}
	}
	return e.devices[n], nil
}

func (e *Engine) deviceName(n backends.DeviceNum) string {
	if n < 0 || int(n) >= len(e.devices) {
		return fmt.Sprintf("%s device #%d", e.name, n)
	}
	return fmt.Sprintf("%s device #%d (%s)", e.name, n, e.devices[n].String())
}

// Capabilities lists every GoMLX op the lowering supports and the dtypes
// PJRT buffers carry. What a given plugin compiles is its own affair (TPUs
// have no Float64, for one); the plugin reports that at compile time.
func (e *Engine) Capabilities() backends.Capabilities { return Capabilities() }

// Capabilities returns the ops and dtypes the pjrt backends accept.
func Capabilities() backends.Capabilities {
	c := backends.Capabilities{Operations: map[backends.OpType]bool{}, DTypes: map[dtypes.DType]bool{}}
	for op := backends.OpTypeParameter; op < backends.OpTypeLast; op++ {
		switch op {
		case backends.OpTypeBroadcast, backends.OpTypeCollectiveBroadcast, backends.OpTypeAllGather:
			// Not part of GoMLX v0.26.0's Builder interface.
			continue
		}
		c.Operations[op] = true
	}
	for dt := range elementTypes {
		c.DTypes[dt] = true
	}
	return c
}

// CompileHook, when set with SetCompileHook, is called by every compile
// with the finished program and the default compile function, and returns
// the executable to use. A compile cache uses it to look the program text up
// and to reuse a serialized executable (Executable.Serialize,
// Engine.LoadExecutable) instead of compiling.
type CompileHook func(ctx context.Context, prog *lower.Program, compile func(context.Context) (*Executable, error)) (*Executable, error)

// SetCompileHook installs h (nil removes it).
func (e *Engine) SetCompileHook(h CompileHook) {
	e.mu.Lock()
	e.hook = h
	e.mu.Unlock()
}

// Builder starts a computation. If the engine is finalized, the builder's
// ops all fail.
func (e *Engine) Builder(name string) backends.Builder {
	return &Builder{Builder: lower.New(name, len(e.devices)).WithBackendName(e.name).WithDepthwiseWindowSum(e.depthwiseAsSum()).WithChannelsLastPooling(e.platform == "cpu"), eng: e}
}

// Finalize closes the PJRT client, freeing every buffer and executable
// still alive. The engine cannot be used afterwards.
func (e *Engine) Finalize() {
	_ = e.close()
}

func (e *Engine) close() error {
	e.mu.Lock()
	if e.finalized {
		e.mu.Unlock()
		return nil
	}
	e.finalized = true
	e.mu.Unlock()
	if err := e.client.Close(); err != nil {
		return wrap(e.name, "close", "", "", err)
	}
	return nil
}

// IsFinalized reports whether Finalize was called.
func (e *Engine) IsFinalized() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.finalized
}

func (e *Engine) check(op string) error {
	if e.IsFinalized() {
		return &errs.Error{Kind: errs.FailedPrecondition, Backend: e.name, Op: op, Err: errs.ErrClosed}
	}
	return nil
}

// elementTypes maps GoMLX dtypes to PJRT element types.
var elementTypes = map[dtypes.DType]capi.ElementType{
	dtypes.Bool:       capi.Pred,
	dtypes.Int8:       capi.S8,
	dtypes.Int16:      capi.S16,
	dtypes.Int32:      capi.S32,
	dtypes.Int64:      capi.S64,
	dtypes.Uint8:      capi.U8,
	dtypes.Uint16:     capi.U16,
	dtypes.Uint32:     capi.U32,
	dtypes.Uint64:     capi.U64,
	dtypes.Float16:    capi.F16,
	dtypes.BFloat16:   capi.BF16,
	dtypes.Float32:    capi.F32,
	dtypes.Float64:    capi.F64,
	dtypes.Complex64:  capi.C64,
	dtypes.Complex128: capi.C128,
}

func dtypeOf(t capi.ElementType) (dtypes.DType, bool) {
	for dt, et := range elementTypes {
		if et == t {
			return dt, true
		}
	}
	return dtypes.InvalidDType, false
}

// Buffer is a backends.Buffer: an array on one device of an Engine.
type Buffer struct {
	eng   *Engine
	buf   *capi.Buffer
	shape shapes.Shape
	dev   backends.DeviceNum

	mu   sync.Mutex
	done bool // finalized or donated
}

// PJRT returns the underlying PJRT buffer.
func (b *Buffer) PJRT() *capi.Buffer { return b.buf }

// Shape returns the buffer's shape.
func (b *Buffer) Shape() shapes.Shape { return b.shape }

func (e *Engine) buffer(op string, buf backends.Buffer) (*Buffer, error) {
	if err := e.check(op); err != nil {
		return nil, err
	}
	b, ok := buf.(*Buffer)
	if !ok || b == nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op,
			Err: fmt.Errorf("buffer is a %T, not a buffer of this backend", buf)}
	}
	if b.eng != e {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op,
			Err: fmt.Errorf("buffer belongs to another %s backend", b.eng.name)}
	}
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done {
		return nil, &errs.Error{Kind: errs.FailedPrecondition, Backend: e.name, Op: op,
			Err: fmt.Errorf("buffer %s was finalized or donated: %w", b.shape, errs.ErrClosed)}
	}
	return b, nil
}

// newBuffer wraps a PJRT buffer, reading its shape and device.
func (e *Engine) newBuffer(op string, pb *capi.Buffer) (*Buffer, error) {
	et, err := pb.ElementType()
	if err != nil {
		return nil, wrap(e.name, op, "", "reading a buffer's element type", err)
	}
	dt, ok := dtypeOf(et)
	if !ok {
		_ = pb.Destroy()
		return nil, &errs.UnsupportedError{Backend: e.name, What: "dtype", Name: et.String(), Detail: "the plugin returned a buffer of an element type GoMLX has no dtype for"}
	}
	dims, err := pb.Dims()
	if err != nil {
		return nil, wrap(e.name, op, "", "reading a buffer's dimensions", err)
	}
	d, err := pb.Device()
	if err != nil {
		return nil, wrap(e.name, op, "", "reading a buffer's device", err)
	}
	n, ok := e.byID[d.ID()]
	if !ok {
		return nil, &errs.Error{Kind: errs.Internal, Backend: e.name, Op: op, Err: fmt.Errorf("buffer on device id %d, which is not addressable", d.ID())}
	}
	idims := make([]int, len(dims))
	for i, v := range dims {
		idims[i] = int(v)
	}
	return &Buffer{eng: e, buf: pb, shape: shapes.Make(dt, idims...), dev: backends.DeviceNum(n)}, nil
}

// BufferFinalize frees the buffer's device memory now.
func (e *Engine) BufferFinalize(buf backends.Buffer) error {
	b, ok := buf.(*Buffer)
	if !ok || b == nil {
		return &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: "buffer finalize", Err: fmt.Errorf("buffer is a %T", buf)}
	}
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return nil
	}
	b.done = true
	b.mu.Unlock()
	if e.IsFinalized() {
		return nil // Client.Close already freed it
	}
	if err := b.buf.Destroy(); err != nil {
		return wrap(e.name, "buffer finalize", e.deviceName(b.dev), "", err)
	}
	return nil
}

// BufferShape returns the buffer's shape.
func (e *Engine) BufferShape(buf backends.Buffer) (shapes.Shape, error) {
	b, err := e.buffer("buffer shape", buf)
	if err != nil {
		return shapes.Invalid(), err
	}
	return b.shape, nil
}

// BufferDeviceNum returns the device holding the buffer.
func (e *Engine) BufferDeviceNum(buf backends.Buffer) (backends.DeviceNum, error) {
	b, err := e.buffer("buffer device", buf)
	if err != nil {
		return 0, err
	}
	return b.dev, nil
}

// flatBytes returns the bytes of flat, a slice whose element type must be
// the Go type of dt, and its length. The bytes alias flat's memory.
func flatBytes(flat any, dt dtypes.DType) ([]byte, int, error) {
	v := reflect.ValueOf(flat)
	if !v.IsValid() || v.Kind() != reflect.Slice {
		return nil, 0, fmt.Errorf("flat data must be a slice, got %T", flat)
	}
	if got := dtypes.FromGoType(v.Type().Elem()); got != dt {
		return nil, 0, fmt.Errorf("flat data is %T (dtype %s), the shape's dtype is %s", flat, got, dt)
	}
	n := v.Len()
	size := int(v.Type().Elem().Size())
	if size != dt.Size() {
		return nil, 0, fmt.Errorf("element type %s is %d bytes in Go but %d in PJRT", v.Type().Elem(), size, dt.Size())
	}
	if n == 0 {
		return []byte{}, 0, nil
	}
	return unsafe.Slice((*byte)(v.UnsafePointer()), n*size), n, nil
}

// BufferToFlatData copies the buffer to flat, a slice of the buffer's Go
// element type and exact size.
func (e *Engine) BufferToFlatData(buf backends.Buffer, flat any) error {
	const op = "buffer to host"
	b, err := e.buffer(op, buf)
	if err != nil {
		return err
	}
	raw, n, err := flatBytes(flat, b.shape.DType)
	if err != nil {
		return &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op, Err: err}
	}
	if n != b.shape.Size() {
		return &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op,
			Err: fmt.Errorf("flat data has %d elements, buffer %s has %d", n, b.shape, b.shape.Size())}
	}
	if n == 0 {
		return nil
	}
	if err := b.buf.ToHost(context.Background(), raw); err != nil {
		return wrap(e.name, op, e.deviceName(b.dev), fmt.Sprintf("copying %s to the host", b.shape), err)
	}
	return nil
}

// BufferFromFlatData copies flat (a slice of shape's Go element type) to a
// new buffer on device n.
func (e *Engine) BufferFromFlatData(n backends.DeviceNum, flat any, shape shapes.Shape) (backends.Buffer, error) {
	const op = "buffer from host"
	if err := e.check(op); err != nil {
		return nil, err
	}
	dev, err := e.device(n)
	if err != nil {
		return nil, err
	}
	et, ok := elementTypes[shape.DType]
	if !ok {
		return nil, &errs.UnsupportedError{Backend: e.name, What: "dtype", Name: shape.DType.String(), Detail: "PJRT buffers of this dtype are not supported"}
	}
	if shape.IsTuple() {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op, Err: fmt.Errorf("tuple shape %s", shape)}
	}
	raw, cnt, err := flatBytes(flat, shape.DType)
	if err != nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op, Err: err}
	}
	if cnt != shape.Size() {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op,
			Err: fmt.Errorf("flat data has %d elements, shape %s needs %d", cnt, shape, shape.Size())}
	}
	dims := make([]int64, shape.Rank())
	for i, d := range shape.Dimensions {
		dims[i] = int64(d)
	}
	pb, err := e.client.BufferFromHost(context.Background(), dev, et, dims, raw, capi.ImmutableUntilTransferCompletes)
	if err != nil {
		return nil, wrap(e.name, op, e.deviceName(n), fmt.Sprintf("placing a %s array (%s)", shape, errs.Bytes(uint64(len(raw)))), err)
	}
	return &Buffer{eng: e, buf: pb, shape: shape.Clone(), dev: n}, nil
}

// HasSharedBuffers is false: buffers live in the plugin's memory and are
// reached by copies only.
func (e *Engine) HasSharedBuffers() bool { return false }

// NewSharedBuffer is not supported (HasSharedBuffers is false).
func (e *Engine) NewSharedBuffer(backends.DeviceNum, shapes.Shape) (backends.Buffer, any, error) {
	return nil, nil, &errs.UnsupportedError{Backend: e.name, What: "feature", Name: "shared buffers", Detail: "PJRT buffers are copied to and from the host"}
}

// BufferData is not supported (HasSharedBuffers is false).
func (e *Engine) BufferData(backends.Buffer) (any, error) {
	return nil, &errs.UnsupportedError{Backend: e.name, What: "feature", Name: "shared buffers", Detail: "PJRT buffers are copied to and from the host"}
}

// BufferCopyToDevice copies the buffer to another device, device to device.
func (e *Engine) BufferCopyToDevice(src backends.Buffer, n backends.DeviceNum) (backends.Buffer, error) {
	const op = "buffer copy"
	b, err := e.buffer(op, src)
	if err != nil {
		return nil, err
	}
	dev, err := e.device(n)
	if err != nil {
		return nil, err
	}
	if n == b.dev {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Backend: e.name, Op: op,
			Err: fmt.Errorf("buffer is already on device %d", n)}
	}
	pb, err := b.buf.CopyToDevice(context.Background(), dev)
	if err != nil {
		return nil, wrap(e.name, op, e.deviceName(n), fmt.Sprintf("copying %s from device %d", b.shape, b.dev), err)
	}
	return &Buffer{eng: e, buf: pb, shape: b.shape.Clone(), dev: n}, nil
}
