package pjrt

import (
	"github.com/gomlx/gomlx/backends"

	"github.com/tensorbridge/tensorbridge/internal/capi"
)

// Accessors only the tests use to look inside an Executable. Callers of
// the package read a program through Executable.Program (its StableHLO
// text is Program().Text).

// StableHLO returns the program's StableHLO text, the key a compile cache
// uses (large constants appear in it as trailing parameters; see
// lower.Program.CompileText for the text that is compiled).
func (x *Executable) StableHLO() []byte { return x.prog.Text }

// CompileOptions returns the options the program was compiled with.
func (x *Executable) CompileOptions() capi.CompileOptions { return x.opts }

// PJRT returns the loaded executable, or nil once finalized.
func (x *Executable) PJRT() *capi.LoadedExecutable {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.le
}

// StableHLO returns the StableHLO text of an executable compiled by a
// pjrt engine, and false for executables of other backends.
func StableHLO(exe backends.Executable) ([]byte, bool) {
	x, ok := exe.(*Executable)
	if !ok || x == nil {
		return nil, false
	}
	return x.prog.Text, true
}
