//go:build !unix

package pjrt

import "os/exec"

// isolateChild leaves the child as exec starts it: cancellation kills the
// child process only.
func isolateChild(cmd *exec.Cmd) {}
