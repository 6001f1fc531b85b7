package pjrt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/pjrt/lower"
)

// Sharing compiled programs between replicas.
//
// A single-device program is compiled as a portable executable
// (CompileOptions.Portable, compile_portable_executable): the plugin
// compiles it for no particular device and Execute names the device it
// runs on (PJRT_LoadedExecutable_Execute_Args.execute_device), which is
// how Executable.ExecuteContext runs every portable program. One loaded
// executable therefore serves every addressable device of the client, and
// the same model loaded once per device (serve's replicas) needs it
// compiled once, not once per device. The engine keeps one loaded
// executable per distinct program (its compile text and options), counted
// by the Executables holding it, and destroys it when the last one is
// finalized. Programs fixed to devices (a device assignment, SPMD or
// Shardy) are not shared: their executables are bound to those devices.
// See https://github.com/openxla/xla/blob/main/xla/pjrt/c/pjrt_c_api.h
// (PJRT_LoadedExecutable_Execute_Args: "execute_device ... only supported
// for portable executables").

// sharedExec is one loaded executable shared by refs Executables.
type sharedExec struct {
	le    *capi.LoadedExecutable
	refs  int
	ready chan struct{} // closed once le (or err) is set
	err   error
}

// shareKey identifies prog's executable among the engine's, or "" when
// prog is not portable (its executable cannot be shared).
func shareKey(prog *lower.Program, opts capi.CompileOptions, text []byte) string {
	if !prog.Portable() || !opts.Portable {
		return ""
	}
	raw, err := opts.Marshal()
	if err != nil {
		return ""
	}
	h := sha256.New()
	h.Write(raw)
	h.Write([]byte{0})
	h.Write(text)
	return hex.EncodeToString(h.Sum(nil))
}

// acquire returns the loaded executable for key, made by build when no
// Executable of the engine holds it yet; callers asking for the same key
// meanwhile wait for that build. Each successful acquire is paired with a
// release.
func (e *Engine) acquire(ctx context.Context, key string, build func() (*capi.LoadedExecutable, error)) (*capi.LoadedExecutable, error) {
	e.shareMu.Lock()
	if e.shared == nil {
		e.shared = map[string]*sharedExec{}
	}
	if s := e.shared[key]; s != nil {
		s.refs++
		e.shareMu.Unlock()
		select {
		case <-s.ready:
		case <-ctx.Done():
			e.release(key)
			return nil, ctx.Err()
		}
		if s.err != nil {
			e.release(key)
			return nil, s.err
		}
		return s.le, nil
	}
	s := &sharedExec{refs: 1, ready: make(chan struct{})}
	e.shared[key] = s
	e.shareMu.Unlock()
	le, err := build()
	s.le, s.err = le, err
	close(s.ready)
	if err != nil {
		e.release(key)
		return nil, err
	}
	return le, nil
}

// release drops one hold on key's executable, destroying it with the last.
func (e *Engine) release(key string) {
	e.shareMu.Lock()
	s := e.shared[key]
	if s == nil {
		e.shareMu.Unlock()
		return
	}
	s.refs--
	if s.refs > 0 {
		e.shareMu.Unlock()
		return
	}
	delete(e.shared, key)
	e.shareMu.Unlock()
	if s.le != nil && !e.IsFinalized() {
		_ = s.le.Destroy()
	}
}

// Shared reports how many distinct loaded executables the engine shares
// and how many Executables hold them.
func (e *Engine) Shared() (executables, holders int) {
	e.shareMu.Lock()
	defer e.shareMu.Unlock()
	for _, s := range e.shared {
		executables++
		holders += s.refs
	}
	return executables, holders
}

// sharedExecutable returns a new Executable of prog sharing the loaded
// executable another Executable of the engine holds, or nil when none
// does (or prog is not portable).
func (e *Engine) sharedExecutable(prog *lower.Program) *Executable {
	opts, err := e.CompileOptions(prog)
	if err != nil {
		return nil
	}
	text, err := prog.CompileText()
	if err != nil {
		return nil
	}
	key := shareKey(prog, opts, text)
	if key == "" {
		return nil
	}
	e.shareMu.Lock()
	defer e.shareMu.Unlock()
	s := e.shared[key]
	if s == nil {
		return nil
	}
	select {
	case <-s.ready:
	default:
		return nil // still compiling: the hook's path compiles or waits
	}
	if s.err != nil {
		return nil
	}
	s.refs++
	return &Executable{eng: e, prog: prog, opts: opts, le: s.le, shareKey: key}
}

// adopt makes x's loaded executable (deserialized by LoadExecutable) the
// shared one for its program when none is yet; otherwise x keeps its own.
func (e *Engine) adopt(x *Executable) {
	text, err := x.prog.CompileText()
	if err != nil {
		return
	}
	key := shareKey(x.prog, x.opts, text)
	if key == "" {
		return
	}
	e.shareMu.Lock()
	defer e.shareMu.Unlock()
	if e.shared == nil {
		e.shared = map[string]*sharedExec{}
	}
	if e.shared[key] != nil {
		return
	}
	ready := make(chan struct{})
	close(ready)
	e.shared[key] = &sharedExec{le: x.le, refs: 1, ready: ready}
	x.shareKey = key
}
