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

func Example() {
	dir, _ := os.MkdirTemp("", "tbcache")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	key := cache.Key{
		Name: "axpy", ProgramFormat: "stablehlo", Program: []byte("module @axpy {...}"),
		InputSpecs: []string{cache.InputSpec("f32", 3), cache.InputSpec("f32", 3)},
		Backend:    "pjrt", Plugin: "tpu", PluginVersion: "libtpu 0.0.1", DeviceKind: "TPU v5 lite", Topology: "1x1",
	}
	compile := func(context.Context) (*exe, int64, error) { return &exe{"compiled axpy"}, 1 << 20, nil }

	open := func() *cache.Cache[*exe] {
		disk, _ := cache.OpenDisk(dir, cache.DiskOptions{MaxBytes: 10 << 30})
		c, _ := cache.New(cache.Options[*exe]{
			Memory:    cache.MemoryOptions[*exe]{MaxBytes: 4 << 30, Timeout: 10 * time.Minute},
			Disk:      disk,
			Serialize: func(e *exe) ([]byte, error) { return []byte(e.code), nil },
			Deserialize: func(_ context.Context, b []byte) (*exe, int64, error) {
				return &exe{string(b)}, 1 << 20, nil
			},
		})
		return c
	}
	for _, process := range []string{"first run", "after restart"} {
		c := open()
		e, done, err := c.GetOrCompile(ctx, key, compile)
		if err != nil {
			fmt.Println(err)
			return
		}
		s := c.Stats()
		fmt.Printf("%s: %s (compiles %d, disk hits %d)\n", process, e.code, s.Misses, s.DiskHits)
		done()
		c.Close(ctx)
	}
	// Output:
	// first run: compiled axpy (compiles 1, disk hits 0)
	// after restart: compiled axpy (compiles 0, disk hits 1)
}
