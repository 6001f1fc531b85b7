package pjrt

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/tensorbridge/tensorbridge/cache"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/pjrt/lower"
)

// lowerVersion names this package's lowering rules in cache keys: bump it
// when a change to package lower changes the programs it writes.
const lowerVersion = "tensorbridge-lower/3"

var _ driver.DiskCacher = (*Backend)(nil)

// SetDiskCache makes every compile of this backend go through d: a program
// compiled before, by this process or another sharing the directory, is
// loaded from its serialized executable instead of compiled; a new one is
// serialized and stored after compiling. A corrupt entry is reported and
// recompiled, never loaded. report receives errors that do not fail the
// compile (a failed store, a corrupt entry); nil discards them. d == nil
// removes the cache.
func (b *Backend) SetDiskCache(d *cache.Disk, report func(error)) {
	b.warm.mu.Lock()
	b.warm.disk = d
	b.warm.mu.Unlock()
	if d == nil {
		b.eng.SetCompileHook(nil)
		return
	}
	if report == nil {
		report = func(error) {}
	}
	b.eng.SetCompileHook(func(ctx context.Context, prog *lower.Program, compile func(context.Context) (*Executable, error)) (*Executable, error) {
		if ir.IsEphemeral(prog.Name) { // a build-time program: compiled for one use, not stored
			return compile(ctx)
		}
		arm := b.armed(prog)
		if arm != nil && arm.load != nil {
			// A warm start (WarmLookup): prog is the caller's stub; there is
			// nothing to compile, so a failure is the caller's to handle.
			exe, err := b.warmLoad(ctx, prog, arm)
			if err != nil {
				return nil, err
			}
			b.diskHits.Add(1)
			return exe, nil
		}
		exe, data, err := b.compileCached(ctx, d, prog, compile, report)
		if err == nil && arm != nil && arm.store != nil && data != nil {
			if err := b.warmStore(ctx, prog, data, arm); err != nil {
				report(fmt.Errorf("pjrt: storing the warm-start entry of %q: %w", prog.Name, err))
			}
		}
		return exe, err
	})
}

// compileCached answers a compile from the disk cache keyed by the program
// text, or compiles it and stores the executable. It also returns the
// serialized executable as the compiler produced it (read from the cache or
// just serialized), nil when there is none: a warm-start entry must store
// those bytes, never a re-serialization of a loaded executable (XLA's CPU
// plugin then leaves out functions: "Function bitcast_gather_fusion not
// found" at execution).
func (b *Backend) compileCached(ctx context.Context, d *cache.Disk, prog *lower.Program,
	compile func(context.Context) (*Executable, error), report func(error)) (*Executable, []byte, error) {
	key, err := b.cacheKey(prog)
	if err != nil {
		report(err)
		exe, err := compile(ctx)
		return exe, nil, err
	}
	if data, _, ok, err := d.Get(ctx, key); err != nil {
		report(err)
	} else if ok {
		exe, err := b.eng.LoadExecutable(ctx, prog, data)
		if err == nil {
			b.diskHits.Add(1)
			return exe, data, nil
		}
		// A stale or incompatible entry: say so, recompile, overwrite.
		report(fmt.Errorf("pjrt: cached executable for %q did not load (recompiling): %w", prog.Name, err))
	}
	b.diskMisses.Add(1)
	start := time.Now()
	exe, err := compile(ctx)
	if err != nil {
		return nil, nil, err
	}
	spent := time.Since(start)
	data, err := exe.Serialize()
	if err != nil {
		report(fmt.Errorf("pjrt: serializing %q for the disk cache: %w", prog.Name, err))
		return exe, nil, nil
	}
	if err := d.Put(ctx, key, data, spent); err != nil {
		report(err)
	}
	return exe, data, nil
}

// DiskCacheStats returns how many compiles the disk cache answered and how
// many it had to compile, in this process.
func (b *Backend) DiskCacheStats() (hits, misses int64) {
	return b.diskHits.Load(), b.diskMisses.Load()
}

// cacheKey identifies prog on this backend: the program text (which holds
// the small constants), the digest of its hoisted constants (which it
// does not), the compile options, the plugin and
// its version, and the devices it is built for.
func (b *Backend) cacheKey(prog *lower.Program) (cache.Key, error) {
	opts, err := b.eng.CompileOptions(prog)
	if err != nil {
		return cache.Key{}, err
	}
	raw, err := opts.Marshal()
	if err != nil {
		return cache.Key{}, err
	}
	kinds := map[string]bool{}
	var kindList []string
	for n := 0; n < b.eng.NumDevices(); n++ {
		d, err := b.eng.Device(backends.DeviceNum(n))
		if err != nil {
			return cache.Key{}, err
		}
		if k := d.Kind(); !kinds[k] {
			kinds[k] = true
			kindList = append(kindList, k)
		}
	}
	major, minor := b.eng.Client().Plugin().Version()
	inputs := make([]string, len(prog.ParamShapes))
	for i, s := range prog.ParamShapes {
		inputs[i] = s.String()
	}
	extra := map[string]string{"lowering": lowerVersion}
	if len(prog.Donated) > 0 {
		// Text does not carry the aliasing CompileText adds.
		extra["donated"] = donatedKey(prog.Donated)
	}
	return cache.Key{
		Name:           prog.Name,
		ProgramFormat:  "stablehlo-mlir",
		Program:        prog.Text,
		WeightsDigest:  prog.WeightsDigest,
		InputSpecs:     inputs,
		CompileOptions: fmt.Sprintf("%x", raw),
		Backend:        b.kind.Name,
		Plugin:         b.pluginPath,
		PluginVersion:  fmt.Sprintf("%s %s; PJRT C API %d.%d", b.eng.Platform(), b.eng.version, major, minor),
		DeviceKind:     strings.Join(kindList, ","),
		Topology:       fmt.Sprintf("%d addressable device(s), assignment %v", b.eng.NumDevices(), prog.DeviceAssignment),
		Extra:          extra,
	}, nil
}

// donatedKey writes a donation map in parameter order ("0>3 5>4").
func donatedKey(donated map[int]int) string {
	keys := slices.Sorted(maps.Keys(donated))
	parts := make([]string, len(keys))
	for n, i := range keys {
		parts[n] = fmt.Sprintf("%d>%d", i, donated[i])
	}
	return strings.Join(parts, " ")
}
