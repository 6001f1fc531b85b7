//go:build linux

package discover_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/discover"
)

// TestRealMachine runs Discover on the host running the test, with every
// option at its default, and checks it against what the kernel says
// through other channels (runtime.NumCPU, sysinfo(2)). It asserts the
// CPU-only case, so it skips on a machine with a TPU or GPU.
func TestRealMachine(t *testing.T) {
	// Independent look at the PCI bus: any Google TPU, NVIDIA or AMD function?
	vendors, _ := filepath.Glob("/sys/bus/pci/devices/*/vendor")
	for _, v := range vendors {
		b, _ := os.ReadFile(v)
		switch strings.TrimSpace(string(b)) {
		case "0x1ae0", "0x10de", "0x1002":
			t.Skipf("%s is an accelerator vendor: this test covers CPU-only hosts", v)
		}
	}
	rep, err := discover.Discover(context.Background(), discover.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rep.Devices); n != 1 || rep.Devices[0].Platform != device.CPU {
		t.Fatalf("devices %v, want only the CPU", ids(rep.Devices))
	}
	c := rep.Devices[0]
	if c.ID != "cpu:0" || c.Cores != runtime.NumCPU() {
		t.Errorf("cpu device %q cores %d, want cpu:0 with runtime.NumCPU() = %d", c.ID, c.Cores, runtime.NumCPU())
	}
	h := rep.Host
	if h.CPU.LogicalCPUs < runtime.NumCPU() || h.CPU.AllowedCPUs != runtime.NumCPU() {
		t.Errorf("logical %d allowed %d, want logical >= %d = allowed", h.CPU.LogicalCPUs, h.CPU.AllowedCPUs, runtime.NumCPU())
	}
	if runtime.GOARCH == "amd64" && h.CPU.Model == "" {
		t.Error("no CPU model name on x86-64")
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err == nil {
		if want := uint64(si.Totalram) * uint64(si.Unit); h.Memory.TotalBytes != want {
			t.Errorf("MemTotal %d, sysinfo(2) says %d", h.Memory.TotalBytes, want)
		}
	}
	if h.Memory.EffectiveBytes == 0 || h.Memory.EffectiveBytes > h.Memory.TotalBytes || c.Memory.Total != h.Memory.EffectiveBytes {
		t.Errorf("effective memory %d (cpu device %d), total %d", h.Memory.EffectiveBytes, c.Memory.Total, h.Memory.TotalBytes)
	}
	p, _ := rep.Probe(discover.ProbeMetadata)
	if h.Cloud.GCE {
		t.Logf("this host is a GCE VM (%s); metadata probe: %+v", h.Cloud.Reason, p)
	} else if !strings.HasPrefix(p.Skipped, "no evidence of a GCE VM") || p.Found != 0 {
		t.Errorf("metadata probe %+v, want skipped for lack of GCE evidence", p)
	}
	p, _ = rep.Probe(discover.ProbeNVML)
	if libs, _ := filepath.Glob("/usr/lib*/*/libnvidia-ml.so*"); len(libs) == 0 && !strings.Contains(p.Skipped, "libnvidia-ml.so.1") {
		t.Errorf("nvml probe %+v, want skipped with the library not found", p)
	}
	for _, name := range []string{discover.ProbePCI, discover.ProbeDeviceNodes, discover.ProbeCPU} {
		if p, _ := rep.Probe(name); p.Err != "" || p.Skipped != "" {
			t.Errorf("probe %s: %+v, want a clean run", name, p)
		}
	}
	t.Logf("cpu %q: %d logical, %d cores, %d sockets, features %v; memory %d (%s)",
		h.CPU.Model, h.CPU.LogicalCPUs, h.CPU.PhysicalCores, h.CPU.Sockets, h.CPU.Features, h.Memory.EffectiveBytes, h.Memory.EffectiveSource)
}
