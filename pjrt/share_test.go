package pjrt

import (
	"testing"

	"github.com/gomlx/gomlx/backends"
)

// The same single-device program compiled twice (as two replicas of a
// model do) shares one loaded executable, which runs on either device with
// the device named at Execute; a different program gets its own; the
// executable is destroyed with its last holder. Values are exact float32
// sums. (Fault injected: with shareKey returning "" the Shared counts stay
// where they were and the test fails.)
func TestPortableExecutablesShared(t *testing.T) {
	eng := cpuEngine(t)
	if len(eng.devices) < 2 {
		t.Fatalf("the engine opened with devices=2 has %d devices", len(eng.devices))
	}
	baseExe, baseHold := eng.Shared()
	x := vec(f32s(1.5, -2, 3))
	y := vec(f32s(0.25, 4, -8))
	a := compileOn(t, eng, "shared_add", bin((*Builder).Add), x, y)
	b := compileOn(t, eng, "shared_add", bin((*Builder).Add), x, y)
	c := compileOn(t, eng, "shared_add", bin((*Builder).Add), vec(f32s(1, 2)), vec(f32s(3, 4)))
	if a.PJRT() != b.PJRT() || a.PJRT() == c.PJRT() {
		t.Fatalf("loaded executables: a %p, b %p, c %p; want a == b != c", a.PJRT(), b.PJRT(), c.PJRT())
	}
	if n, h := eng.Shared(); n != baseExe+2 || h != baseHold+3 {
		t.Fatalf("shared %d executables held %d times, want %d and %d", n, h, baseExe+2, baseHold+3)
	}
	for dev, exe := range []*Executable{a, b} {
		bufs := upload(t, eng, dev, x, y)
		res, err := exe.Execute(bufs, nil, backends.DeviceNum(dev))
		if err != nil {
			t.Fatalf("device %d: %v", dev, err)
		}
		for _, buf := range bufs {
			_ = eng.BufferFinalize(buf)
		}
		checkOut(t, download(t, eng, res)[0], vec(f32s(1.75, 2, -5)), 0)
	}
	a.Finalize()
	// b still runs after a let go of the executable.
	bufs := upload(t, eng, 1, x, y)
	res, err := b.Execute(bufs, nil, backends.DeviceNum(1))
	if err != nil {
		t.Fatal(err)
	}
	checkOut(t, download(t, eng, res)[0], vec(f32s(1.75, 2, -5)), 0)
	for _, buf := range bufs {
		_ = eng.BufferFinalize(buf)
	}
	b.Finalize()
	c.Finalize()
	if n, h := eng.Shared(); n != baseExe || h != baseHold {
		t.Fatalf("after finalizing: %d executables held %d times, want %d and %d", n, h, baseExe, baseHold)
	}
}
