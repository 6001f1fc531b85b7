package discovertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/discover"
)

func TestHosts(t *testing.T) {
	// The host directories of testdata/hosts (see its README.md).
	want := []string{"cpu-only", "synthetic-amd-mi300x", "synthetic-gce-cpu-gvnic", "synthetic-nvidia-8xh100", "synthetic-nvidia-no-nvml",
		"synthetic-tpu-v4", "synthetic-tpu-v4-busy", "synthetic-tpu-v5litepod-8", "synthetic-tpu-v5p", "synthetic-tpu-v6e-8", "synthetic-tpu7x"}
	if got := Hosts(); !slices.Equal(got, want) {
		t.Errorf("Hosts() = %v, want %v", got, want)
	}
}

func TestLoadFromAnyDirectory(t *testing.T) {
	t.Chdir(t.TempDir()) // the fixtures must not be looked up relative to the working directory
	h := Load(t, "synthetic-tpu-v4-busy")

	// root.txtar: a file (1ae0:005e is TPU v4, tpu-v4-busy/SOURCE.md via
	// tpu-v4) and a link (/proc/4242/fd/17 holds /dev/accel0).
	b, err := os.ReadFile(filepath.Join(h.Root, "sys/bus/pci/devices/0000:00:04.0/device"))
	if err != nil || string(b) != "0x005e\n" {
		t.Errorf("PCI device file: %q, %v; want 0x005e", b, err)
	}
	if tgt, err := os.Readlink(filepath.Join(h.Root, "proc/4242/fd/17")); err != nil || tgt != "/dev/accel0" {
		t.Errorf("fd link: %q, %v; want /dev/accel0", tgt, err)
	}
	// env.json, and nothing of this process's environment.
	if v, ok := h.Options.Env("TENSORBRIDGE_NO_METADATA"); !ok || v != "1" {
		t.Errorf("env TENSORBRIDGE_NO_METADATA = %q, %v; want 1", v, ok)
	}
	if _, ok := h.Options.Env("PATH"); ok {
		t.Error("the host environment leaks PATH from the test process")
	}
	// nodes.json: /dev/accel0 is a 0666 character device owned by root.
	st, err := h.Options.StatNode("/dev/accel0")
	if err != nil || st.Mode != fs.ModeDevice|fs.ModeCharDevice|0o666 || st.UID != 0 || st.GID != 0 {
		t.Errorf("StatNode(/dev/accel0) = %+v, %v", st, err)
	}
	if h.Options.Root != h.Root || h.Options.SelfPID != 0 || h.Options.Credentials == nil || h.Options.Credentials.UID != 0 {
		t.Errorf("options %+v", h.Options)
	}
}

func TestMetadataServer(t *testing.T) {
	h := Load(t, "synthetic-tpu-v4")
	get := func(path string, flavor bool) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, h.Options.MetadataURL+path, nil)
		if flavor {
			req.Header.Set("Metadata-Flavor", "Google")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("Metadata-Flavor") != "Google" {
			t.Errorf("%s: response lacks Metadata-Flavor: Google", path)
		}
		return resp.StatusCode, string(b)
	}
	// metadata.json of tpu-v4: accelerator-type v4-8.
	if code, body := get("/instance/attributes/accelerator-type", true); code != 200 || body != "v4-8" {
		t.Errorf("accelerator-type: %d %q, want 200 v4-8", code, body)
	}
	if code, _ := get("/instance/attributes/accelerator-type", false); code != http.StatusForbidden {
		t.Errorf("without Metadata-Flavor: %d, want 403", code)
	}
	if code, _ := get("/instance/attributes/absent", true); code != http.StatusNotFound {
		t.Errorf("absent key: %d, want 404", code)
	}
	if n := h.MetadataRequests(); n != 3 {
		t.Errorf("MetadataRequests() = %d, want 3", n)
	}
	// A host without metadata.json still gets a loopback server, never the
	// real one.
	if u := Options(t, "cpu-only").MetadataURL; !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("cpu-only metadata URL %q, want a loopback server", u)
	}
}

func TestNVML(t *testing.T) {
	// nvidia-8xh100 has nvml.json with 8 H100s; cpu-only has none, so it
	// replays the recorded "library not found".
	snap, err := Options(t, "synthetic-nvidia-8xh100").NVML.Snapshot(context.Background())
	if err != nil || len(snap.Devices) != 8 || snap.Devices[0].Name != "NVIDIA H100 80GB HBM3" || snap.DriverVersion != "545.23.08" {
		t.Errorf("synthetic-nvidia-8xh100 NVML: %+v, %v", snap, err)
	}
	if _, err := Options(t, "cpu-only").NVML.Snapshot(context.Background()); !errors.Is(err, discover.ErrNVMLNotFound) {
		t.Errorf("cpu-only NVML: %v, want ErrNVMLNotFound", err)
	}
}

func TestUnpack(t *testing.T) {
	root := t.TempDir()
	archive := "comment line\n-- a/b.txt --\nline 1\n-- not a marker -\n-- empty --\n-- c/link -> ../a/b.txt --\nignored\n-- last --\nno newline"
	if err := unpack(root, []byte(archive)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a/b.txt": "line 1\n-- not a marker -\n", "empty": "", "c/link": "line 1\n-- not a marker -\n", "last": "no newline"}
	for p, w := range want {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || string(b) != w {
			t.Errorf("%s: %q, %v; want %q", p, b, err, w)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "comment line")); err == nil {
		t.Error("text before the first marker became a file")
	}
	for _, bad := range []string{"-- ../escape --\nx\n", "-- /abs --\nx\n", "-- a/../../b --\n"} {
		if err := unpack(t.TempDir(), []byte(bad)); err == nil || !strings.Contains(err.Error(), "unsafe path") {
			t.Errorf("%q: err %v, want an unsafe path error", bad, err)
		}
	}
}

// fatalTB records Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestLoadUnknownHost(t *testing.T) {
	for _, name := range []string{"no-such-host", "../hosts", "", "synthetic-tpu-v4/root.txtar"} {
		tb := &fatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Load(tb, name)
		}()
		<-done
		if !strings.Contains(tb.msg, "unknown host") || !strings.Contains(tb.msg, "synthetic-tpu-v4") {
			t.Errorf("Load(%q): fatal %q, want unknown host listing the hosts", name, tb.msg)
		}
	}
}

// recordedHosts are the fixtures captured on a real host; every other one
// is built from published facts and must say so in its name and in the
// title of its SOURCE.md.
var recordedHosts = map[string]bool{"cpu-only": true}

// Every fixture is honest about where it comes from: a host not recorded
// is named synthetic-*, and its SOURCE.md title says "synthetic"; a
// recorded one says "recorded". A SOURCE.md cites its sources by URL or by
// a file of this repository, never by a path outside it (the team's notes
// under shared/, section numbers of a document not in the repository).
func TestHostsNamedHonestly(t *testing.T) {
	for _, h := range Hosts() {
		b, err := fixtures.ReadFile(hostsDir + "/" + h + "/SOURCE.md")
		if err != nil {
			t.Errorf("%s: %v", h, err)
			continue
		}
		src := string(b)
		title, _, _ := strings.Cut(src, "\n")
		if recordedHosts[h] {
			if strings.HasPrefix(h, "synthetic-") || !strings.Contains(title, "recorded") {
				t.Errorf("%s is recorded: its name must not say synthetic and its title must say recorded: %q", h, title)
			}
		} else if !strings.HasPrefix(h, "synthetic-") || !strings.Contains(strings.ToLower(title), "synthetic") {
			t.Errorf("%s was not recorded on a host: name it synthetic-* and say synthetic in its title: %q", h, title)
		}
		for _, bad := range []string{"shared/", "§", "hardware-and-runtimes", "reference =", "(reference"} {
			if strings.Contains(src, bad) {
				t.Errorf("%s/SOURCE.md cites %q: cite the public URL or a file in this repository", h, bad)
			}
		}
	}
}
