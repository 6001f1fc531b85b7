package capi

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Program is code for the compiler: PJRT_Program.
type Program struct {
	// Format is "mlir" (StableHLO/MHLO as MLIR text or bytecode), "hlo"
	// (serialized HloModuleProto) or "hlo_with_config".
	Format string
	Code   []byte
}

// MLIR returns a Program in the "mlir" format.
func MLIR(text string) Program { return Program{Format: "mlir", Code: []byte(text)} }

// pinProgram builds a PJRT_Program in pinned memory.
func pinProgram(pin *runtime.Pinner, fn string, prog Program) (unsafe.Pointer, error) {
	if prog.Format == "" {
		return nil, argError(fn, "program format is empty; want \"mlir\", \"hlo\" or \"hlo_with_config\"")
	}
	if len(prog.Code) == 0 {
		return nil, argError(fn, "program code is empty")
	}
	cp := newArgs[cProgram]()
	code := append([]byte(nil), prog.Code...)
	format := []byte(prog.Format)
	cp.code, cp.codeSize = pinBytes(pin, code), uintptr(len(code))
	cp.format, cp.formatSize = pinBytes(pin, format), uintptr(len(format))
	pin.Pin(cp)
	return unsafe.Pointer(cp), nil
}

// Compile compiles prog for the client's devices (PJRT_Client_Compile).
// Compiler errors (a malformed program, an unsupported op) come back as
// *Error with the plugin's message, usually INVALID_ARGUMENT. ctx abandons
// the wait; an executable compiled after that is destroyed.
func (c *Client) Compile(ctx context.Context, prog Program, opts CompileOptions) (*LoadedExecutable, error) {
	const op = "PJRT_Client_Compile"
	serialized, err := opts.Marshal()
	if err != nil {
		return nil, err
	}
	ch, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	if _, err := c.p.fn(fnClientCompile); err != nil {
		return nil, err
	}
	return blocking(ctx, op, func() (*LoadedExecutable, error) {
		var pin runtime.Pinner
		defer pin.Unpin()
		cp, err := pinProgram(&pin, op, prog)
		if err != nil {
			return nil, err
		}
		a := newArgs[cClientCompileArgs]()
		a.client = ch
		a.program = cp
		a.compileOptions, a.compileOptionsSize = pinBytes(&pin, serialized), uintptr(len(serialized))
		if err := c.p.call(fnClientCompile, unsafe.Pointer(a)); err != nil {
			return nil, err
		}
		return c.newLoaded(a.executable), nil
	}, func(e *LoadedExecutable) { _ = e.Destroy() })
}

// DeserializeAndLoad loads an executable serialized by Executable.Serialize
// (PJRT_Executable_DeserializeAndLoad). The bytes must come from the same
// platform and plugin build. overrideOptions, if not nil, is a serialized
// CompileOptionsProto that replaces the one stored in the executable.
func (c *Client) DeserializeAndLoad(ctx context.Context, serialized []byte, overrideOptions []byte) (*LoadedExecutable, error) {
	const op = "PJRT_Executable_DeserializeAndLoad"
	if len(serialized) == 0 {
		return nil, argError(op, "serialized executable is empty")
	}
	ch, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	if _, err := c.p.fn(fnExecutableDeserializeAndLoad); err != nil {
		return nil, err
	}
	data := append([]byte(nil), serialized...)
	override := append([]byte(nil), overrideOptions...)
	return blocking(ctx, op, func() (*LoadedExecutable, error) {
		var pin runtime.Pinner
		defer pin.Unpin()
		a := newArgs[cExecutableDeserializeAndLoadArgs]()
		a.client = ch
		a.serialized, a.serializedSize = pinBytes(&pin, data), uintptr(len(data))
		a.overriddenOptions, a.overriddenOptionsSizes = pinBytes(&pin, override), uintptr(len(override))
		if err := c.p.call(fnExecutableDeserializeAndLoad, unsafe.Pointer(a)); err != nil {
			return nil, err
		}
		return c.newLoaded(a.loaded), nil
	}, func(e *LoadedExecutable) { _ = e.Destroy() })
}

// LoadedExecutable is a PJRT_LoadedExecutable: a compiled program loaded on
// the client's devices, ready to run.
type LoadedExecutable struct {
	c  *Client
	mu sync.Mutex
	h  uintptr     // 0 once destroyed
	ex *Executable // lazily fetched PJRT_Executable view, freed with the loaded executable
	// outs is what Execute needs to know of the outputs, read from the
	// plugin once (a compiled program's outputs do not change) instead of
	// on every execution; nil until the first Execute.
	outs *outputInfo
}

// outputInfo is an executable's output count and, per output, the byte
// size of its dense host copy (-1 where the element type has no byte
// layout), which Execute stamps on single-device outputs so that ToHost
// need not ask the plugin for it.
type outputInfo struct {
	n         int
	hostSizes []int
}

// outputs returns the executable's outputInfo, asking the plugin on the
// first call only.
func (e *LoadedExecutable) outputs() (*outputInfo, error) {
	e.mu.Lock()
	info := e.outs
	e.mu.Unlock()
	if info != nil {
		return info, nil
	}
	ex, err := e.Executable()
	if err != nil {
		return nil, err
	}
	n, err := ex.NumOutputs()
	if err != nil {
		return nil, err
	}
	info = &outputInfo{n: n, hostSizes: make([]int, n)}
	for i := range info.hostSizes {
		info.hostSizes[i] = -1
	}
	// The sizes are an optimisation: a plugin that cannot say leaves them
	// unknown, and ToHost asks each buffer instead.
	types, terr := ex.OutputElementTypes()
	dims, derr := ex.OutputDims()
	if terr == nil && derr == nil && len(types) == n && len(dims) == n {
		for i := range n {
			if size, err := denseSize("", types[i], dims[i]); err == nil {
				info.hostSizes[i] = size
			}
		}
	}
	e.mu.Lock()
	if e.outs == nil {
		e.outs = info
	}
	info = e.outs
	e.mu.Unlock()
	return info, nil
}

func (c *Client) newLoaded(h uintptr) *LoadedExecutable {
	e := &LoadedExecutable{c: c, h: h}
	c.track(e)
	return e
}

func (e *LoadedExecutable) handle(op string) (uintptr, error) {
	if e == nil {
		return 0, argError(op, "nil executable")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == 0 {
		return 0, fmt.Errorf("pjrt: %s: loaded executable: %w", op, ErrClosed)
	}
	return e.h, nil
}

// Destroy frees the executable. Calling it again does nothing.
func (e *LoadedExecutable) Destroy() error {
	e.c.untrack(e)
	return e.destroy()
}

func (e *LoadedExecutable) destroy() error {
	e.mu.Lock()
	h, ex := e.h, e.ex
	e.h, e.ex = 0, nil
	e.mu.Unlock()
	if h == 0 {
		return nil
	}
	var first error
	if ex != nil {
		first = ex.Destroy()
	}
	a := newArgs[cExecutableArgs]()
	a.executable = h
	if err := e.c.p.call(fnLoadedExecutableDestroy, unsafe.Pointer(a)); err != nil && first == nil {
		first = err
	}
	return first
}

// Executable returns the executable's compile-time view (names, output
// shapes, statistics, serialization). It is owned by e and freed with it: do
// not Destroy it.
func (e *LoadedExecutable) Executable() (*Executable, error) {
	const op = "PJRT_LoadedExecutable_GetExecutable"
	h, err := e.handle(op)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	ex := e.ex
	e.mu.Unlock()
	if ex != nil {
		return ex, nil
	}
	a := newArgs[cLoadedExecutableGetExecutableArgs]()
	a.loaded = h
	if err := e.c.p.call(fnLoadedExecutableGetExecutable, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	ex = &Executable{p: e.c.p, h: a.executable}
	e.mu.Lock()
	if e.ex == nil && e.h != 0 {
		e.ex = ex
		ex = nil
	}
	cur := e.ex
	e.mu.Unlock()
	if ex != nil { // lost a race, or destroyed meanwhile
		_ = ex.Destroy()
	}
	if cur == nil {
		return nil, fmt.Errorf("pjrt: %s: loaded executable: %w", op, ErrClosed)
	}
	return cur, nil
}

// AddressableDevices lists the devices the executable runs on, in the order
// Execute takes argument lists.
func (e *LoadedExecutable) AddressableDevices() ([]*Device, error) {
	h, err := e.handle("PJRT_LoadedExecutable_AddressableDevices")
	if err != nil {
		return nil, err
	}
	a := newArgs[cLoadedExecutableAddressableDevicesArgs]()
	a.executable = h
	if err := e.c.p.call(fnLoadedExecutableAddressableDevices, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	hs := handles(a.devices, a.numDevices)
	out := make([]*Device, len(hs))
	for i, dh := range hs {
		d, err := e.c.device(dh)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// DeviceAssignment returns the executable's device assignment
// (PJRT_LoadedExecutable_GetDeviceAssignment), decoded from the
// DeviceAssignmentProto the plugin serializes.
func (e *LoadedExecutable) DeviceAssignment() (DeviceAssignment, error) {
	const op = "PJRT_LoadedExecutable_GetDeviceAssignment"
	h, err := e.handle(op)
	if err != nil {
		return DeviceAssignment{}, err
	}
	a := newArgs[cSerializedArgs]()
	a.object = h
	if err := e.c.p.call(fnLoadedExecutableGetDeviceAssignment, unsafe.Pointer(a)); err != nil {
		return DeviceAssignment{}, err
	}
	raw := goBytes(a.bytes, a.bytesSize)
	callFreeFn(a.deleter, a.owner)
	return ParseDeviceAssignment(raw)
}

// ExecuteOptions tune one execution.
type ExecuteOptions struct {
	// NonDonatable lists argument indices the runtime must not donate even
	// if the program aliases them to outputs.
	NonDonatable []int
	// LaunchID, if not zero, tags a multi-device launch so the runtime can
	// detect launches issued in different orders on different hosts.
	LaunchID int32
	// Device, if set, runs a portable (single-device) executable on this
	// device; args then holds one list.
	Device *Device
}

// Execute runs the executable (PJRT_LoadedExecutable_Execute) and waits for
// it to finish. args[d] is the argument list for the d-th device of
// AddressableDevices (or for opts.Device); the result holds, per device,
// the output buffers, which the caller destroys. Arguments the program
// donates are consumed: their buffers report IsDeleted and only Destroy
// remains to be called on them.
func (e *LoadedExecutable) Execute(ctx context.Context, args [][]*Buffer, opts *ExecuteOptions) ([][]*Buffer, error) {
	const op = "PJRT_LoadedExecutable_Execute"
	defer runtime.KeepAlive(args) // the arguments' cleanups must not free them mid-execution
	if opts == nil {
		opts = &ExecuteOptions{}
	}
	h, err := e.handle(op)
	if err != nil {
		return nil, err
	}
	if len(args) == 0 {
		return nil, argError(op, "no argument lists: give one list (possibly empty) per device")
	}
	if opts.Device != nil {
		if opts.Device.c != e.c {
			return nil, argError(op, "execute device belongs to another client")
		}
		if len(args) != 1 {
			return nil, argError(op, "with an execute device, give exactly one argument list; got %d", len(args))
		}
	}
	numArgs := len(args[0])
	for d, list := range args {
		if len(list) != numArgs {
			return nil, argError(op, "argument list %d has %d buffers, list 0 has %d: every device takes the same number", d, len(list), numArgs)
		}
	}
	info, err := e.outputs()
	if err != nil {
		return nil, err
	}
	numOut := info.n

	// Argument handles, device-major, as PJRT_Buffer* const* const*.
	inner := make([][]uintptr, len(args))
	for d, list := range args {
		inner[d] = make([]uintptr, max(numArgs, 1))
		for i, b := range list {
			if b == nil {
				return nil, argError(op, "argument %d of device %d is nil", i, d)
			}
			if b.c != e.c {
				return nil, argError(op, "argument %d of device %d belongs to another client", i, d)
			}
			bh, err := b.handle(op)
			if err != nil {
				return nil, fmt.Errorf("argument %d of device %d: %w", i, d, err)
			}
			inner[d][i] = bh
		}
	}
	for _, i := range opts.NonDonatable {
		if i < 0 || i >= numArgs {
			return nil, argError(op, "non-donatable index %d is outside [0, %d)", i, numArgs)
		}
	}

	type result struct {
		outs [][]uintptr
	}
	// One frame holds the argument structs and, for one device, the arrays
	// of per-device pointers, so that one pin covers them all.
	type frame struct {
		a       cLoadedExecutableExecuteArgs
		eo      cExecuteOptions
		argList [1]unsafe.Pointer
		outList [1]unsafe.Pointer
		event   [1]uintptr
	}
	run := func() (result, error) {
		// The client stays alive while the plugin runs, even when the
		// caller stopped waiting (a cancelled context): a Close meanwhile
		// returns at once and this execution's release destroys the
		// client when it ends (hold.go), instead of freeing it underneath.
		if !e.c.hold() {
			return result{}, fmt.Errorf("pjrt: %s: client: %w", op, ErrClosed)
		}
		defer e.c.release()
		if _, err := e.handle(op); err != nil {
			return result{}, err
		}
		var pin runtime.Pinner
		defer pin.Unpin()
		f := &frame{}
		f.a.structSize = structSizeOf[cLoadedExecutableExecuteArgs]()
		f.eo.structSize = structSizeOf[cExecuteOptions]()
		pin.Pin(f)
		argLists, outLists, events := f.argList[:], f.outList[:], f.event[:]
		if len(args) > 1 {
			argLists = make([]unsafe.Pointer, len(args))
			outLists = make([]unsafe.Pointer, len(args))
			events = make([]uintptr, len(args))
			pin.Pin(unsafe.SliceData(argLists))
			pin.Pin(unsafe.SliceData(outLists))
			pin.Pin(unsafe.SliceData(events))
		}
		for d := range inner {
			argLists[d] = unsafe.Pointer(unsafe.SliceData(inner[d]))
			pin.Pin(argLists[d])
		}
		outs := make([][]uintptr, len(args))
		for d := range outs {
			outs[d] = make([]uintptr, max(numOut, 1))
			outLists[d] = unsafe.Pointer(unsafe.SliceData(outs[d]))
			pin.Pin(outLists[d])
		}
		eo := &f.eo
		eo.launchID = opts.LaunchID
		if len(opts.NonDonatable) > 0 {
			nd := make([]int64, len(opts.NonDonatable))
			for i, v := range opts.NonDonatable {
				nd[i] = int64(v)
			}
			eo.nonDonatableInputIndices = pinInt64s(&pin, nd)
			eo.numNonDonatableInputIndices = uintptr(len(nd))
		}
		a := &f.a
		a.executable = h
		a.options = unsafe.Pointer(eo)
		a.argumentLists = unsafe.Pointer(unsafe.SliceData(argLists))
		a.numDevices = uintptr(len(args))
		a.numArgs = uintptr(numArgs)
		a.outputLists = unsafe.Pointer(unsafe.SliceData(outLists))
		a.deviceCompleteEvents = unsafe.Pointer(unsafe.SliceData(events))
		if opts.Device != nil {
			a.executeDevice = opts.Device.h
		}
		if err := e.c.p.call(fnLoadedExecutableExecute, unsafe.Pointer(a)); err != nil {
			return result{}, err
		}
		var first error
		for _, ev := range events {
			if err := (event{e.c.p, ev}).await(); err != nil && first == nil {
				first = err
			}
		}
		for d := range outs {
			outs[d] = outs[d][:numOut]
		}
		if first != nil {
			e.c.p.destroyBufferHandles(outs)
			return result{}, first
		}
		return result{outs: outs}, nil
	}
	res, err := blocking(ctx, op, run, func(r result) { e.c.p.destroyBufferHandles(r.outs) })
	if err != nil {
		return nil, err
	}
	out := make([][]*Buffer, len(res.outs))
	for d, list := range res.outs {
		out[d] = make([]*Buffer, len(list))
		for i, bh := range list {
			b := e.c.newBuffer(bh)
			if len(res.outs) == 1 {
				// One device: each output is the whole array the program
				// declares (with several, an output may be a shard).
				b.hostSize = info.hostSizes[i]
			}
			out[d][i] = b
		}
	}
	return out, nil
}

func (p *Plugin) destroyBufferHandles(lists [][]uintptr) {
	for _, l := range lists {
		for _, h := range l {
			if h != 0 {
				a := newArgs[cBufferArgs]()
				a.buffer = h
				_ = p.call(fnBufferDestroy, unsafe.Pointer(a))
			}
		}
	}
}

// Executable is a PJRT_Executable: a compiled program not bound to devices,
// either the compile-time view of a LoadedExecutable or the result of an
// ahead-of-time compile against a topology (Topology.Compile).
type Executable struct {
	p  *Plugin
	mu sync.Mutex
	h  uintptr
}

func (x *Executable) handle(op string) (uintptr, error) {
	if x == nil {
		return 0, argError(op, "nil executable")
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.h == 0 {
		return 0, fmt.Errorf("pjrt: %s: executable: %w", op, ErrClosed)
	}
	return x.h, nil
}

// Destroy frees the executable. Executables obtained from
// LoadedExecutable.Executable are freed with their loaded executable and
// need not be destroyed. Calling it again does nothing.
func (x *Executable) Destroy() error {
	x.mu.Lock()
	h := x.h
	x.h = 0
	x.mu.Unlock()
	if h == 0 {
		return nil
	}
	a := newArgs[cExecutableArgs]()
	a.executable = h
	return x.p.call(fnExecutableDestroy, unsafe.Pointer(a))
}

func (x *Executable) str(id fnID) (string, error) {
	h, err := x.handle(fnNames[id])
	if err != nil {
		return "", err
	}
	a := newArgs[cExecutableStringArgs]()
	a.executable = h
	if err := x.p.call(id, unsafe.Pointer(a)); err != nil {
		return "", err
	}
	return goString(a.str, a.strSize), nil
}

func (x *Executable) count(id fnID) (int, error) {
	h, err := x.handle(fnNames[id])
	if err != nil {
		return 0, err
	}
	a := newArgs[cExecutableCountArgs]()
	a.executable = h
	if err := x.p.call(id, unsafe.Pointer(a)); err != nil {
		return 0, err
	}
	return int(a.count), nil
}

// Name is the program's name (the MLIR module name, or "main").
func (x *Executable) Name() (string, error) { return x.str(fnExecutableName) }

// Fingerprint identifies the compiled program; plugins may answer
// UNIMPLEMENTED.
func (x *Executable) Fingerprint() (string, error) { return x.str(fnExecutableFingerprint) }

// NumReplicas is the replica count it was compiled for.
func (x *Executable) NumReplicas() (int, error) { return x.count(fnExecutableNumReplicas) }

// NumPartitions is the partition count it was compiled for.
func (x *Executable) NumPartitions() (int, error) { return x.count(fnExecutableNumPartitions) }

// NumOutputs is the number of outputs per device.
func (x *Executable) NumOutputs() (int, error) { return x.count(fnExecutableNumOutputs) }

// SizeOfGeneratedCode is the size of the generated code in bytes.
func (x *Executable) SizeOfGeneratedCode() (int64, error) {
	h, err := x.handle("PJRT_Executable_SizeOfGeneratedCodeInBytes")
	if err != nil {
		return 0, err
	}
	a := newArgs[cExecutableSizeOfGeneratedCodeArgs]()
	a.executable = h
	if err := x.p.call(fnExecutableSizeOfGeneratedCodeInBytes, unsafe.Pointer(a)); err != nil {
		return 0, err
	}
	return a.sizeInBytes, nil
}

// OutputElementTypes lists the element type of each output.
func (x *Executable) OutputElementTypes() ([]ElementType, error) {
	h, err := x.handle("PJRT_Executable_OutputElementTypes")
	if err != nil {
		return nil, err
	}
	a := newArgs[cExecutableOutputElementTypesArgs]()
	a.executable = h
	if err := x.p.call(fnExecutableOutputElementTypes, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	out := make([]ElementType, a.numOutputTypes)
	if a.numOutputTypes > 0 {
		for i, t := range unsafe.Slice((*int32)(a.outputTypes), a.numOutputTypes) {
			out[i] = ElementType(t)
		}
	}
	return out, nil
}

// OutputDims lists the dimensions of each output.
func (x *Executable) OutputDims() ([][]int64, error) {
	h, err := x.handle("PJRT_Executable_OutputDimensions")
	if err != nil {
		return nil, err
	}
	a := newArgs[cExecutableOutputDimensionsArgs]()
	a.executable = h
	if err := x.p.call(fnExecutableOutputDimensions, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	out := make([][]int64, a.numOutputs)
	if a.numOutputs == 0 {
		return out, nil
	}
	sizes := unsafe.Slice((*uintptr)(a.dimSizes), a.numOutputs)
	var total uintptr
	for _, s := range sizes {
		total += s
	}
	var all []int64
	if total > 0 {
		all = unsafe.Slice((*int64)(a.dims), total)
	}
	off := uintptr(0)
	for i, s := range sizes {
		out[i] = append([]int64{}, all[off:off+s]...)
		off += s
	}
	return out, nil
}

// OutputMemoryKinds lists the memory kind of each output ("device", ...).
func (x *Executable) OutputMemoryKinds() ([]string, error) {
	h, err := x.handle("PJRT_Executable_OutputMemoryKinds")
	if err != nil {
		return nil, err
	}
	a := newArgs[cExecutableOutputMemoryKindsArgs]()
	a.executable = h
	if err := x.p.call(fnExecutableOutputMemoryKinds, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	out := make([]string, a.numOutputs)
	if a.numOutputs > 0 {
		kinds := unsafe.Slice((*unsafe.Pointer)(a.memoryKinds), a.numOutputs)
		sizes := unsafe.Slice((*uintptr)(a.memoryKindSizes), a.numOutputs)
		for i := range out {
			out[i] = goString(kinds[i], sizes[i])
		}
	}
	return out, nil
}

// CostAnalysis returns the compiler's cost properties (e.g. "flops",
// "bytes accessed"); which ones depends on the plugin.
func (x *Executable) CostAnalysis() ([]NamedValue, error) {
	h, err := x.handle("PJRT_Executable_GetCostAnalysis")
	if err != nil {
		return nil, err
	}
	a := newArgs[cExecutableGetCostAnalysisArgs]()
	a.executable = h
	if err := x.p.call(fnExecutableGetCostAnalysis, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	return readNamedValues(a.properties, a.numProperties), nil
}

// CompiledMemoryStats are the compiler's memory figures for an executable
// (xla::CompiledMemoryStats), in bytes: device memory, then host memory.
type CompiledMemoryStats struct {
	GeneratedCode, Argument, Output, Alias, Temp                     int64
	HostGeneratedCode, HostArgument, HostOutput, HostAlias, HostTemp int64
	// Peak is the peak device memory the compiler planned, 0 when the
	// plugin does not report it.
	Peak int64
}

// CompiledMemoryStats returns the compile-time memory statistics; a
// pre-flight "will it fit" check compares Argument+Output-Alias+Temp (or
// Peak) with the device's memory.
func (x *Executable) CompiledMemoryStats() (CompiledMemoryStats, error) {
	h, err := x.handle("PJRT_Executable_GetCompiledMemoryStats")
	if err != nil {
		return CompiledMemoryStats{}, err
	}
	a := newArgs[cExecutableGetCompiledMemoryStatsArgs]()
	a.executable = h
	if err := x.p.call(fnExecutableGetCompiledMemoryStats, unsafe.Pointer(a)); err != nil {
		return CompiledMemoryStats{}, err
	}
	return CompiledMemoryStats{
		GeneratedCode: a.generatedCodeSizeInBytes, Argument: a.argumentSizeInBytes,
		Output: a.outputSizeInBytes, Alias: a.aliasSizeInBytes, Temp: a.tempSizeInBytes,
		HostGeneratedCode: a.hostGeneratedCodeSizeBytes, HostArgument: a.hostArgumentSizeInBytes,
		HostOutput: a.hostOutputSizeInBytes, HostAlias: a.hostAliasSizeInBytes, HostTemp: a.hostTempSizeInBytes,
		Peak: a.peakMemoryInBytes,
	}, nil
}

// Serialize returns the plugin's serialization of the executable, for
// Client.DeserializeAndLoad with the same plugin build. The format is not
// stable across plugin versions.
func (x *Executable) Serialize() ([]byte, error) {
	h, err := x.handle("PJRT_Executable_Serialize")
	if err != nil {
		return nil, err
	}
	a := newArgs[cSerializedArgs]()
	a.object = h
	if err := x.p.call(fnExecutableSerialize, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	out := goBytes(a.bytes, a.bytesSize)
	callFreeFn(a.deleter, a.owner)
	return out, nil
}

// Serialize is a shortcut for Executable().Serialize().
func (e *LoadedExecutable) Serialize() ([]byte, error) {
	ex, err := e.Executable()
	if err != nil {
		return nil, err
	}
	return ex.Serialize()
}
