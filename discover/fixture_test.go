package discover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/internal/discovertest"
)

func TestDiscoverErrors(t *testing.T) {
	_, err := discover.Discover(context.Background(), discover.Options{Root: filepath.Join(t.TempDir(), "absent")})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent root: err %v, want fs.ErrNotExist", err)
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	_, err = discover.Discover(context.Background(), discover.Options{Root: file})
	if !errors.Is(err, discover.ErrRootNotDir) {
		t.Errorf("file root: err %v, want ErrRootNotDir", err)
	}

	// A cancelled context: a report with every probe marked skipped.
	f := discovertest.Load(t, "synthetic-tpu-v4")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := discover.Discover(ctx, f.Options)
	if !errors.Is(err, context.Canceled) || rep == nil || len(rep.Probes) != 8 {
		t.Fatalf("cancelled: rep %v err %v, want a report of 8 skipped probes and context.Canceled", rep != nil, err)
	}
	for _, p := range rep.Probes {
		if !strings.Contains(p.Skipped, "context canceled") {
			t.Errorf("probe %s: skipped %q, want the cancellation", p.Name, p.Skipped)
		}
	}
	if f.MetadataRequests() != 0 {
		t.Errorf("metadata server asked %d times after cancellation", f.MetadataRequests())
	}
}

func TestMetadataFailures(t *testing.T) {
	noFlavor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("v4-8")) // a captive portal or proxy, not GCE
	}))
	defer noFlavor.Close()
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer hang.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Metadata-Flavor", "Google")
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer broken.Close()

	tests := []struct {
		name, url string
		timeout   time.Duration
		wantErr   string
	}{
		{"not a metadata server", noFlavor.URL, 0, "Metadata-Flavor: Google"},
		{"no answer", hang.URL, 50 * time.Millisecond, "no answer within 50ms"},
		{"server error", broken.URL, 0, "HTTP 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := discovertest.Load(t, "synthetic-tpu-v4")
			opts := f.Options
			opts.MetadataURL, opts.MetadataTimeout = tc.url, tc.timeout
			rep, err := discover.Discover(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := rep.Probe(discover.ProbeMetadata)
			if !strings.Contains(p.Err, tc.wantErr) {
				t.Errorf("metadata probe error %q, want it to contain %q", p.Err, tc.wantErr)
			}
			if rep.TPU.AcceleratorType != "" || len(rep.DevicesOf(device.TPU)) != 4 {
				t.Errorf("accelerator type %q, TPUs %d: want none from a failed server, 4 chips from PCI", rep.TPU.AcceleratorType, len(rep.DevicesOf(device.TPU)))
			}
		})
	}
}

func TestMetadataEvidence(t *testing.T) {
	// cpu-only has no evidence: skipped, server not asked; ForceMetadata
	// asks; SkipMetadata wins over ForceMetadata.
	for _, tc := range []struct {
		force, skip bool
		wantHits    bool
		wantSkipped string
	}{
		{false, false, false, "no evidence of a GCE VM"},
		{true, false, true, ""},
		{true, true, false, "Options.SkipMetadata"},
	} {
		f := discovertest.Load(t, "cpu-only")
		opts := f.Options
		opts.ForceMetadata, opts.SkipMetadata = tc.force, tc.skip
		rep, err := discover.Discover(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := rep.Probe(discover.ProbeMetadata)
		if (f.MetadataRequests() > 0) != tc.wantHits || !strings.Contains(p.Skipped, tc.wantSkipped) {
			t.Errorf("force=%v skip=%v: hits %d skipped %q; want hits %v, skipped containing %q", tc.force, tc.skip, f.MetadataRequests(), p.Skipped, tc.wantHits, tc.wantSkipped)
		}
		if tc.force && !tc.skip && !strings.Contains(strings.Join(p.Notes, ";"), "not a TPU VM") {
			t.Errorf("forced probe on a server without TPU attributes: notes %v", p.Notes)
		}
	}
}

func TestTPUEnvironmentProblems(t *testing.T) {
	tests := []struct {
		host string
		env  map[string]string
		want []string
	}{
		// GKE variables without a chip on the bus (pod without a TPU request).
		{"cpu-only", map[string]string{"TPU_ACCELERATOR_TYPE": "v6e-8", "TPU_WORKER_ID": "0"}, []string{"tpu-env-without-chips"}},
		// v5e chips, variables saying v6e, bounds for 4 chips on an 8-chip
		// host, a 2x2 topology for 8 chips, worker 3 of 1 host.
		{"synthetic-tpu-v5litepod-8", map[string]string{
			"TPU_ACCELERATOR_TYPE": "v6e-8", "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1", "TPU_TOPOLOGY": "2x2",
			"TPU_WORKER_ID": "3", "TPU_HOST_BOUNDS": "1,1,1", "TPU_SKIP_MDS_QUERY": "1",
		}, []string{"thp-not-always", "tpu-chip-count-mismatch", "tpu-generation-mismatch", "tpu-topology-mismatch", "tpu-worker-id-out-of-range"}},
		// TPU_VISIBLE_CHIPS explains a smaller per-process bound.
		{"synthetic-tpu-v5litepod-8", map[string]string{
			"TPU_ACCELERATOR_TYPE": "v5litepod-8", "TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1", "TPU_VISIBLE_CHIPS": "0",
			"TPU_SKIP_MDS_QUERY": "true",
		}, []string{"thp-not-always"}},
		// "v5e-8" is not a Cloud TPU type (v5e slices are v5litepod-N,
		// https://cloud.google.com/tpu/docs/v5e): reported, not silently ignored, and the chips
		// are still found and named from their PCI IDs.
		{"synthetic-tpu-v5litepod-8", map[string]string{"TPU_ACCELERATOR_TYPE": "v5e-8", "TPU_SKIP_MDS_QUERY": "1"},
			[]string{"thp-not-always", "tpu-accelerator-type-invalid"}},
		// An invalid type on a host without chips: both problems.
		{"cpu-only", map[string]string{"TPU_ACCELERATOR_TYPE": "v4-7", "TPU_SKIP_MDS_QUERY": "1"},
			[]string{"tpu-accelerator-type-invalid", "tpu-env-without-chips"}},
		// A topology that does not parse.
		{"synthetic-tpu-v5litepod-8", map[string]string{"TPU_ACCELERATOR_TYPE": "v5litepod-8", "TPU_TOPOLOGY": "2x4x", "TPU_SKIP_MDS_QUERY": "1"},
			[]string{"thp-not-always", "tpu-topology-invalid"}},
	}
	for _, tc := range tests {
		f := discovertest.Load(t, tc.host)
		opts := f.Options
		opts.Env = discover.EnvMap(tc.env)
		rep, err := discover.Discover(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := problemCodes(rep.Problems); !equalStrings(got, tc.want) {
			t.Errorf("%s %v: problems %v, want %v", tc.host, tc.env, got, tc.want)
		}
	}
}

func TestReportJSON(t *testing.T) {
	f := discovertest.Load(t, "synthetic-nvidia-no-nvml")
	rep, err := discover.Discover(context.Background(), f.Options)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"root", "devices", "host", "tpu", "plugin_search", "plugins", "probes"} {
		if _, ok := top[k]; !ok {
			t.Errorf("report JSON lacks %q: %s", k, b)
		}
	}
	var probes []map[string]any
	json.Unmarshal(top["probes"], &probes)
	for _, k := range []string{"name", "source", "duration_ns", "found"} {
		if _, ok := probes[0][k]; !ok {
			t.Errorf("probe JSON lacks %q: %v", k, probes[0])
		}
	}
	var host map[string]map[string]any
	json.Unmarshal(top["host"], &host)
	for _, k := range []string{"total_bytes", "cgroup_limit_bytes", "cgroup_version", "cgroup_source", "effective_bytes", "effective_source"} {
		if _, ok := host["memory"][k]; !ok {
			t.Errorf("host.memory JSON lacks %q: %v", k, host["memory"])
		}
	}
	// The report reads back into the same value (severities by name).
	var back discover.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Devices[0].Problems[0].Severity != device.SeverityError || back.Host.Memory != rep.Host.Memory || back.Probes[3].Err != rep.Probes[3].Err {
		t.Errorf("round trip lost data: %+v", back.Devices[0].Problems)
	}
}

func TestNVIDIANodeMissing(t *testing.T) {
	// Remove /dev/nvidia-uvm (every GPU needs it) and /dev/nvidia0, which
	// belongs to the GPU whose Device Minor is 0: bus 40, not bus 16.
	f := discovertest.Load(t, "synthetic-nvidia-8xh100")
	for _, n := range []string{"dev/nvidia-uvm", "dev/nvidia0"} {
		if err := os.Remove(filepath.Join(f.Root, n)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := discover.Discover(context.Background(), f.Options)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rep.DevicesOf(device.CUDA) {
		want := []string{"device-node-missing"}
		if d.ID == "cuda:0000:40:00.0" {
			want = []string{"device-node-missing", "device-node-missing"}
		}
		if got := problemCodes(d.Problems); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: problems %v, want %v", d.ID, d.Problems, want)
		}
		if !strings.Contains(fmt.Sprint(d.Problems), "/dev/nvidia-uvm does not exist") {
			t.Errorf("%s: %v does not name /dev/nvidia-uvm", d.ID, d.Problems)
		}
	}
}

func TestUsable(t *testing.T) {
	f := discovertest.Load(t, "synthetic-tpu-v4-busy")
	rep, err := discover.Discover(context.Background(), f.Options)
	if err != nil {
		t.Fatal(err)
	}
	tpus, err := rep.Usable(device.TPU)
	if err != nil || !reflect.DeepEqual(ids(tpus), seq("tpu:", tpuAddrs4[1:]...)) {
		t.Errorf("usable TPUs %v, %v; want the 3 idle chips", ids(tpus), err)
	}
	_, err = rep.Usable(device.CUDA)
	var ue *discover.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "libnvidia-ml.so.1") || !strings.Contains(err.Error(), "no cuda device on the PCI bus") {
		t.Errorf("cuda: %v, want an UnavailableError naming the NVML probe and the empty bus", err)
	}

	f = discovertest.Load(t, "synthetic-nvidia-no-nvml")
	rep, _ = discover.Discover(context.Background(), f.Options)
	_, err = rep.Usable(device.CUDA)
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "cuda:0000:02:00.0: NVIDIA GPU 0000:02:00.0 has no kernel driver bound") {
		t.Errorf("cuda: %v, want the device problems", err)
	}
	if cpus, err := rep.Usable(device.CPU); err != nil || len(cpus) != 1 {
		t.Errorf("cpu: %v %v", cpus, err)
	}
}

func TestInvalidAcceleratorTypeInReport(t *testing.T) {
	// From the environment (GKE): the report names the value, its source
	// and the catalog's reason, and the chips keep their PCI identity.
	f := discovertest.Load(t, "synthetic-tpu-v5litepod-8")
	opts := f.Options
	opts.Env = discover.EnvMap(map[string]string{"TPU_ACCELERATOR_TYPE": "v5e-8", "TPU_SKIP_MDS_QUERY": "1"})
	rep, err := discover.Discover(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	p := findProblem(rep.Problems, "tpu-accelerator-type-invalid")
	for _, sub := range []string{`"v5e-8"`, "env:TPU_ACCELERATOR_TYPE", "v5litepod-N"} {
		if !strings.Contains(p.Message, sub) {
			t.Errorf("problem %q lacks %q", p.Message, sub)
		}
	}
	if tp := rep.TPU; tp.AcceleratorType != "v5e-8" || tp.Generation != "" || tp.SliceChips != 0 || tp.LocalChips != 8 {
		t.Errorf("tpu env %+v: want the raw type kept, no derived slice, 8 local chips", tp)
	}
	for _, d := range rep.DevicesOf(device.TPU) {
		if d.Generation != "v5e" || d.Kind != "TPU v5 lite" || d.Cores != 1 {
			t.Errorf("%s: %q/%q/%d, want v5e/TPU v5 lite/1 from PCI 0x0063", d.ID, d.Generation, d.Kind, d.Cores)
		}
	}

	// From the metadata server: same problem, the fix points at the catalog.
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Metadata-Flavor", "Google")
		if strings.HasSuffix(r.URL.Path, "/accelerator-type") {
			fmt.Fprint(w, "v9x-8")
			return
		}
		http.NotFound(w, r)
	}))
	defer md.Close()
	f = discovertest.Load(t, "synthetic-tpu-v4")
	opts = f.Options
	opts.MetadataURL = md.URL
	rep, err = discover.Discover(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	p = findProblem(rep.Problems, "tpu-accelerator-type-invalid")
	for _, sub := range []string{`"v9x-8"`, "metadata:accelerator-type", "unknown type"} {
		if !strings.Contains(p.Message, sub) {
			t.Errorf("problem %q lacks %q", p.Message, sub)
		}
	}
	if !strings.Contains(p.Fix, "catalog") {
		t.Errorf("fix %q does not point at the catalog", p.Fix)
	}
}

func findProblem(ps []device.Problem, code string) device.Problem {
	for _, p := range ps {
		if p.Code == code {
			return p
		}
	}
	return device.Problem{Code: "(none with code " + code + ")"}
}

// noNVML fails the test if discovery asks NVML anything.
type noNVML struct{ t *testing.T }

func (n noNVML) Snapshot(context.Context) (*discover.NVMLSnapshot, error) {
	n.t.Error("NVML was asked")
	return nil, errors.New("not expected")
}

func TestCPU(t *testing.T) {
	// Expected values are the recorded files: MemTotal of /proc/meminfo,
	// the cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes),
	// the cpuinfo model and Cpus_allowed_list (see each host's SOURCE.md).
	tests := []struct {
		host      string
		model     string
		cores     int
		mem       uint64
		memSource string // device.Memory.Source
		effSource string // Host.Memory.EffectiveSource
	}{
		// No limit (v1 limit 9223372036854771712 means none): MemTotal.
		{"cpu-only", "AMD EPYC", 2, 24684084 * 1024, "/proc/meminfo", "/proc/meminfo"},
		// memory.max 68719476736 < MemTotal 1031057 MiB.
		{"synthetic-nvidia-8xh100", "Intel(R) Xeon(R) Platinum 8468", 96, 64 << 30, "cgroup", "/sys/fs/cgroup/memory.max"},
		// v1 limit 17179869184 three levels down.
		{"synthetic-nvidia-no-nvml", synModel, 16, 16 << 30, "cgroup", "/sys/fs/cgroup/memory/docker/f00d/memory.limit_in_bytes"},
		// memory.max "max": MemTotal 396000000 kB.
		{"synthetic-tpu-v5litepod-8", synModel, 224, 396000000 * 1024, "/proc/meminfo", "/proc/meminfo"},
	}
	for _, tc := range tests {
		f := discovertest.Load(t, tc.host)
		opts := f.Options
		// Nothing but the CPU probe may run: no NVML, no device-node
		// checks, no metadata request even when forced.
		opts.NVML = noNVML{t}
		opts.ForceMetadata = true
		opts.StatNode = func(p string) (discover.NodeStat, error) {
			t.Errorf("%s: device node %s was checked", tc.host, p)
			return discover.NodeStat{}, fs.ErrNotExist
		}
		info, host, err := discover.CPU(context.Background(), opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.host, err)
		}
		if info.ID != "cpu:0" || info.Platform != device.CPU || info.Kind != tc.model || info.Cores != tc.cores {
			t.Errorf("%s: device %q %s %q cores %d; want cpu:0 cpu %q cores %d", tc.host, info.ID, info.Platform, info.Kind, info.Cores, tc.model, tc.cores)
		}
		if info.Memory.Total != tc.mem || info.Memory.Source != tc.memSource || len(info.Problems) != 0 {
			t.Errorf("%s: memory %+v problems %v; want %d from %q, no problems", tc.host, info.Memory, info.Problems, tc.mem, tc.memSource)
		}
		if host.Memory.EffectiveBytes != tc.mem || host.Memory.EffectiveSource != tc.effSource {
			t.Errorf("%s: host memory %+v; want effective %d from %s", tc.host, host.Memory, tc.mem, tc.effSource)
		}
		if host.Cloud != (discover.CloudEvidence{}) {
			t.Errorf("%s: cloud evidence %+v, want none gathered", tc.host, host.Cloud)
		}
		if n := f.MetadataRequests(); n != 0 {
			t.Errorf("%s: %d metadata requests", tc.host, n)
		}
	}
}

func TestCPUAgreesWithDiscover(t *testing.T) {
	// On every fixture host CPU gives the device and host Discover gives,
	// apart from the cloud evidence CPU does not gather.
	for _, name := range discovertest.Hosts() {
		f := discovertest.Load(t, name)
		rep, err := discover.Discover(context.Background(), f.Options)
		if err != nil {
			t.Fatal(err)
		}
		info, host, err := discover.CPU(context.Background(), f.Options)
		if err != nil {
			t.Fatal(err)
		}
		want := rep.Host
		want.Cloud = discover.CloudEvidence{}
		if cpus := rep.DevicesOf(device.CPU); len(cpus) != 1 || !reflect.DeepEqual(info, cpus[0]) || !reflect.DeepEqual(host, want) {
			t.Errorf("%s: CPU gave %+v\n%+v\nDiscover gave %+v\n%+v", name, info, host, cpus, want)
		}
	}
}

func TestCPUMemoryLimit(t *testing.T) {
	// The effective memory is min(MemTotal, cgroup limit): exact arithmetic
	// on a hand-made root.
	tests := []struct {
		name              string
		memTotalKB        uint64
		memoryMax         string // cgroup v2 memory.max; "" = file absent
		wantTotal         uint64
		wantSrc, wantFile string
	}{
		{"limit below MemTotal", 1000, "512000", 512000, "cgroup", "/sys/fs/cgroup/memory.max"},
		{"limit above MemTotal", 1000, "2048000", 1024000, "/proc/meminfo", "/proc/meminfo"},
		{"limit equal to MemTotal", 1000, "1024000", 1024000, "/proc/meminfo", "/proc/meminfo"},
		{"no limit", 1000, "max", 1024000, "/proc/meminfo", "/proc/meminfo"},
		{"no memory controller", 1000, "", 1024000, "/proc/meminfo", "/proc/meminfo"},
	}
	for _, tc := range tests {
		root := t.TempDir()
		files := map[string]string{
			"proc/cpuinfo":     "processor\t: 0\nmodel name\t: Test CPU\n",
			"proc/meminfo":     fmt.Sprintf("MemTotal: %d kB\n", tc.memTotalKB),
			"proc/self/cgroup": "0::/\n",
		}
		if tc.memoryMax != "" {
			files["sys/fs/cgroup/memory.max"] = tc.memoryMax + "\n"
		}
		for p, c := range files {
			full := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		info, host, err := discover.CPU(context.Background(), discover.Options{Root: root, Env: discover.EnvMap(nil)})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if info.Memory.Total != tc.wantTotal || info.Memory.Source != tc.wantSrc || host.Memory.EffectiveSource != tc.wantFile {
			t.Errorf("%s: memory %+v (effective source %q), want %d from %q (%s)", tc.name, info.Memory, host.Memory.EffectiveSource, tc.wantTotal, tc.wantSrc, tc.wantFile)
		}
		if info.Kind != "Test CPU" || info.Cores != 1 {
			t.Errorf("%s: kind %q cores %d", tc.name, info.Kind, info.Cores)
		}
	}
}

func TestCPUErrors(t *testing.T) {
	_, _, err := discover.CPU(context.Background(), discover.Options{Root: filepath.Join(t.TempDir(), "absent")})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent root: err %v, want fs.ErrNotExist", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := discover.CPU(ctx, discovertest.Options(t, "cpu-only")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v, want context.Canceled", err)
	}
	// An empty root: nothing readable, a described failure, no error.
	info, _, err := discover.CPU(context.Background(), discover.Options{Root: t.TempDir(), Env: discover.EnvMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if got := problemCodes(info.Problems); !reflect.DeepEqual(got, []string{"cpu-probe-failed", "cpuinfo-unreadable"}) {
		t.Errorf("empty root: problems %v, want cpu-probe-failed and cpuinfo-unreadable", info.Problems)
	}
	if p := findProblem(info.Problems, "cpu-probe-failed"); !strings.Contains(p.Message, "/proc/meminfo") {
		t.Errorf("problem %q does not name /proc/meminfo", p.Message)
	}
}

// A Google network or storage function is never a TPU, even under a TPU
// device ID: the gVNIC of synthetic-gce-cpu-gvnic given v4's device ID
// 0x005e stays a network card; given class 0x120000 (processing
// accelerator) as well, it is read as a v4 chip.
func TestGoogleNetworkFunctionIsNotATPU(t *testing.T) {
	for _, c := range []struct {
		class string
		tpus  int
	}{
		{"0x020000", 0}, // network controller (gVNIC)
		{"0x010802", 0}, // NVMe controller
		{"0x120000", 1}, // processing accelerator
	} {
		f := discovertest.Load(t, "synthetic-gce-cpu-gvnic")
		dev := filepath.Join(f.Root, "sys/bus/pci/devices/0000:00:03.0")
		if err := os.WriteFile(filepath.Join(dev, "device"), []byte("0x005e\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dev, "class"), []byte(c.class+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := discover.Discover(context.Background(), f.Options)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(rep.DevicesOf(device.TPU)); got != c.tpus {
			t.Errorf("1ae0:005e class %s: %d TPUs (%v), want %d", c.class, got, ids(rep.Devices), c.tpus)
		}
	}
}
