package tensorbridge_test

import (
	"context"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/ir"
)

func TestMain(m *testing.M) {
	if os.Getenv(tensorbridge.MultiHostRoleEnv) != "" { // a process of TestMultiHostXLACPU (multihost_internal_test.go)
		os.Exit(tensorbridge.MultiHostWorker())
	}
	// Keep the tests' compile-cache entries out of the user's cache.
	if os.Getenv("TENSORBRIDGE_CACHE_DIR") == "" {
		dir, err := os.MkdirTemp("", "tensorbridge-test-cache")
		if err == nil {
			os.Setenv("TENSORBRIDGE_CACHE_DIR", dir)
			code := m.Run()
			os.RemoveAll(dir)
			os.Exit(code)
		}
	}
	os.Exit(m.Run())
}

func needXLACPU(t *testing.T) {
	t.Helper()
	d, ok := driver.Lookup("xla-cpu")
	if !ok {
		t.Fatal("pjrt backend not linked")
	}
	if av := d.Probe(context.Background()); !av.Available {
		testreq.Skipf(t, "xla-cpu unavailable: %s (run scripts/install-plugins.sh xla-cpu)", av.Reason)
	}
}

// A second backend (as after a restart) loads the executable the first
// compiled from the disk cache, and it computes the same; a corrupted entry
// is detected, reported, and recompiled.
func TestDiskCacheAcrossOpens(t *testing.T) {
	needXLACPU(t)
	ctx := context.Background()
	dir := t.TempDir()
	fn := func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		return []*ir.Node{graph.Add(graph.MatMul(in[0], in[0]), graph.Const(g, float32(1)))}, nil
	}
	x := tensors.FromValue([][]float32{{1, 2}, {3, 4}})
	want := [][]float32{{8, 11}, {16, 23}} // [[1,2],[3,4]]^2 + 1
	compileRun := func() tensorbridge.CacheStats {
		b, err := tensorbridge.Open(ctx, "xla-cpu", tensorbridge.WithSettings(tensorbridge.Settings{CacheDir: dir}))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		exe, err := b.Compile(ctx, "square-plus-one", fn, ir.MakeShape(ir.Float32, 2, 2))
		if err != nil {
			t.Fatal(err)
		}
		out, err := exe.Run(ctx, x)
		if err != nil {
			t.Fatal(err)
		}
		got := out[0].Value().([][]float32)
		for i := range want {
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("got %v, want %v", got, want)
				}
			}
		}
		return b.CacheStats()
	}
	if s := compileRun(); s.Hits != 0 || s.Misses != 1 || s.Dir != dir {
		t.Fatalf("first open: %+v, want 1 miss in %s", s, dir)
	}
	if s := compileRun(); s.Hits != 1 || s.Misses != 0 {
		t.Fatalf("second open: %+v, want 1 hit", s)
	}
	// Corrupt every entry: the next open must notice, recompile, and store
	// a good entry again.
	entries, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	if len(entries) == 0 {
		entries, _ = filepath.Glob(filepath.Join(dir, "*"))
	}
	corrupted := 0
	for _, e := range entries {
		st, err := os.Stat(e)
		if err != nil || st.IsDir() || st.Size() < 200 {
			continue
		}
		b, _ := os.ReadFile(e)
		b[len(b)-10] ^= 0xff
		if err := os.WriteFile(e, b, 0o644); err != nil {
			t.Fatal(err)
		}
		corrupted++
	}
	if corrupted == 0 {
		t.Fatalf("no cache entry found under %s", dir)
	}
	s := compileRun()
	if s.Misses != 1 || s.Hits != 0 || len(s.Problems) == 0 || !strings.Contains(strings.Join(s.Problems, " "), "corrupt") {
		t.Fatalf("after corruption: %+v, want a reported corrupt entry and a recompile", s)
	}
	if s := compileRun(); s.Hits != 1 {
		t.Fatalf("after recompiling: %+v, want the replaced entry to hit", s)
	}
}
