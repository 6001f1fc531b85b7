package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/errs"
)

func TestResolveNeverOverwritesUserValues(t *testing.T) {
	off := false
	user := Config{Precision: Float32, MixedPrecision: &off, MemoryFraction: 0.5, CacheDir: "/tmp/x",
		CacheSize: 1 << 20, CompileTimeout: time.Second, Buckets: Buckets{Sizes: map[string][]int{"batch": {1, 8}}}}
	for _, target := range []Target{{Platform: device.TPU}, {Platform: device.CUDA, BF16: true}, {Platform: device.CPU}} {
		e, err := user.Resolve(target)
		if err != nil {
			t.Fatal(err)
		}
		if e.Precision != Float32 || e.MixedPrecision || e.MemoryFraction != 0.5 || e.CacheDir != "/tmp/x" ||
			e.CacheSize != 1<<20 || e.CompileTimeout != time.Second || e.Buckets.Sizes["batch"][1] != 8 {
			t.Fatalf("%s: user values changed: %+v", target.Platform, e)
		}
		for _, s := range e.Settings {
			if s.Source != "user" {
				t.Errorf("%s: setting %s has source %q, want user", target.Platform, s.Name, s.Source)
			}
		}
	}
}

func TestAutoPrecision(t *testing.T) {
	tests := []struct {
		target Target
		want   Precision
		mixed  bool
	}{
		{Target{Platform: device.TPU, Kind: "TPU v5 lite"}, BFloat16, true},
		{Target{Platform: device.CUDA, Kind: "NVIDIA H100 80GB HBM3", BF16: true}, BFloat16, true},
		{Target{Platform: device.CUDA, Kind: "Tesla V100-SXM2-16GB", BF16: false}, Float32, false},
		{Target{Platform: device.ROCm, Kind: "AMD Instinct MI300X", BF16: true}, BFloat16, true},
		{Target{Platform: device.CPU}, Float32, false},
	}
	for _, tc := range tests {
		for _, p := range []Precision{"", Auto} {
			e, err := Config{Precision: p}.Resolve(tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if e.Precision != tc.want || e.MixedPrecision != tc.mixed {
				t.Errorf("%+v: got %s mixed=%v, want %s mixed=%v", tc.target, e.Precision, e.MixedPrecision, tc.want, tc.mixed)
			}
			if !strings.HasPrefix(e.Settings[0].Source, "auto:") {
				t.Errorf("precision source %q does not say auto", e.Settings[0].Source)
			}
		}
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		c    Config
		want string
	}{
		{Config{Precision: "fp8"}, `precision "fp8"`},
		{Config{MemoryFraction: 1.2}, "memory fraction 1.2"},
		{Config{MemoryFraction: -0.1}, "memory fraction -0.1"},
		{Config{CacheSize: -1}, "cache size -1"},
		{Config{CompileTimeout: -time.Second}, "compile timeout -1s"},
		{Config{Buckets: Buckets{Sizes: map[string][]int{"batch": {8, 4}}}}, `buckets for "batch"`},
		{Config{Buckets: Buckets{Sizes: map[string][]int{"batch": {0}}}}, `buckets for "batch"`},
	}
	for _, tc := range tests {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || errs.KindOf(err) != errs.InvalidArgument {
			t.Errorf("Validate(%+v) = %v, want InvalidArgument mentioning %q", tc.c, err, tc.want)
		}
		if _, err := tc.c.Resolve(Target{Platform: device.CPU}); err == nil {
			t.Errorf("Resolve accepted %+v", tc.c)
		}
	}
	// Several problems are reported together.
	err := Config{Precision: "x", MemoryFraction: 2}.Validate()
	if err == nil || !strings.Contains(err.Error(), "precision") || !strings.Contains(err.Error(), "memory fraction") {
		t.Errorf("want both problems, got %v", err)
	}
}

func TestBucket(t *testing.T) {
	b := Buckets{Sizes: map[string][]int{"sequence": {128, 512}}, Max: 64}
	tests := []struct {
		name string
		n    int
		want int
		err  bool
	}{
		{"batch", 1, 1, false},
		{"batch", 3, 4, false},
		{"batch", 8, 8, false},
		{"batch", 33, 64, false},
		{"batch", 65, 0, true},
		{"batch", 0, 0, false}, // an empty dimension stays empty
		{"batch", -1, 0, true},
		{"sequence", 1, 128, false},
		{"sequence", 129, 512, false},
		{"sequence", 513, 0, true},
	}
	for _, tc := range tests {
		got, err := b.Bucket(tc.name, tc.n)
		if tc.err {
			var ie *errs.InputError
			if !errors.As(err, &ie) {
				t.Errorf("Bucket(%s, %d) = %d, %v; want *InputError", tc.name, tc.n, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Bucket(%s, %d) = %d, %v; want %d", tc.name, tc.n, got, err, tc.want)
		}
	}
}

func TestParseBuckets(t *testing.T) {
	b, err := ParseBuckets("batch=1,8,32; sequence=128,512")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "batch=1,8,32; sequence=128,512; others: powers of two up to 65536" {
		t.Fatalf("String() = %q", got)
	}
	for _, bad := range []string{"batch", "batch=1,x", "=1", "batch=8,4"} {
		if _, err := ParseBuckets(bad); err == nil {
			t.Errorf("ParseBuckets(%q) accepted", bad)
		}
	}
}

// TENSORBRIDGE_CACHE_DIR=off turns the disk cache off, as --cache-dir off
// does, instead of naming a directory called "off" (which it did).
func TestCacheDirOffFromEnvironment(t *testing.T) {
	t.Setenv("TENSORBRIDGE_CACHE_DIR", "off")
	e, err := Config{}.Resolve(Target{Platform: device.CPU})
	if err != nil {
		t.Fatal(err)
	}
	if e.CacheDir != "" {
		t.Fatalf("cache dir %q, want none (off)", e.CacheDir)
	}
}
