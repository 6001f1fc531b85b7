package main

import (
	"os"

	"github.com/tensorbridge/tensorbridge/plan"
)

// The process environment the plugins read when they load. Library code
// never sets it (another goroutine, or a plugin already running, may be
// reading it: setenv is not safe beside getenv in C); the CLI sets what it
// needs here, before any backend is opened or plugin loaded, and leaves
// every variable the user set as it is:
//
//   - TF_CPP_MIN_LOG_LEVEL=2 for every command (setPluginEnv, from main):
//     XLA's plugins log only warnings and errors, so that their
//     informational lines do not mix with the command's output. Set it to 0
//     to see them.
//   - For `plan`, what plan.Env lists for the slice (setPlanEnv):
//     TPU_SKIP_MDS_QUERY=1 and ALLOW_MULTIPLE_LIBTPU_LOAD=1 for libtpu, or
//     XLA_FLAGS with --xla_gpu_cuda_data_dir for the CUDA plugin.
//
// os.Setenv reaches the plugins' getenv in this cgo-free binary because
// purego's runtime support forwards it to the C library's setenv.

// setPluginEnv sets the variables every command wants; main calls it
// first.
func setPluginEnv() {
	if _, ok := os.LookupEnv("TF_CPP_MIN_LOG_LEVEL"); !ok {
		_ = os.Setenv("TF_CPP_MIN_LOG_LEVEL", "2")
	}
}

// setPlanEnv sets what a plan of slice needs before plan.Run loads its
// plugin (plan.Env leaves out what the user set).
func setPlanEnv(slice string) {
	for _, v := range plan.Env(slice, nil) {
		_ = os.Setenv(v.Name, v.Value)
	}
}
