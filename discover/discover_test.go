package discover_test

import (
	"context"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/internal/discovertest"
)

// wantGroup is what a fixture's devices of one platform must be.
type wantGroup struct {
	platform   device.Platform
	ids        []string // in report order
	generation string
	kind       string
	cores      int
	mem        uint64
	memSource  string
	// nodes[i] are the device nodes of ids[i]; nil to skip.
	nodes [][]string
}

type wantHost struct {
	model                         string
	logical, physical, sockets    int
	features                      []string
	memTotal, memEff, cgroupLimit uint64
	effSource, cgroupSource       string
	cgroupVersion                 int
	cpuLimit                      float64
	cpuDeviceCores                int
	cpuMemSource                  string
	allowedCPUs                   int
	hostname                      string
	gce                           bool
}

type wantTPU struct {
	accelType, accelSource string
	generation             string
	topology               string
	workerID               int // -1: unset
	hosts                  int
	hostsSource            string
	sliceChips, sliceCores int
	localChips             int
}

type fixtureCase struct {
	host  string
	creds *discover.Credentials
	// override replaces nodes.json entries.
	override map[string]discover.NodeStat
	groups   []wantGroup
	host_    wantHost
	tpu      wantTPU
	// devProblems maps device IDs to their problem codes (sorted); devices
	// not listed must have none.
	devProblems map[string][]string
	// problemText maps device IDs to substrings their problems must contain.
	problemText    map[string][]string
	reportProblems []string
	// probe expectations: name -> "ran" | "skipped:<substring>" | "error:<substring>"
	probes map[string]string
	found  map[string]int
	// metadataHits: whether the fake metadata server must have been asked.
	metadataHits bool
}

func seq(prefix string, addrs ...string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = prefix + a
	}
	return out
}

var (
	tpuAddrs4 = []string{"0000:00:04.0", "0000:00:05.0", "0000:00:06.0", "0000:00:07.0"}
	tpuAddrs8 = []string{"0000:00:04.0", "0000:00:05.0", "0000:00:06.0", "0000:00:07.0", "0000:00:08.0", "0000:00:09.0", "0000:00:0a.0", "0000:00:0b.0"}
	h100Addrs = []string{"0000:16:00.0", "0000:17:00.0", "0000:40:00.0", "0000:41:00.0", "0000:96:00.0", "0000:97:00.0", "0000:c0:00.0", "0000:c1:00.0"}
	mi300Addr = []string{"0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0", "0000:9f:00.0", "0000:af:00.0", "0000:bf:00.0", "0000:df:00.0"}
)

func accelNodes(n int) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = []string{fmt.Sprintf("/dev/accel%d", i)}
	}
	return out
}

func vfioNodes(n int) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = []string{fmt.Sprintf("/dev/vfio/%d", i), "/dev/vfio/vfio"}
	}
	return out
}

// synthetic host CPU of the generated fixtures (gen_fixtures.py SYN_*).
const synModel = "SYNTHETIC x86-64 CPU (fixture; host CPU not in sources)"

var synFeatures = []string{"sse4.2", "avx", "avx2", "fma", "f16c"}

func synHost(sockets, cores, threads int, memKB uint64, gce bool) wantHost {
	l := sockets * cores * threads
	return wantHost{model: synModel, logical: l, physical: sockets * cores, sockets: sockets,
		features: synFeatures, memTotal: memKB * 1024, memEff: memKB * 1024, effSource: "/proc/meminfo",
		cgroupVersion: 2, cgroupSource: "/sys/fs/cgroup/memory.max", cpuDeviceCores: l,
		cpuMemSource: "/proc/meminfo", allowedCPUs: l, gce: gce}
}

func fixtureCases() []fixtureCase {
	v4Host := synHost(1, 4, 2, 67108864, true)
	v4Host.hostname = "t1v-n-tpu-v4-w-0"
	return []fixtureCase{
		{
			// v4-8: 4 chips, 2 TensorCores each, 2x2x1, one host (see the
			// fixture's SOURCE.md); /dev/accel0-3; TPU facts from metadata.
			host: "synthetic-tpu-v4",
			groups: []wantGroup{{platform: device.TPU, ids: seq("tpu:", tpuAddrs4...), generation: "v4",
				kind: "TPU v4", cores: 2, nodes: accelNodes(4)}},
			host_: v4Host,
			tpu: wantTPU{accelType: "v4-8", accelSource: "metadata:accelerator-type", generation: "v4",
				topology: "2x2x1", workerID: 0, hosts: 1, hostsSource: "host_bounds", sliceChips: 4, sliceCores: 8, localChips: 4},
			probes:       map[string]string{discover.ProbeMetadata: "ran", discover.ProbeNVML: "skipped:library not found", discover.ProbeKFD: "skipped:does not exist"},
			found:        map[string]int{discover.ProbePCI: 4, discover.ProbeDeviceNodes: 4, discover.ProbeMetadata: 4, discover.ProbeTPUEnv: 0, discover.ProbeCPU: 8, discover.ProbePlugins: 0},
			metadataHits: true,
		},
		{
			// The same host with process 4242 holding /dev/accel0 open.
			host: "synthetic-tpu-v4-busy",
			groups: []wantGroup{{platform: device.TPU, ids: seq("tpu:", tpuAddrs4...), generation: "v4",
				kind: "TPU v4", cores: 2, nodes: accelNodes(4)}},
			host_:       func() wantHost { h := synHost(1, 4, 2, 67108864, true); h.hostname = "t1v-n-tpu-v4-busy-w-0"; return h }(),
			tpu:         wantTPU{workerID: -1, localChips: 4},
			devProblems: map[string][]string{"tpu:0000:00:04.0": {"device-busy"}},
			problemText: map[string][]string{"tpu:0000:00:04.0": {"/dev/accel0", "process 4242 (python3)", "kill 4242"}},
			probes:      map[string]string{discover.ProbeMetadata: "skipped:TENSORBRIDGE_NO_METADATA=1"},
		},
		{
			// v5litepod-8: 8 chips, 1 TensorCore each, 2x4, VFIO nodes;
			// ct5lp-hightpu-8t has 224 vCPU on 2 NUMA nodes (https://cloud.google.com/tpu/docs/v5e).
			host: "synthetic-tpu-v5litepod-8",
			groups: []wantGroup{{platform: device.TPU, ids: seq("tpu:", tpuAddrs8...), generation: "v5e",
				kind: "TPU v5 lite", cores: 1, nodes: vfioNodes(8)}},
			host_: func() wantHost {
				h := synHost(2, 56, 2, 396000000, true)
				h.hostname = "t1v-n-v5e8-w-0"
				return h
			}(),
			tpu: wantTPU{accelType: "v5litepod-8", accelSource: "metadata:accelerator-type", generation: "v5e",
				topology: "2x4", workerID: 0, hosts: 1, hostsSource: "host_bounds", sliceChips: 8, sliceCores: 8, localChips: 8},
			reportProblems: []string{"thp-not-always"},
			probes:         map[string]string{discover.ProbeMetadata: "ran"},
			found:          map[string]int{discover.ProbePCI: 8, discover.ProbeDeviceNodes: 9, discover.ProbeMetadata: 4, discover.ProbeCPU: 224},
			metadataHits:   true,
		},
		{
			// An unprivileged user, with /dev/vfio/3 made root-only.
			host:     "synthetic-tpu-v5litepod-8",
			creds:    &discover.Credentials{UID: 1000, GID: 1000},
			override: map[string]discover.NodeStat{"/dev/vfio/3": {Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600}},
			groups: []wantGroup{{platform: device.TPU, ids: seq("tpu:", tpuAddrs8...), generation: "v5e",
				kind: "TPU v5 lite", cores: 1, nodes: vfioNodes(8)}},
			host_: func() wantHost {
				h := synHost(2, 56, 2, 396000000, true)
				h.hostname = "t1v-n-v5e8-w-0"
				return h
			}(),
			tpu: wantTPU{accelType: "v5litepod-8", accelSource: "metadata:accelerator-type", generation: "v5e",
				topology: "2x4", workerID: 0, hosts: 1, hostsSource: "host_bounds", sliceChips: 8, sliceCores: 8, localChips: 8},
			devProblems:    map[string][]string{"tpu:0000:00:07.0": {"permission-denied"}},
			problemText:    map[string][]string{"tpu:0000:00:07.0": {"/dev/vfio/3", "uid 1000", "chmod a+rw /dev/vfio/3"}},
			reportProblems: []string{"thp-not-always"},
			metadataHits:   true,
		},
		{
			// v5p-8: 4 chips x 2 TensorCores, 2x2x1 (https://cloud.google.com/tpu/docs/v5p);
			// ct5p-hightpu-4t has 208 vCPU.
			host: "synthetic-tpu-v5p",
			groups: []wantGroup{{platform: device.TPU, ids: seq("tpu:", tpuAddrs4...), generation: "v5p",
				kind: "TPU v5", cores: 2, nodes: vfioNodes(4)}},
			host_: func() wantHost {
				h := synHost(2, 52, 2, 462000000, true)
				h.hostname = "t1v-n-v5p8-w-0"
				return h
			}(),
			tpu: wantTPU{accelType: "v5p-8", accelSource: "metadata:accelerator-type", generation: "v5p",
				topology: "2x2x1", workerID: 0, hosts: 1, hostsSource: "host_bounds", sliceChips: 4, sliceCores: 8, localChips: 4},
			probes:       map[string]string{discover.ProbeMetadata: "ran"},
			metadataHits: true,
		},
		{
			// v6e-8 on GKE: environment only, TPU_SKIP_MDS_QUERY.
			host: "synthetic-tpu-v6e-8",
			groups: []wantGroup{{platform: device.TPU, ids: seq("tpu:", tpuAddrs8...), generation: "v6e",
				kind: "TPU v6 lite", cores: 1, nodes: vfioNodes(8)}},
			host_: func() wantHost { h := synHost(1, 4, 2, 67108864, true); h.hostname = "v6e-job-0"; return h }(),
			tpu: wantTPU{accelType: "v6e-8", accelSource: "env:TPU_ACCELERATOR_TYPE", generation: "v6e",
				topology: "2x4", workerID: 0, hosts: 1, hostsSource: "host_bounds", sliceChips: 8, sliceCores: 8, localChips: 8},
			probes: map[string]string{discover.ProbeMetadata: "skipped:TPU_SKIP_MDS_QUERY"},
			found:  map[string]int{discover.ProbeTPUEnv: 10},
		},
		{
			// Worker 1 of tpu7x-16: 8 chips (suffix counts TensorCores,
			// 2 per chip), 4 chips per VM, so 2 hosts (https://cloud.google.com/tpu/docs/tpu7x).
			host: "synthetic-tpu7x",
			groups: []wantGroup{{platform: device.TPU, ids: seq("tpu:", tpuAddrs4...), generation: "tpu7x",
				kind: "TPU7x", cores: 2, nodes: vfioNodes(4)}},
			host_: func() wantHost { h := synHost(1, 4, 2, 67108864, true); h.hostname = "tpu7x-job-1"; return h }(),
			tpu: wantTPU{accelType: "tpu7x-16", accelSource: "env:TPU_ACCELERATOR_TYPE", generation: "tpu7x",
				topology: "2x2x2", workerID: 1, hosts: 2, hostsSource: "host_bounds", sliceChips: 8, sliceCores: 16, localChips: 4},
			probes: map[string]string{discover.ProbeMetadata: "skipped:TPU_SKIP_MDS_QUERY"},
		},
		{
			// 8x H100 80GB HBM3 SXM5 (10de:2330), NVML replay; NVSwitches
			// (10de:22a3, class 0x0680) are not GPUs; device minors come
			// from /proc/driver/nvidia and do not follow PCI order.
			host: "synthetic-nvidia-8xh100",
			groups: []wantGroup{{platform: device.CUDA, ids: seq("cuda:", h100Addrs...), generation: "h100-sxm",
				kind: "NVIDIA H100 80GB HBM3", mem: 81559 << 20, memSource: "nvml",
				nodes: [][]string{{"/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm"}, {"/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm"},
					{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"}, {"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"},
					{"/dev/nvidia6", "/dev/nvidiactl", "/dev/nvidia-uvm"}, {"/dev/nvidia7", "/dev/nvidiactl", "/dev/nvidia-uvm"},
					{"/dev/nvidia4", "/dev/nvidiactl", "/dev/nvidia-uvm"}, {"/dev/nvidia5", "/dev/nvidiactl", "/dev/nvidia-uvm"}}}},
			host_: wantHost{model: "Intel(R) Xeon(R) Platinum 8468", logical: 96, physical: 96, sockets: 2,
				features: []string{"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512cd",
					"avx512bw", "avx512vl", "avx512ifma", "avx512vbmi", "avx512-vbmi2", "avx512-vnni",
					"avx512-bf16", "avx512-fp16", "avx-vnni", "amx-tile", "amx-bf16", "amx-int8"},
				memTotal: 1031057 << 20, memEff: 64 << 30, cgroupLimit: 64 << 30, cgroupVersion: 2,
				cgroupSource: "/sys/fs/cgroup/memory.max", effSource: "/sys/fs/cgroup/memory.max",
				cpuLimit: 32, cpuDeviceCores: 96, cpuMemSource: "cgroup", allowedCPUs: 96, hostname: "gpu-node-01"},
			tpu:    wantTPU{workerID: -1},
			probes: map[string]string{discover.ProbeNVML: "ran", discover.ProbeMetadata: "skipped:no evidence"},
			found:  map[string]int{discover.ProbePCI: 8, discover.ProbeNVML: 8, discover.ProbeDeviceNodes: 10, discover.ProbeCPU: 96},
		},
		{
			// Two H100 PCIe (10de:2331): NVML missing, the second unbound;
			// a v1 memory cgroup limits the container to 16 GiB and 4 CPUs.
			host: "synthetic-nvidia-no-nvml",
			groups: []wantGroup{{platform: device.CUDA, ids: seq("cuda:", "0000:01:00.0", "0000:02:00.0"),
				generation: "h100-pcie", kind: "NVIDIA H100 PCIe",
				nodes: [][]string{{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"}, nil}}},
			host_: wantHost{model: synModel, logical: 16, physical: 8, sockets: 1, features: synFeatures,
				memTotal: 67108864 * 1024, memEff: 16 << 30, cgroupLimit: 16 << 30, cgroupVersion: 1,
				cgroupSource: "/sys/fs/cgroup/memory/docker/f00d/memory.limit_in_bytes",
				effSource:    "/sys/fs/cgroup/memory/docker/f00d/memory.limit_in_bytes", cpuLimit: 4,
				cpuDeviceCores: 16, cpuMemSource: "cgroup", allowedCPUs: 16, hostname: "gpu-box"},
			tpu: wantTPU{workerID: -1},
			devProblems: map[string][]string{
				"cuda:0000:01:00.0": {"driver-library-missing"},
				"cuda:0000:02:00.0": {"driver-library-missing", "driver-not-bound"},
			},
			problemText: map[string][]string{"cuda:0000:01:00.0": {"libnvidia-ml.so.1", "--gpus all"}},
			probes:      map[string]string{discover.ProbeNVML: "error:NVML library not found"},
		},
		{
			// 8x MI300X: gfx942 (gfx_target_version 90402), 304 CUs,
			// 192 GB (ROCm GPU specifications), /dev/kfd + renderD128-135.
			host: "synthetic-amd-mi300x",
			groups: []wantGroup{{platform: device.ROCm, ids: seq("rocm:", mi300Addr...), generation: "mi300x",
				kind: "AMD Instinct MI300X", cores: 304, mem: 192 << 30, memSource: "sysfs",
				nodes: func() [][]string {
					var o [][]string
					for i := range 8 {
						o = append(o, []string{"/dev/kfd", fmt.Sprintf("/dev/dri/renderD%d", 128+i)})
					}
					return o
				}()}},
			host_:  func() wantHost { h := synHost(2, 4, 1, 67108864, false); h.hostname = "mi300x-node"; return h }(),
			tpu:    wantTPU{workerID: -1},
			probes: map[string]string{discover.ProbeKFD: "ran", discover.ProbeMetadata: "skipped:no evidence"},
			found:  map[string]int{discover.ProbeKFD: 8, discover.ProbePCI: 8, discover.ProbeDeviceNodes: 9},
		},
		{
			// The same host for a user outside group render (gid 109).
			host:  "synthetic-amd-mi300x",
			creds: &discover.Credentials{UID: 1000, GID: 1000},
			groups: []wantGroup{{platform: device.ROCm, ids: seq("rocm:", mi300Addr...), generation: "mi300x",
				kind: "AMD Instinct MI300X", cores: 304, mem: 192 << 30, memSource: "sysfs"}},
			host_: func() wantHost { h := synHost(2, 4, 1, 67108864, false); h.hostname = "mi300x-node"; return h }(),
			tpu:   wantTPU{workerID: -1},
			devProblems: func() map[string][]string {
				m := map[string][]string{}
				for _, a := range mi300Addr {
					m["rocm:"+a] = []string{"permission-denied", "permission-denied"}
				}
				return m
			}(),
			problemText: map[string][]string{"rocm:0000:0c:00.0": {"/dev/kfd", "/dev/dri/renderD128", "usermod -aG render $USER"}},
		},
		{
			// The same user in group render.
			host:  "synthetic-amd-mi300x",
			creds: &discover.Credentials{UID: 1000, GID: 1000, Groups: []int{1000, 109}},
			groups: []wantGroup{{platform: device.ROCm, ids: seq("rocm:", mi300Addr...), generation: "mi300x",
				kind: "AMD Instinct MI300X", cores: 304, mem: 192 << 30, memSource: "sysfs"}},
			host_: func() wantHost { h := synHost(2, 4, 1, 67108864, false); h.hostname = "mi300x-node"; return h }(),
			tpu:   wantTPU{workerID: -1},
		},
		{
			// This machine, recorded (see discovertest/testdata/hosts/cpu-only/SOURCE.md):
			// 2 vCPU "AMD EPYC", MemTotal 24684084 kB, cgroup v1 memory
			// limit 9223372036854771712 (= none), no DMI, 6 virtio/Intel
			// PCI functions.
			host: "cpu-only",
			host_: wantHost{model: "AMD EPYC", logical: 2, physical: 2, sockets: 1,
				features: []string{"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512cd",
					"avx512bw", "avx512vl", "avx512ifma", "avx512vbmi", "avx512-vbmi2", "avx512-vnni", "avx512-bf16", "avx-vnni"},
				memTotal: 24684084 * 1024, memEff: 24684084 * 1024, effSource: "/proc/meminfo", cgroupVersion: 1,
				cgroupSource:   "/sys/fs/cgroup/memory/process_api/0f41c91bad3e469e408c81ad0ccbb7f2/memory.limit_in_bytes",
				cpuDeviceCores: 2, cpuMemSource: "/proc/meminfo", allowedCPUs: 2, hostname: "vm"},
			tpu: wantTPU{workerID: -1},
			probes: map[string]string{discover.ProbeMetadata: "skipped:no evidence of a GCE VM", discover.ProbeNVML: "skipped:library not found",
				discover.ProbeKFD: "skipped:does not exist", discover.ProbePCI: "ran", discover.ProbeDeviceNodes: "ran", discover.ProbeCPU: "ran", discover.ProbePlugins: "ran"},
			found: map[string]int{discover.ProbePCI: 0, discover.ProbeDeviceNodes: 0, discover.ProbeCPU: 2, discover.ProbePlugins: 0, discover.ProbeMetadata: 0},
		},
		{
			// A GCE VM without accelerators: DMI says Google and its gVNIC
			// (1ae0:0042, class 0x020000, driver gve) shares the TPU
			// chips' PCI vendor ID. It is a GCE VM, so the metadata
			// server is asked, but it has no TPU: only the CPU.
			host:         "synthetic-gce-cpu-gvnic",
			host_:        func() wantHost { h := synHost(1, 2, 2, 16393932, true); h.hostname = "cpu-vm-0"; return h }(),
			tpu:          wantTPU{workerID: -1},
			probes:       map[string]string{discover.ProbePCI: "ran", discover.ProbeDeviceNodes: "ran", discover.ProbeCPU: "ran"},
			found:        map[string]int{discover.ProbePCI: 0, discover.ProbeDeviceNodes: 0, discover.ProbeCPU: 4},
			metadataHits: true,
		},
	}
}

func TestFixtures(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range fixtureCases() {
		covered[tc.host] = true
	}
	for _, h := range discovertest.Hosts() {
		if !covered[h] {
			t.Errorf("fixture host %s has no fixture case", h)
		}
	}
	for _, tc := range fixtureCases() {
		name := tc.host
		if tc.creds != nil {
			name += fmt.Sprintf("/uid%d", tc.creds.UID)
			if len(tc.creds.Groups) > 0 {
				name += "+groups"
			}
		}
		t.Run(name, func(t *testing.T) {
			f := discovertest.Load(t, tc.host)
			opts := f.Options
			if tc.creds != nil {
				opts.Credentials = tc.creds
			}
			if tc.override != nil {
				base := opts.StatNode
				opts.StatNode = func(p string) (discover.NodeStat, error) {
					if n, ok := tc.override[p]; ok {
						return n, nil
					}
					return base(p)
				}
			}
			rep, err := discover.Discover(context.Background(), opts)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			checkReport(t, rep, tc, f)
		})
	}
}

func checkReport(t *testing.T, rep *discover.Report, tc fixtureCase, f *discovertest.Host) {
	t.Helper()
	// Devices: the accelerator groups, then exactly one CPU.
	var accel []device.Info
	cpus := rep.DevicesOf(device.CPU)
	for _, d := range rep.Devices {
		if d.Platform != device.CPU {
			accel = append(accel, d)
		}
	}
	wantN := 0
	for _, g := range tc.groups {
		wantN += len(g.ids)
	}
	if len(accel) != wantN {
		t.Errorf("accelerators: got %d (%v), want %d", len(accel), ids(accel), wantN)
	}
	for _, g := range tc.groups {
		got := rep.DevicesOf(g.platform)
		if !reflect.DeepEqual(ids(got), g.ids) {
			t.Errorf("%s ids: got %v, want %v", g.platform, ids(got), g.ids)
			continue
		}
		for i, d := range got {
			if d.Index != i {
				t.Errorf("%s: index %d, want %d", d.ID, d.Index, i)
			}
			if d.Generation != g.generation || d.Kind != g.kind || d.Cores != g.cores {
				t.Errorf("%s: generation/kind/cores = %q/%q/%d, want %q/%q/%d", d.ID, d.Generation, d.Kind, d.Cores, g.generation, g.kind, g.cores)
			}
			if d.Memory.Total != g.mem || d.Memory.Source != g.memSource {
				t.Errorf("%s: memory %d (%q), want %d (%q)", d.ID, d.Memory.Total, d.Memory.Source, g.mem, g.memSource)
			}
			if d.PCI == nil || d.PCI.Address != strings.SplitN(d.ID, ":", 2)[1] {
				t.Errorf("%s: PCI %v does not match the ID", d.ID, d.PCI)
			}
			if g.nodes != nil && !reflect.DeepEqual(d.Nodes, g.nodes[i]) {
				t.Errorf("%s: nodes %v, want %v", d.ID, d.Nodes, g.nodes[i])
			}
			if d.CoreOnChip != -1 {
				t.Errorf("%s: core_on_chip %d, want -1 (unknown before a runtime opens it)", d.ID, d.CoreOnChip)
			}
			if g.platform == device.TPU && tc.tpu.workerID >= 0 && d.ProcessIndex != tc.tpu.workerID {
				t.Errorf("%s: process_index %d, want worker id %d", d.ID, d.ProcessIndex, tc.tpu.workerID)
			}
		}
	}
	for _, d := range rep.Devices {
		want := tc.devProblems[d.ID]
		if got := problemCodes(d.Problems); !equalStrings(got, want) {
			t.Errorf("%s problems: got %v, want %v\n%v", d.ID, got, want, d.Problems)
		}
		for _, sub := range tc.problemText[d.ID] {
			all := fmt.Sprint(d.Problems)
			if !strings.Contains(all, sub) {
				t.Errorf("%s problems %q lack %q", d.ID, all, sub)
			}
		}
		for _, p := range d.Problems {
			if p.Message == "" || (p.Severity == device.SeverityError && p.Fix == "") {
				t.Errorf("%s: problem %q lacks a message or, being an error, a fix", d.ID, p.Code)
			}
		}
	}
	if got := problemCodes(rep.Problems); !equalStrings(got, tc.reportProblems) {
		t.Errorf("report problems: got %v, want %v (%v)", got, tc.reportProblems, rep.Problems)
	}

	// CPU device and host.
	if len(cpus) != 1 {
		t.Fatalf("cpu devices: %d, want 1", len(cpus))
	}
	c, h, w := cpus[0], rep.Host, tc.host_
	if c.ID != "cpu:0" || c.Kind != w.model || c.Cores != w.cpuDeviceCores || !reflect.DeepEqual(c.Features, w.features) {
		t.Errorf("cpu device: id %q kind %q cores %d features %v; want cpu:0 %q %d %v", c.ID, c.Kind, c.Cores, c.Features, w.model, w.cpuDeviceCores, w.features)
	}
	if c.Memory.Total != w.memEff || c.Memory.Source != w.cpuMemSource {
		t.Errorf("cpu memory %d (%q), want %d (%q)", c.Memory.Total, c.Memory.Source, w.memEff, w.cpuMemSource)
	}
	if h.CPU.Model != w.model || h.CPU.LogicalCPUs != w.logical || h.CPU.PhysicalCores != w.physical || h.CPU.Sockets != w.sockets || h.CPU.AllowedCPUs != w.allowedCPUs {
		t.Errorf("host cpu %+v; want model %q logical %d physical %d sockets %d allowed %d", h.CPU, w.model, w.logical, w.physical, w.sockets, w.allowedCPUs)
	}
	if h.CPU.CgroupCPULimit != w.cpuLimit {
		t.Errorf("cgroup cpu limit %v, want %v", h.CPU.CgroupCPULimit, w.cpuLimit)
	}
	m := h.Memory
	if m.TotalBytes != w.memTotal || m.EffectiveBytes != w.memEff || m.CgroupLimitBytes != w.cgroupLimit ||
		m.EffectiveSource != w.effSource || m.CgroupSource != w.cgroupSource || m.CgroupVersion != w.cgroupVersion {
		t.Errorf("host memory %+v; want total %d effective %d (%s) cgroup v%d %d (%s)", m, w.memTotal, w.memEff, w.effSource, w.cgroupVersion, w.cgroupLimit, w.cgroupSource)
	}
	if w.hostname != "" && h.Hostname != w.hostname {
		t.Errorf("hostname %q, want %q", h.Hostname, w.hostname)
	}
	if h.Cloud.GCE != w.gce {
		t.Errorf("GCE evidence %v (%s), want %v", h.Cloud.GCE, h.Cloud.Reason, w.gce)
	}

	// TPU environment.
	tp, wt := rep.TPU, tc.tpu
	if tp.AcceleratorType != wt.accelType || tp.Sources["accelerator_type"] != wt.accelSource || tp.Generation != wt.generation ||
		tp.Topology != wt.topology || tp.Hosts != wt.hosts || tp.HostsSource != wt.hostsSource ||
		tp.SliceChips != wt.sliceChips || tp.SliceTensorCores != wt.sliceCores || tp.LocalChips != wt.localChips {
		t.Errorf("tpu env: type %q (%q) gen %q topology %q hosts %d (%s) slice %d chips %d cores, local %d;\nwant %+v",
			tp.AcceleratorType, tp.Sources["accelerator_type"], tp.Generation, tp.Topology, tp.Hosts, tp.HostsSource,
			tp.SliceChips, tp.SliceTensorCores, tp.LocalChips, wt)
	}
	switch {
	case wt.workerID < 0 && tp.WorkerID != nil:
		t.Errorf("worker id %d, want unset", *tp.WorkerID)
	case wt.workerID >= 0 && (tp.WorkerID == nil || *tp.WorkerID != wt.workerID):
		t.Errorf("worker id %v, want %d", tp.WorkerID, wt.workerID)
	}

	// Probes: all eight, in order, each with a source.
	var names []string
	for _, p := range rep.Probes {
		names = append(names, p.Name)
		if p.Source == "" {
			t.Errorf("probe %s has no source", p.Name)
		}
	}
	wantNames := []string{discover.ProbePCI, discover.ProbeDeviceNodes, discover.ProbeKFD, discover.ProbeNVML, discover.ProbeTPUEnv, discover.ProbeMetadata, discover.ProbePlugins, discover.ProbeCPU}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("probes %v, want %v", names, wantNames)
	}
	for name, want := range tc.probes {
		p, _ := rep.Probe(name)
		kind, sub, _ := strings.Cut(want, ":")
		switch kind {
		case "ran":
			if p.Skipped != "" || p.Err != "" {
				t.Errorf("probe %s: skipped %q err %q, want it to run cleanly", name, p.Skipped, p.Err)
			}
		case "skipped":
			if !strings.Contains(p.Skipped, sub) || p.Err != "" {
				t.Errorf("probe %s: skipped %q err %q, want skipped containing %q", name, p.Skipped, p.Err, sub)
			}
		case "error":
			if !strings.Contains(p.Err, sub) {
				t.Errorf("probe %s: err %q, want it to contain %q", name, p.Err, sub)
			}
		}
	}
	for name, n := range tc.found {
		if p, _ := rep.Probe(name); p.Found != n {
			t.Errorf("probe %s found %d, want %d", name, p.Found, n)
		}
	}
	if hits := f.MetadataRequests(); (hits > 0) != tc.metadataHits {
		t.Errorf("metadata server requests: %d, want any: %v", hits, tc.metadataHits)
	}
}

func ids(ds []device.Info) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

// problemCodes lists the sorted codes of ps.
func problemCodes(ps []device.Problem) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Code)
	}
	slices.Sort(out)
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}
