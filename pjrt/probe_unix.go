//go:build unix

package pjrt

import (
	"os/exec"
	"syscall"
)

// isolateChild puts the probe child in its own process group and makes
// cancellation kill the whole group, so that a helper process the plugin
// started cannot outlive a timed-out probe. Being in its own group also
// keeps the terminal's Ctrl-C from reaching it; the caller's context
// handles that, and on Linux the child is killed if this process dies
// first.
func isolateChild(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		return nil
	}
}
