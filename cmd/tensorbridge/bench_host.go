package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/tensorbridge/tensorbridge/catalog"
	"github.com/tensorbridge/tensorbridge/device"
)

// hostInfo describes the machine, for reading figures later.
type hostInfo struct {
	CPU        string     `json:"cpu"`
	CPUs       int        `json:"cpus"`
	GOMAXPROCS int        `json:"gomaxprocs"`
	LoadBefore [3]float64 `json:"loadavg_before"`
	LoadAfter  [3]float64 `json:"loadavg_after"`
	GoVersion  string     `json:"go"`
	Malloc     string     `json:"malloc"` // the C allocator's settings (malloc.go)
}

// peakFor returns the catalog's peak rate of dev for the precision, or
// zero and the reason there is none.
func peakFor(dev device.Info, prec string) (float64, string) {
	if dev.Platform == device.CPU || dev.Platform == "" {
		return 0, "no peak for CPUs: the sustained FLOP/cycle and clock of a (virtual) CPU are not discoverable reliably " +
			"(vCPUs may be SMT siblings, turbo clocks vary with load), so no share of peak is given; compare with `tensorbridge matmul` on the same backend"
	}
	a, ok := catalog.ByDeviceKind(dev.Kind)
	if !ok && dev.Generation != "" {
		a, ok = catalog.Lookup(dev.Generation)
	}
	if !ok {
		return 0, fmt.Sprintf("device kind %q is not in the catalog", dev.Kind)
	}
	var f catalog.Figure[float64]
	switch prec {
	case "bfloat16", "auto":
		f = a.PeakBF16
	case "float16":
		f = a.PeakFP16
	default:
		return 0, "the catalog has no float32 peak (accelerators' float32 rates depend on the precision mode of matrix units); run with --precision bfloat16 for a share of peak"
	}
	if !f.Known() {
		return 0, fmt.Sprintf("the catalog has no %s peak for %s", prec, dev.Kind)
	}
	return f.Value, fmt.Sprintf("catalog dense %s peak of %s (%s)", prec, dev.Kind, f.Source)
}

// cpuModel reads the CPU model name from /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// loadAvg reads the 1, 5 and 15-minute load averages; zeros when unknown.
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	fmt.Sscanf(string(b), "%g %g %g", &l[0], &l[1], &l[2])
	return l
}
