package cache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func runCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Command(context.Background(), args, &out, &errb)
	return out.String(), err
}

func TestCommand(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d := openTestDisk(t, dir, DiskOptions{})
	for _, n := range []string{"mlp", "encoder"} {
		if err := d.Put(ctx, testKey(n), payloadFor(n, 1000), 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	d.Get(ctx, testKey("mlp"))
	if err := d.FlushStats(ctx); err != nil {
		t.Fatal(err)
	}
	// A corrupt entry is listed as such.
	bad := filepath.Join(dir, strings.Repeat("ab", 32)+".tbc")
	os.WriteFile(bad, []byte("garbage"), 0o600)

	out, err := runCommand(t, "ls", "--dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mlp", "encoder", "pjrt/cuda 12.3", "NVIDIA H100 80GB HBM3 1 device", "f32[2,3]", "2s", "CORRUPT"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls output lacks %q:\n%s", want, out)
		}
	}

	out, err = runCommand(t, "ls", "--dir", dir, "--json")
	var es []EntryInfo
	if err != nil || json.Unmarshal([]byte(out), &es) != nil || len(es) != 3 {
		t.Fatalf("ls --json: %v\n%s", err, out)
	}

	out, err = runCommand(t, "stats", "--json", "--dir", dir)
	var st struct {
		Dir    string
		Usage  Usage
		Totals DiskStats
	}
	if err != nil || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	if st.Usage.Entries != 3 || st.Usage.Corrupt != 1 || st.Totals.Puts != 2 || st.Totals.Hits != 1 ||
		st.Totals.CompileTimeSaved != 2*time.Second || st.Usage.CompileTimeStored != 4*time.Second {
		t.Errorf("stats = %+v", st)
	}
	out, err = runCommand(t, "stats", "--dir", dir)
	if err != nil || !strings.Contains(out, "hits") || !strings.Contains(out, "3 (1 corrupt)") {
		t.Errorf("stats: %v\n%s", err, out)
	}

	out, err = runCommand(t, "clear", "--dir", dir)
	if err != nil || !strings.Contains(out, "removed 3 entries") {
		t.Errorf("clear: %v\n%s", err, out)
	}
	out, err = runCommand(t, "ls", "--dir", dir)
	if err != nil || !strings.Contains(out, "no entries") {
		t.Errorf("ls after clear: %v\n%s", err, out)
	}
}

func TestCommandUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{}, {"list"}, {"ls", "--dir", dir, "extra"}, {"ls", "--bogus"}} {
		if _, err := runCommand(t, args...); !errors.Is(err, ErrUsage) {
			t.Errorf("Command(%q) = %v, want ErrUsage", args, err)
		}
	}
	for _, args := range [][]string{{"-h"}, {"ls", "-h"}} {
		if _, err := runCommand(t, args...); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("Command(%q) = %v, want flag.ErrHelp", args, err)
		}
	}
}

func TestDefaultDir(t *testing.T) {
	env := map[string]string{EnvDir: "/srv/tbcache"}
	if got, err := DefaultDir(func(k string) string { return env[k] }); err != nil || got != "/srv/tbcache" {
		t.Errorf("DefaultDir with %s set = %q, %v", EnvDir, got, err)
	}
	got, err := DefaultDir(func(string) string { return "" })
	if base, berr := os.UserCacheDir(); berr == nil {
		if err != nil || got != filepath.Join(base, "tensorbridge", "compile") {
			t.Errorf("DefaultDir = %q, %v", got, err)
		}
	}
}
