package capi

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Topology is a PJRT_TopologyDescription: a description of a set of devices,
// which need not be present. libtpu creates them from a name such as
// "v5e:2x2" so that programs can be compiled for a TPU slice on a machine
// without TPUs (Topology.Compile), then serialized and loaded on the slice.
type Topology struct {
	p     *Plugin
	mu    sync.Mutex
	h     uintptr
	owned bool    // false for a client's topology, which the client frees
	c     *Client // the owning client of a client's topology
}

// NewTopology calls PJRT_TopologyDescription_Create. The name and the
// options are plugin-specific: libtpu takes "<generation>:<bounds>" names
// such as "v5e:2x2", "v5p:2x2x1", "v6e:2x4" and options such as
// "chip_config_name" ("default", "megacore") and "num_slices"; the CPU plugin
// answers UNIMPLEMENTED.
func (p *Plugin) NewTopology(ctx context.Context, name string, options []NamedValue) (*Topology, error) {
	const op = "PJRT_TopologyDescription_Create"
	if _, err := p.fn(fnTopologyDescriptionCreate); err != nil {
		return nil, err
	}
	h, err := blocking(ctx, op, func() (uintptr, error) {
		var pin runtime.Pinner
		defer pin.Unpin()
		a := newArgs[cTopologyCreateArgs]()
		nb := []byte(name)
		a.topologyName, a.topologyNameSize = pinBytes(&pin, nb), uintptr(len(nb))
		opts, n, err := encodeNamedValues(&pin, op, options)
		if err != nil {
			return 0, err
		}
		a.createOptions, a.numOptions = opts, n
		if err := p.call(fnTopologyDescriptionCreate, unsafe.Pointer(a)); err != nil {
			return 0, err
		}
		if a.topology == 0 {
			return 0, &Error{Code: CodeInternal, Func: op, Message: "plugin returned no error and no topology"}
		}
		return a.topology, nil
	}, func(h uintptr) { _ = (&Topology{p: p, h: h, owned: true}).Destroy() })
	if err != nil {
		return nil, err
	}
	return &Topology{p: p, h: h, owned: true}, nil
}

// Topology returns the topology of the client's devices. It belongs to the
// client: Destroy on it does nothing.
func (c *Client) Topology() (*Topology, error) {
	const op = "PJRT_Client_TopologyDescription"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	a := newArgs[cClientTopologyDescriptionArgs]()
	a.client = h
	if err := c.p.call(fnClientTopologyDescription, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	return &Topology{p: c.p, h: a.topology, c: c}, nil
}

func (t *Topology) handle(op string) (uintptr, error) {
	if t == nil {
		return 0, argError(op, "nil topology")
	}
	if t.c != nil {
		if _, err := t.c.handle(op); err != nil {
			return 0, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h == 0 {
		return 0, fmt.Errorf("pjrt: %s: topology: %w", op, ErrClosed)
	}
	return t.h, nil
}

// Destroy frees a topology made by NewTopology. Calling it again does
// nothing.
func (t *Topology) Destroy() error {
	t.mu.Lock()
	h, owned := t.h, t.owned
	t.h = 0
	t.mu.Unlock()
	if h == 0 || !owned {
		return nil
	}
	a := newArgs[cTopologyArgs]()
	a.topology = h
	return t.p.call(fnTopologyDescriptionDestroy, unsafe.Pointer(a))
}

func (t *Topology) str(id fnID) (string, error) {
	h, err := t.handle(fnNames[id])
	if err != nil {
		return "", err
	}
	a := newArgs[cTopologyStringArgs]()
	a.topology = h
	if err := t.p.call(id, unsafe.Pointer(a)); err != nil {
		return "", err
	}
	return goString(a.str, a.strSize), nil
}

// PlatformName is e.g. "tpu".
func (t *Topology) PlatformName() (string, error) {
	return t.str(fnTopologyDescriptionPlatformName)
}

// PlatformVersion is the runtime's version string.
func (t *Topology) PlatformVersion() (string, error) {
	return t.str(fnTopologyDescriptionPlatformVersion)
}

// DeviceDescriptions describes every device of the topology.
func (t *Topology) DeviceDescriptions() ([]DeviceDescription, error) {
	h, err := t.handle("PJRT_TopologyDescription_GetDeviceDescriptions")
	if err != nil {
		return nil, err
	}
	a := newArgs[cTopologyGetDeviceDescriptionsArgs]()
	a.topology = h
	if err := t.p.call(fnTopologyDescriptionGetDeviceDescriptions, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	hs := handles(a.descriptions, a.numDescriptions)
	out := make([]DeviceDescription, len(hs))
	for i, dh := range hs {
		d, err := t.p.describe(dh)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// Attributes returns the topology's named values.
func (t *Topology) Attributes() ([]NamedValue, error) {
	h, err := t.handle("PJRT_TopologyDescription_Attributes")
	if err != nil {
		return nil, err
	}
	a := newArgs[cTopologyAttributesArgs]()
	a.topology = h
	if err := t.p.call(fnTopologyDescriptionAttributes, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	return readNamedValues(a.attributes, a.numAttributes), nil
}

// Serialize returns the plugin's serialization of the topology, meant for
// cache keys.
func (t *Topology) Serialize() ([]byte, error) {
	h, err := t.handle("PJRT_TopologyDescription_Serialize")
	if err != nil {
		return nil, err
	}
	a := newArgs[cSerializedArgs]()
	a.object = h
	if err := t.p.call(fnTopologyDescriptionSerialize, unsafe.Pointer(a)); err != nil {
		return nil, err
	}
	out := goBytes(a.bytes, a.bytesSize)
	callFreeFn(a.deleter, a.owner)
	return out, nil
}

// Compile compiles prog for the topology without loading it anywhere
// (PJRT_Compile): the ahead-of-time path. client is optional (nil) and only
// lends the compiler performance hints. The caller destroys the result,
// typically after serializing it.
func (t *Topology) Compile(ctx context.Context, prog Program, opts CompileOptions, client *Client) (*Executable, error) {
	const op = "PJRT_Compile"
	serialized, err := opts.Marshal()
	if err != nil {
		return nil, err
	}
	th, err := t.handle(op)
	if err != nil {
		return nil, err
	}
	var ch uintptr
	if client != nil {
		if client.p != t.p {
			return nil, argError(op, "client belongs to another plugin")
		}
		if ch, err = client.handle(op); err != nil {
			return nil, err
		}
	}
	if _, err := t.p.fn(fnCompile); err != nil {
		return nil, err
	}
	return blocking(ctx, op, func() (*Executable, error) {
		var pin runtime.Pinner
		defer pin.Unpin()
		cp, err := pinProgram(&pin, op, prog)
		if err != nil {
			return nil, err
		}
		a := newArgs[cCompileArgs]()
		a.topology = th
		a.program = cp
		a.compileOptions, a.compileOptionsSize = pinBytes(&pin, serialized), uintptr(len(serialized))
		a.client = ch
		if err := t.p.call(fnCompile, unsafe.Pointer(a)); err != nil {
			return nil, err
		}
		return &Executable{p: t.p, h: a.executable}, nil
	}, func(x *Executable) { _ = x.Destroy() })
}
