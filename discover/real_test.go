//go:build linux

package discover_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/internal/discovertest"
)

// tpuPCIDeviceIDs are the Google PCI device IDs of TPU chips, from jax's
// _TPU_PCI_DEVICE_IDS
// (https://github.com/jax-ml/jax/blob/main/jax/_src/hardware_utils.py):
// v2/v3, v4, the unnamed 0x0056, v5p, v5e, v6e, TPU7x, TPU8t, TPU8i.
var tpuPCIDeviceIDs = map[string]bool{
	"0x0027": true, "0x005e": true, "0x0056": true, "0x0062": true, "0x0063": true,
	"0x006f": true, "0x0076": true, "0x007c": true, "0x0083": true,
}

// acceleratorOnPCI looks at the PCI functions under dir (a
// /sys/bus/pci/devices) independently of package discover and returns the
// first that is a TPU or GPU, by vendor and PCI class (and, for Google, the
// TPU device IDs): a Google function is a TPU only as a processing
// accelerator (class 0x12) or with a TPU device ID, never as a network
// (0x02) or storage (0x01) controller, so the gVNIC network card of every
// GCE VM (1ae0:0042, class 0x020000) is not one; NVIDIA and AMD functions
// count as display controllers (0x03) or processing accelerators (0x12),
// not as their audio or bridge functions.
func acceleratorOnPCI(dir string) (string, bool) {
	devs, _ := filepath.Glob(filepath.Join(dir, "*"))
	read := func(d, f string) string {
		b, _ := os.ReadFile(filepath.Join(d, f))
		return strings.ToLower(strings.TrimSpace(string(b)))
	}
	for _, d := range devs {
		vendor, dev, class := read(d, "vendor"), read(d, "device"), read(d, "class")
		base := ""
		if len(class) >= 4 {
			base = class[:4] // "0x12" of "0x120000"
		}
		desc := fmt.Sprintf("%s (%s:%s class %s)", filepath.Base(d), vendor, dev, class)
		switch vendor {
		case "0x1ae0":
			if base != "0x02" && base != "0x01" && (base == "0x12" || tpuPCIDeviceIDs[dev]) {
				return desc, true
			}
		case "0x10de", "0x1002":
			if base == "0x03" || base == "0x12" {
				return desc, true
			}
		}
	}
	return "", false
}

// TestRealMachine runs Discover on the host running the test, with every
// option at its default, and checks it against what the kernel says
// through other channels (runtime.NumCPU, sysinfo(2)). It asserts the
// CPU-only case, so it skips on a machine with a TPU or GPU, and only
// there: an ordinary GCE VM, whose gVNIC shares Google's PCI vendor ID,
// runs it.
func TestRealMachine(t *testing.T) {
	if acc, ok := acceleratorOnPCI("/sys/bus/pci/devices"); ok {
		t.Skipf("PCI function %s is a TPU or GPU: this test covers CPU-only hosts", acc)
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

// The skip rule of TestRealMachine, on the fixture hosts: a GCE VM with
// only a gVNIC and the recorded CPU-only VM run the test; TPU, NVIDIA and
// AMD hosts skip it.
func TestRealMachineSkipRule(t *testing.T) {
	for _, c := range []struct {
		host string
		skip bool
	}{
		{"cpu-only", false},
		{"synthetic-gce-cpu-gvnic", false},
		{"synthetic-tpu-v4", true},
		{"synthetic-tpu-v6e-8", true},
		{"synthetic-nvidia-8xh100", true},
		{"synthetic-amd-mi300x", true},
	} {
		h := discovertest.Load(t, c.host)
		acc, skip := acceleratorOnPCI(filepath.Join(h.Root, "sys/bus/pci/devices"))
		if skip != c.skip {
			t.Errorf("%s: skip %v (%s), want %v", c.host, skip, acc, c.skip)
		}
	}
}
