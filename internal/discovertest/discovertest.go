// Package discovertest replays known hosts so that tests can run discovery
// against them from any working directory.
//
// The hosts are the fixtures under testdata/hosts: synthetic TPU VMs, GPU
// servers and a GCE VM, built from published facts and named synthetic-*,
// and cpu-only, recorded on a real VM. The tests of package discover and of
// its callers, such as the tensorbridge CLI's devices and doctor commands,
// use them. It is internal: a fixture of this module's tests, not an API.
//
// Each host is a directory testdata/hosts/<name>/ holding root.txtar (the
// filesystem: sysfs, /dev, /proc, cgroup files) and optional sidecars:
// env.json (the environment), metadata.json (metadata-server paths and
// answers), nvml.json (an NVML snapshot), nodes.json (mode and owner of each
// device node, since a fixture cannot mknod). Each host's SOURCE.md says
// where its facts come from and what is synthetic; gen_fixtures.py in
// testdata writes the synthetic hosts and records cpu-only. The fixtures are
// embedded, so nothing depends on the caller's working directory.
//
// The Options a Host carries read nothing of the machine running the test:
// not its filesystem, environment, NVML library or the real metadata
// server.
package discovertest

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tensorbridge/tensorbridge/discover"
)

//go:embed testdata/hosts
var fixtures embed.FS

const hostsDir = "testdata/hosts"

// NotFoundNVML is what discover.SystemNVML answers on a host without the
// NVIDIA driver; its text is the dlopen error recorded on the machine that
// recorded cpu-only (see its SOURCE.md). Hosts without nvml.json use it.
var NotFoundNVML = discover.StaticNVML{Err: fmt.Errorf("%w: libnvidia-ml.so.1: cannot open shared object file: No such file or directory", discover.ErrNVMLNotFound)}

// Hosts returns the names of the fixture hosts, sorted.
func Hosts() []string {
	ents, err := fixtures.ReadDir(hostsDir)
	if err != nil {
		return nil // cannot happen: the directory is embedded
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// Host is one fixture host, unpacked for a test.
type Host struct {
	// Name is the fixture's directory name, e.g. "synthetic-tpu-v4".
	Name string
	// Root is the temporary directory root.txtar was unpacked into; a test
	// may change files under it before running discovery.
	Root string
	// Env is env.json, empty when the host has none.
	Env map[string]string
	// Options inspect only this host: Root, Env from Env, MetadataURL on a
	// loopback server, NVML replaying nvml.json (NotFoundNVML without it),
	// StatNode answering from nodes.json, and Credentials of root (uid 0,
	// gid 0). SelfPID is 0, so no process of the recording is left out of
	// the busy-device scan.
	Options discover.Options

	hits *atomic.Int64
}

// MetadataRequests is the number of requests the host's loopback metadata
// server has received.
func (h *Host) MetadataRequests() int64 { return h.hits.Load() }

// Options returns discover.Options that replay the named host; see Load.
func Options(t testing.TB, host string) discover.Options {
	t.Helper()
	return Load(t, host).Options
}

// Load unpacks testdata/hosts/<host>/root.txtar into t.TempDir() and builds
// Options reading only it. A loopback httptest server stands in for the
// metadata server: it answers the paths of metadata.json (requiring the
// Metadata-Flavor: Google request header, as GCE's does) and 404 to every
// other path. It is started for every host, with or without metadata.json,
// so that no test can reach the real metadata server; t.Cleanup closes it.
// Load fails the test when the host is unknown or its files are malformed.
func Load(t testing.TB, host string) *Host {
	t.Helper()
	if !validName(host) {
		t.Fatalf("discovertest: unknown host %q; hosts: %s", host, strings.Join(Hosts(), ", "))
	}
	dir := path.Join(hostsDir, host)
	archive, err := fixtures.ReadFile(path.Join(dir, "root.txtar"))
	if err != nil {
		t.Fatalf("discovertest: unknown host %q (%v); hosts: %s", host, err, strings.Join(Hosts(), ", "))
	}
	root := t.TempDir()
	if err := unpack(root, archive); err != nil {
		t.Fatalf("discovertest: %s/root.txtar: %v", dir, err)
	}
	h := &Host{Name: host, Root: root, Env: map[string]string{}, hits: &atomic.Int64{}}

	readJSON := func(file string, v any) bool {
		b, err := fixtures.ReadFile(path.Join(dir, file))
		if errors.Is(err, fs.ErrNotExist) {
			return false
		}
		if err != nil {
			t.Fatalf("discovertest: %s/%s: %v", dir, file, err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("discovertest: %s/%s: %v", dir, file, err)
		}
		return true
	}
	readJSON("env.json", &h.Env)

	var rawNodes map[string]struct {
		Mode string `json:"mode"`
		UID  int    `json:"uid"`
		GID  int    `json:"gid"`
	}
	nodes := map[string]discover.NodeStat{}
	if readJSON("nodes.json", &rawNodes) {
		for p, n := range rawNodes {
			m, err := strconv.ParseUint(n.Mode, 8, 32)
			if err != nil || m > 0o7777 {
				t.Fatalf("discovertest: %s/nodes.json %s: mode %q: want octal permission bits like 0660", dir, p, n.Mode)
			}
			nodes[p] = discover.NodeStat{Mode: fs.FileMode(m) | fs.ModeDevice | fs.ModeCharDevice, UID: n.UID, GID: n.GID}
		}
	}

	var nvml discover.NVML = NotFoundNVML
	var snap discover.NVMLSnapshot
	if readJSON("nvml.json", &snap) {
		nvml = discover.StaticNVML{Snap: &snap}
	}

	md := map[string]string{}
	readJSON("metadata.json", &md)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		w.Header().Set("Metadata-Flavor", "Google")
		if r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "missing Metadata-Flavor request header", http.StatusForbidden)
			return
		}
		v, ok := md[strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, v)
	}))
	t.Cleanup(srv.Close)

	h.Options = discover.Options{
		Root:        root,
		Env:         discover.EnvMap(h.Env),
		MetadataURL: srv.URL + "/computeMetadata/v1",
		NVML:        nvml,
		Credentials: &discover.Credentials{UID: 0, GID: 0},
		StatNode: func(p string) (discover.NodeStat, error) {
			if n, ok := nodes[p]; ok {
				return n, nil
			}
			fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
			if err != nil {
				return discover.NodeStat{}, err
			}
			return discover.NodeStat{Mode: fi.Mode()}, nil
		},
	}
	return h
}

// validName accepts a single path element, so a host name cannot reach
// outside testdata/hosts.
func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`)
}

// unpack writes a txtar archive under root. "-- name --" starts a file whose
// content runs to the next marker line; "-- name -> target --" is a
// symbolic link. Text before the first marker is a comment. Names must be
// relative and stay inside root.
func unpack(root string, archive []byte) error {
	var (
		name, target string
		link, open   bool
		content      strings.Builder
	)
	flush := func() error {
		if !open {
			return nil
		}
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if link {
			return os.Symlink(target, p)
		}
		return os.WriteFile(p, []byte(content.String()), 0o644)
	}
	for i, line := range strings.SplitAfter(string(archive), "\n") {
		marker := strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(marker, "-- ") && strings.HasSuffix(marker, " --") && len(marker) > 6 {
			if err := flush(); err != nil {
				return err
			}
			name, target, link, open = marker[3:len(marker)-3], "", false, true
			content.Reset()
			if n, tgt, ok := strings.Cut(name, " -> "); ok {
				name, target, link = n, tgt, true
			}
			if !filepath.IsLocal(filepath.FromSlash(name)) {
				return fmt.Errorf("line %d: unsafe path %q: want a relative path inside the root", i+1, name)
			}
			continue
		}
		if open && !link {
			content.WriteString(line)
		}
	}
	return flush()
}
