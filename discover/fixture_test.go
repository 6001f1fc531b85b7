package discover

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tensorbridge/tensorbridge/device"
)

// A host fixture is testdata/hosts/<name>/: root.txtar (the filesystem,
// materialised into a temporary directory), and optional env.json,
// metadata.json, nvml.json and nodes.json. See gen_fixtures.py.

// materialize unpacks a txtar archive into a new temporary directory.
// "-- path --" starts a file whose content runs to the next marker;
// "-- path -> target --" is a symbolic link.
func materialize(t testing.TB, archive string) string {
	t.Helper()
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	type entry struct {
		name, target string
		content      strings.Builder
		link         bool
	}
	var cur *entry
	flush := func() {
		if cur == nil {
			return
		}
		p := filepath.Join(root, filepath.FromSlash(cur.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if cur.link {
			if err := os.Symlink(cur.target, p); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(p, []byte(cur.content.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.SplitAfter(string(data), "\n")
	for _, line := range lines {
		trimmed := strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			flush()
			name := trimmed[3 : len(trimmed)-3]
			cur = &entry{name: name}
			if n, tgt, ok := strings.Cut(name, " -> "); ok {
				cur.name, cur.target, cur.link = n, tgt, true
			}
			if strings.Contains(cur.name, "..") || strings.HasPrefix(cur.name, "/") {
				t.Fatalf("%s: unsafe path %q", archive, cur.name)
			}
			continue
		}
		if cur != nil && !cur.link {
			cur.content.WriteString(line)
		}
	}
	flush()
	return root
}

// problemCodes lists the sorted codes of ps.
func problemCodes(ps []device.Problem) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Code)
	}
	slices.Sort(out)
	return out
}

// fixture is a loaded host.
type fixture struct {
	name     string
	root     string
	env      map[string]string
	nodes    map[string]NodeStat
	nvml     NVML
	metadata *httptest.Server
	hits     *atomic.Int64
}

// notFoundNVML is what SystemNVML answers on a host without the NVIDIA
// driver; the wording is this machine's dlopen error (recorded here).
var notFoundNVML = StaticNVML{Err: fmt.Errorf("%w: libnvidia-ml.so.1: cannot open shared object file: No such file or directory", ErrNVMLNotFound)}

func loadFixture(t testing.TB, name string) *fixture {
	t.Helper()
	dir := filepath.Join("testdata", "hosts", name)
	f := &fixture{name: name, root: materialize(t, filepath.Join(dir, "root.txtar")), env: map[string]string{}, nvml: notFoundNVML}
	readJSON := func(file string, v any) bool {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if errors.Is(err, fs.ErrNotExist) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s/%s: %v", dir, file, err)
		}
		return true
	}
	readJSON("env.json", &f.env)
	var nodes map[string]struct {
		Mode string `json:"mode"`
		UID  int    `json:"uid"`
		GID  int    `json:"gid"`
	}
	if readJSON("nodes.json", &nodes) {
		f.nodes = map[string]NodeStat{}
		for p, n := range nodes {
			m, err := strconv.ParseUint(n.Mode, 8, 32)
			if err != nil {
				t.Fatalf("%s nodes.json %s: mode %q: %v", dir, p, n.Mode, err)
			}
			f.nodes[p] = NodeStat{Mode: fs.FileMode(m) | fs.ModeDevice | fs.ModeCharDevice, UID: n.UID, GID: n.GID}
		}
	}
	var snap NVMLSnapshot
	if readJSON("nvml.json", &snap) {
		f.nvml = StaticNVML{Snap: &snap}
	}
	md := map[string]string{}
	readJSON("metadata.json", &md)
	f.hits = &atomic.Int64{}
	f.metadata = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		w.Header().Set("Metadata-Flavor", "Google")
		if r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "missing Metadata-Flavor request header", http.StatusForbidden)
			return
		}
		key := strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/")
		v, ok := md[key]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, v)
	}))
	t.Cleanup(f.metadata.Close)
	return f
}

// options returns Options that read only the fixture.
func (f *fixture) options() Options {
	return Options{
		Root:        f.root,
		Env:         EnvMap(f.env),
		MetadataURL: f.metadata.URL + "/computeMetadata/v1",
		NVML:        f.nvml,
		Credentials: &Credentials{UID: 0, GID: 0},
		StatNode: func(p string) (NodeStat, error) {
			if n, ok := f.nodes[p]; ok {
				return n, nil
			}
			fi, err := os.Stat(filepath.Join(f.root, p))
			if err != nil {
				return NodeStat{}, err
			}
			return NodeStat{Mode: fi.Mode()}, nil
		},
	}
}
