package serve

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// A token mounted as a Kubernetes Secret volume is a symlink chain
// (token -> ..data/token, ..data -> ..2026_11_26_v1) that an update swaps
// atomically by renaming a new ..data link over the old one: the next
// check reads the new token, and the old one is refused. An emptied file
// refuses every token (closed, not open). (Proved once by skipping the
// change check: the old token was still accepted after the swap.)
func TestTokenFileSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, token string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "token"), []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", "first-token")
	if err := os.Symlink(filepath.Join("..data", "token"), filepath.Join(dir, "token")); err != nil {
		t.Fatal(err)
	}
	tf, err := newTokenFile(filepath.Join(dir, "token"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	check := func(header string, ok bool) {
		t.Helper()
		err := tf.check(header)
		var ue *UnauthenticatedError
		if ok != (err == nil) || (err != nil && !errors.As(err, &ue)) {
			t.Fatalf("%q: %v, want ok=%v", header, err, ok)
		}
	}
	check("Bearer first-token", true)
	check("Bearer second-token", false)
	version("..v2", "second-token")
	check("Bearer first-token", false)
	check("Bearer second-token", true)
	if err := os.WriteFile(filepath.Join(dir, "..v2", "token"), []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("Bearer second-token", false)
	check("Bearer ", false)
	check("", false)
}
