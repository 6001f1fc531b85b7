package discover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/device"
)

// AcceleratorType is a parsed Cloud TPU accelerator type such as "v4-8",
// "v5litepod-16" or "tpu7x-8".
type AcceleratorType struct {
	// Name is the type as given.
	Name string `json:"name"`
	// Prefix is the part before the dash ("v5litepod").
	Prefix string `json:"prefix"`
	// Suffix is the number after the dash.
	Suffix int `json:"suffix"`
	// Generation is the catalog key ("v5e"), "" if the prefix is unknown.
	Generation string `json:"generation,omitempty"`
	// Chips and TensorCores are the slice totals; 0 if unknown.
	Chips       int `json:"chips,omitempty"`
	TensorCores int `json:"tensor_cores,omitempty"`
}

// accelTypeRE accepts "v<digits><letters>-N" and "tpu<digits><letters>-N".
// Source: reference §1.2, which notes Ray's ^v\d+[a-zA-Z]*-\d+$ misses
// tpu7x-N and proposes this broader form.
var accelTypeRE = regexp.MustCompile(`^(v\d+[a-z]*|tpu\d+[a-z]*)-(\d+)$`)

// tpuGen describes a TPU generation for accelerator-type arithmetic.
type tpuGen struct {
	coresPerChip int  // TensorCores per chip (reference §1.1)
	suffixCores  bool // the accel-type suffix counts TensorCores, not chips (§1.2)
	vfio         bool // device nodes are /dev/vfio/N, not /dev/accelN (§1.4)
	kind         string
}

// tpuGens is keyed by catalog generation. Sources: reference §1.1
// (TensorCores/chip: v4 2, v5e 1, v5p 2, v6e 1, TPU7x 2), §1.2 ("Suffix N
// counts": TensorCores for v2/v3, v4, v5p, tpu7x; chips for v5e, v6e;
// device_kind spellings), §1.4 (v4 and v2/v3 use /dev/accel*; v5p, v6e and
// later use VFIO; v5e hosts are VFIO too per Ray's /dev/vfio fallback, and
// v2/v3 hosts hold 4 chips with 2 cores each per Ray).
var tpuGens = map[string]tpuGen{
	"v2":    {2, true, false, "TPU v2"},
	"v3":    {2, true, false, "TPU v3"},
	"v4":    {2, true, false, "TPU v4"},
	"v5e":   {1, false, true, "TPU v5 lite"},
	"v5p":   {2, true, true, "TPU v5"},
	"v6e":   {1, false, true, "TPU v6 lite"},
	"tpu7x": {2, true, true, "TPU7x"},
}

// accelPrefixGen maps accelerator-type prefixes to generations
// (reference §1.2 "Cloud accel-type" column).
var accelPrefixGen = map[string]string{
	"v2": "v2", "v3": "v3", "v4": "v4",
	"v5litepod": "v5e", "v5e": "v5e",
	"v5p": "v5p", "v6e": "v6e", "tpu7x": "tpu7x",
}

// ErrBadAcceleratorType is wrapped by ParseAcceleratorType's errors.
var ErrBadAcceleratorType = errors.New("malformed TPU accelerator type")

// ParseAcceleratorType parses a Cloud TPU accelerator type. An unknown but
// well-formed prefix ("v9z-8") parses with an empty Generation and zero
// Chips; only malformed text is an error.
func ParseAcceleratorType(s string) (AcceleratorType, error) {
	m := accelTypeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return AcceleratorType{}, fmt.Errorf("%w: %q (want e.g. v4-8, v5litepod-16, tpu7x-8)", ErrBadAcceleratorType, s)
	}
	n, err := strconv.Atoi(m[2])
	if err != nil || n <= 0 {
		return AcceleratorType{}, fmt.Errorf("%w: %q: size must be a positive integer", ErrBadAcceleratorType, s)
	}
	at := AcceleratorType{Name: m[0], Prefix: m[1], Suffix: n}
	gen, ok := accelPrefixGen[m[1]]
	if !ok {
		return at, nil
	}
	at.Generation = gen
	g := tpuGens[gen]
	if g.suffixCores {
		if n%g.coresPerChip == 0 {
			at.TensorCores, at.Chips = n, n/g.coresPerChip
		}
	} else {
		at.Chips, at.TensorCores = n, n*g.coresPerChip
	}
	return at, nil
}

// TPUEnvironment is the TPU slice as the environment and the metadata
// server describe it. Values come from environment variables first (GKE
// injects them), then the metadata server's attributes and tpu-env (TPU
// VMs), as the reference (§5.5 item 8) prescribes; Sources says which.
type TPUEnvironment struct {
	AcceleratorType       string   `json:"accelerator_type,omitempty"`
	Topology              string   `json:"topology,omitempty"`
	TopologyWrap          string   `json:"topology_wrap,omitempty"`
	TopologyAlt           string   `json:"topology_alt,omitempty"`
	ChipsPerHostBounds    string   `json:"chips_per_host_bounds,omitempty"`
	HostBounds            string   `json:"host_bounds,omitempty"`
	ChipsPerProcessBounds string   `json:"chips_per_process_bounds,omitempty"`
	ProcessBounds         string   `json:"process_bounds,omitempty"`
	VisibleChips          string   `json:"visible_chips,omitempty"`
	WorkerID              *int     `json:"worker_id,omitempty"`
	WorkerHostnames       []string `json:"worker_hostnames,omitempty"`
	Zone                  string   `json:"zone,omitempty"`
	Name                  string   `json:"name,omitempty"`
	RuntimeVersion        string   `json:"runtime_version,omitempty"`
	RuntimeMetricsPorts   string   `json:"runtime_metrics_ports,omitempty"`
	LibraryPath           string   `json:"library_path,omitempty"`
	// SkipMDSQuery is TPU_SKIP_MDS_QUERY: set on GKE, it means "read the
	// environment, not the metadata server".
	SkipMDSQuery                bool   `json:"skip_mds_query,omitempty"`
	MegascaleCoordinatorAddress string `json:"megascale_coordinator_address,omitempty"`
	MegascaleNumSlices          *int   `json:"megascale_num_slices,omitempty"`
	MegascaleSliceID            *int   `json:"megascale_slice_id,omitempty"`

	// Derived values.
	// Generation is the accelerator type's catalog key.
	Generation string `json:"generation,omitempty"`
	// SliceChips and SliceTensorCores are slice totals from the
	// accelerator type, or from the topology when there is no type.
	SliceChips       int `json:"slice_chips,omitempty"`
	SliceTensorCores int `json:"slice_tensor_cores,omitempty"`
	// LocalChips is the number of TPU chips on this host's PCI bus.
	LocalChips int `json:"local_chips"`
	// Hosts is the number of hosts (VMs) in the slice, and HostsSource how
	// it was derived: "host_bounds", "worker_hostnames",
	// "slice_chips/chips_per_host_bounds" or "slice_chips/local_chips".
	Hosts       int    `json:"hosts,omitempty"`
	HostsSource string `json:"hosts_source,omitempty"`

	// Env holds every TPU-related environment variable that is set.
	Env map[string]string `json:"env,omitempty"`
	// Metadata is what the metadata server returned, nil if not asked.
	Metadata *TPUMetadata `json:"metadata,omitempty"`
	// Sources maps each field's JSON name to where its value came from:
	// "env:TPU_TOPOLOGY", "metadata:accelerator-type",
	// "metadata:tpu-env:TOPOLOGY".
	Sources map[string]string `json:"sources,omitempty"`
}

// TPUMetadata is the TPU part of the GCE metadata server's instance
// attributes (reference §1.5).
type TPUMetadata struct {
	AcceleratorType        string            `json:"accelerator_type,omitempty"`
	AgentWorkerNumber      string            `json:"agent_worker_number,omitempty"`
	WorkerNetworkEndpoints string            `json:"worker_network_endpoints,omitempty"`
	WorkerIPs              []string          `json:"worker_ips,omitempty"`
	TPUEnv                 map[string]string `json:"tpu_env,omitempty"`
}

// tpuEnvVars are the variables the TPU probe reads. Sources: reference §1.4
// (PyTorch/XLA list, JAX init, Ray subsetting) and §1.5 (GKE pod
// environment, Multislice).
var tpuEnvVars = []string{
	"TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES",
	"TPU_TOPOLOGY", "TPU_TOPOLOGY_WRAP", "TPU_TOPOLOGY_ALT",
	"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS",
	"TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_PROCESS_BOUNDS",
	"TPU_PROCESS_ADDRESSES", "TPU_PROCESS_PORT", "TPU_VISIBLE_CHIPS",
	"TPU_RUNTIME_METRICS_PORTS", "TPU_SKIP_MDS_QUERY", "TPU_NAME",
	"TPU_LIBRARY_PATH", "CLOUD_TPU_TASK_ID", "VBAR_CONTROL_SERVICE_URL",
	"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID",
	"PJRT_DEVICE", "JAX_PLATFORMS", "JAX_FORCE_TPU_INIT", "LIBTPU_INIT_ARGS",
}

// truthy reports whether a flag variable is set to something other than
// an explicit false. JAX treats any non-empty TPU_SKIP_MDS_QUERY as set.
func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false", "no", "off":
		return false
	}
	return true
}

// probeTPUEnv reads the TPU environment variables.
func (d *run) probeTPUEnv(_ context.Context, p *Probe) {
	p.Source = "environment (" + strings.Join([]string{"TPU_*", "MEGASCALE_*", "CLOUD_TPU_TASK_ID", "PJRT_DEVICE", "JAX_PLATFORMS"}, ", ") + ")"
	t := &d.rep.TPU
	t.Sources = map[string]string{}
	for _, k := range tpuEnvVars {
		if v, ok := d.getenv(k); ok {
			if t.Env == nil {
				t.Env = map[string]string{}
			}
			t.Env[k] = v
			p.Found++
		}
	}
	e := t.Env
	set := func(dst *string, field, key string) {
		if v := e[key]; v != "" && *dst == "" {
			*dst = v
			t.Sources[field] = "env:" + key
		}
	}
	set(&t.AcceleratorType, "accelerator_type", "TPU_ACCELERATOR_TYPE")
	set(&t.Topology, "topology", "TPU_TOPOLOGY")
	set(&t.TopologyWrap, "topology_wrap", "TPU_TOPOLOGY_WRAP")
	set(&t.TopologyAlt, "topology_alt", "TPU_TOPOLOGY_ALT")
	set(&t.ChipsPerHostBounds, "chips_per_host_bounds", "TPU_CHIPS_PER_HOST_BOUNDS")
	set(&t.HostBounds, "host_bounds", "TPU_HOST_BOUNDS")
	set(&t.ChipsPerProcessBounds, "chips_per_process_bounds", "TPU_CHIPS_PER_PROCESS_BOUNDS")
	set(&t.ProcessBounds, "process_bounds", "TPU_PROCESS_BOUNDS")
	set(&t.VisibleChips, "visible_chips", "TPU_VISIBLE_CHIPS")
	set(&t.Name, "name", "TPU_NAME")
	set(&t.RuntimeMetricsPorts, "runtime_metrics_ports", "TPU_RUNTIME_METRICS_PORTS")
	set(&t.LibraryPath, "library_path", "TPU_LIBRARY_PATH")
	set(&t.MegascaleCoordinatorAddress, "megascale_coordinator_address", "MEGASCALE_COORDINATOR_ADDRESS")
	if v, ok := e["TPU_SKIP_MDS_QUERY"]; ok {
		t.SkipMDSQuery = truthy(v)
		t.Sources["skip_mds_query"] = "env:TPU_SKIP_MDS_QUERY"
	}
	if v := e["TPU_WORKER_HOSTNAMES"]; v != "" {
		t.WorkerHostnames = splitList(v)
		t.Sources["worker_hostnames"] = "env:TPU_WORKER_HOSTNAMES"
	}
	for _, k := range []string{"TPU_WORKER_ID", "CLOUD_TPU_TASK_ID"} {
		if v := e[k]; v != "" && t.WorkerID == nil {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				p.Notes = append(p.Notes, fmt.Sprintf("%s=%q is not a non-negative integer; ignored", k, v))
				continue
			}
			t.WorkerID = &n
			t.Sources["worker_id"] = "env:" + k
		}
	}
	d.setIntPtr(&t.MegascaleNumSlices, "megascale_num_slices", e["MEGASCALE_NUM_SLICES"], "env:MEGASCALE_NUM_SLICES", p)
	d.setIntPtr(&t.MegascaleSliceID, "megascale_slice_id", e["MEGASCALE_SLICE_ID"], "env:MEGASCALE_SLICE_ID", p)
}

func (d *run) setIntPtr(dst **int, field, v, source string, p *Probe) {
	if v == "" || *dst != nil {
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("%s=%q is not a non-negative integer; ignored", source, v))
		return
	}
	*dst = &n
	d.rep.TPU.Sources[field] = source
}

// mergeMetadata fills fields the environment left empty from metadata.
func (d *run) mergeMetadata(md *TPUMetadata, p *Probe) {
	t := &d.rep.TPU
	t.Metadata = md
	if t.Sources == nil {
		t.Sources = map[string]string{}
	}
	if t.AcceleratorType == "" && md.AcceleratorType != "" {
		t.AcceleratorType = md.AcceleratorType
		t.Sources["accelerator_type"] = "metadata:accelerator-type"
	}
	if t.WorkerID == nil && md.AgentWorkerNumber != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(md.AgentWorkerNumber)); err == nil && n >= 0 {
			t.WorkerID = &n
			t.Sources["worker_id"] = "metadata:agent-worker-number"
		} else {
			p.Notes = append(p.Notes, fmt.Sprintf("agent-worker-number %q is not a non-negative integer; ignored", md.AgentWorkerNumber))
		}
	}
	if len(t.WorkerHostnames) == 0 && len(md.WorkerIPs) > 0 {
		t.WorkerHostnames = md.WorkerIPs
		t.Sources["worker_hostnames"] = "metadata:worker-network-endpoints"
	}
	te := md.TPUEnv
	set := func(dst *string, field string, keys ...string) {
		for _, k := range keys {
			if v := te[k]; v != "" && *dst == "" {
				*dst = v
				t.Sources[field] = "metadata:tpu-env:" + k
			}
		}
	}
	set(&t.AcceleratorType, "accelerator_type", "ACCELERATOR_TYPE")
	set(&t.Topology, "topology", "TOPOLOGY")
	set(&t.TopologyWrap, "topology_wrap", "TPU_TOPOLOGY_WRAP", "WRAP")
	set(&t.TopologyAlt, "topology_alt", "TPU_TOPOLOGY_ALT", "ALT")
	set(&t.ChipsPerHostBounds, "chips_per_host_bounds", "CHIPS_PER_HOST_BOUNDS")
	set(&t.HostBounds, "host_bounds", "HOST_BOUNDS")
	set(&t.ChipsPerProcessBounds, "chips_per_process_bounds", "TPU_CHIPS_PER_PROCESS_BOUNDS")
	set(&t.ProcessBounds, "process_bounds", "TPU_PROCESS_BOUNDS")
	set(&t.Zone, "zone", "ZONE")
	set(&t.Name, "name", "NODE_ID")
	set(&t.RuntimeVersion, "runtime_version", "RUNTIME_VERSION")
	set(&t.RuntimeMetricsPorts, "runtime_metrics_ports", "TPU_RUNTIME_METRICS_PORTS")
	set(&t.MegascaleCoordinatorAddress, "megascale_coordinator_address", "MEGASCALE_COORDINATOR_ADDRESS")
	if t.WorkerID == nil && te["WORKER_ID"] != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(te["WORKER_ID"])); err == nil && n >= 0 {
			t.WorkerID = &n
			t.Sources["worker_id"] = "metadata:tpu-env:WORKER_ID"
		}
	}
	d.setIntPtr(&t.MegascaleNumSlices, "megascale_num_slices", te["MEGASCALE_NUM_SLICES"], "metadata:tpu-env:MEGASCALE_NUM_SLICES", p)
	d.setIntPtr(&t.MegascaleSliceID, "megascale_slice_id", te["MEGASCALE_SLICE_ID"], "metadata:tpu-env:MEGASCALE_SLICE_ID", p)
}

// deriveTPU computes the slice totals and host count once env and
// metadata are merged.
func (d *run) deriveTPU() {
	t := &d.rep.TPU
	t.LocalChips = 0
	for _, f := range d.pci {
		if f.isTPU() {
			t.LocalChips++
		}
	}
	if t.AcceleratorType != "" {
		if at, err := ParseAcceleratorType(t.AcceleratorType); err == nil {
			t.Generation = at.Generation
			t.SliceChips, t.SliceTensorCores = at.Chips, at.TensorCores
		}
	}
	if t.SliceChips == 0 && t.Topology != "" {
		if n, err := dimsProduct(t.Topology, "x"); err == nil {
			t.SliceChips = n
			if g, ok := tpuGens[t.Generation]; ok {
				t.SliceTensorCores = n * g.coresPerChip
			}
		}
	}
	if t.HostBounds != "" {
		if n, err := dimsProduct(t.HostBounds, ","); err == nil {
			t.Hosts, t.HostsSource = n, "host_bounds"
		}
	}
	if t.Hosts == 0 && len(t.WorkerHostnames) > 0 {
		t.Hosts, t.HostsSource = len(t.WorkerHostnames), "worker_hostnames"
	}
	if t.Hosts == 0 && t.SliceChips > 0 && t.ChipsPerHostBounds != "" {
		if n, err := dimsProduct(t.ChipsPerHostBounds, ","); err == nil && t.SliceChips%n == 0 {
			t.Hosts, t.HostsSource = t.SliceChips/n, "slice_chips/chips_per_host_bounds"
		}
	}
	if t.Hosts == 0 && t.SliceChips > 0 && t.LocalChips > 0 && t.SliceChips%t.LocalChips == 0 {
		t.Hosts, t.HostsSource = t.SliceChips/t.LocalChips, "slice_chips/local_chips"
	}
	if len(t.Sources) == 0 {
		t.Sources = nil
	}
}

// dimsProduct multiplies "2x2x1" or "2,2,1"; every dimension must be a
// positive integer.
func dimsProduct(s, sep string) (int, error) {
	parts := strings.Split(strings.TrimSpace(s), sep)
	n := 1
	for _, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v <= 0 || v > 1<<20 {
			return 0, fmt.Errorf("bad dimension %q in %q (want positive integers separated by %q)", p, s, sep)
		}
		n *= v
		if n > 1<<30 {
			return 0, fmt.Errorf("dimensions %q multiply past 2^30", s)
		}
	}
	return n, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// tpuDevices builds one device.Info per TPU chip on the PCI bus.
func (d *run) tpuDevices() []device.Info {
	var chips []pciFunc
	for _, f := range d.pci {
		if f.isTPU() {
			chips = append(chips, f)
		}
	}
	if len(chips) == 0 {
		return nil
	}
	t := d.rep.TPU
	accels := d.accelNodes()
	accelByAddr := d.accelSysfsMap()
	var out []device.Info
	for i, f := range chips {
		entry := tpuPCI[f.device]
		gen, kind := entry.gen, entry.kind
		if f.device == 0x0027 && (t.Generation == "v2" || t.Generation == "v3") {
			gen, kind = t.Generation, tpuGens[t.Generation].kind
		}
		info := device.Info{
			ID:         "tpu:" + f.addr,
			Platform:   device.TPU,
			Kind:       kind,
			Generation: gen,
			Index:      i,
			PCI:        f.info(),
			CoreOnChip: -1,
		}
		if g, ok := tpuGens[gen]; ok {
			info.Cores = g.coresPerChip
		}
		if t.WorkerID != nil {
			info.ProcessIndex = *t.WorkerID
		}
		info.SetAttr(device.Attribute{Name: "pci_device_id", Value: fmt.Sprintf("0x%04x", f.device), Source: "sysfs"})
		if t.AcceleratorType != "" {
			info.SetAttr(device.Attribute{Name: "accelerator_type", Value: t.AcceleratorType, Source: t.Sources["accelerator_type"]})
		}

		// Find the chip's device node: VFIO group first, then /dev/accelN
		// by sysfs link, then by order when counts agree.
		var node, mapping string
		vfioNode := ""
		if f.iommuGroup != "" {
			vfioNode = "/dev/vfio/" + f.iommuGroup
		}
		switch {
		case vfioNode != "" && d.nodes[vfioNode]:
			node, mapping = vfioNode, "iommu_group"
		case accelByAddr[f.addr] != "":
			node, mapping = accelByAddr[f.addr], "sysfs"
		case len(accels) == len(chips) && f.driver != "vfio-pci":
			node, mapping = accels[i], "order"
		}
		if node != "" {
			info.Nodes = []string{node}
			info.SetAttr(device.Attribute{Name: "node_mapping", Value: mapping, Source: "sysfs"})
			info.Problems = append(info.Problems, d.checkNode(node, "")...)
			info.Problems = append(info.Problems, d.busyProblem(node)...)
			if mapping == "iommu_group" {
				info.Nodes = append(info.Nodes, "/dev/vfio/vfio")
				info.Problems = append(info.Problems, d.checkNode("/dev/vfio/vfio", "load the VFIO driver: sudo modprobe vfio-pci")...)
			}
		} else {
			info.Problems = append(info.Problems, d.tpuNodeMissing(f, gen, vfioNode, len(accels), len(chips)))
		}
		info.Problems = append(info.Problems, d.busyProblem("/tmp/libtpu_lockfile")...)
		out = append(out, info)
	}
	return out
}

// tpuNodeMissing explains why a chip has no device node.
func (d *run) tpuNodeMissing(f pciFunc, gen, vfioNode string, accels, chips int) device.Problem {
	drv := f.driver
	if drv == "" {
		drv = "none"
	}
	msg := fmt.Sprintf("TPU chip %s (1ae0:%04x, kernel driver: %s) has no device node", f.addr, f.device, drv)
	switch {
	case vfioNode != "":
		msg += fmt.Sprintf(": %s does not exist", vfioNode)
	case accels > 0:
		msg += fmt.Sprintf(": %d /dev/accel* nodes for %d chips, and sysfs does not link them to chips", accels, chips)
	default:
		msg += ": no /dev/accel* and no /dev/vfio/<iommu group>"
	}
	fix := "recreate the TPU VM from a Cloud TPU runtime image (--version); the image creates /dev/accel* (jax-ml/jax#13260: recreating the VM restored a missing /dev/accel0)"
	if g, ok := tpuGens[gen]; (ok && g.vfio) || (!ok && f.device != 0x0027) {
		fix = fmt.Sprintf("bind the chip to vfio-pci: sudo modprobe vfio-pci && echo 1ae0 %04x | sudo tee /sys/bus/pci/drivers/vfio-pci/new_id", f.device)
	}
	return device.Problem{Code: "device-node-missing", Severity: device.SeverityError, Message: msg, Fix: fix}
}

// accelNodes returns /dev/accel* sorted by number.
func (d *run) accelNodes() []string {
	var out []string
	for n := range d.nodes {
		if strings.HasPrefix(n, "/dev/accel") {
			if _, ok := numericSuffix(n); ok {
				out = append(out, n)
			}
		}
	}
	sort.Slice(out, func(a, b int) bool {
		x, _ := numericSuffix(out[a])
		y, _ := numericSuffix(out[b])
		return x < y
	})
	return out
}

// accelSysfsMap maps PCI addresses to /dev/accelN through
// Root/sys/class/accel/accelN/device links, where the kernel provides them.
func (d *run) accelSysfsMap() map[string]string {
	out := map[string]string{}
	ms, _ := filepath.Glob(globEscape(d.path("/sys/class/accel")) + "/accel*")
	for _, m := range ms {
		t, err := os.Readlink(filepath.Join(m, "device"))
		if err != nil {
			continue
		}
		node := "/dev/" + filepath.Base(m)
		if d.nodes[node] {
			out[strings.ToLower(filepath.Base(t))] = node
		}
	}
	return out
}

// tpuEnvProblems cross-checks the TPU environment against the PCI bus.
func (d *run) tpuEnvProblems() []device.Problem {
	t := d.rep.TPU
	var ps []device.Problem
	if t.LocalChips == 0 {
		if t.Env["TPU_ACCELERATOR_TYPE"] != "" || t.Env["TPU_TOPOLOGY"] != "" || t.Env["TPU_WORKER_ID"] != "" {
			ps = append(ps, device.Problem{
				Code: "tpu-env-without-chips", Severity: device.SeverityWarning,
				Message: "TPU environment variables are set (TPU_ACCELERATOR_TYPE/TPU_TOPOLOGY/TPU_WORKER_ID) but no TPU chip (PCI vendor 0x1ae0) is on this host",
				Fix:     "on GKE, request the chips in the container spec (resources.limits google.com/tpu) and schedule onto a TPU node pool; elsewhere unset the TPU_* variables",
			})
		}
		return ps
	}
	pciGen := ""
	for _, f := range d.pci {
		if f.isTPU() {
			pciGen = tpuPCI[f.device].gen
			break
		}
	}
	if t.Generation != "" && pciGen != "" && t.Generation != pciGen {
		ps = append(ps, device.Problem{
			Code: "tpu-generation-mismatch", Severity: device.SeverityWarning,
			Message: fmt.Sprintf("accelerator type %s (%s) says %s but the PCI bus has %s chips", t.AcceleratorType, t.Sources["accelerator_type"], t.Generation, pciGen),
			Fix:     "correct TPU_ACCELERATOR_TYPE, or check that the pod landed on the intended node pool",
		})
	}
	if t.ChipsPerHostBounds != "" && t.VisibleChips == "" {
		if n, err := dimsProduct(t.ChipsPerHostBounds, ","); err == nil && n != t.LocalChips {
			ps = append(ps, device.Problem{
				Code: "tpu-chip-count-mismatch", Severity: device.SeverityWarning,
				Message: fmt.Sprintf("chips_per_host_bounds %s (%s) gives %d chips but %d are on the PCI bus and TPU_VISIBLE_CHIPS is unset", t.ChipsPerHostBounds, t.Sources["chips_per_host_bounds"], n, t.LocalChips),
				Fix:     "set TPU_VISIBLE_CHIPS to the chips this process should use, or correct TPU_CHIPS_PER_HOST_BOUNDS",
			})
		}
	}
	if t.Topology != "" && t.AcceleratorType != "" {
		if n, err := dimsProduct(t.Topology, "x"); err == nil {
			if at, err := ParseAcceleratorType(t.AcceleratorType); err == nil && at.Chips > 0 && at.Chips != n {
				ps = append(ps, device.Problem{
					Code: "tpu-topology-mismatch", Severity: device.SeverityWarning,
					Message: fmt.Sprintf("topology %s has %d chips but accelerator type %s has %d", t.Topology, n, t.AcceleratorType, at.Chips),
				})
			}
		}
	}
	if t.WorkerID != nil && t.Hosts > 0 && *t.WorkerID >= t.Hosts {
		ps = append(ps, device.Problem{
			Code: "tpu-worker-id-out-of-range", Severity: device.SeverityError,
			Message: fmt.Sprintf("worker id %d (%s) is not below the slice's %d hosts (%s)", *t.WorkerID, t.Sources["worker_id"], t.Hosts, t.HostsSource),
			Fix:     "set TPU_WORKER_ID to this host's index, 0 to hosts-1",
		})
	}
	return ps
}

// hostProblems reports host settings that affect accelerators.
func (d *run) hostProblems() []device.Problem {
	var ps []device.Problem
	// JAX warns when THP is not [always] on v5e and later (reference §1.4).
	late := false
	for _, f := range d.pci {
		if f.isTPU() {
			switch tpuPCI[f.device].gen {
			case "v5e", "v5p", "v6e", "tpu7x":
				late = true
			}
		}
	}
	if late {
		p := d.path("/sys/kernel/mm/transparent_hugepage/enabled")
		if b, err := os.ReadFile(p); err == nil {
			if sel := bracketed(string(b)); sel != "" && sel != "always" {
				ps = append(ps, device.Problem{
					Code: "thp-not-always", Severity: device.SeverityWarning,
					Message: fmt.Sprintf("transparent huge pages are [%s] in %s; JAX warns on v5e and later TPUs unless they are [always]", sel, "/sys/kernel/mm/transparent_hugepage/enabled"),
					Fix:     "echo always | sudo tee /sys/kernel/mm/transparent_hugepage/enabled",
				})
			}
		}
	}
	return ps
}

// bracketed returns the [selected] word of a sysfs choice list.
func bracketed(s string) string {
	i := strings.IndexByte(s, '[')
	j := strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return ""
	}
	return s[i+1 : j]
}
