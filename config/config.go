// Package config holds the settings that prepare a model for a device:
// precision, mixed precision, memory fraction, compile cache, compile
// timeout and shape buckets.
//
// The rule this package exists to keep: a value the user set is never
// overwritten. Config records only what the user gave (zero means "not
// set"); Resolve fills each unset field from the target device and says,
// field by field, where every effective value came from. Out-of-range values
// are errors, not clamps. (The Python system this project re-imagines
// silently replaced user values with its own defaults.)
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge/cache"
	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/errs"
)

// Precision is the floating-point format a model computes in.
type Precision string

// Precisions. Auto picks per device (see Resolve).
const (
	Auto     Precision = "auto"
	Float32  Precision = "float32"
	BFloat16 Precision = "bfloat16"
	Float16  Precision = "float16"
)

// Defaults applied by Resolve to unset fields.
const (
	DefaultMemoryFraction = 0.9
	DefaultCacheSize      = 2 << 30 // bytes
	DefaultCompileTimeout = 10 * time.Minute
	DefaultMaxBucket      = 1 << 16
)

// Config is what the user set. The zero value of a field means "not set".
type Config struct {
	// Precision of compute; "" or Auto chooses per device.
	Precision Precision `json:"precision,omitempty"`
	// MixedPrecision keeps parameters and accumulations in float32 while
	// computing in Precision; nil means not set (default: true when the
	// effective precision is below float32).
	MixedPrecision *bool `json:"mixed_precision,omitempty"`
	// MemoryFraction is the share of device memory the budget allows, in (0, 1].
	MemoryFraction float64 `json:"memory_fraction,omitempty"`
	// CacheDir is the on-disk compile cache; "off" disables it.
	CacheDir string `json:"cache_dir,omitempty"`
	// CacheSize caps the on-disk cache in bytes.
	CacheSize int64 `json:"cache_size,omitempty"`
	// CompileTimeout bounds one compilation.
	CompileTimeout time.Duration `json:"compile_timeout,omitempty"`
	// Buckets are the sizes symbolic dimensions are padded up to.
	Buckets Buckets `json:"buckets,omitempty"`
}

// Buckets maps a symbolic dimension name ("batch", "sequence") to its
// allowed sizes, ascending. A dimension without an entry uses powers of two
// up to Max (DefaultMaxBucket when 0).
type Buckets struct {
	Sizes map[string][]int `json:"sizes,omitempty"`
	Max   int              `json:"max,omitempty"`
}

// Bucket returns the smallest allowed size for dimension name that holds n.
// An empty dimension (n = 0) stays empty: padding it would invent rows that
// reductions and scans over it would see.
func (b Buckets) Bucket(name string, n int) (int, error) {
	if n < 0 {
		return 0, &errs.InputError{Name: name, Problem: "dimension", Expected: "a size >= 0", Got: strconv.Itoa(n)}
	}
	if n == 0 {
		return 0, nil
	}
	if sizes, ok := b.Sizes[name]; ok {
		for _, s := range sizes {
			if s >= n {
				return s, nil
			}
		}
		return 0, &errs.InputError{Name: name, Problem: "dimension",
			Expected: fmt.Sprintf("at most %d (the largest configured bucket)", sizes[len(sizes)-1]), Got: strconv.Itoa(n)}
	}
	limit := b.Max
	if limit == 0 {
		limit = DefaultMaxBucket
	}
	p := 1
	for p < n {
		p <<= 1
	}
	if p > limit {
		return 0, &errs.InputError{Name: name, Problem: "dimension",
			Expected: fmt.Sprintf("at most %d (the bucket limit)", limit), Got: strconv.Itoa(n)}
	}
	return p, nil
}

// Validate reports every out-of-range value at once.
func (c Config) Validate() error {
	var problems []string
	switch c.Precision {
	case "", Auto, Float32, BFloat16, Float16:
	default:
		problems = append(problems, fmt.Sprintf("precision %q: expected one of auto, float32, bfloat16, float16", c.Precision))
	}
	if c.MemoryFraction != 0 && !(c.MemoryFraction > 0 && c.MemoryFraction <= 1) {
		problems = append(problems, fmt.Sprintf("memory fraction %g: expected a value in (0, 1]", c.MemoryFraction))
	}
	if c.CacheSize < 0 {
		problems = append(problems, fmt.Sprintf("cache size %d: expected a positive number of bytes", c.CacheSize))
	}
	if c.CompileTimeout < 0 {
		problems = append(problems, fmt.Sprintf("compile timeout %s: expected a positive duration", c.CompileTimeout))
	}
	if c.Buckets.Max < 0 {
		problems = append(problems, fmt.Sprintf("bucket limit %d: expected a positive size", c.Buckets.Max))
	}
	names := make([]string, 0, len(c.Buckets.Sizes))
	for n := range c.Buckets.Sizes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sizes := c.Buckets.Sizes[n]
		if len(sizes) == 0 {
			problems = append(problems, fmt.Sprintf("buckets for %q: expected at least one size", n))
		}
		for i, s := range sizes {
			if s <= 0 || (i > 0 && s <= sizes[i-1]) {
				problems = append(problems, fmt.Sprintf("buckets for %q: expected positive ascending sizes, got %v", n, sizes))
				break
			}
		}
	}
	if len(problems) > 0 {
		return &errs.Error{Kind: errs.InvalidArgument, Op: "config", Err: errors.New(strings.Join(problems, "; "))}
	}
	return nil
}

// Target is what Resolve needs to know about the device.
type Target struct {
	Platform device.Platform
	// Kind is the device kind, for messages.
	Kind string
	// BF16 says the device computes bfloat16 natively (from the catalog:
	// TPUs, NVIDIA from A100, AMD MI200 onwards).
	BF16 bool
}

// Setting is one effective value and where it came from.
type Setting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"` // "user", or the rule that chose it
}

// Effective is a fully resolved configuration.
type Effective struct {
	Precision      Precision     `json:"precision"`
	MixedPrecision bool          `json:"mixed_precision"`
	MemoryFraction float64       `json:"memory_fraction"`
	CacheDir       string        `json:"cache_dir"` // "" when disabled
	CacheSize      int64         `json:"cache_size"`
	CompileTimeout time.Duration `json:"compile_timeout"`
	Buckets        Buckets       `json:"buckets"`
	Settings       []Setting     `json:"settings"`
}

// String prints one setting per line with its source.
func (e Effective) String() string {
	var b strings.Builder
	for _, s := range e.Settings {
		fmt.Fprintf(&b, "%-16s %-40s (%s)\n", s.Name, s.Value, s.Source)
	}
	return b.String()
}

// Overlay returns c with every field that o sets replacing c's: settings
// given one after another compose in order, and a later one never resets
// what it leaves unset.
func (c Config) Overlay(o Config) Config {
	if o.Precision != "" {
		c.Precision = o.Precision
	}
	if o.MixedPrecision != nil {
		c.MixedPrecision = o.MixedPrecision
	}
	if o.MemoryFraction != 0 {
		c.MemoryFraction = o.MemoryFraction
	}
	if o.CacheDir != "" {
		c.CacheDir = o.CacheDir
	}
	if o.CacheSize != 0 {
		c.CacheSize = o.CacheSize
	}
	if o.CompileTimeout != 0 {
		c.CompileTimeout = o.CompileTimeout
	}
	if o.Buckets.Sizes != nil {
		c.Buckets.Sizes = o.Buckets.Sizes
	}
	if o.Buckets.Max != 0 {
		c.Buckets.Max = o.Buckets.Max
	}
	return c
}

// noCacheDirOnce makes the missing user cache directory a warning said once
// per process, not on every Open.
var noCacheDirOnce sync.Once

// Resolve validates c and fills every unset field for target. Fields the
// user set are copied unchanged and labelled "user".
func (c Config) Resolve(t Target) (Effective, error) {
	if err := c.Validate(); err != nil {
		return Effective{}, err
	}
	var e Effective
	add := func(name, value, source string) { e.Settings = append(e.Settings, Setting{name, value, source}) }

	switch {
	case c.Precision != "" && c.Precision != Auto:
		e.Precision = c.Precision
		add("precision", string(e.Precision), "user")
	case t.Platform == device.TPU:
		e.Precision = BFloat16
		add("precision", "bfloat16", "auto: TPUs compute in bfloat16")
	case (t.Platform == device.CUDA || t.Platform == device.ROCm) && t.BF16:
		e.Precision = BFloat16
		add("precision", "bfloat16", fmt.Sprintf("auto: %s supports bfloat16 (catalog)", orDefault(t.Kind, "the GPU")))
	case t.Platform == device.CUDA || t.Platform == device.ROCm:
		e.Precision = Float32
		add("precision", "float32", fmt.Sprintf("auto: %s has no bfloat16 in the catalog", orDefault(t.Kind, "the GPU")))
	default:
		e.Precision = Float32
		add("precision", "float32", "auto: float32 on CPU")
	}

	if c.MixedPrecision != nil {
		e.MixedPrecision = *c.MixedPrecision
		add("mixed_precision", strconv.FormatBool(e.MixedPrecision), "user")
	} else {
		e.MixedPrecision = e.Precision != Float32
		add("mixed_precision", strconv.FormatBool(e.MixedPrecision), "default: on when computing below float32")
	}

	if c.MemoryFraction != 0 {
		e.MemoryFraction = c.MemoryFraction
		add("memory_fraction", strconv.FormatFloat(e.MemoryFraction, 'g', -1, 64), "user")
	} else {
		e.MemoryFraction = DefaultMemoryFraction
		add("memory_fraction", strconv.FormatFloat(e.MemoryFraction, 'g', -1, 64), "default")
	}

	switch c.CacheDir {
	case "off":
		add("cache_dir", "off", "user")
	case "":
		dir, err := DefaultCacheDir()
		if err != nil {
			// No $HOME nor $XDG_CACHE_HOME (a bare container, a service
			// account): run without a disk cache rather than refuse to run.
			why := "default: off, there is no user cache directory (" + err.Error() + "); set " + cache.EnvDir + " to keep compiles across restarts"
			add("cache_dir", "off", why)
			noCacheDirOnce.Do(func() { slog.Warn("tensorbridge: compile cache disabled", "reason", why) })
			break
		}
		if dir == "off" { // TENSORBRIDGE_CACHE_DIR=off, as --cache-dir off
			add("cache_dir", "off", "$"+cache.EnvDir)
			break
		}
		e.CacheDir = dir
		add("cache_dir", dir, "default: the user cache directory")
	default:
		e.CacheDir = c.CacheDir
		add("cache_dir", c.CacheDir, "user")
	}

	if c.CacheSize != 0 {
		e.CacheSize = c.CacheSize
		add("cache_size", errs.Bytes(uint64(e.CacheSize)), "user")
	} else {
		e.CacheSize = DefaultCacheSize
		add("cache_size", errs.Bytes(uint64(e.CacheSize)), "default")
	}

	if c.CompileTimeout != 0 {
		e.CompileTimeout = c.CompileTimeout
		add("compile_timeout", e.CompileTimeout.String(), "user")
	} else {
		e.CompileTimeout = DefaultCompileTimeout
		add("compile_timeout", e.CompileTimeout.String(), "default")
	}

	e.Buckets = c.Buckets
	if len(c.Buckets.Sizes) > 0 || c.Buckets.Max != 0 {
		add("buckets", c.Buckets.String(), "user")
	} else {
		add("buckets", c.Buckets.String(), "default")
	}
	return e, nil
}

// String renders buckets as "batch=1,8,32; others: powers of two up to 65536".
func (b Buckets) String() string {
	var parts []string
	names := make([]string, 0, len(b.Sizes))
	for n := range b.Sizes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var s []string
		for _, v := range b.Sizes[n] {
			s = append(s, strconv.Itoa(v))
		}
		parts = append(parts, n+"="+strings.Join(s, ","))
	}
	limit := b.Max
	if limit == 0 {
		limit = DefaultMaxBucket
	}
	parts = append(parts, fmt.Sprintf("others: powers of two up to %d", limit))
	return strings.Join(parts, "; ")
}

// ParseBuckets reads "batch=1,8,32;sequence=128,512" as bucket sizes.
func ParseBuckets(s string) (Buckets, error) {
	b := Buckets{Sizes: map[string][]int{}}
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, list, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return Buckets{}, &errs.InputError{Name: "buckets", Problem: "syntax", Expected: "NAME=SIZE,SIZE,...", Got: part}
		}
		for _, v := range strings.Split(list, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return Buckets{}, &errs.InputError{Name: "buckets", Problem: "size", Expected: "an integer", Got: v}
			}
			b.Sizes[strings.TrimSpace(name)] = append(b.Sizes[strings.TrimSpace(name)], n)
		}
	}
	return b, (Config{Buckets: b}).Validate()
}

// DefaultCacheDir is the compile cache directory used when none is set:
// $TENSORBRIDGE_CACHE_DIR, else the user cache directory's tensorbridge/compile.
func DefaultCacheDir() (string, error) {
	d, err := cache.DefaultDir(os.Getenv)
	if err != nil {
		return "", &errs.Error{Kind: errs.FailedPrecondition, Op: "config", Err: err}
	}
	return d, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
