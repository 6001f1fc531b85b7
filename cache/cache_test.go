package cache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
)

// harness is a two-level cache over *value whose compile and deserialize
// calls are counted. A compiled value's payload is "exe:" + its name.
type harness struct {
	c        *tiered[*value]
	disk     *Disk
	compiles atomic.Int32
	loads    atomic.Int32
	mu       sync.Mutex
	reported []error
}

func newHarness(t *testing.T, dir string, mutate func(*tieredOptions[*value])) *harness {
	t.Helper()
	h := &harness{}
	if dir != "" {
		h.disk = openTestDisk(t, dir, DiskOptions{})
	}
	opts := tieredOptions[*value]{
		Disk:      h.disk,
		Serialize: func(v *value) ([]byte, error) { return []byte("exe:" + v.name), nil },
		Deserialize: func(_ context.Context, b []byte) (*value, int64, error) {
			h.loads.Add(1)
			name, ok := strings.CutPrefix(string(b), "exe:")
			if !ok {
				return nil, 0, errors.New("not an executable")
			}
			return &value{name: name}, int64(len(b)), nil
		},
		Report: func(err error) { h.mu.Lock(); h.reported = append(h.reported, err); h.mu.Unlock() },
	}
	if mutate != nil {
		mutate(&opts)
	}
	c, err := newTiered(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	return h
}

// get fetches key, compiling a value named after it.
func (h *harness) get(t *testing.T, k Key) *value {
	t.Helper()
	v, done, err := h.c.GetOrCompile(context.Background(), k, func(context.Context) (*value, int64, error) {
		h.compiles.Add(1)
		return &value{name: k.Name}, 10, nil
	})
	if err != nil {
		t.Fatalf("GetOrCompile(%s): %v", k.Name, err)
	}
	done()
	if v.name != k.Name {
		t.Fatalf("GetOrCompile(%s) returned %q", k.Name, v.name)
	}
	return v
}

// TestCacheRestart: a second process (a new tiered cache and Disk on the same
// directory) loads from disk instead of compiling.
func TestCacheRestart(t *testing.T) {
	dir := t.TempDir()
	first := newHarness(t, dir, nil)
	first.get(t, testKey("a"))
	first.get(t, testKey("a"))
	if n := first.compiles.Load(); n != 1 {
		t.Fatalf("first process compiled %d times, want 1", n)
	}
	if s := first.c.Stats(); s.Misses != 1 || s.MemoryHits != 1 || s.DiskHits != 0 {
		t.Errorf("first stats = %+v", s)
	}
	if err := first.c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	second := newHarness(t, dir, nil)
	second.get(t, testKey("a"))
	second.get(t, testKey("a"))
	if n := second.compiles.Load(); n != 0 {
		t.Errorf("restarted process compiled %d times, want 0", n)
	}
	if n := second.loads.Load(); n != 1 {
		t.Errorf("restarted process deserialized %d times, want 1", n)
	}
	s := second.c.Stats()
	if s.DiskHits != 1 || s.MemoryHits != 1 || s.Misses != 0 || s.CompileTime != 0 {
		t.Errorf("second stats = %+v, want 1 disk hit, 1 memory hit, no compile", s)
	}
	// The saved time is what the first process's compile took, once per hit.
	stored, _ := second.disk.List()
	if want := 2 * stored[0].CompileTime; s.CompileTimeSaved != want {
		t.Errorf("saved %s, want 2 x recorded %s", s.CompileTimeSaved, stored[0].CompileTime)
	}
	if tot, _ := ReadStats(dir); tot.Puts != 1 {
		t.Errorf("flushed totals = %+v, want 1 put", tot)
	}
}

// TestCacheKeyIsolation is the regression test for a key built from the
// printed model: same program, different weights (or plugin version) must
// compile separately, in memory and on disk.
func TestCacheKeyIsolation(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir, nil)
	base := testKey("m")
	w1, w2 := NewWeightsHasher(), NewWeightsHasher()
	w1.Add("w", "f32", []int{1}, []byte{0, 0, 0x80, 0x3f})
	w2.Add("w", "f32", []int{1}, []byte{0, 0, 0, 0x40})
	variants := []func(k *Key){
		func(k *Key) { k.WeightsDigest = w1.Sum() },
		func(k *Key) { k.WeightsDigest = w2.Sum() },
		func(k *Key) { k.WeightsDigest = w2.Sum(); k.PluginVersion = "12.4" },
		func(k *Key) { k.WeightsDigest = w2.Sum(); k.InputSpecs = []string{"f32[4,3]"} },
	}
	for _, v := range variants {
		k := base
		v(&k)
		h.get(t, k)
	}
	if n := h.compiles.Load(); n != int32(len(variants)) {
		t.Errorf("compiled %d times for %d distinct keys", n, len(variants))
	}
	if ls, _ := h.disk.List(); len(ls) != len(variants) {
		t.Errorf("%d disk entries, want %d", len(ls), len(variants))
	}
}

// TestCacheCorruptRecompiled: a damaged disk entry is reported, counted,
// recompiled, and replaced by a valid one.
func TestCacheCorruptRecompiled(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			k := testKey("k")
			newHarness(t, dir, nil).get(t, k)
			p := filepath.Join(dir, k.Digest()+".tbc")
			raw, _ := os.ReadFile(p)
			os.WriteFile(p, c.damage(raw), 0o600)

			h := newHarness(t, dir, nil)
			h.get(t, k)
			if h.compiles.Load() != 1 || h.loads.Load() != 0 {
				t.Errorf("compiles %d, loads %d; want the corrupt entry recompiled, never loaded", h.compiles.Load(), h.loads.Load())
			}
			if s := h.c.Stats(); s.Corrupt != 1 || s.DiskHits != 0 {
				t.Errorf("stats = %+v, want 1 corrupt", s)
			}
			if len(h.reported) != 1 || !errors.Is(h.reported[0], ErrCorrupt) {
				t.Errorf("reported %v, want one corrupt-entry error", h.reported)
			}
			// The file was replaced: a third process loads it.
			h3 := newHarness(t, dir, nil)
			h3.get(t, k)
			if h3.compiles.Load() != 0 || h3.loads.Load() != 1 {
				t.Errorf("replacement entry not loaded: compiles %d loads %d", h3.compiles.Load(), h3.loads.Load())
			}
		})
	}
}

// TestCacheDiskProblems: refused loads, failed serialization and slow-only
// persistence.
func TestCacheDiskProblems(t *testing.T) {
	t.Run("deserialize refuses", func(t *testing.T) {
		dir := t.TempDir()
		k := testKey("k")
		d := openTestDisk(t, dir, DiskOptions{})
		d.Put(context.Background(), k, []byte("not an exe"), time.Second) // checksums fine, content wrong
		h := newHarness(t, dir, nil)
		h.get(t, k)
		if s := h.c.Stats(); s.LoadErrors != 1 || s.Misses != 1 || h.loads.Load() != 1 {
			t.Errorf("stats = %+v", s)
		}
		if data, _, ok, _ := d.Get(context.Background(), k); !ok || string(data) != "exe:k" {
			t.Errorf("refused entry not replaced: %q %v", data, ok)
		}
	})
	t.Run("serialize fails", func(t *testing.T) {
		dir := t.TempDir()
		h := newHarness(t, dir, func(o *tieredOptions[*value]) {
			o.Serialize = func(*value) ([]byte, error) { return nil, errors.New("no serializer for this plugin") }
		})
		h.get(t, testKey("k"))
		if s := h.c.Stats(); s.DiskErrors != 1 || len(h.reported) != 1 {
			t.Errorf("stats = %+v, reported %v", s, h.reported)
		}
		if ls, _ := h.disk.List(); len(ls) != 0 {
			t.Errorf("entry written despite the error")
		}
	})
	t.Run("fast compiles stay in memory", func(t *testing.T) {
		dir := t.TempDir()
		h := newHarness(t, dir, func(o *tieredOptions[*value]) { o.MinCompileTime = time.Hour })
		h.get(t, testKey("k"))
		if ls, _ := h.disk.List(); len(ls) != 0 {
			t.Errorf("a compile under MinCompileTime was written")
		}
	})
	t.Run("memory only", func(t *testing.T) {
		h := newHarness(t, "", nil)
		h.get(t, testKey("k"))
		h.get(t, testKey("k"))
		if s := h.c.Stats(); s.Misses != 1 || s.MemoryHits != 1 {
			t.Errorf("stats = %+v", s)
		}
	})
}

func TestCacheOptions(t *testing.T) {
	d := openTestDisk(t, t.TempDir(), DiskOptions{})
	bad := []tieredOptions[int]{
		{Disk: d},
		{Disk: d, Serialize: func(int) ([]byte, error) { return nil, nil }},
		{MinCompileTime: -1},
		{Memory: MemoryOptions[int]{MaxEntries: -1}},
	}
	for i, o := range bad {
		if _, err := newTiered(o); err == nil {
			t.Errorf("options %d accepted", i)
		}
	}
}

// TestCacheTimeoutNamesKey: the timeout error names the key's backend and
// program.
func TestCacheTimeoutNamesKey(t *testing.T) {
	h := newHarness(t, t.TempDir(), func(o *tieredOptions[*value]) { o.Memory.Timeout = time.Millisecond })
	release := make(chan struct{})
	defer close(release)
	_, _, err := h.c.GetOrCompile(context.Background(), testKey("slow"), func(context.Context) (*value, int64, error) {
		<-release
		return &value{name: "slow"}, 1, nil
	})
	var te *errs.CompileTimeoutError
	if !errors.As(err, &te) || te.Backend != "pjrt" || te.Program != "slow" {
		t.Fatalf("got %v, want a CompileTimeoutError for pjrt/slow", err)
	}
	if s := h.c.Stats(); s.Timeouts != 1 {
		t.Errorf("timeouts = %d", s.Timeouts)
	}
}

// TestCacheConcurrentTwoLevel: many callers, a cold disk: one compile, one
// write; then a fresh cache with many callers: one load.
func TestCacheConcurrentTwoLevel(t *testing.T) {
	dir := t.TempDir()
	for round, want := range []struct{ compiles, loads int32 }{{1, 0}, {0, 1}} {
		h := newHarness(t, dir, nil)
		var wg sync.WaitGroup
		for range 50 {
			wg.Add(1)
			go func() { defer wg.Done(); h.get(t, testKey("k")) }()
		}
		wg.Wait()
		if h.compiles.Load() != want.compiles || h.loads.Load() != want.loads {
			t.Errorf("round %d: compiles %d loads %d, want %d and %d", round, h.compiles.Load(), h.loads.Load(), want.compiles, want.loads)
		}
	}
}
