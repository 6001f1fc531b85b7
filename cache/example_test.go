package cache_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tensorbridge/tensorbridge/cache"
)

// A backend's executable, as far as the cache is concerned.
type exe struct{ code string }

// The two levels as the runtime composes them: a Memory in front (each
// tensorbridge.Model keeps one), and behind it a Disk that the backend
// reads before compiling and writes after (pjrt/diskcache.go), so that a
// restarted process loads the executable instead of compiling it again.
func Example() {
	dir, _ := os.MkdirTemp("", "tbcache")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	key := cache.Key{
		Name: "axpy", ProgramFormat: "stablehlo", Program: []byte("module @axpy {...}"),
		InputSpecs: []string{cache.InputSpec("f32", 3), cache.InputSpec("f32", 3)},
		Backend:    "pjrt", Plugin: "tpu", PluginVersion: "libtpu 0.0.1", DeviceKind: "TPU v5 lite", Topology: "1x1",
	}
	for _, process := range []string{"first run", "after restart"} {
		disk, _ := cache.OpenDisk(dir, cache.DiskOptions{MaxBytes: 10 << 30})
		mem, _ := cache.NewMemory(cache.MemoryOptions[*exe]{MaxBytes: 4 << 30, Timeout: 10 * time.Minute})
		compiles := 0
		compile := func(ctx context.Context) (*exe, int64, error) {
			if data, _, ok, err := disk.Get(ctx, key); err == nil && ok {
				return &exe{string(data)}, 1 << 20, nil // deserialized
			}
			compiles++
			e := &exe{"compiled axpy"}
			_ = disk.Put(ctx, key, []byte(e.code), 3*time.Second) // serialized
			return e, 1 << 20, nil
		}
		var got *exe
		for range 2 { // the second call is a memory hit
			e, done, err := mem.GetOrCompile(ctx, key.Digest(), compile)
			if err != nil {
				fmt.Println(err)
				return
			}
			got = e
			done()
		}
		fmt.Printf("%s: %s (compiles %d, memory hits %d, disk hits %d)\n",
			process, got.code, compiles, mem.Stats().Hits, disk.Stats().Hits)
		mem.Close()
	}
	// Output:
	// first run: compiled axpy (compiles 1, memory hits 1, disk hits 0)
	// after restart: compiled axpy (compiles 0, memory hits 1, disk hits 1)
}
