package capi

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Client is a PJRT_Client: the plugin's runtime for the devices of one
// process. A process should hold at most one client per plugin; TPUs in
// particular can be opened by one client only.
type Client struct {
	p *Plugin

	mu      sync.Mutex
	h       uintptr                // 0 once closed
	live    map[destroyer]struct{} // executables not yet destroyed
	buffers map[uintptr]struct{}   // PJRT_Buffer* not yet destroyed, by handle: a *Buffer is never pinned
	origins map[uintptr]string     // with TENSORBRIDGE_TRACE_LOST_BUFFERS=1: where each buffer was made
	devices map[uintptr]*Device    // by PJRT_Device*, so that a device has one *Device

	// holds counts the calls that need the client alive for their whole
	// length (an execution, a buffer destroy, an in-place read): Close
	// never waits for them; it refuses new holds and, while some remain,
	// leaves the destruction to the last release (hold.go).
	holds clientHolds
	// lost counts buffers freed by the garbage-collection safety net rather
	// than by Destroy: each one is a leak in the caller that the net caught.
	lost int64
}

// destroyer is a client-owned object Close must free.
type destroyer interface{ destroy() error }

// Well-known client create option names. Which ones a plugin honours is
// up to the plugin; unknown names are usually rejected with
// INVALID_ARGUMENT.
const (
	// OptCPUDeviceCount (int64) sets the number of CPU devices of the XLA CPU
	// plugin (the option exists in the XLA CPU plugins of 2025 and later;
	// older ones only read XLA_FLAGS=--xla_force_host_platform_device_count=N
	// at load).
	OptCPUDeviceCount = "cpu_device_count"
	// OptAsynchronous (bool) is the XLA CPU client's "asynchronous": true
	// (the C API plugin's default) dispatches every execution costing more
	// than about 1000 FLOPs to the client's thread pool; false runs it on
	// the calling thread. Present in the 0.115 plugin ("asynchronous set via
	// create_options"), absent in older ones, which reject it.
	OptAsynchronous = "asynchronous"
	// OptMemoryFraction (float32) and OptPreallocate (bool) size the GPU
	// allocator of the CUDA/ROCm plugins.
	OptMemoryFraction = "memory_fraction"
	OptPreallocate    = "preallocate"
	// OptVisibleDevices ([]int64) restricts a GPU client to these device
	// ordinals.
	OptVisibleDevices = "visible_devices"
)

// clientOptionTypes are the value types of the create options above, as the
// plugins declare them (the XLA CPU plugin's "expected type index", JAX's GPU
// client options). NewClient checks them because not every plugin does.
var clientOptionTypes = map[string]int32{
	OptCPUDeviceCount: nvInt64,
	OptMemoryFraction: nvFloat,
	OptPreallocate:    nvBool,
	OptAsynchronous:   nvBool,
	OptVisibleDevices: nvInt64List,
}

// NewClient calls PJRT_Client_Create with the given create options and no
// key-value store (single-process). Creation can take long (a TPU runtime
// initialising its chips); ctx abandons the wait, and a client created after
// that is destroyed.
func (p *Plugin) NewClient(ctx context.Context, options []NamedValue) (*Client, error) {
	return p.newClient(ctx, options, nil)
}

// newClient is NewClient with setup, if not nil, completing the create
// arguments (the key-value callbacks of NewClientWithKV).
func (p *Plugin) newClient(ctx context.Context, options []NamedValue, setup func(*cClientCreateArgs)) (*Client, error) {
	const op = "PJRT_Client_Create"
	if _, err := p.fn(fnClientCreate); err != nil {
		return nil, err
	}
	if err := checkOptionTypes(op, options, clientOptionTypes); err != nil {
		return nil, err
	}
	h, err := blocking(ctx, op, func() (uintptr, error) {
		var pin runtime.Pinner
		defer pin.Unpin()
		a := newArgs[cClientCreateArgs]()
		opts, n, err := encodeNamedValues(&pin, op, options)
		if err != nil {
			return 0, err
		}
		a.createOptions, a.numOptions = opts, n
		if setup != nil {
			setup(a)
		}
		if err := p.call(fnClientCreate, unsafe.Pointer(a)); err != nil {
			return 0, err
		}
		if a.client == 0 {
			return 0, &Error{Code: CodeInternal, Func: op, Message: "plugin returned no error and no client"}
		}
		return a.client, nil
	}, func(h uintptr) { p.destroyClient(h) })
	if err != nil {
		return nil, err
	}
	return &Client{p: p, h: h, live: map[destroyer]struct{}{}, buffers: map[uintptr]struct{}{}, origins: map[uintptr]string{}, devices: map[uintptr]*Device{}}, nil
}

func (p *Plugin) destroyClient(h uintptr) error {
	a := newArgs[cClientArgs]()
	a.client = h
	return p.call(fnClientDestroy, unsafe.Pointer(a))
}

// Plugin returns the plugin the client belongs to.
func (c *Client) Plugin() *Plugin { return c.p }

// handle returns the PJRT_Client* or an ErrClosed error naming op.
func (c *Client) handle(op string) (uintptr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == 0 {
		return 0, fmt.Errorf("pjrt: %s: client: %w", op, ErrClosed)
	}
	return c.h, nil
}

func (c *Client) track(d destroyer) {
	c.mu.Lock()
	c.live[d] = struct{}{}
	c.mu.Unlock()
}

func (c *Client) untrack(d destroyer) {
	c.mu.Lock()
	delete(c.live, d)
	c.mu.Unlock()
}

// LiveBuffers is the number of the client's buffers not yet destroyed.
func (c *Client) LiveBuffers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buffers)
}

// LostBuffers is the number of buffers that were dropped without Destroy and
// freed by the garbage-collection safety net instead.
func (c *Client) LostBuffers() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// Close destroys every buffer and executable of the client that is still
// alive, then the client. It returns the first error met; calling it again
// does nothing. The caller must not use the client's objects concurrently
// with Close.
func (c *Client) Close() error {
	if !c.holds.closeNow() {
		return nil // destroyed by the last holder's release (hold.go)
	}
	return c.destroyAll()
}

// destroyAll frees every buffer and executable the client still owns and
// the client itself; it runs once, when Close finds no holder or when the
// last holder releases after Close.
func (c *Client) destroyAll() error {
	c.mu.Lock()
	if c.h == 0 {
		c.mu.Unlock()
		return nil
	}
	live := make([]destroyer, 0, len(c.live))
	for d := range c.live {
		live = append(live, d)
	}
	bufs := make([]uintptr, 0, len(c.buffers))
	for h := range c.buffers {
		bufs = append(bufs, h)
	}
	clear(c.buffers)
	c.mu.Unlock()

	var first error
	for _, h := range bufs {
		if err := c.p.destroyBuffer(h); err != nil && first == nil {
			first = err
		}
	}
	for _, d := range live {
		if err := d.destroy(); err != nil && first == nil {
			first = err
		}
	}
	c.mu.Lock()
	h := c.h
	c.h = 0
	c.mu.Unlock()
	if err := c.p.destroyClient(h); err != nil && first == nil {
		first = err
	}
	return first
}

// clientString calls one of the PJRT_Client_* functions that return a string.
func (c *Client) clientString(id fnID) (string, error) {
	h, err := c.handle(fnNames[id])
	if err != nil {
		return "", err
	}
	a := newArgs[cClientStringArgs]()
	a.client = h
	if err := c.p.call(id, unsafe.Pointer(a)); err != nil {
		return "", err
	}
	return goString(a.str, a.strSize), nil
}

// PlatformName is e.g. "cpu", "tpu", "cuda".
func (c *Client) PlatformName() (string, error) { return c.clientString(fnClientPlatformName) }

// PlatformVersion is the runtime's version string (libtpu or CUDA version,
// "<unknown>" on some plugins).
func (c *Client) PlatformVersion() (string, error) { return c.clientString(fnClientPlatformVersion) }

// ProcessIndex is the client's process index; 0 in single-process use.
func (c *Client) ProcessIndex() (int, error) {
	h, err := c.handle("PJRT_Client_ProcessIndex")
	if err != nil {
		return 0, err
	}
	a := newArgs[cClientProcessIndexArgs]()
	a.client = h
	if err := c.p.call(fnClientProcessIndex, unsafe.Pointer(a)); err != nil {
		return 0, err
	}
	return int(a.processIndex), nil
}

// Devices lists all devices the runtime sees, addressable or not.
func (c *Client) Devices() ([]*Device, error) { return c.deviceList(fnClientDevices) }

// AddressableDevices lists the devices this process can issue work to.
func (c *Client) AddressableDevices() ([]*Device, error) {
	return c.deviceList(fnClientAddressableDevices)
}

func (c *Client) deviceList(id fnID) ([]*Device, error) {
	h, err := c.handle(fnNames[id])
	if err != nil {
		return nil, err
	}
	a := newArgs[cClientDevicesArgs]()
	a.client = h
	if err := c.p.call(id, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	hs := handles(a.devices, a.numDevices)
	out := make([]*Device, len(hs))
	for i, dh := range hs {
		d, err := c.device(dh)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// LookupDevice returns the device with the given global id.
func (c *Client) LookupDevice(id int) (*Device, error) {
	h, err := c.handle("PJRT_Client_LookupDevice")
	if err != nil {
		return nil, err
	}
	a := newArgs[cClientLookupDeviceArgs]()
	a.client, a.id = h, int32(id)
	if err := c.p.call(fnClientLookupDevice, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	return c.device(a.device)
}

// device returns the *Device for a PJRT_Device*, reading its description
// the first time.
func (c *Client) device(h uintptr) (*Device, error) {
	c.mu.Lock()
	d := c.devices[h]
	c.mu.Unlock()
	if d != nil {
		return d, nil
	}
	a := newArgs[cDeviceGetDescriptionArgs]()
	a.device = h
	if err := c.p.call(fnDeviceGetDescription, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	desc, err := c.p.describe(a.desc)
	if err != nil {
		return nil, err
	}
	d = &Device{c: c, h: h, desc: desc}
	c.mu.Lock()
	if prev := c.devices[h]; prev != nil {
		d = prev
	} else {
		c.devices[h] = d
	}
	c.mu.Unlock()
	return d, nil
}

// DefaultDeviceAssignment returns the plugin's default assignment of devices
// for numReplicas × numPartitions: result[r][p] is the device id of replica r,
// partition p.
func (c *Client) DefaultDeviceAssignment(numReplicas, numPartitions int) ([][]int, error) {
	const op = "PJRT_Client_DefaultDeviceAssignment"
	if numReplicas < 1 || numPartitions < 1 || numReplicas*numPartitions > 1<<20 {
		return nil, argError(op, "replicas %d × partitions %d: each must be ≥ 1 and the product ≤ 2^20", numReplicas, numPartitions)
	}
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	n := numReplicas * numPartitions
	buf := make([]int32, n)
	var pin runtime.Pinner
	defer pin.Unpin()
	a := newArgs[cClientDefaultDeviceAssignmentArgs]()
	a.client, a.numReplicas, a.numPartitions = h, int32(numReplicas), int32(numPartitions)
	a.defaultAssignmentSize = uintptr(n)
	a.defaultAssignment = unsafe.Pointer(unsafe.SliceData(buf))
	pin.Pin(a.defaultAssignment)
	if err := c.p.call(fnClientDefaultDeviceAssignment, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	// The C++ DeviceAssignment is a (replica, computation) array in row-major
	// order: the flat list is replica-major.
	out := make([][]int, numReplicas)
	for r := range out {
		out[r] = make([]int, numPartitions)
		for q := range out[r] {
			out[r][q] = int(buf[r*numPartitions+q])
		}
	}
	return out, nil
}

// Device is a PJRT_Device of a client. Its description is read once, when
// the device is first listed.
type Device struct {
	c    *Client
	h    uintptr
	desc DeviceDescription
}

// DeviceDescription is what PJRT_DeviceDescription_* report about a device,
// live (from a client) or compile-only (from a topology).
type DeviceDescription struct {
	ID           int    // unique among the platform's devices, across hosts
	ProcessIndex int    // process the device is addressable from
	Kind         string // e.g. "cpu", "TPU v5 lite", "NVIDIA H100 80GB HBM3"
	DebugString  string // verbose, for logs
	ToString     string // terse, e.g. "CpuDevice(id=0)"
	// Attributes are the device's named values, e.g. TPU "coords" ([]int64),
	// "core_on_chip" (int64); GPU "compute_capability" (string).
	Attributes []NamedValue
}

// describe reads every field of a PJRT_DeviceDescription*.
func (p *Plugin) describe(h uintptr) (DeviceDescription, error) {
	var d DeviceDescription
	ia := newArgs[cDescIntArgs]()
	ia.desc = h
	if err := p.call(fnDeviceDescriptionId, unsafe.Pointer(ia)); err != nil {
		return d, err
	}
	d.ID = int(ia.value)
	ia = newArgs[cDescIntArgs]()
	ia.desc = h
	if err := p.call(fnDeviceDescriptionProcessIndex, unsafe.Pointer(ia)); err != nil {
		return d, err
	}
	d.ProcessIndex = int(ia.value)
	for _, s := range []struct {
		id  fnID
		dst *string
	}{{fnDeviceDescriptionKind, &d.Kind}, {fnDeviceDescriptionDebugString, &d.DebugString}, {fnDeviceDescriptionToString, &d.ToString}} {
		sa := newArgs[cDescStringArgs]()
		sa.desc = h
		if err := p.call(s.id, unsafe.Pointer(sa)); err != nil {
			return d, err
		}
		*s.dst = goString(sa.str, sa.strSize)
	}
	aa := newArgs[cDescAttributesArgs]()
	aa.desc = h
	if err := p.call(fnDeviceDescriptionAttributes, unsafe.Pointer(aa)); err != nil {
		return d, err
	}
	d.Attributes = readNamedValues(aa.attributes, aa.numAttributes)
	return d, nil
}

// Client returns the client the device belongs to.
func (d *Device) Client() *Client { return d.c }

// Description returns the device's description.
func (d *Device) Description() DeviceDescription { return d.desc }

// ID is the device's global id (PJRT_DeviceDescription_Id).
func (d *Device) ID() int { return d.desc.ID }

// Kind is the device kind (PJRT_DeviceDescription_Kind).
func (d *Device) Kind() string { return d.desc.Kind }

// String is the device's terse description, e.g. "CpuDevice(id=0)".
func (d *Device) String() string { return d.desc.ToString }

// IsAddressable reports whether this process can issue work to the device.
func (d *Device) IsAddressable() (bool, error) {
	if _, err := d.c.handle("PJRT_Device_IsAddressable"); err != nil {
		return false, err
	}
	a := newArgs[cDeviceIsAddressableArgs]()
	a.device = d.h
	if err := d.c.p.call(fnDeviceIsAddressable, unsafe.Pointer(a)); err != nil {
		return false, err
	}
	return a.isAddressable, nil
}

// LocalHardwareID is the plugin's hardware number for the device (the CUDA
// ordinal, ...); -1 when undefined.
func (d *Device) LocalHardwareID() (int, error) {
	if _, err := d.c.handle("PJRT_Device_LocalHardwareId"); err != nil {
		return 0, err
	}
	a := newArgs[cDeviceLocalHardwareIDArgs]()
	a.device = d.h
	if err := d.c.p.call(fnDeviceLocalHardwareId, unsafe.Pointer(a)); err != nil {
		return 0, err
	}
	return int(a.localHardwareID), nil
}

// Opt is an optional statistic: Valid is false when the plugin did not
// report it.
type Opt struct {
	Value int64
	Valid bool
}

func (o Opt) String() string {
	if !o.Valid {
		return "n/a"
	}
	return fmt.Sprint(o.Value)
}

// MemoryStats are a device's allocator statistics
// (PJRT_Device_MemoryStats). Only BytesInUse is always reported.
type MemoryStats struct {
	BytesInUse            int64
	PeakBytesInUse        Opt
	NumAllocs             Opt
	LargestAllocSize      Opt
	BytesLimit            Opt // upper limit of user-allocatable memory
	BytesReserved         Opt
	PeakBytesReserved     Opt
	BytesReservableLimit  Opt
	LargestFreeBlockBytes Opt
	PoolBytes             Opt
	PeakPoolBytes         Opt
}

// MemoryStats reads the device's allocator statistics. Plugins may answer
// UNIMPLEMENTED (errors.Is(err, ErrUnimplemented)).
func (d *Device) MemoryStats() (MemoryStats, error) {
	if _, err := d.c.handle("PJRT_Device_MemoryStats"); err != nil {
		return MemoryStats{}, err
	}
	a := newArgs[cDeviceMemoryStatsArgs]()
	a.device = d.h
	if err := d.c.p.call(fnDeviceMemoryStats, unsafe.Pointer(a)); err != nil {
		return MemoryStats{}, err
	}
	return MemoryStats{
		BytesInUse:            a.bytesInUse,
		PeakBytesInUse:        Opt{a.peakBytesInUse, a.peakBytesInUseIsSet},
		NumAllocs:             Opt{a.numAllocs, a.numAllocsIsSet},
		LargestAllocSize:      Opt{a.largestAllocSize, a.largestAllocSizeIsSet},
		BytesLimit:            Opt{a.bytesLimit, a.bytesLimitIsSet},
		BytesReserved:         Opt{a.bytesReserved, a.bytesReservedIsSet},
		PeakBytesReserved:     Opt{a.peakBytesReserved, a.peakBytesReservedIsSet},
		BytesReservableLimit:  Opt{a.bytesReservableLimit, a.bytesReservableLimitIsSet},
		LargestFreeBlockBytes: Opt{a.largestFreeBlockBytes, a.largestFreeBlockBytesIsSet},
		PoolBytes:             Opt{a.poolBytes, a.poolBytesIsSet},
		PeakPoolBytes:         Opt{a.peakPoolBytes, a.peakPoolBytesIsSet},
	}, nil
}

// Memory is a memory space a device can address (PJRT_Memory).
type Memory struct {
	ID   int
	Kind string // e.g. "device", "pinned_host", "unpinned_host"
	h    uintptr
}

// Memories lists the memory spaces the device can address.
func (d *Device) Memories() ([]Memory, error) {
	if _, err := d.c.handle("PJRT_Device_AddressableMemories"); err != nil {
		return nil, err
	}
	a := newArgs[cDeviceAddressableMemoriesArgs]()
	a.device = d.h
	if err := d.c.p.call(fnDeviceAddressableMemories, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	hs := handles(a.memories, a.numMemories)
	out := make([]Memory, len(hs))
	for i, h := range hs {
		m, err := d.c.p.memory(h)
		if err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

// DefaultMemory is the memory space data for the device goes to by default.
func (d *Device) DefaultMemory() (Memory, error) {
	if _, err := d.c.handle("PJRT_Device_DefaultMemory"); err != nil {
		return Memory{}, err
	}
	a := newArgs[cDeviceDefaultMemoryArgs]()
	a.device = d.h
	if err := d.c.p.call(fnDeviceDefaultMemory, unsafe.Pointer(a)); err != nil {
		return Memory{}, err
	}
	return d.c.p.memory(a.memory)
}

func (p *Plugin) memory(h uintptr) (Memory, error) {
	ia := newArgs[cMemoryIDArgs]()
	ia.memory = h
	if err := p.call(fnMemoryId, unsafe.Pointer(ia)); err != nil {
		return Memory{}, err
	}
	ka := newArgs[cMemoryKindArgs]()
	ka.memory = h
	if err := p.call(fnMemoryKind, unsafe.Pointer(ka)); err != nil {
		return Memory{}, err
	}
	return Memory{ID: int(ia.id), Kind: goString(ka.kind, ka.kindSize), h: h}, nil
}
