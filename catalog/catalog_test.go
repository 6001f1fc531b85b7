package catalog

import (
	"math"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/device"
)

func TestValidate(t *testing.T) {
	if err := validate(); err != nil {
		t.Fatalf("validate() = %v", err)
	}
}

// Expected values below are typed in from the Google, NVIDIA and AMD
// documentation and jax tpu_info.py (the URLs in doc.go), not copied from
// the catalog.
const (
	giB = 1 << 30
	miB = 1 << 20
)

func TestFiguresAgainstReference(t *testing.T) {
	type num = float64
	tests := []struct {
		gen              string
		mem              num // bytes
		bw               num // bytes/s
		bf16, fp8, int8  num // op/s, 0 = not known/none
		cores            int
		chipsPerHost     int
		mxuRows, mxuCols int
		mxusPerCore      int
		platform         device.Platform
	}{
		{"v4", 32 * giB, 1200e9, 275e12, 0, 275e12, 2, 4, 128, 128, 4, device.TPU},
		{"v5e", 16 * giB, 819e9, 197e12, 0, 393e12, 1, 8, 128, 128, 4, device.TPU},
		{"v5p", 95 * giB, 2765e9, 459e12, 459e12, 918e12, 2, 4, 128, 128, 4, device.TPU},
		{"v6e", 32 * giB, 1638e9, 918e12, 918e12, 1836e12, 1, 8, 256, 256, 2, device.TPU},
		{"tpu7x", 192 * giB, 7.40e12, 2307e12, 4614e12, 0, 2, 4, 0, 256, 2, device.TPU},
		{"tpu8i", 309e9, 8.6e12, 0, 8.8e15, 0, 0, 0, 0, 0, 0, device.TPU},
		{"tpu8t", 231e9, 6.4e12, 0, 0, 0, 0, 0, 0, 0, 0, device.TPU},
		{"v2", 0, 0, 0, 0, 0, 2, 4, 0, 128, 0, device.TPU},
		{"v3", 0, 0, 0, 0, 0, 2, 4, 0, 128, 0, device.TPU},
		{"v100", 0, 900e9, 0, 0, 62e12, 0, 0, 0, 0, 0, device.CUDA},
		{"a100-40gb", 40e9, 1.555e12, 312e12, 0, 624e12, 108, 0, 0, 0, 0, device.CUDA},
		{"a100-80gb", 80e9, 2.039e12, 312e12, 0, 624e12, 108, 0, 0, 0, 0, device.CUDA},
		{"h100-sxm", 80e9, 3.35e12, 989.4e12, 1978.9e12, 1978.9e12, 132, 0, 0, 0, 0, device.CUDA},
		{"h100-pcie", 80e9, 2.0e12, 756e12, 1513e12, 1513e12, 114, 0, 0, 0, 0, device.CUDA},
		{"h200", 141e9, 4.8e12, 989.4e12, 1978.9e12, 1978.9e12, 0, 0, 0, 0, 0, device.CUDA},
		{"b200", 192e9, 8e12, 2250e12, 4500e12, 4500e12, 0, 0, 0, 0, 0, device.CUDA},
		{"mi250x", 128e9, 3.2768e12, 383e12, 0, 383e12, 220, 0, 0, 0, 0, device.ROCm},
		{"mi300x", 192e9, 5.3e12, 1307.4e12, 2614.9e12, 2614.9e12, 304, 0, 0, 0, 0, device.ROCm},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }
	for _, tc := range tests {
		t.Run(tc.gen, func(t *testing.T) {
			a, ok := Lookup(tc.gen)
			if !ok {
				t.Fatalf("Lookup(%q) not found", tc.gen)
			}
			if a.Platform != tc.platform {
				t.Errorf("Platform = %q, want %q", a.Platform, tc.platform)
			}
			check := func(name string, got, want float64) {
				t.Helper()
				if !near(got, want) {
					t.Errorf("%s = %g, want %g", name, got, want)
				}
			}
			check("Memory", float64(a.Memory.Value), tc.mem)
			check("MemoryBandwidth", a.MemoryBandwidth.Value, tc.bw)
			check("PeakBF16", a.PeakBF16.Value, tc.bf16)
			check("PeakFP8", a.PeakFP8.Value, tc.fp8)
			check("PeakINT8", a.PeakINT8.Value, tc.int8)
			check("Cores", float64(a.Cores.Value), float64(tc.cores))
			check("ChipsPerHost", float64(a.ChipsPerHost.Value), float64(tc.chipsPerHost))
			check("MXURows", float64(a.MXURows.Value), float64(tc.mxuRows))
			check("MXUCols", float64(a.MXUCols.Value), float64(tc.mxuCols))
			check("MXUsPerCore", float64(a.MXUsPerCore.Value), float64(tc.mxusPerCore))
		})
	}
}

func TestOtherReferenceFacts(t *testing.T) {
	get := func(g string) Accelerator {
		t.Helper()
		a, ok := Lookup(g)
		if !ok {
			t.Fatalf("Lookup(%q) not found", g)
		}
		return a
	}
	// ICI (store bandwidths with their units).
	if got := get("v5e").Interconnect.BandwidthPerChip.Value; got != 400e9 {
		t.Errorf("v5e ICI = %g, want 400 GBps", got)
	}
	if got := get("v5e").Interconnect.Ports.Value; got != 4 {
		t.Errorf("v5e ICI ports = %d, want 4", got)
	}
	if got := get("v5p").Interconnect.BandwidthPerChip.Value; got != 1200e9 {
		t.Errorf("v5p ICI = %g, want 1200 GBps", got)
	}
	if got := get("v5p").Interconnect.LegacyGbpsPerChip.Value; got != 4800 {
		t.Errorf("v5p legacy ICI = %g, want 4800 Gbps", got)
	}
	if got := get("v4").Interconnect.BandwidthPerLink.Value; got != 4.5e10 {
		t.Errorf("v4 ICI per link = %g, want 4.5e10", got)
	}
	// Unverified legacy Gbps figures must stay unknown.
	for _, g := range []string{"v5e", "v6e"} {
		if f := get(g).Interconnect.LegacyGbpsPerChip; f.Known() || f.Note == "" {
			t.Errorf("%s legacy ICI Gbps = %+v, want unknown with a note", g, f)
		}
	}
	topo := map[string]string{"v4": "3D mesh/torus", "v5e": "2D torus", "v5p": "3D torus", "v6e": "2D torus", "tpu7x": "3D torus"}
	for g, want := range topo {
		if got := get(g).Interconnect.Topology.Value; got != want {
			t.Errorf("%s interconnect topology = %q, want %q", g, got, want)
		}
	}
	// VMEM per TensorCore (tpu_info.py).
	vmem := map[string]uint64{"v4": 16 * miB, "v5e": 128 * miB, "v5p": 64 * miB, "v6e": 128 * miB, "tpu7x": 64 * miB}
	for g, want := range vmem {
		if got := get(g).VMEMPerCore.Value; got != want {
			t.Errorf("%s VMEM = %d, want %d", g, got, want)
		}
	}
	// Megacore: one JAX device per chip on v4 and v5p; the sources conflict on TPU7x.
	for g, want := range map[string]int{"v4": 1, "v5p": 1, "v5e": 1, "v6e": 1, "mi250x": 2} {
		if got := get(g).DevicesPerChip.Value; got != want {
			t.Errorf("%s DevicesPerChip = %d, want %d", g, got, want)
		}
	}
	if f := get("tpu7x").DevicesPerChip; f.Known() || !strings.Contains(f.Note, "conflict") {
		t.Errorf("tpu7x DevicesPerChip = %+v, want unknown, noting the conflict", f)
	}
	// Compute capability and gfx targets.
	cc := map[string]string{"v100": "7.0", "a100-40gb": "8.0", "a100-80gb": "8.0", "h100-sxm": "9.0",
		"h100-pcie": "9.0", "h200": "9.0", "b200": "10.0"}
	for g, want := range cc {
		if got := get(g).ComputeCapability.Value; got != want {
			t.Errorf("%s compute capability = %q, want %q", g, got, want)
		}
	}
	if got := get("mi250x").GFXTarget.Value; got != "gfx90a" {
		t.Errorf("mi250x gfx = %q, want gfx90a", got)
	}
	// Pod and maximum slice sizes.
	pods := map[string][2]int{"v4": {4096, 2048}, "v5e": {256, 256}, "v5p": {8960, 6144}, "v6e": {256, 256}, "tpu7x": {9216, 9216}}
	for g, want := range pods {
		r := get(g).TPU
		if r.PodChips.Value != want[0] || r.MaxSliceChips.Value != want[1] {
			t.Errorf("%s pod/max slice = %d/%d, want %d/%d", g, r.PodChips.Value, r.MaxSliceChips.Value, want[0], want[1])
		}
	}
	// Absent versus unknown: V100 has no bf16 (the source says so); v4 fp8 is unknown.
	if f := get("v100").PeakBF16; !f.Absent() {
		t.Errorf("v100 bf16 = %+v, want absent with a source", f)
	}
	if f := get("v4").PeakFP8; f.Known() || f.Absent() {
		t.Errorf("v4 fp8 = %+v, want unknown", f)
	}
	if f := get("v5e").PeakFP8; !f.Absent() {
		t.Errorf("v5e fp8 = %+v, want absent (tpu_info 0)", f)
	}
}

// TorchBridge's spec tables (a project reviewed while building this one) got these wrong.
func TestTorchbridgeErrorsNotRepeated(t *testing.T) {
	a, _ := Lookup("tpu7x")
	if a.Memory.Value != 192*giB {
		t.Errorf("tpu7x memory = %d, want 192 GiB (TorchBridge used 128 GB and 256 GiB)", a.Memory.Value)
	}
	m, _ := Lookup("mi300x")
	if m.GFXTarget.Value != "gfx942" || m.MemoryBandwidth.Value != 5.3e12 || m.Memory.Value != 192e9 {
		t.Errorf("mi300x = %s, %g B/s, %d B; want gfx942, 5.3e12, 192e9 (TorchBridge used the MI325X row)",
			m.GFXTarget.Value, m.MemoryBandwidth.Value, m.Memory.Value)
	}
	v6, _ := Lookup("v6e")
	if v6.Interconnect.BandwidthPerChip.Value != 800e9 {
		t.Errorf("v6e ICI = %g, want 800 GBps (TorchBridge's plan said 13 TB/s)", v6.Interconnect.BandwidthPerChip.Value)
	}
	v4, _ := Lookup("v4")
	if v4.PeakFP16.Known() || v4.PeakBF16.Value != 275e12 {
		t.Errorf("v4 fp16 = %g, bf16 = %g; want fp16 unknown and bf16 275e12 (TorchBridge: 1.1 PFLOPS fp16)",
			v4.PeakFP16.Value, v4.PeakBF16.Value)
	}
	for _, k := range []string{"", "unknown", "TPU"} {
		if a, ok := ByDeviceKind(k); ok {
			t.Errorf("ByDeviceKind(%q) = %s; want no default generation (TorchBridge fell back to v5e)", k, a.Generation)
		}
	}
}

func TestRequiredGenerationsPresent(t *testing.T) {
	want := map[string]device.Platform{
		"v2": device.TPU, "v3": device.TPU, "v4": device.TPU, "v5e": device.TPU, "v5p": device.TPU,
		"v6e": device.TPU, "tpu7x": device.TPU, "tpu8i": device.TPU, "tpu8t": device.TPU,
		"v100": device.CUDA, "a100-40gb": device.CUDA, "a100-80gb": device.CUDA, "h100-sxm": device.CUDA,
		"h100-pcie": device.CUDA, "h200": device.CUDA, "b200": device.CUDA,
		"mi250x": device.ROCm, "mi300x": device.ROCm,
	}
	all := All()
	if len(all) != len(want) {
		t.Errorf("All() has %d entries, want %d", len(all), len(want))
	}
	for _, a := range all {
		p, ok := want[a.Generation]
		if !ok {
			t.Errorf("unexpected entry %q", a.Generation)
			continue
		}
		if a.Platform != p {
			t.Errorf("%s platform = %s, want %s", a.Generation, a.Platform, p)
		}
	}
}

func TestLookup(t *testing.T) {
	if a, ok := Lookup("  V5E "); !ok || a.Generation != "v5e" {
		t.Errorf("Lookup(\"  V5E \") = %q, %v; want v5e", a.Generation, ok)
	}
	for _, g := range []string{"", "v5", "v5litepod", "h100", "tpu7", "v7", "mi325x"} {
		if _, ok := Lookup(g); ok {
			t.Errorf("Lookup(%q) found an entry; want none", g)
		}
	}
}

func TestResultsAreCopies(t *testing.T) {
	a, _ := Lookup("v4")
	a.DeviceKinds[0].Value = "changed"
	a.TPU.Topologies[0][0] = 99
	a.TPU.MaxSliceChips.Value = 1
	a.Memory.Value = 1
	b, _ := Lookup("v4")
	if b.DeviceKinds[0].Value != "TPU v4" || b.TPU.Topologies[0][0] != 2 || b.TPU.MaxSliceChips.Value != 2048 || b.Memory.Value != 32*giB {
		t.Errorf("modifying a Lookup result changed the catalog: %+v", b)
	}
	s, _ := ParseAcceleratorType("v4-8")
	s.Topology[0] = 99
	if s2, _ := ParseAcceleratorType("v4-8"); s2.Topology[0] != 2 {
		t.Error("modifying a parsed Slice's Topology changed the catalog")
	}
	ts := Topologies("v4")
	ts[0][0] = 99
	if Topologies("v4")[0][0] != 2 {
		t.Error("modifying Topologies' result changed the catalog")
	}
}

func TestByDeviceKind(t *testing.T) {
	tests := []struct {
		kind string
		want string // "" = not found
	}{
		// TPU kinds from jax mesh_utils.py / tpu_info.py.
		{"TPU v2", "v2"},
		{"TPU v3", "v3"},
		{"TPU v4", "v4"},
		{"TPU v5 lite", "v5e"},
		{"TPU v5e", "v5e"},
		{"TPU v5", "v5p"},
		{"TPU v5p", "v5p"},
		{"TPU v6 lite", "v6e"},
		{"TPU v6e", "v6e"},
		{"TPU7x", "tpu7x"},
		{"TPU8i", "tpu8i"},
		{"TPU8t", "tpu8t"},
		// Normalisation: case and spaces only.
		{"  tpu   V5  LITE ", "v5e"},
		{"tpu7X", "tpu7x"},
		// GPU marketing names.
		{"NVIDIA H100 80GB HBM3", "h100-sxm"},
		{"nvidia h100 80gb hbm3", "h100-sxm"},
		{"NVIDIA H100 PCIe", "h100-pcie"},
		{"NVIDIA A100-SXM4-40GB", "a100-40gb"},
		{"NVIDIA A100-SXM4-80GB", "a100-80gb"},
		{"Tesla V100-SXM2-16GB", "v100"},
		{"NVIDIA H200", "h200"},
		{"NVIDIA B200", "b200"},
		{"AMD Instinct MI300X", "mi300x"},
		{"AMD Instinct MI250X", "mi250x"},
		// Not in the catalog: never a near match.
		{"TPU v4 lite", ""}, // v4i, a different chip
		{"TPU7", ""},        // defined in jax, not said to be Ironwood
		{"TPU v6", ""},
		{"TPU v5 litepod", ""},
		{"TPUv4", ""},
		{"TPU-v4", ""},
		{"NVIDIA H100 NVL", ""},
		{"NVIDIA A100 80GB PCIe", ""},
		{"NVIDIA H200 NVL", ""},
		{"AMD Instinct MI325X", ""},
		{"gfx942", ""},
		{"", ""},
		{"   ", ""},
	}
	for _, tc := range tests {
		a, ok := ByDeviceKind(tc.kind)
		switch {
		case tc.want == "" && ok:
			t.Errorf("ByDeviceKind(%q) = %s, want not found", tc.kind, a.Generation)
		case tc.want != "" && (!ok || a.Generation != tc.want):
			t.Errorf("ByDeviceKind(%q) = %q, %v; want %q", tc.kind, a.Generation, ok, tc.want)
		}
	}
}

func TestByPCIID(t *testing.T) {
	// PCI device IDs from jax hardware_utils.py, vendor 0x1ae0.
	tests := []struct {
		vendor, dev uint16
		want        []string
	}{
		{0x1ae0, 0x0027, []string{"v2", "v3"}},
		{0x1ae0, 0x005e, []string{"v4"}},
		{0x1ae0, 0x0063, []string{"v5e"}},
		{0x1ae0, 0x0062, []string{"v5p"}},
		{0x1ae0, 0x006f, []string{"v6e"}},
		{0x1ae0, 0x0076, []string{"tpu7x"}},
		{0x1ae0, 0x0083, []string{"tpu8i"}},
		{0x1ae0, 0x007c, []string{"tpu8t"}},
		{0x1ae0, 0x0056, nil}, // internal "plc", no public name
		{0x10de, 0x005e, nil}, // right device ID, wrong vendor
		{0x1002, 0x740f, nil}, // AMD IDs are not used as keys
	}
	for _, tc := range tests {
		got := ByPCIID(tc.vendor, tc.dev)
		var gens []string
		for _, a := range got {
			gens = append(gens, a.Generation)
		}
		if strings.Join(gens, ",") != strings.Join(tc.want, ",") {
			t.Errorf("ByPCIID(0x%04x, 0x%04x) = %v, want %v", tc.vendor, tc.dev, gens, tc.want)
		}
	}
}

func TestValidateCatchesBrokenEntries(t *testing.T) {
	base := func() []Accelerator { return All() }
	find := func(es []Accelerator, g string) *Accelerator {
		for i := range es {
			if es[i].Generation == g {
				return &es[i]
			}
		}
		t.Fatalf("no %s", g)
		return nil
	}
	tests := []struct {
		name   string
		mutate func(es []Accelerator) []Accelerator
		want   string
	}{
		{"figure without source", func(es []Accelerator) []Accelerator {
			find(es, "v4").PeakBF16.Source = ""
			return es
		}, "PeakBF16 has a value but no source"},
		{"nested figure without source", func(es []Accelerator) []Accelerator {
			find(es, "v5p").TPU.MaxSliceChips.Source = ""
			return es
		}, "TPU.MaxSliceChips has a value but no source"},
		{"unexplained unknown memory", func(es []Accelerator) []Accelerator {
			find(es, "v2").Memory.Note = ""
			return es
		}, "Memory is unknown and has no note"},
		{"unit slip", func(es []Accelerator) []Accelerator {
			find(es, "v6e").MemoryBandwidth.Value = 1638 // GBps stored as B/s
			return es
		}, "MemoryBandwidth = 1638 outside the plausible range"},
		{"negative", func(es []Accelerator) []Accelerator {
			find(es, "v6e").PeakINT8.Value = -1
			return es
		}, "not a finite non-negative number"},
		{"duplicate key", func(es []Accelerator) []Accelerator {
			return append(es, *find(es, "h200"))
		}, "h200: duplicate generation key"},
		{"duplicate device kind", func(es []Accelerator) []Accelerator {
			find(es, "h200").DeviceKinds = append(find(es, "h200").DeviceKinds, f("tpu v4", "x"))
			return es
		}, "already belongs to v4"},
		{"missing required key", func(es []Accelerator) []Accelerator {
			out := es[:0]
			for _, a := range es {
				if a.Generation != "b200" {
					out = append(out, a)
				}
			}
			return out
		}, `required generation "b200" missing`},
		{"wrong platform", func(es []Accelerator) []Accelerator {
			find(es, "mi300x").Platform = device.CUDA
			return es
		}, "vendor amd implies platform rocm"},
		{"topology dims", func(es []Accelerator) []Accelerator {
			find(es, "v5e").TPU.Topologies[2] = Topology{2, 2, 2}
			return es
		}, "topology 2x2x2 has 3 dimensions, want 2"},
		{"topologies out of order", func(es []Accelerator) []Accelerator {
			ts := find(es, "v4").TPU.Topologies
			ts[0], ts[1] = ts[1], ts[0]
			return es
		}, "is not after the previous one"},
		{"max slice disagrees", func(es []Accelerator) []Accelerator {
			find(es, "v6e").TPU.MaxSliceChips.Value = 512
			return es
		}, "largest topology has 256 chips but MaxSliceChips is 512"},
		{"multi-host not divisible", func(es []Accelerator) []Accelerator {
			find(es, "v6e").TPU.Topologies[3] = Topology{3, 5}
			return es
		}, "15 chips is multi-host but not a multiple of 4"},
		{"single host larger than a host", func(es []Accelerator) []Accelerator {
			find(es, "v4").TPU.SingleHostMaxChips.Value = 8
			return es
		}, "exceeds chips per host 4"},
		{"duplicate prefix", func(es []Accelerator) []Accelerator {
			find(es, "v6e").TPU.AcceleratorType.Value = "v5p"
			return es
		}, `prefix "v5p" already belongs to v5p`},
		{"gpu without compute capability", func(es []Accelerator) []Accelerator {
			find(es, "b200").ComputeCapability = Figure[string]{}
			return es
		}, "NVIDIA entry without compute capability"},
		// Sources are URLs or files of this repository, never notes kept
		// outside it.
		{"source outside the repository", func(es []Accelerator) []Accelerator {
			find(es, "v4").Memory.Source = "shared/docs/reference/hardware-and-runtimes.md §1.1"
			return es
		}, "does not start with an https URL or a file of this repository"},
		{"section of a note outside the repository", func(es []Accelerator) []Accelerator {
			find(es, "v4").Memory.Source = "hardware-and-runtimes.md §1.1"
			return es
		}, "does not start with an https URL"},
		{"URL with a note outside the repository", func(es []Accelerator) []Accelerator {
			find(es, "v4").Memory.Source = "https://cloud.google.com/tpu/docs/v4 (as quoted in hardware-and-runtimes.md §1.1)"
			return es
		}, "which is not in this repository"},
		{"repository path", func(es []Accelerator) []Accelerator {
			find(es, "v4").TPU.TopologiesSource = "owner/repo: some/file.py"
			return es
		}, "does not start with an https URL"},
	}
	if err := validateEntries(base()); err != nil {
		t.Fatalf("unmodified copy fails: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validateEntries(tc.mutate(base()))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validateEntries = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// Every figure that has a value names where it comes from: checked directly,
// independently of validate's reflection walk.
func TestHeadlineFiguresHaveSources(t *testing.T) {
	for _, a := range All() {
		for name, fg := range map[string]figure{
			"Memory": a.Memory, "MemoryBandwidth": a.MemoryBandwidth, "PeakBF16": a.PeakBF16,
			"PeakFP8": a.PeakFP8, "PeakINT8": a.PeakINT8, "Cores": a.Cores,
		} {
			if fg.figureKnown() && !strings.Contains(fg.figureSource(), "/") && !strings.Contains(fg.figureSource(), "datasheet") {
				t.Errorf("%s %s source %q names no document or path", a.Generation, name, fg.figureSource())
			}
		}
	}
}
