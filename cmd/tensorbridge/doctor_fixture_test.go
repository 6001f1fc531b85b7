package main

import (
	"context"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/discover/discovertest"
)

// doctor on recorded hosts: what it says about the accelerators found
// there (facts from each fixture's SOURCE.md).
func TestDoctorOnRecordedHosts(t *testing.T) {
	tests := []struct {
		host   string
		area   string
		status string
		want   []string // substrings of that area's findings, with fixes
	}{
		{"tpu-v4", "tpu", statusProblem, []string{"4 TPU device(s) found, 4 usable (slice v4-8)", "no tpu PJRT plugin", "plugins install tpu"}},
		{"tpu-v4-busy", "tpu", statusProblem, []string{"held open by process 4242 (python3)", "kill 4242", "4 TPU device(s) found, 3 usable"}},
		{"tpu-v6e-8", "tpu", statusProblem, []string{"8 TPU device(s) found"}},
		{"nvidia-8xh100", "cuda", statusProblem, []string{"8 NVIDIA GPU device(s) found", "plugins install cuda"}},
		{"amd-mi300x", "rocm", statusProblem, []string{"8 AMD GPU device(s) found"}},
		{"cpu-only", "tpu", statusMissing, []string{"no TPU on this host", "tpu-vm create"}},
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
