package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// run invokes the CLI in-process and returns exit code, stdout, stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// cpuinfoFlags reads the first "flags" line of /proc/cpuinfo directly, as
// an independent reference for the features the CLI reports.
func cpuinfoFlags(t *testing.T) map[string]bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			m := map[string]bool{}
			for _, f := range strings.Fields(v) {
				m[f] = true
			}
			return m
		}
	}
	t.Skip("no flags line in /proc/cpuinfo")
	return nil
}

// On this machine (no accelerator): the CPU with its real core count and
// SIMD features, and a statement that no accelerator was found.
func TestDevicesJSONOnThisMachine(t *testing.T) {
	code, stdout, stderr := run(t, "devices", "--json", "--no-metadata")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Devices []struct {
			ID       string   `json:"id"`
			Platform string   `json:"platform"`
			Cores    int      `json:"cores"`
			Features []string `json:"features"`
			Memory   struct {
				Total uint64 `json:"total_bytes"`
			} `json:"memory"`
		} `json:"devices"`
		Accelerators int    `json:"accelerators"`
		Summary      string `json:"summary"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	if got.Accelerators != 0 || !strings.HasPrefix(got.Summary, "no accelerator found") {
		t.Skipf("this host has accelerators (%d): %s", got.Accelerators, got.Summary)
	}
	if len(got.Devices) != 1 || got.Devices[0].Platform != "cpu" || got.Devices[0].ID != "cpu:0" {
		t.Fatalf("devices %+v, want exactly cpu:0", got.Devices)
	}
	cpu := got.Devices[0]
	if cpu.Cores != runtime.NumCPU() {
		t.Errorf("cores %d, runtime.NumCPU() %d", cpu.Cores, runtime.NumCPU())
	}
	if cpu.Memory.Total == 0 {
		t.Errorf("no memory reported")
	}
	flags := cpuinfoFlags(t)
	for _, f := range []string{"avx2", "fma", "avx512f", "amx_tile"} {
		name := strings.ReplaceAll(f, "_", "-")
		if flags[f] != slices.Contains(cpu.Features, name) {
			t.Errorf("feature %s: cpuinfo %v, reported %v", name, flags[f], slices.Contains(cpu.Features, name))
		}
	}
}

func TestDevicesTable(t *testing.T) {
	code, stdout, stderr := run(t, "devices", "--no-metadata", "--backend", "cpu")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"ID", "PLATFORM", "cpu:0", "Backend cpu reports"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

// doctor on this machine explains what TPU and GPU use would need.
func TestDoctorOnThisMachine(t *testing.T) {
	code, stdout, stderr := run(t, "doctor", "--json", "--no-metadata")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Findings []Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	byArea := map[string]Finding{}
	for _, f := range got.Findings {
		if _, seen := byArea[f.Area]; !seen {
			byArea[f.Area] = f
		}
	}
	if f := byArea["cpu"]; f.Status != statusOK {
		t.Errorf("cpu finding %+v, want ok", f)
	}
	for _, area := range []string{"tpu", "cuda", "rocm"} {
		f, ok := byArea[area]
		if !ok {
			t.Errorf("no %s finding", area)
			continue
		}
		if f.Status == statusMissing && f.Fix == "" {
			t.Errorf("%s is missing but no fix is given: %+v", area, f)
		}
	}
	if f := byArea["tpu"]; f.Status == statusMissing && !strings.Contains(f.Fix, "tpu-vm create") {
		t.Errorf("tpu fix %q does not say how to get a TPU VM", f.Fix)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Commands:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"devices", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"devices", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"devices", "--backend", "tpu", "--no-metadata"}, 1, "tpu is unavailable"},
		{[]string{"version", "-h"}, 0, "Usage: tensorbridge version"},
	}
	for _, tc := range tests {
		code, _, stderr := run(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}
