package pjrt

import "syscall"

// setDeathSignal has the kernel kill the probe child when the thread that
// started it exits, so that a hung plugin cannot outlive a killed caller.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
