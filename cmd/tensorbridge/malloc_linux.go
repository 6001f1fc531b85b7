package main

import (
	"os"
	"syscall"
)

// reexecWithMallocTunables re-executes this program with mallocTunables
// when wantMallocReexec says so (malloc.go). It returns only when it does
// not re-execute or the exec fails; the program then runs with the C
// library's defaults.
func reexecWithMallocTunables() {
	if !wantMallocReexec(os.Getenv, os.Args) {
		return
	}
	env := append(os.Environ(), "GLIBC_TUNABLES="+mallocTunables, envMallocSet+"=1")
	_ = syscall.Exec("/proc/self/exe", os.Args, env)
}
