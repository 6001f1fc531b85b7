package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// restartReport compares the time to first inference of two fresh
// processes: one with an empty compile cache, one with the cache the
// first left behind.
type restartReport struct {
	CacheDir string       `json:"cache_dir"`
	Cold     restartPoint `json:"cold"`
	Warm     restartPoint `json:"warm"`
	// Speedup is the cold process's time to first inference over the
	// warm one's.
	Speedup float64 `json:"speedup"`
}

// restartPoint is one child process: FirstInferenceS from its start (just
// before the parent starts it) to its first inference's result, WallS
// from its start to its exit (it exits right after the first inference:
// the rest is closing the backend and leaving), and its own breakdown.
type restartPoint struct {
	FirstInferenceS float64         `json:"first_inference_s"`
	WallS           float64         `json:"wall_s"`
	OpenS           float64         `json:"open_s"`
	LoadS           float64         `json:"load_s"`
	CompileS        float64         `json:"compile_s,omitempty"`
	FirstRunS       float64         `json:"first_run_s"`
	Cache           *tensorbridgeCS `json:"compile_cache,omitempty"`
}

// runRestart runs this command twice as a child process with
// --first-only, sharing a fresh compile cache directory: the first
// (cold) compiles and fills the cache, the second (warm) should load from
// it. Both use the first batch size.
func runRestart(ctx context.Context, c *benchConfig, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--restart: finding this executable: %w", err)
	}
	dir, err := os.MkdirTemp("", "tensorbridge-bench-cache-")
	if err != nil {
		return fmt.Errorf("--restart: %w", err)
	}
	defer os.RemoveAll(dir)
	childArgs := restartChildArgs(c)
	rep := &benchReport{Model: c.model, Precision: c.precision, Restart: &restartReport{CacheDir: dir}}
	rep.Host = hostInfo{CPU: cpuModel(), CPUs: availableCPUs(), GoVersion: runtime.Version(), LoadBefore: loadAvg(), Malloc: mallocSetting()}
	for _, pt := range []*restartPoint{&rep.Restart.Cold, &rep.Restart.Warm} {
		cmd := exec.CommandContext(ctx, self, childArgs...)
		cmd.Env = append(os.Environ(), cacheDirEnv+"="+dir)
		var out strings.Builder
		cmd.Stdout = &out
		cmd.Stderr = stderr
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("--restart: child %s %s: %w", self, strings.Join(childArgs, " "), err)
		}
		pt.WallS = time.Since(t0).Seconds()
		var child benchReport
		if err := json.Unmarshal([]byte(out.String()), &child); err != nil || len(child.Batches) == 0 {
			return fmt.Errorf("--restart: reading the child's report: %v\n%s", err, out.String())
		}
		pt.OpenS, pt.LoadS, pt.FirstRunS = child.OpenS, child.LoadS, child.Batches[0].FirstRunS
		pt.FirstInferenceS = pt.WallS
		if n := child.FirstResultUnixNano; n > t0.UnixNano() {
			pt.FirstInferenceS = float64(n-t0.UnixNano()) / 1e9
		}
		pt.CompileS = child.Batches[0].CompileS
		pt.Cache = child.Cache
		rep.Backend, rep.Device, rep.Threads = child.Backend, child.Device, child.Threads
	}
	if rep.Restart.Warm.FirstInferenceS > 0 {
		rep.Restart.Speedup = rep.Restart.Cold.FirstInferenceS / rep.Restart.Warm.FirstInferenceS
	}
	if cs := rep.Restart.Warm.Cache; cs == nil || cs.Hits == 0 {
		rep.Notes = append(rep.Notes, "the warm process reported no compile-cache hit: this backend or build has no disk cache, so both processes compiled")
	}
	rep.Host.LoadAfter = loadAvg()
	return printBench(stdout, c, rep)
}

// restartChildArgs returns the command line of --restart's child
// processes: the user's, without --restart, --json, --save-io and
// --cpuprofile, with --first-only --json and, when --batch was given, its
// first size (a later --batch wins over an earlier one).
func restartChildArgs(c *benchConfig) []string {
	args := []string{"bench"}
	in := c.args // flags first (reordered when parsed)
	for i := 0; i < len(in); i++ {
		a := in[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") {
			switch name {
			case "restart", "json":
				continue
			case "save-io", "cpuprofile":
				if !hasValue {
					i++ // skip the value too
				}
				continue
			}
		}
		args = append(args, a)
	}
	args = append(args, "--first-only", "--json")
	if c.batchSet {
		// The user's first size; without --batch the child, like this
		// process, lets the model decide (planBatches).
		args = append(args, "--batch", fmt.Sprint(c.batches[0]))
	}
	return args
}
