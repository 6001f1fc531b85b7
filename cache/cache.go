package cache

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// tieredOptions configure a tiered cache.
type tieredOptions[V any] struct {
	// Memory configures the in-memory level: limits, timeout, release.
	Memory MemoryOptions[V]

	// Disk is the persistent level; nil keeps the cache in memory only.
	// Several tiered caches (and processes) may share one Disk directory.
	Disk *Disk

	// Serialize turns a compiled value into bytes for Disk, and
	// Deserialize turns them back into a loaded value and its size. Both
	// are required with Disk: a backend that cannot serialize executables
	// should pass no Disk.
	Serialize   func(value V) ([]byte, error)
	Deserialize func(ctx context.Context, data []byte) (value V, size int64, err error)

	// MinCompileTime: compiles faster than this are not written to Disk,
	// since loading them would save little. 0 writes every compile.
	MinCompileTime time.Duration

	// Report receives the problems the cache recovers from by itself: a
	// corrupt disk entry (then recompiled), an entry Deserialize refused
	// (removed, then recompiled), a disk read or write that failed. Nil
	// means they are only counted in Stats.
	Report func(error)
}

// tieredStats counts what a tiered cache did since it was made.
type tieredStats struct {
	MemoryHits    int64 // calls served from memory
	DiskHits      int64 // loads served from disk (each then kept in memory)
	Misses        int64 // compiles run
	Shared        int64 // calls that joined a load or compile already running for their key
	CompileErrors int64 // compiles (or loads) that failed, timeouts included
	Timeouts      int64 // calls that returned a *errs.CompileTimeoutError
	Corrupt       int64 // disk entries found corrupt, removed and recompiled
	LoadErrors    int64 // disk entries Deserialize refused, removed and recompiled
	DiskErrors    int64 // disk reads, writes or serializations that failed (the call still succeeded)
	Evictions     int64 // memory entries evicted

	Entries int   // memory entries now
	Bytes   int64 // their total size
	Retired int   // evicted values still held by callers

	CompileTime      time.Duration // time spent compiling
	CompileTimeSaved time.Duration // compile time recorded for the entries that memory and disk hits returned
}

// tiered is a two-level compile cache: memory (an LRU with single-flight
// compiles, see Memory), then optionally a Disk of serialized executables
// that survives restarts. A memory miss tries the disk, then compiles; a
// compile is serialized and written to disk. Entries are found by
// Key.Digest, which covers everything that changes the compiled result.
// tiered is safe for concurrent use.
//
// It is unexported because nothing outside this package's tests uses it:
// the runtime keeps the memory level in each Model (cache.NewMemory in
// model.go) and hands the Disk to the backend (driver.DiskCacher), which
// serializes its own executables (pjrt/diskcache.go). The tests keep it as
// the worked composition of the two levels.
type tiered[V any] struct {
	mem  *Memory[V]
	opts tieredOptions[V]

	mu    sync.Mutex
	stats tieredStats // the counters Memory does not keep
}

// newTiered returns a tiered cache. Options are validated: negative
// limits, or Disk without both Serialize and Deserialize, are errors.
func newTiered[V any](opts tieredOptions[V]) (*tiered[V], error) {
	if opts.Disk != nil && (opts.Serialize == nil || opts.Deserialize == nil) {
		return nil, errors.New("compile cache: Options.Disk needs both Serialize and Deserialize; pass no Disk for a backend that cannot serialize executables")
	}
	if opts.MinCompileTime < 0 {
		return nil, fmt.Errorf("compile cache: negative MinCompileTime %s", opts.MinCompileTime)
	}
	mem, err := NewMemory(opts.Memory)
	if err != nil {
		return nil, err
	}
	return &tiered[V]{mem: mem, opts: opts}, nil
}

// GetOrCompile returns the value for key: from memory, else from disk,
// else by calling compile (and then storing it on disk). Call done when the
// value is no longer used; see Memory.GetOrCompile for errors and waiting.
// Disk failures never fail the call: they are reported and counted, and the
// value is compiled instead.
func (c *tiered[V]) GetOrCompile(ctx context.Context, key Key, compile CompileFunc[V]) (value V, done func(), err error) {
	prog := programSum(key.Program)
	digest := hex.EncodeToString(key.digest(prog))
	name := key.Name
	if name == "" {
		name = digest[:12]
	}
	return c.mem.getOrLoad(ctx, digest, label{backend: key.Backend, program: name}, func(ctx context.Context) (V, int64, loadResult, error) {
		if d := c.opts.Disk; d != nil {
			if v, size, cost, ok := c.loadFromDisk(ctx, d, digest); ok {
				return v, size, loadResult{cost: cost}, nil
			}
			if err := ctx.Err(); err != nil {
				var zero V
				return zero, 0, loadResult{}, err
			}
		}
		start := time.Now()
		v, size, err := compile(ctx)
		cost := time.Since(start)
		c.count(func(s *tieredStats) { s.Misses++ })
		if err != nil {
			return v, size, loadResult{compiled: true, cost: cost}, err
		}
		if d := c.opts.Disk; d != nil && cost >= c.opts.MinCompileTime {
			c.store(ctx, d, digest, key.info(prog), v, cost)
		}
		return v, size, loadResult{compiled: true, cost: cost}, nil
	})
}

// loadFromDisk returns the deserialized entry for digest, if there is a
// usable one, with the compile time it recorded.
func (c *tiered[V]) loadFromDisk(ctx context.Context, d *Disk, digest string) (V, int64, time.Duration, bool) {
	var zero V
	data, info, ok, err := d.get(ctx, digest)
	switch {
	case errors.Is(err, ErrCorrupt):
		c.count(func(s *tieredStats) { s.Corrupt++ })
		c.report(err)
		return zero, 0, 0, false
	case err != nil:
		if ctx.Err() == nil {
			c.count(func(s *tieredStats) { s.DiskErrors++ })
			c.report(err)
		}
		return zero, 0, 0, false
	case !ok:
		return zero, 0, 0, false
	}
	v, size, err := c.opts.Deserialize(ctx, data)
	if err != nil {
		c.count(func(s *tieredStats) { s.LoadErrors++ })
		c.report(fmt.Errorf("compile cache: loading entry %s: %w; removed, compiling instead", info.Path, err))
		if rerr := d.remove(digest); rerr != nil {
			c.report(rerr)
		}
		return zero, 0, 0, false
	}
	c.count(func(s *tieredStats) { s.DiskHits++; s.CompileTimeSaved += info.CompileTime })
	return v, size, info.CompileTime, true
}

func (c *tiered[V]) store(ctx context.Context, d *Disk, digest string, ki KeyInfo, v V, cost time.Duration) {
	data, err := c.opts.Serialize(v)
	if err == nil {
		err = d.put(ctx, digest, ki, data, cost)
	} else {
		err = fmt.Errorf("compile cache: serializing %s: %w", ki.Name, err)
	}
	if err != nil {
		c.count(func(s *tieredStats) { s.DiskErrors++ })
		c.report(err)
	}
}

func (c *tiered[V]) count(f func(*tieredStats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

func (c *tiered[V]) report(err error) {
	if c.opts.Report != nil {
		c.opts.Report(err)
	}
}

// Stats returns the counters and the memory level's occupancy.
func (c *tiered[V]) Stats() tieredStats {
	m := c.mem.Stats()
	c.mu.Lock()
	s := c.stats
	c.mu.Unlock()
	s.MemoryHits = m.Hits
	s.Shared = m.Shared
	s.CompileErrors = m.Failures
	s.Timeouts = m.Timeouts
	s.Evictions = m.Evictions
	s.Entries, s.Bytes, s.Retired = m.Entries, m.Bytes, m.Retired
	s.CompileTime = m.CompileTime
	s.CompileTimeSaved += m.CompileTimeSaved
	return s
}

// Memory returns the in-memory level, for Remove, Keys and its own Stats.
func (c *tiered[V]) Memory() *Memory[V] { return c.mem }

// Clear empties the memory level and, if there is one, the disk directory.
func (c *tiered[V]) Clear(ctx context.Context) error {
	c.mem.Clear()
	if c.opts.Disk != nil {
		_, _, err := c.opts.Disk.Clear(ctx)
		return err
	}
	return nil
}

// Close releases the memory level (values still held are released when
// their callers call done), refuses further calls, and flushes the disk
// counters to the directory's stats file.
func (c *tiered[V]) Close(ctx context.Context) error {
	c.mem.Close()
	if c.opts.Disk != nil {
		return c.opts.Disk.FlushStats(ctx)
	}
	return nil
}
