//go:build linux

package discover

import (
	"context"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// SystemNVML loads libnvidia-ml with purego (no cgo) and queries it.
//
// Each Snapshot calls nvmlInit_v2, reads every device, then nvmlShutdown.
// The calls run on their own goroutine so that a hung driver cannot hold
// the caller past ctx; a crash inside the driver library would still take
// the process down, so callers that must survive a broken driver should run
// discovery in a child process. The library stays loaded after the first
// call: unloading driver libraries is not reliably safe.
type SystemNVML struct {
	// Libraries are tried in order; nil means libnvidia-ml.so.1, then
	// libnvidia-ml.so.
	Libraries []string
}

// Snapshot implements NVML.
func (s SystemNVML) Snapshot(ctx context.Context) (*NVMLSnapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	libs := s.Libraries
	if len(libs) == 0 {
		libs = defaultNVMLLibraries
	}
	type result struct {
		snap *NVMLSnapshot
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				ch <- result{nil, fmt.Errorf("nvml: binding panicked: %v", r)}
			}
		}()
		snap, err := queryNVML(libs)
		ch <- result{snap, err}
	}()
	select {
	case r := <-ch:
		return r.snap, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("nvml: no answer before the deadline: %w", ctx.Err())
	}
}

// nvmlMemory is nvmlMemory_t: unsigned long long total, free, used
// (NVML API reference, struct nvmlMemory_t).
type nvmlMemory struct {
	Total, Free, Used uint64
}

// nvmlPciInfo is nvmlPciInfo_t (NVML API reference, struct nvmlPciInfo_t):
//
//	char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; // 16
//	unsigned int domain, bus, device;
//	unsigned int pciDeviceId;    // (device id << 16) | vendor id
//	unsigned int pciSubSystemId;
//	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];          // 32
//
// 68 bytes, no padding (every member is 4-byte aligned or a char array).
type nvmlPciInfo struct {
	BusIDLegacy    [16]byte
	Domain         uint32
	Bus            uint32
	Device         uint32
	PCIDeviceID    uint32
	PCISubSystemID uint32
	BusID          [32]byte
}

// Compile-time layout checks against the C sizes above.
var (
	_ [68 - unsafe.Sizeof(nvmlPciInfo{})]byte
	_ [unsafe.Sizeof(nvmlPciInfo{}) - 68]byte
	_ [24 - unsafe.Sizeof(nvmlMemory{})]byte
	_ [unsafe.Sizeof(nvmlMemory{}) - 24]byte
)

// Buffer sizes from nvml.h: NVML_DEVICE_NAME_V2_BUFFER_SIZE,
// NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE.
const (
	nvmlNameBuf    = 96
	nvmlUUIDBuf    = 96
	nvmlVersionBuf = 80
)

// nvmlAPI holds the bound functions. nvmlDevice_t is an opaque pointer.
type nvmlAPI struct {
	init          func() int32
	shutdown      func() int32
	errorString   func(int32) string
	driverVersion func(*byte, uint32) int32
	count         func(*uint32) int32
	handle        func(uint32, *uintptr) int32
	name          func(uintptr, *byte, uint32) int32
	uuid          func(uintptr, *byte, uint32) int32
	memory        func(uintptr, *nvmlMemory) int32
	pci           func(uintptr, *nvmlPciInfo) int32
	pciSym        string
}

// bind resolves each function, trying the versioned symbol first. A
// missing symbol is an error, never a panic (purego.RegisterLibFunc would
// panic, so symbols are looked up first).
func bindNVML(h uintptr) (*nvmlAPI, error) {
	a := &nvmlAPI{}
	bind := func(fptr any, names ...string) (string, error) {
		for _, n := range names {
			sym, err := purego.Dlsym(h, n)
			if err == nil && sym != 0 {
				purego.RegisterFunc(fptr, sym)
				return n, nil
			}
		}
		return "", fmt.Errorf("nvml: symbol %s not found in the library", strings.Join(names, " or "))
	}
	steps := []struct {
		fptr  any
		names []string
	}{
		{&a.init, []string{"nvmlInit_v2", "nvmlInit"}},
		{&a.shutdown, []string{"nvmlShutdown"}},
		{&a.errorString, []string{"nvmlErrorString"}},
		{&a.driverVersion, []string{"nvmlSystemGetDriverVersion"}},
		{&a.count, []string{"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}},
		{&a.handle, []string{"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}},
		{&a.name, []string{"nvmlDeviceGetName"}},
		{&a.uuid, []string{"nvmlDeviceGetUUID"}},
		{&a.memory, []string{"nvmlDeviceGetMemoryInfo"}},
		{&a.pci, []string{"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}},
	}
	for i, s := range steps {
		n, err := bind(s.fptr, s.names...)
		if err != nil {
			return nil, err
		}
		if i == len(steps)-1 {
			a.pciSym = n
		}
	}
	return a, nil
}

func (a *nvmlAPI) err(op string, code int32) error {
	e := &NVMLError{Op: op, Code: int(code)}
	if a.errorString != nil {
		e.Message = a.errorString(code)
	}
	return e
}

func queryNVML(libs []string) (*NVMLSnapshot, error) {
	var h uintptr
	var lib string
	var loadErrs []string
	for _, l := range libs {
		hh, err := purego.Dlopen(l, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil && hh != 0 {
			h, lib = hh, l
			break
		}
		if err != nil {
			loadErrs = append(loadErrs, err.Error())
		}
	}
	if h == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNVMLNotFound, strings.Join(loadErrs, "; "))
	}
	a, err := bindNVML(h)
	if err != nil {
		return nil, err
	}
	if r := a.init(); r != nvmlSuccess {
		return nil, a.err("nvmlInit_v2", r)
	}
	defer a.shutdown()

	snap := &NVMLSnapshot{Library: lib, Devices: []NVMLDevice{}}
	buf := make([]byte, nvmlVersionBuf)
	if r := a.driverVersion(&buf[0], uint32(len(buf))); r == nvmlSuccess {
		snap.DriverVersion = cString(buf)
	}
	var n uint32
	if r := a.count(&n); r != nvmlSuccess {
		return nil, a.err("nvmlDeviceGetCount_v2", r)
	}
	for i := uint32(0); i < n && i < 1024; i++ {
		dev := NVMLDevice{Index: int(i)}
		fail := func(op string, r int32) {
			if dev.Err == "" {
				dev.Err = a.err(op, r).Error()
			}
		}
		var hd uintptr
		if r := a.handle(i, &hd); r != nvmlSuccess {
			fail("nvmlDeviceGetHandleByIndex_v2", r)
			snap.Devices = append(snap.Devices, dev)
			continue
		}
		nb := make([]byte, nvmlNameBuf)
		if r := a.name(hd, &nb[0], uint32(len(nb))); r == nvmlSuccess {
			dev.Name = cString(nb)
		} else {
			fail("nvmlDeviceGetName", r)
		}
		ub := make([]byte, nvmlUUIDBuf)
		if r := a.uuid(hd, &ub[0], uint32(len(ub))); r == nvmlSuccess {
			dev.UUID = cString(ub)
		} else {
			fail("nvmlDeviceGetUUID", r)
		}
		var m nvmlMemory
		if r := a.memory(hd, &m); r == nvmlSuccess {
			dev.MemoryTotal, dev.MemoryFree, dev.MemoryUsed = m.Total, m.Free, m.Used
		} else {
			fail("nvmlDeviceGetMemoryInfo", r)
		}
		var p nvmlPciInfo
		if r := a.pci(hd, &p); r == nvmlSuccess {
			dev.PCIBusID = cString(p.BusID[:])
			if dev.PCIBusID == "" {
				dev.PCIBusID = cString(p.BusIDLegacy[:])
			}
			dev.PCIDeviceID, dev.PCISubsystemID = p.PCIDeviceID, p.PCISubSystemID
		} else {
			fail(a.pciSym, r)
		}
		snap.Devices = append(snap.Devices, dev)
	}
	return snap, nil
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
