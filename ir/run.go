package ir

// Running a compiled graph with explicit ownership of every device buffer.
//
// GoMLX's Graph.Run transfers a host input to the device and keeps the
// device copy inside the caller's tensor, and returns outputs that hold
// device buffers until someone calls FinalizeAll: in a server that is device
// memory growing on every call. RunOwned instead lends or creates one buffer
// per input, frees the ones it created when the execution ends, and returns
// outputs as host tensors with their device buffers already freed.

import (
	"errors"
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/notimplemented"
)

// ErrNotImplemented is the sentinel GoMLX wraps when a backend lacks an op;
// errors.Is classifies such failures without reading their text.
var ErrNotImplemented = notimplemented.NotImplementedError

// Buffer is a backend's array on one device.
type Buffer = backends.Buffer

// DeviceBuffer returns a buffer holding t's value on device dev of engine e,
// and whether the caller owns it. A tensor that already lives on that device
// of e lends its buffer (owned is false: the tensor keeps it). Otherwise t's
// host value (brought to the host first if t lives elsewhere) is copied into
// a new buffer that the caller owns and must free with FreeBuffer. t itself
// never gains a device copy.
func DeviceBuffer(e Engine, dev int, t *Tensor) (buf Buffer, owned bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			buf, owned, err = nil, false, fmt.Errorf("ir: placing a tensor on device %d: %v", dev, r)
		}
	}()
	if err := t.CheckValid(); err != nil {
		return nil, false, err
	}
	dn := backends.DeviceNum(dev)
	if !t.IsLocal() && t.IsOnDevice(dn) {
		if tb, err := t.Backend(); err == nil && tb == e {
			b, err := t.Buffer(e, dn)
			return b, false, err
		}
	}
	var placeErr error
	err = t.ConstFlatData(func(flat any) {
		buf, placeErr = e.BufferFromFlatData(dn, flat, t.Shape())
	})
	if err == nil {
		err = placeErr
	}
	if err != nil {
		return nil, false, err
	}
	return buf, true, nil
}

// FreeBuffer frees a buffer the caller owns.
func FreeBuffer(e Engine, b Buffer) error {
	if b == nil {
		return nil
	}
	return e.BufferFinalize(b)
}

// RunOwned executes the compiled graph g on device dev with inputs (not
// donated: they stay valid) and returns every output as a host tensor whose
// device buffer is already freed. It returns an error rather than panicking.
// If it fails, no output buffer is left behind.
func RunOwned(g *Graph, dev int, inputs []Buffer) (outs []*Tensor, err error) {
	return RunOwnedDonating(g, dev, inputs, nil)
}

// RunOwnedDonating is RunOwned where donate[i] gives inputs[i] to the run
// (see DonatedBuffer): it is consumed whether the run succeeds or not. A
// nil donate donates nothing.
func RunOwnedDonating(g *Graph, dev int, inputs []Buffer, donate []bool) (outs []*Tensor, err error) {
	var results []*Tensor
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
		if err != nil {
			for _, t := range results {
				if t != nil {
					_ = t.FinalizeAll()
				}
			}
			outs = nil
		}
	}()
	if donate == nil {
		donate = make([]bool, len(inputs))
	}
	results = g.RunWithBuffers(inputs, donate, backends.DeviceNum(dev))
	for i, t := range results {
		h, err := toHost(t)
		if err != nil {
			return nil, err
		}
		results[i] = h
	}
	return results, nil
}

// toHost returns t's value as a host tensor and frees t's device buffer.
func toHost(t *Tensor) (*Tensor, error) {
	if t.IsShared() {
		// A buffer the backend shares with the host: copy it out, then free it.
		c, err := t.LocalClone()
		if err != nil {
			return nil, err
		}
		return c, t.FinalizeAll()
	}
	t.MaterializeLocal()
	return t, t.InvalidateOnDevice()
}

// IsNotImplemented reports whether err says the backend lacks an op.
func IsNotImplemented(err error) bool { return errors.Is(err, ErrNotImplemented) }

// RunOnDevice executes the compiled graph g on device dev with inputs
// (those with donate[i] given to the run and consumed, see
// RunOwnedDonating; a nil donate donates nothing) and returns its outputs as device tensors the
// caller owns and frees (FinalizeAll). It returns an error rather than
// panicking; if it fails, no output buffer is left behind.
func RunOnDevice(g *Graph, dev int, inputs []Buffer, donate []bool) (outs []*Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", r)
			}
			for _, t := range outs {
				if t != nil {
					_ = t.FinalizeAll()
				}
			}
			outs = nil
		}
	}()
	if donate == nil {
		donate = make([]bool, len(inputs))
	}
	outs = g.RunWithBuffers(inputs, donate, backends.DeviceNum(dev))
	return outs, nil
}
