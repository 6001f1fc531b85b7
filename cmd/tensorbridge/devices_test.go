package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestDevicesNamesPluginsByBackend: `devices` names each PJRT plugin file
// by the backend that loads it, as `plugins list` (its "backend"),
// `--backend` and `plugins install` do: XLA's CPU plugin
// (pjrt_c_api_cpu_plugin.so, plugin name "cpu") is xla-cpu, never cpu,
// the embedded backend's name; a file no backend loads says so. The text
// and the JSON agree with `plugins list --json`. Fault injected: printing
// p.Name as before fails the text check with "cpu".
func TestDevicesNamesPluginsByBackend(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"pjrt_c_api_cpu_plugin.so", "pjrt_c_api_tpu_plugin.so", "pjrt_c_api_mystery_plugin.so"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not loaded"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", t.TempDir()) // no per-user plugin directory
	t.Setenv("TENSORBRIDGE_PLUGIN_PATH", dir)

	code, stdout, stderr := run(t, "devices", "--no-metadata")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		`(?m)^  xla-cpu\s+` + regexp.QuoteMeta(filepath.Join(dir, "pjrt_c_api_cpu_plugin.so")) + ` \(`,
		`(?m)^  tpu\s+` + regexp.QuoteMeta(filepath.Join(dir, "pjrt_c_api_tpu_plugin.so")) + ` \(`,
		`(?m)^  -\s+` + regexp.QuoteMeta(filepath.Join(dir, "pjrt_c_api_mystery_plugin.so")) + ` \(.*no backend loads a "mystery" plugin\)`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("output lacks %s:\n%s", want, stdout)
		}
	}
	if regexp.MustCompile(`(?m)^  cpu\s`).MatchString(stdout) {
		t.Errorf("a plugin is listed as cpu (the embedded backend's name):\n%s", stdout)
	}

	type plugin struct {
		Name, Path, Backend string
	}
	backends := func(args ...string) map[string]string {
		code, stdout, stderr := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		var doc struct{ Plugins []plugin }
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		m := map[string]string{}
		for _, p := range doc.Plugins {
			if filepath.Dir(p.Path) == dir {
				m[filepath.Base(p.Path)] = p.Name + "/" + p.Backend
			}
		}
		return m
	}
	dev, list := backends("devices", "--json", "--no-metadata"), backends("plugins", "list", "--json")
	want := map[string]string{"pjrt_c_api_cpu_plugin.so": "cpu/xla-cpu", "pjrt_c_api_tpu_plugin.so": "tpu/tpu", "pjrt_c_api_mystery_plugin.so": "mystery/"}
	for f, w := range want {
		if dev[f] != w || list[f] != w {
			t.Errorf("%s: devices --json %q, plugins list --json %q, want name/backend %q", f, dev[f], list[f], w)
		}
	}
}
