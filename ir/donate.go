package ir

import (
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
)

// Donation: a run that gives an input's device buffer to the program, which
// writes the output replacing that input into the same memory (a KV cache,
// a training step's weights and optimizer state) instead of allotting a new
// buffer and copying the old value into it.

// Donator is implemented by backend builders whose compiled programs must
// say ahead of time which parameters they write outputs into (XLA's
// input/output aliasing, pjrt.Builder). Backends without it (GoMLX's
// simplego) reuse a donated buffer at run time on their own.
type Donator interface {
	// SetDonated maps parameter positions to the outputs that replace
	// them; the builder's Compile checks and applies it.
	SetDonated(donated map[int]int) error
}

// builderOffset is the offset of GoMLX v0.26.0's Graph.builder, the
// backend builder of a graph being built, and builderOK false when the
// field is not there as expected (a GoMLX upgrade moved it). GoMLX offers
// no exported way to reach the builder.
var builderOffset, builderOK = func() (uintptr, bool) {
	f, found := reflect.TypeFor[Graph]().FieldByName("builder")
	if !found || f.Type != reflect.TypeFor[backends.Builder]() {
		return 0, false
	}
	return f.Offset, true
}()

// builderReachable is builderOK, or false where a test simulates a GoMLX
// whose Graph lost the field (export_test.go).
var builderReachable = builderOK

// warn logs a warning; tests replace it to see what is logged.
var warn = func(msg string, args ...any) { slog.Default().Warn(msg, args...) }

// donationOff warns, once per process, that donation is switched off.
var donationOff sync.Once

// SetDonation tells g's backend builder, before g is compiled, which
// parameters are donated to which outputs (positions among the outputs
// given to Compile). It does nothing on backends that need no notice
// (no Donator): they reuse a donated buffer at run time.
//
// If the builder cannot be reached (GoMLX's Graph changed: see
// builderOffset), donation is switched off rather than every compile
// failing: SetDonation logs a warning once (slog) and returns nil, the
// program is compiled without input/output aliasing, and its runs stay
// correct: each writes its outputs into new buffers, and a donated input
// is still consumed (freed after the run), so callers see the same
// contract at the cost of a copy. g must be building (at least one
// parameter created).
func SetDonation(g *Graph, donated map[int]int) error {
	if len(donated) == 0 {
		return nil
	}
	if g == nil || !g.IsBuilding() {
		return fmt.Errorf("ir: donation must be set on a graph being built")
	}
	if !builderReachable {
		// A fresh builder of the same engine says whether its programs
		// need the notice at all.
		if _, needs := g.Backend().Builder(g.Name()).(Donator); needs {
			donationOff.Do(func() {
				warn("ir: donation switched off: GoMLX's Graph no longer has the builder field tensorbridge reaches (a GoMLX upgrade?); donated inputs are copied, not updated in place, which costs memory and time but not correctness",
					"backend", g.Backend().Name(), "program", g.Name())
			})
		}
		return nil
	}
	b := *(*backends.Builder)(unsafe.Add(unsafe.Pointer(g), builderOffset))
	if d, ok := b.(Donator); ok {
		return d.SetDonated(donated)
	}
	return nil
}

// DonatedBuffer takes t's value as a buffer on device dev of engine e that
// the caller gives to a run: a tensor already there gives up its buffer,
// any other has its value copied into a new one. Either way t is finalized
// (its remaining copies freed): it is consumed, and using it again is an
// error. The caller owns the buffer until it hands it to an execution.
func DonatedBuffer(e Engine, dev int, t *Tensor) (buf Buffer, err error) {
	defer func() {
		if r := recover(); r != nil {
			buf, err = nil, fmt.Errorf("ir: donating a tensor on device %d: %v", dev, r)
		}
	}()
	if err := t.CheckValid(); err != nil {
		return nil, err
	}
	dn := backends.DeviceNum(dev)
	if !t.IsLocal() && t.IsOnDevice(dn) {
		if tb, err := t.Backend(); err == nil && tb == e {
			b, err := t.DonateBuffer(e, dn)
			if err != nil {
				return nil, err
			}
			_ = t.FinalizeAll() // a host copy, if any; the buffer is no longer t's
			return b, nil
		}
	}
	b, _, err := DeviceBuffer(e, dev, t)
	if err != nil {
		return nil, err
	}
	_ = t.FinalizeAll()
	return b, nil
}
