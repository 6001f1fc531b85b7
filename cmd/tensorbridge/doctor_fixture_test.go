package main

import (
	"context"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/internal/discovertest"
)

// doctor on the fixture hosts: what it says about the accelerators found
// there. The synthetic-* hosts are built from published facts (each
// fixture's SOURCE.md cites them); cpu-only was recorded on a real VM.
func TestDoctorOnFixtureHosts(t *testing.T) {
	tests := []struct {
		host   string
		area   string
		status string
		want   []string // substrings of that area's findings, with fixes
	}{
		{"synthetic-tpu-v4", "tpu", statusProblem, []string{"4 TPU device(s) found, 4 usable (slice v4-8)", "no tpu PJRT plugin", "plugins install tpu"}},
		{"synthetic-tpu-v4-busy", "tpu", statusProblem, []string{"held open by process 4242 (python3)", "kill 4242", "4 TPU device(s) found, 3 usable"}},
		{"synthetic-tpu-v6e-8", "tpu", statusProblem, []string{"8 TPU device(s) found"}},
		{"synthetic-nvidia-8xh100", "cuda", statusProblem, []string{"8 NVIDIA GPU device(s) found", "plugins install cuda"}},
		{"synthetic-amd-mi300x", "rocm", statusProblem, []string{"8 AMD GPU device(s) found"}},
		{"cpu-only", "tpu", statusMissing, []string{"no TPU on this host", "tpu-vm create"}},
		// A GCE VM's gVNIC network card shares Google's PCI vendor ID: not a TPU.
		{"synthetic-gce-cpu-gvnic", "tpu", statusMissing, []string{"no TPU on this host", "tpu-vm create"}},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			rep, err := discover.Discover(context.Background(), discovertest.Options(t, tc.host))
			if err != nil {
				t.Fatal(err)
			}
			var text []string
			worst := ""
			for _, f := range diagnose(rep, []string{"cpu", "cuda", "rocm", "tpu", "xla-cpu"}, nil) {
				if f.Area != tc.area {
					continue
				}
				text = append(text, f.Message+" | fix: "+f.Fix)
				if f.Status == statusProblem || (worst == "" && f.Status != statusInfo) {
					worst = f.Status
				}
			}
			all := strings.Join(text, "\n")
			t.Logf("%s:\n%s", tc.area, all)
			if worst != tc.status {
				t.Errorf("%s status %q, want %q:\n%s", tc.area, worst, tc.status, all)
			}
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("%s findings lack %q:\n%s", tc.area, w, all)
				}
			}
		})
	}
}
