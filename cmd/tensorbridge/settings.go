package main

import (
	"flag"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/cluster"
	"github.com/tensorbridge/tensorbridge/config"
)

// settingsFlags are the preparation settings every command that opens a
// backend takes. Zero values mean "not set": the backend fills them per
// device and never overrides what is given here.
type settingsFlags struct {
	precision      string
	mixed          string
	memoryFraction float64
	cacheDir       string
	cacheSize      int64
	compileTimeout time.Duration
	buckets        string
	printConfig    bool
	// cluster are the job credentials; clusterSec what settings() read.
	cluster    clusterAuthFlags
	clusterSec *cluster.Security
}

func addSettingsFlags(fs *flag.FlagSet, f *settingsFlags) {
	fs.StringVar(&f.precision, "precision", "", "compute precision: auto, float32, bfloat16, float16 (default auto: bfloat16 on TPU and bf16-capable GPUs, float32 on CPU)")
	fs.StringVar(&f.mixed, "mixed-precision", "", "true or false: keep parameters and accumulation in float32 (default: on below float32)")
	addResourceFlags(fs, f)
}

// addResourceFlags adds the settings other than precision (bench has
// precision flags of its own).
func addResourceFlags(fs *flag.FlagSet, f *settingsFlags) {
	fs.Float64Var(&f.memoryFraction, "memory-fraction", 0, "share of device memory to use, in (0, 1] (default 0.9)")
	fs.StringVar(&f.cacheDir, "cache-dir", "", `compile cache directory, or "off" (default $TENSORBRIDGE_CACHE_DIR, else the user cache dir)`)
	fs.Int64Var(&f.cacheSize, "cache-size", 0, "compile cache size cap in bytes (default 2 GiB)")
	fs.DurationVar(&f.compileTimeout, "compile-timeout", 0, "limit for one compilation (default 10m)")
	fs.StringVar(&f.buckets, "buckets", "", `bucket sizes per symbolic dimension, e.g. "batch=1,8,32;sequence=128,512" (default powers of two)`)
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective settings and where each came from")
	addClusterAuthFlags(fs, &f.cluster)
}

func (f *settingsFlags) settings() (tensorbridge.Settings, error) {
	s := tensorbridge.Settings{Precision: config.Precision(f.precision), MemoryFraction: f.memoryFraction,
		CacheDir: f.cacheDir, CacheSize: f.cacheSize, CompileTimeout: f.compileTimeout}
	switch f.mixed {
	case "":
	case "true", "on", "1":
		v := true
		s.MixedPrecision = &v
	case "false", "off", "0":
		v := false
		s.MixedPrecision = &v
	default:
		return s, usageErr("--mixed-precision %q: want true or false", f.mixed)
	}
	if f.buckets != "" {
		b, err := config.ParseBuckets(f.buckets)
		if err != nil {
			return s, usageErr("--buckets: %v", err)
		}
		s.Buckets = b
	}
	sec, err := f.cluster.security()
	if err != nil {
		return s, err
	}
	f.clusterSec = sec
	return s, s.Validate()
}
