//go:build unix && !linux

package pjrt

import "syscall"

// setDeathSignal does nothing where there is no parent-death signal.
func setDeathSignal(*syscall.SysProcAttr) {}
