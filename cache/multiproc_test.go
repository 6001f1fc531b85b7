package cache

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Environment of the helper process.
const (
	envHelperDir = "TB_CACHE_TEST_HELPER_DIR"
	envHelperID  = "TB_CACHE_TEST_HELPER_ID"
	envHelperCap = "TB_CACHE_TEST_HELPER_CAP"
)

const (
	sharedKeys = 16 // keys every writer writes
	ownKeys    = 16 // keys only one writer writes
	rounds     = 3  // times each writer writes its keys
)

// writerPayload is what writer id stores for name: the name and the writer,
// then filler derived from both, so a reader can tell a whole payload from
// a mix of two writers' bytes.
func writerPayload(name string, id int) []byte {
	head := fmt.Sprintf("%s|%d|", name, id)
	return append([]byte(head), payloadFor(head, 3000+97*id)...)
}

// checkPayload verifies that b is exactly one writer's payload for name.
func checkPayload(name string, b []byte) error {
	parts := strings.SplitN(string(b), "|", 3)
	if len(parts) != 3 || parts[0] != name {
		return fmt.Errorf("payload for %s starts %q", name, b[:min(len(b), 40)])
	}
	id, err := strconv.Atoi(parts[1])
	if err != nil {
		return fmt.Errorf("payload for %s: writer %q", name, parts[1])
	}
	if !bytes.Equal(b, writerPayload(name, id)) {
		return fmt.Errorf("payload for %s from writer %d is not what that writer wrote", name, id)
	}
	return nil
}

// writeAll is one writer's work: the shared keys and its own, several times.
func writeAll(ctx context.Context, dir string, id int, maxBytes int64) error {
	d, err := OpenDisk(dir, DiskOptions{MaxBytes: maxBytes})
	if err != nil {
		return err
	}
	for r := range rounds {
		for i := range max(sharedKeys, ownKeys) {
			names := []string{fmt.Sprintf("shared-%d", i), fmt.Sprintf("own-%d-%d", id, i)}
			for _, n := range names {
				if err := d.Put(ctx, testKey(n), writerPayload(n, id), 0); err != nil {
					return fmt.Errorf("writer %d round %d: %w", id, r, err)
				}
				// Read back what is there: it may be another writer's, but whole.
				if b, _, ok, err := d.Get(ctx, testKey(n)); err != nil {
					return fmt.Errorf("writer %d: %w", id, err)
				} else if ok {
					if err := checkPayload(n, b); err != nil {
						return fmt.Errorf("writer %d: %w", id, err)
					}
				}
			}
		}
	}
	return d.FlushStats(ctx)
}

// TestHelperDiskWriter is the child process of TestMultiProcessSharedDir;
// it does nothing in a normal run.
func TestHelperDiskWriter(t *testing.T) {
	dir := os.Getenv(envHelperDir)
	if dir == "" {
		t.Skip("helper process for TestMultiProcessSharedDir")
	}
	id, _ := strconv.Atoi(os.Getenv(envHelperID))
	capBytes, _ := strconv.ParseInt(os.Getenv(envHelperCap), 10, 64)
	if err := writeAll(context.Background(), dir, id, capBytes); err != nil {
		t.Fatal(err)
	}
}

// TestMultiProcessSharedDir runs two child processes of this test binary
// and this process as writers on one directory at once, on the same and on
// different keys, then checks that every entry is whole and loadable.
func TestMultiProcessSharedDir(t *testing.T) {
	tests := []struct {
		name     string
		maxBytes int64
	}{
		{"no cap", 0},
		{"cap evicts concurrently", 60_000}, // about 18 of the 48 distinct entries
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.maxBytes > 0 && !crossProcessLock {
				t.Skip("no flock on this platform: the cap is not exact across processes")
			}
			dir := t.TempDir()
			ctx := context.Background()
			var wg sync.WaitGroup
			errc := make(chan error, 3)
			for id := 1; id <= 2; id++ {
				cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperDiskWriter$", "-test.count=1")
				cmd.Env = append(os.Environ(), envHelperDir+"="+dir, envHelperID+"="+strconv.Itoa(id),
					envHelperCap+"="+strconv.FormatInt(tt.maxBytes, 10))
				wg.Add(1)
				go func() {
					defer wg.Done()
					if out, err := cmd.CombinedOutput(); err != nil {
						errc <- fmt.Errorf("child %d: %v\n%s", id, err, out)
					}
				}()
			}
			wg.Add(1)
			go func() { defer wg.Done(); errc <- writeAll(ctx, dir, 0, tt.maxBytes) }()
			wg.Wait()
			close(errc)
			for err := range errc {
				if err != nil {
					t.Fatal(err)
				}
			}

			d := openTestDisk(t, dir, DiskOptions{})
			ls, err := d.List()
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for _, e := range ls {
				total += e.Size
				if e.Problem != "" {
					t.Errorf("entry %s: %s", e.Key.Name, e.Problem)
				}
				b, _, ok, err := d.Get(ctx, testKey(e.Key.Name))
				if err != nil || !ok {
					t.Errorf("entry %s: ok %v err %v", e.Key.Name, ok, err)
					continue
				}
				if err := checkPayload(e.Key.Name, b); err != nil {
					t.Error(err)
				}
			}
			want := sharedKeys + 3*ownKeys
			if tt.maxBytes == 0 && len(ls) != want {
				t.Errorf("%d entries, want %d", len(ls), want)
			}
			if tt.maxBytes > 0 && (total > tt.maxBytes || len(ls) == 0) {
				t.Errorf("%d entries, %d bytes; want some, at most %d bytes", len(ls), total, tt.maxBytes)
			}
			tot, err := ReadStats(dir)
			if err != nil {
				t.Fatal(err)
			}
			if n := int64(3 * rounds * (max(sharedKeys, ownKeys) * 2)); tot.Puts != n || tot.Corrupt != 0 {
				t.Errorf("flushed totals = %+v, want %d puts and no corrupt entry", tot, n)
			}
			if s := d.Stats(); s.Corrupt != 0 {
				t.Errorf("corrupt entries found: %d", s.Corrupt)
			}
			left, _ := os.ReadDir(dir)
			for _, e := range left {
				if strings.HasPrefix(e.Name(), tempPrefix) {
					t.Errorf("temporary file left: %s", e.Name())
				}
			}
		})
	}
}
