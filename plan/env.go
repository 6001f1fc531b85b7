package plan

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// The plugins plan loads read some settings only from the process
// environment, when they load: libtpu reads TPU_SKIP_MDS_QUERY (without it,
// off a TPU VM, it spends minutes reaching for a metadata server that is
// not there; docs/pjrt-findings.md), ALLOW_MULTIPLE_LIBTPU_LOAD (planning
// opens no TPU, so it may run beside a process that owns them and beside
// other plans, instead of failing on /tmp/libtpu_lockfile) and
// TPU_WORKER_HOSTNAMES (see Env); the CUDA plugin
// reads XLA_FLAGS, where --xla_gpu_cuda_data_dir tells it where ptxas is.
//
// Package plan never changes the process environment (another goroutine, or
// a plugin already running, may be reading it). Env says what a plan of a
// slice needs; the program sets it before any plugin loads (the tensorbridge
// CLI does, at the start of `plan`), and Run refuses with an *EnvError
// naming each missing variable rather than load a plugin without it.

// EnvVar is a variable a plugin reads when it loads, with the value plan
// needs and why.
type EnvVar struct {
	Name, Value, Why string
}

// ErrEnv is matched by *EnvError.
var ErrEnv = errors.New("plan: the plugin's environment is not set")

// EnvError lists what Env asked for and the environment lacks.
type EnvError struct {
	Missing []EnvVar
}

func (e *EnvError) Error() string {
	parts := make([]string, len(e.Missing))
	for i, v := range e.Missing {
		parts[i] = fmt.Sprintf("%s=%q (%s)", v.Name, v.Value, v.Why)
	}
	return "plan: set before the plugin loads (the tensorbridge CLI does; plan.Env lists them): " + strings.Join(parts, "; ")
}

// Is matches ErrEnv.
func (e *EnvError) Is(target error) bool { return target == ErrEnv }

// Env lists the variables a plan of slice needs that lookup (nil:
// os.LookupEnv) does not already provide: a variable the caller set, to any
// value, is left as it is. XLA_FLAGS, when listed, is the whole new value
// (the caller's flags and the one added).
func Env(slice string, lookup func(string) (string, bool)) []EnvVar {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var out []EnvVar
	if _, ok := gpuSlice(slice); ok {
		flags, _ := lookup("XLA_FLAGS")
		if dir := cudaDir(); dir != "" && !strings.Contains(flags, "xla_gpu_cuda_data_dir") {
			out = append(out, EnvVar{"XLA_FLAGS", strings.TrimSpace(flags + " --xla_gpu_cuda_data_dir=" + dir),
				"the CUDA plugin finds ptxas under --xla_gpu_cuda_data_dir"})
		}
		return out
	}
	if _, ok := lookup("TPU_SKIP_MDS_QUERY"); !ok {
		out = append(out, EnvVar{"TPU_SKIP_MDS_QUERY", "1", "libtpu off a TPU VM otherwise waits minutes for a metadata server"})
	}
	if _, ok := lookup("ALLOW_MULTIPLE_LIBTPU_LOAD"); !ok {
		out = append(out, EnvVar{"ALLOW_MULTIPLE_LIBTPU_LOAD", "1", "planning opens no TPU and may run beside a process that does"})
	}
	// Without a worker list (no metadata server to ask) libtpu takes its own
	// warning text for one and logs "E0000 ... INVALID_ARGUMENT: unexpected
	// worker hostname" on every plan. This host is the one worker; the plans
	// of multi-host slices are the same with it (v5e-16: identical reports).
	if _, ok := lookup("TPU_WORKER_HOSTNAMES"); !ok {
		out = append(out, EnvVar{"TPU_WORKER_HOSTNAMES", "localhost", "libtpu otherwise logs an INVALID_ARGUMENT error for the missing worker list"})
	}
	return out
}

// checkEnv is Run's refusal to load a plugin without its environment.
func checkEnv(slice string) error {
	if missing := Env(slice, nil); len(missing) > 0 {
		return &EnvError{Missing: missing}
	}
	return nil
}
