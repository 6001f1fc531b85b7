package cache

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkMemoryHit: a hit on a warm key, from one and from all cores.
func BenchmarkMemoryHit(b *testing.B) {
	m, _ := NewMemory(MemoryOptions[int]{MaxEntries: 1024})
	ctx := context.Background()
	compile := func(context.Context) (int, int64, error) { return 1, 1, nil }
	_, done, _ := m.GetOrCompile(ctx, "k", compile)
	done()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			_, done, _ := m.GetOrCompile(ctx, "k", compile)
			done()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, done, _ := m.GetOrCompile(ctx, "k", compile)
				done()
			}
		})
	})
}

// BenchmarkKeyDigest: what building the key costs per lookup, by program
// size (the program is hashed on every Digest call).
func BenchmarkKeyDigest(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 20} {
		k := testKey("k")
		k.Program = payloadFor("p", n)
		b.Run(fmt.Sprintf("program=%dKiB", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				_ = k.Digest()
			}
		})
	}
}

// BenchmarkDiskGet: a disk hit (open, read, verify both checksums, stamp
// the access time), by payload size.
func BenchmarkDiskGet(b *testing.B) {
	for _, n := range []int{64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("payload=%dKiB", n>>10), func(b *testing.B) {
			ctx := context.Background()
			d, _ := OpenDisk(b.TempDir(), DiskOptions{})
			k := testKey("k")
			if err := d.Put(ctx, k, payloadFor("k", n), 0); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(n))
			for b.Loop() {
				if _, _, ok, err := d.Get(ctx, k); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkDiskPut: an atomic write (temporary file, fsync, rename, fsync of
// the directory), with and without a cap (which adds a locked directory
// scan; 100 entries present).
func BenchmarkDiskPut(b *testing.B) {
	for _, c := range []struct {
		n        int
		maxBytes int64
	}{{64 << 10, 0}, {1 << 20, 0}, {64 << 10, 1 << 40}} {
		b.Run(fmt.Sprintf("payload=%dKiB/cap=%v", c.n>>10, c.maxBytes > 0), func(b *testing.B) {
			ctx := context.Background()
			d, _ := OpenDisk(b.TempDir(), DiskOptions{MaxBytes: c.maxBytes})
			for i := range 100 {
				d.Put(ctx, testKey(fmt.Sprint("fill", i)), []byte("x"), 0)
			}
			k := testKey("k")
			data := payloadFor("k", c.n)
			b.SetBytes(int64(c.n))
			for b.Loop() {
				if err := d.Put(ctx, k, data, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
