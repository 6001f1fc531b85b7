package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testKey is a distinct key per name.
func testKey(name string) Key {
	return Key{
		Name: name, ProgramFormat: "stablehlo", Program: []byte("module @" + name),
		InputSpecs: []string{InputSpec("f32", 2, 3)}, Backend: "pjrt", Plugin: "cuda",
		PluginVersion: "12.3", DeviceKind: "NVIDIA H100 80GB HBM3", Topology: "1 device",
	}
}

// payloadFor is deterministic test content for a key.
func payloadFor(name string, n int) []byte {
	b := make([]byte, n)
	seed := sha256.Sum256([]byte(name))
	for i := range b {
		b[i] = seed[i%32] ^ byte(i/32)
	}
	return b
}

// clock is a fake time source advancing one second per reading, so LRU
// order does not depend on the file system's timestamp resolution.
type clock struct{ t time.Time }

func (c *clock) now() time.Time {
	c.t = c.t.Add(time.Second)
	return c.t
}

func openTestDisk(t *testing.T, dir string, opts DiskOptions) *Disk {
	t.Helper()
	d, err := OpenDisk(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d.now = c.now
	return d
}

// TestDiskRoundTripAcrossInstances simulates a restart: what one Disk
// wrote, a fresh Disk on the same directory reads back exactly.
func TestDiskRoundTripAcrossInstances(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	k := testKey("axpy")
	k.CompileOptions = "num_replicas=1"
	want := payloadFor("axpy", 5000)
	d1 := openTestDisk(t, dir, DiskOptions{})
	if err := d1.Put(ctx, k, want, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d2 := openTestDisk(t, dir, DiskOptions{})
	got, info, ok, err := d2.Get(ctx, k)
	if err != nil || !ok {
		t.Fatalf("Get = ok %v, err %v", ok, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("payload differs after round trip")
	}
	if info.CompileTime != 1500*time.Millisecond || info.Key.Name != "axpy" || info.Digest != k.Digest() ||
		info.Key.CompileOptions != "num_replicas=1" || info.Key.ProgramBytes != len(k.Program) {
		t.Errorf("info = %+v", info)
	}
	if _, _, ok, err := d2.Get(ctx, testKey("other")); ok || err != nil {
		t.Errorf("missing key: ok %v err %v", ok, err)
	}
	if s := d2.Stats(); s.Hits != 1 || s.Misses != 1 || s.CompileTimeSaved != 1500*time.Millisecond {
		t.Errorf("stats = %+v", s)
	}
	// The file name is the digest, and the size is prefix + header + payload.
	fi, err := os.Stat(filepath.Join(dir, k.Digest()+".tbc"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, k.Digest()+".tbc"))
	hl := binary.LittleEndian.Uint32(raw[12:])
	if fi.Size() != int64(88+int(hl)+len(want)) || string(raw[:8]) != "TBCACHE\x00" {
		t.Errorf("file is %d bytes with header %d, want 88+%d+%d", fi.Size(), hl, hl, len(want))
	}
}

// corruptions damage an entry file in the ways the issue names.
var corruptions = []struct {
	name   string
	damage func(b []byte) []byte
	reason string // a word the reason must contain
}{
	{"flip payload byte", func(b []byte) []byte { b[len(b)-10] ^= 0x01; return b }, "payload checksum"},
	{"flip header byte", func(b []byte) []byte { b[prefixLen+5] ^= 0x20; return b }, "header checksum"},
	{"flip length field", func(b []byte) []byte { b[16] ^= 0x01; return b }, "bytes, want"},
	{"flip payload checksum", func(b []byte) []byte { b[25] ^= 0x80; return b }, "checksum"},
	{"flip reserved byte", func(b []byte) []byte { b[30] ^= 0x80; return b }, "not zero"},
	{"truncate payload", func(b []byte) []byte { return b[:len(b)-1] }, "bytes, want"},
	{"truncate to half", func(b []byte) []byte { return b[:len(b)/2] }, "bytes, want"},
	{"truncate in prefix", func(b []byte) []byte { return b[:40] }, "shorter"},
	{"empty file", func(b []byte) []byte { return b[:0] }, "shorter"},
	{"trailing byte", func(b []byte) []byte { return append(b, 0) }, "bytes, want"},
	{"bad magic", func(b []byte) []byte { copy(b, "GARBAGE!"); return b }, "magic"},
	{"bad version", func(b []byte) []byte { b[8] = 9; return b }, "version"},
	{"garbage header", func(b []byte) []byte {
		hl := int(binary.LittleEndian.Uint32(b[12:]))
		for i := prefixLen; i < prefixLen+hl; i++ {
			b[i] = byte(i * 7)
		}
		return b
	}, "header checksum"},
	{"garbage header with matching checksum", func(b []byte) []byte {
		hl := int(binary.LittleEndian.Uint32(b[12:]))
		for i := prefixLen; i < prefixLen+hl; i++ {
			b[i] = '{'
		}
		s := headerSum(b[:56], b[prefixLen:prefixLen+hl])
		copy(b[56:88], s[:])
		return b
	}, "JSON"},
	{"huge header length", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 1<<31); return b }, "limit"},
}

// TestDiskCorruptEntries: each damage is detected, returned as a
// *CorruptError, counted, and the file removed; nothing is returned.
func TestDiskCorruptEntries(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			d := openTestDisk(t, dir, DiskOptions{})
			k := testKey("k")
			if err := d.Put(ctx, k, payloadFor("k", 300), time.Second); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, k.Digest()+".tbc")
			raw, _ := os.ReadFile(p)
			if err := os.WriteFile(p, c.damage(raw), 0o600); err != nil {
				t.Fatal(err)
			}
			ls, err := d.List()
			if err != nil || len(ls) != 1 {
				t.Fatalf("List = %v, %v", ls, err)
			}
			if c.name != "flip payload byte" && ls[0].Problem == "" {
				t.Errorf("List did not flag the damaged header/prefix")
			}
			payload, _, ok, err := d.Get(ctx, k)
			var ce *CorruptError
			if ok || payload != nil || !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Get = ok %v, %d bytes, err %v; want a *CorruptError and nothing returned", ok, len(payload), err)
			}
			if !strings.Contains(ce.Reason, c.reason) || ce.Path != p {
				t.Errorf("error %q, want path %s and a reason containing %q", err, p, c.reason)
			}
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("corrupt file not removed: %v", err)
			}
			if s := d.Stats(); s.Corrupt != 1 || s.Hits != 0 {
				t.Errorf("stats = %+v, want 1 corrupt, 0 hits", s)
			}
		})
	}
}

// TestDiskWrongName: a valid entry under another key's name is corrupt.
func TestDiskWrongName(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d := openTestDisk(t, dir, DiskOptions{})
	a, b := testKey("a"), testKey("b")
	if err := d.Put(ctx, a, []byte("payload of a"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, a.Digest()+".tbc"), filepath.Join(dir, b.Digest()+".tbc")); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := d.Get(ctx, b); ok || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get(b) = ok %v, err %v; want ErrCorrupt", ok, err)
	}
}

// TestDiskEviction: with a cap of about two entries, puts and hits evict
// the least recently used. Entries are ~10.6 KB; the cap is 25,000 bytes.
func TestDiskEviction(t *testing.T) {
	tests := []struct {
		name string
		ops  []string // "put x" or "get x"
		want []string // entries left, most recently used first
	}{
		{"oldest goes", []string{"put a", "put b", "put c"}, []string{"c", "b"}},
		{"hit refreshes", []string{"put a", "put b", "get a", "put c"}, []string{"c", "a"}},
		{"rewrite refreshes", []string{"put a", "put b", "put a", "put c"}, []string{"c", "a"}},
		{"chain", []string{"put a", "put b", "put c", "get b", "put d", "put e"}, []string{"e", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			d := openTestDisk(t, t.TempDir(), DiskOptions{MaxBytes: 25000})
			puts := 0
			for _, op := range tt.ops {
				verb, name, _ := strings.Cut(op, " ")
				if verb == "put" {
					puts++
					if err := d.Put(ctx, testKey(name), payloadFor(name, 10000), 0); err != nil {
						t.Fatal(err)
					}
				} else if _, _, ok, err := d.Get(ctx, testKey(name)); !ok || err != nil {
					t.Fatalf("%s: ok %v err %v", op, ok, err)
				}
			}
			ls, err := d.List()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var total int64
			for _, e := range ls {
				got = append(got, e.Key.Name)
				total += e.Size
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("entries = %v, want %v", got, tt.want)
			}
			if total > 25000 {
				t.Errorf("total %d over the cap", total)
			}
			if s := d.Stats(); s.Evictions != int64(len(uniq(tt.ops))-len(tt.want)) {
				t.Errorf("evictions = %d, want %d", s.Evictions, len(uniq(tt.ops))-len(tt.want))
			}
		})
	}
}

func uniq(ops []string) map[string]bool {
	m := map[string]bool{}
	for _, op := range ops {
		if name, ok := strings.CutPrefix(op, "put "); ok {
			m[name] = true
		}
	}
	return m
}

func TestDiskTooLarge(t *testing.T) {
	d := openTestDisk(t, t.TempDir(), DiskOptions{MaxBytes: 1000})
	err := d.Put(context.Background(), testKey("big"), make([]byte, 1000), 0)
	if err == nil || !strings.Contains(err.Error(), "cap") {
		t.Fatalf("Put over the cap = %v, want an error naming the cap", err)
	}
	if ls, _ := d.List(); len(ls) != 0 {
		t.Errorf("oversized entry stored")
	}
}

// TestDiskListClearStats covers ls, clear and the cross-process totals.
func TestDiskListClearStats(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d1 := openTestDisk(t, dir, DiskOptions{})
	d2 := openTestDisk(t, dir, DiskOptions{})
	d2.now = d1.now // one clock for both, as for processes on one host
	for i, n := range []string{"a", "b", "c"} {
		if err := d1.Put(ctx, testKey(n), payloadFor(n, 100*(i+1)), time.Duration(i+1)*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok, _ := d2.Get(ctx, testKey("b")); !ok {
		t.Fatal("b missing")
	}
	d2.Get(ctx, testKey("zz"))
	// A stale temporary file from a dead writer, and an unrelated file.
	stale := filepath.Join(dir, ".tmp-deadbeef-1")
	os.WriteFile(stale, []byte("partial"), 0o600)
	os.Chtimes(stale, time.Unix(0, 0), time.Unix(0, 0))
	os.WriteFile(filepath.Join(dir, "README"), []byte("x"), 0o600)

	ls, err := d1.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ls {
		names = append(names, e.Key.Name)
		if e.Problem != "" || e.Key.Backend != "pjrt" || e.Key.DeviceKind != "NVIDIA H100 80GB HBM3" {
			t.Errorf("entry %+v", e)
		}
	}
	if !slices.Equal(names, []string{"b", "c", "a"}) { // b was hit last
		t.Errorf("List order = %v, want [b c a]", names)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temporary file kept")
	}
	u, err := d1.Usage()
	if err != nil || u.Entries != 3 || u.CompileTimeStored != 6*time.Second {
		t.Errorf("Usage = %+v, %v", u, err)
	}

	for _, d := range []*Disk{d1, d2, d2} { // the second flush of d2 adds nothing
		if err := d.FlushStats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tot, err := ReadStats(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Puts != 3 || tot.Hits != 1 || tot.Misses != 1 || tot.CompileTimeStored != 6*time.Second ||
		tot.CompileTimeSaved != 2*time.Second || tot.Since.IsZero() {
		t.Errorf("totals = %+v, want 3 puts, 1 hit, 1 miss, 6s stored, 2s saved", tot)
	}

	n, b, err := d2.Clear(ctx)
	if err != nil || n != 3 || b != u.Bytes {
		t.Errorf("Clear = %d, %d, %v; want 3, %d", n, b, err, u.Bytes)
	}
	if ls, _ := d1.List(); len(ls) != 0 {
		t.Errorf("entries after Clear: %v", ls)
	}
	if _, err := os.Stat(filepath.Join(dir, "stats.json")); err != nil {
		t.Errorf("Clear removed the stats file")
	}
}

func TestOpenDiskErrors(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	for _, tt := range []struct {
		dir  string
		opts DiskOptions
	}{
		{"", DiskOptions{}},
		{f, DiskOptions{}},
		{t.TempDir(), DiskOptions{MaxBytes: -1}},
	} {
		if _, err := OpenDisk(tt.dir, tt.opts); err == nil {
			t.Errorf("OpenDisk(%q, %+v) accepted", tt.dir, tt.opts)
		}
	}
	// A missing directory is fine: it has no entries, and Put creates it.
	missing := filepath.Join(t.TempDir(), "a", "b")
	d := openTestDisk(t, missing, DiskOptions{})
	if ls, err := d.List(); err != nil || len(ls) != 0 {
		t.Errorf("List of a missing directory = %v, %v", ls, err)
	}
	if err := d.Put(context.Background(), testKey("x"), []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(missing); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created directory: %v, %v", fi, err)
	}
}

// TestStatsFileCorrupt: an unreadable stats file is reported and replaced.
func TestStatsFileCorrupt(t *testing.T) {
	dir := t.TempDir()
	var reported []error
	d := openTestDisk(t, dir, DiskOptions{Report: func(err error) { reported = append(reported, err) }})
	os.WriteFile(filepath.Join(dir, "stats.json"), []byte("{not json"), 0o600)
	d.Get(context.Background(), testKey("x"))
	if err := d.FlushStats(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "stats") {
		t.Errorf("reported %v", reported)
	}
	if tot, err := ReadStats(dir); err != nil || tot.Misses != 1 {
		t.Errorf("ReadStats = %+v, %v", tot, err)
	}
}

// ExampleDisk is kept short; see Example for the full flow.
func ExampleDisk() {
	dir, _ := os.MkdirTemp("", "tbcache")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	d, _ := OpenDisk(dir, DiskOptions{MaxBytes: 1 << 30})
	key := Key{Name: "axpy", Program: []byte("module @axpy"), Backend: "pjrt", PluginVersion: "1"}
	d.Put(ctx, key, []byte("serialized executable"), 2*time.Second)
	data, info, ok, _ := d.Get(ctx, key)
	fmt.Println(ok, string(data), info.CompileTime)
	// Output: true serialized executable 2s
}
