package discover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/device"
)

// Host describes the machine Discover ran on.
type Host struct {
	// Hostname is Root/proc/sys/kernel/hostname.
	Hostname string `json:"hostname,omitempty"`
	// Kernel is Root/proc/sys/kernel/osrelease.
	Kernel string     `json:"kernel,omitempty"`
	CPU    CPUInfo    `json:"cpu"`
	Memory HostMemory `json:"memory"`
	// Cloud is the evidence for (or against) this being a GCE VM.
	Cloud CloudEvidence `json:"cloud"`
}

// CPUInfo summarises Root/proc/cpuinfo and the process's CPU limits.
type CPUInfo struct {
	Vendor string `json:"vendor,omitempty"`
	// Model is the "model name" (x86) or the closest equivalent.
	Model string `json:"model,omitempty"`
	// Sockets counts distinct "physical id"s; 0 when cpuinfo has none.
	Sockets int `json:"sockets"`
	// PhysicalCores counts distinct (physical id, core id) pairs; when
	// cpuinfo lacks them it equals LogicalCPUs.
	PhysicalCores int `json:"physical_cores"`
	// LogicalCPUs counts "processor" entries (online logical CPUs).
	LogicalCPUs int `json:"logical_cpus"`
	// AllowedCPUs counts Cpus_allowed_list in Root/proc/self/status: the
	// CPUs this process may run on (runtime.NumCPU's answer); 0 if unknown.
	AllowedCPUs int `json:"allowed_cpus,omitempty"`
	// CgroupCPULimit is the cgroup CPU quota in CPUs (quota/period);
	// 0 when there is none. CgroupCPUSource is the file read.
	CgroupCPULimit  float64 `json:"cgroup_cpu_limit,omitempty"`
	CgroupCPUSource string  `json:"cgroup_cpu_source,omitempty"`
	// Features are the SIMD/matrix features of interest present in the
	// first CPU's flags, kernel names with '_' written '-' (avx512-bf16,
	// amx-tile) and sse4_2 written sse4.2, in simdFeatures order.
	Features []string `json:"features,omitempty"`
}

// HostMemory is the host's memory and the limit that applies to this
// process.
type HostMemory struct {
	// TotalBytes is MemTotal from Root/proc/meminfo.
	TotalBytes uint64 `json:"total_bytes"`
	// AvailableBytes is MemAvailable, 0 if absent.
	AvailableBytes uint64 `json:"available_bytes,omitempty"`
	// CgroupLimitBytes is the tightest memory limit of this process's
	// cgroup and its ancestors; 0 when there is none.
	CgroupLimitBytes uint64 `json:"cgroup_limit_bytes,omitempty"`
	// CgroupVersion is 1 or 2 for the memory controller found, 0 if none.
	CgroupVersion int `json:"cgroup_version,omitempty"`
	// CgroupSource is the file that set the limit, or the leaf file read
	// when no level sets one.
	CgroupSource string `json:"cgroup_source,omitempty"`
	// EffectiveBytes is min(TotalBytes, CgroupLimitBytes), and
	// EffectiveSource where it came from ("/proc/meminfo" or the cgroup file).
	EffectiveBytes  uint64 `json:"effective_bytes"`
	EffectiveSource string `json:"effective_source,omitempty"`
}

// simdFeatures are the cpuinfo flags reported in CPUInfo.Features, x86
// then Arm. Names are the kernel's (arch/x86/include/asm/cpufeatures.h,
// arch/arm64 hwcaps).
var simdFeatures = []string{
	"sse4_2", "avx", "avx2", "fma", "f16c",
	"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl",
	"avx512ifma", "avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bf16", "avx512_fp16",
	"avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
	"asimd", "asimddp", "asimdhp", "sve", "sve2", "bf16", "i8mm", "sme",
}

// cpuinfo is what parseCPUInfo extracts.
type cpuinfo struct {
	vendor, model string
	logical       int
	sockets       int
	cores         int
	flags         map[string]bool
}

// parseCPUInfo reads /proc/cpuinfo text: blocks of "key : value" lines,
// one block per logical CPU. It accepts x86 ("model name", "flags",
// "physical id", "core id") and Arm ("Features", "CPU part", no model
// name) layouts. It fails only on a read error or when no "processor"
// entry is present.
func parseCPUInfo(r io.Reader) (cpuinfo, error) {
	var ci cpuinfo
	sockets := map[string]bool{}
	cores := map[string]bool{}
	phys := ""
	firstFlags := true
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1<<20)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			if _, err := strconv.Atoi(v); err == nil {
				ci.logical++
				phys = ""
			}
		case "vendor_id", "CPU implementer":
			if ci.vendor == "" {
				ci.vendor = v
			}
		case "model name", "Model Name", "cpu model", "uarch":
			if ci.model == "" {
				ci.model = v
			}
		case "Hardware", "Model":
			if ci.model == "" {
				ci.model = v
			}
		case "physical id":
			phys = v
			sockets[v] = true
		case "core id":
			cores[phys+"/"+v] = true
		case "flags", "Features":
			if firstFlags {
				ci.flags = map[string]bool{}
				for _, f := range strings.Fields(v) {
					ci.flags[f] = true
				}
				firstFlags = false
			}
		}
	}
	if err := s.Err(); err != nil {
		return ci, fmt.Errorf("read cpuinfo: %w", err)
	}
	if ci.logical == 0 {
		return ci, errors.New("cpuinfo has no \"processor\" entry")
	}
	ci.sockets = len(sockets)
	ci.cores = len(cores)
	if ci.cores == 0 || ci.cores > ci.logical {
		ci.cores = ci.logical
	}
	if ci.sockets > ci.cores {
		ci.sockets = ci.cores
	}
	return ci, nil
}

// features lists the simdFeatures present, '_' spelled '-'.
func (ci cpuinfo) features() []string {
	var out []string
	for _, f := range simdFeatures {
		if !ci.flags[f] {
			continue
		}
		if f == "sse4_2" {
			out = append(out, "sse4.2")
		} else {
			out = append(out, strings.ReplaceAll(f, "_", "-"))
		}
	}
	return out
}

// parseMemInfo returns MemTotal and MemAvailable in bytes.
func parseMemInfo(r io.Reader) (total, avail uint64, err error) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok || (k != "MemTotal" && k != "MemAvailable") {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, 0, fmt.Errorf("meminfo %s: no value", k)
		}
		n, perr := strconv.ParseUint(f[0], 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("meminfo %s: want an integer, got %q", k, f[0])
		}
		if len(f) > 1 && strings.EqualFold(f[1], "kB") {
			if n > (1<<64-1)/1024 {
				return 0, 0, fmt.Errorf("meminfo %s: %d kB overflows", k, n)
			}
			n *= 1024
		}
		if k == "MemTotal" {
			total = n
		} else {
			avail = n
		}
	}
	if err := s.Err(); err != nil {
		return 0, 0, err
	}
	if total == 0 {
		return 0, 0, errors.New("meminfo has no MemTotal")
	}
	return total, avail, nil
}

// countCPUList counts a kernel CPU list such as "0-3,8,10-11".
func countCPUList(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty CPU list")
	}
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, fmt.Errorf("CPU list %q: bad number %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		n += b - a + 1
		if n > 1<<20 {
			return 0, fmt.Errorf("CPU list %q: too many CPUs", s)
		}
	}
	return n, nil
}

// cgroupUnlimited is where cgroup v1 limits start meaning "no limit": the
// kernel reports PAGE_COUNTER_MAX pages, 9223372036854771712 with 4 KiB
// pages, for an unlimited memory.limit_in_bytes.
const cgroupUnlimited = 1 << 62

// cgroupPaths parses /proc/self/cgroup: the v2 path ("0::/path") and the
// v1 paths by controller.
func cgroupPaths(text string) (v2 string, hasV2 bool, v1 map[string]string) {
	v1 = map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, hasV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				v1[c] = parts[2]
			}
		}
	}
	return v2, hasV2, v1
}

// cgroupWalk reads file in dir/rel and each ancestor up to dir, returning
// the tightest value parse accepts. The kernel shows a namespaced process
// "/" as its own path, so when rel does not exist under dir only dir
// itself is read.
func cgroupWalk(dir, rel, file string, parse func(string) (uint64, bool)) (limit uint64, src string, leaf string, found bool) {
	rel = path.Clean("/" + rel)
	if _, err := os.Stat(dir + rel); err != nil {
		rel = "/"
	}
	for {
		p := dir + strings.TrimSuffix(rel, "/") + "/" + file
		if b, err := os.ReadFile(p); err == nil {
			if !found {
				leaf = p
			}
			found = true
			if v, ok := parse(strings.TrimSpace(string(b))); ok && (limit == 0 || v < limit) {
				limit, src = v, p
			}
		}
		if rel == "/" {
			break
		}
		rel = path.Dir(rel)
	}
	return limit, src, leaf, found
}

// visible returns dir/rel, or dir itself when rel is not visible there
// (a cgroup namespace shows the process its own cgroup as the root).
func visible(dir, rel string) string {
	p := strings.TrimSuffix(dir+path.Clean("/"+rel), "/")
	if _, err := os.Stat(p); err != nil {
		return dir
	}
	return p
}

func parseMemLimit(s string) (uint64, bool) {
	if s == "max" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 || v >= cgroupUnlimited {
		return 0, false
	}
	return v, true
}

// probeCPU reads cpuinfo, meminfo, the cgroup limits and the hostname.
func (d *run) probeCPU(_ context.Context, p *Probe) {
	h := &d.rep.Host
	p.Source = d.path("/proc/cpuinfo")
	var errs []string
	if f, err := os.Open(d.path("/proc/cpuinfo")); err == nil {
		ci, err := parseCPUInfo(f)
		f.Close()
		if err != nil {
			errs = append(errs, d.path("/proc/cpuinfo")+": "+err.Error())
		} else {
			h.CPU.Vendor, h.CPU.Model = ci.vendor, ci.model
			h.CPU.Sockets, h.CPU.PhysicalCores, h.CPU.LogicalCPUs = ci.sockets, ci.cores, ci.logical
			h.CPU.Features = ci.features()
			p.Found = ci.logical
		}
	} else {
		errs = append(errs, err.Error())
	}
	if f, err := os.Open(d.path("/proc/meminfo")); err == nil {
		total, avail, err := parseMemInfo(f)
		f.Close()
		if err != nil {
			errs = append(errs, d.path("/proc/meminfo")+": "+err.Error())
		} else {
			h.Memory.TotalBytes, h.Memory.AvailableBytes = total, avail
		}
	} else {
		errs = append(errs, err.Error())
	}
	if b, err := os.ReadFile(d.path("/proc/self/status")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				if n, err := countCPUList(v); err == nil {
					h.CPU.AllowedCPUs = n
				} else {
					p.Notes = append(p.Notes, err.Error())
				}
			}
		}
	}
	d.cgroupLimits(p)
	h.Memory.EffectiveBytes, h.Memory.EffectiveSource = h.Memory.TotalBytes, "/proc/meminfo"
	if l := h.Memory.CgroupLimitBytes; l > 0 && (h.Memory.TotalBytes == 0 || l < h.Memory.TotalBytes) {
		h.Memory.EffectiveBytes, h.Memory.EffectiveSource = l, h.Memory.CgroupSource
	}
	if h.Memory.TotalBytes == 0 && h.Memory.CgroupLimitBytes == 0 {
		h.Memory.EffectiveSource = ""
	}
	if b, err := os.ReadFile(d.path("/proc/sys/kernel/hostname")); err == nil {
		h.Hostname = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(d.path("/proc/sys/kernel/osrelease")); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if len(errs) > 0 {
		p.Err = strings.Join(errs, "; ")
	}
}

// cgroupLimits finds the memory and CPU limits of this process's cgroup.
func (d *run) cgroupLimits(p *Probe) {
	h := &d.rep.Host
	b, err := os.ReadFile(d.path("/proc/self/cgroup"))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.Notes = append(p.Notes, "cgroup: "+err.Error())
		}
		return
	}
	v2, hasV2, v1 := cgroupPaths(string(b))
	base := d.path("/sys/fs/cgroup")
	if rel, ok := v1["memory"]; ok {
		if l, src, leaf, found := cgroupWalk(base+"/memory", rel, "memory.limit_in_bytes", parseMemLimit); found {
			h.Memory.CgroupVersion = 1
			h.Memory.CgroupLimitBytes, h.Memory.CgroupSource = l, d.logical(src)
			if l == 0 {
				h.Memory.CgroupSource = d.logical(leaf)
			}
		}
	} else if hasV2 {
		for _, mnt := range []string{base, base + "/unified"} {
			if l, src, leaf, found := cgroupWalk(mnt, v2, "memory.max", parseMemLimit); found {
				h.Memory.CgroupVersion = 2
				h.Memory.CgroupLimitBytes, h.Memory.CgroupSource = l, d.logical(src)
				if l == 0 {
					h.Memory.CgroupSource = d.logical(leaf)
				}
				break
			}
		}
	}
	// CPU quota: v2 cpu.max "quota period" or "max period"; v1
	// cpu.cfs_quota_us (-1 = none) over cpu.cfs_period_us.
	if rel, ok := v1["cpu"]; ok {
		dir := base + "/cpu"
		if _, err := os.Stat(dir); err != nil {
			dir = base + "/cpu,cpuacct"
		}
		cg := visible(dir, rel)
		q, qerr := os.ReadFile(cg + "/cpu.cfs_quota_us")
		per, perr := os.ReadFile(cg + "/cpu.cfs_period_us")
		if qerr == nil && perr == nil {
			qn, e1 := strconv.ParseInt(strings.TrimSpace(string(q)), 10, 64)
			pn, e2 := strconv.ParseInt(strings.TrimSpace(string(per)), 10, 64)
			if e1 == nil && e2 == nil && qn > 0 && pn > 0 {
				h.CPU.CgroupCPULimit = float64(qn) / float64(pn)
				h.CPU.CgroupCPUSource = d.logical(cg + "/cpu.cfs_quota_us")
			}
		}
	} else if hasV2 {
		f := visible(base, v2) + "/cpu.max"
		if b, err := os.ReadFile(f); err == nil {
			fs := strings.Fields(string(b))
			if len(fs) == 2 && fs[0] != "max" {
				qn, e1 := strconv.ParseInt(fs[0], 10, 64)
				pn, e2 := strconv.ParseInt(fs[1], 10, 64)
				if e1 == nil && e2 == nil && qn > 0 && pn > 0 {
					h.CPU.CgroupCPULimit = float64(qn) / float64(pn)
					h.CPU.CgroupCPUSource = d.logical(f)
				}
			}
		}
	}
}

// CPU describes the host CPU as a device without the rest of discovery: it
// runs only the cpu probe (Root/proc/cpuinfo, /proc/meminfo,
// /proc/self/status, the cgroup memory and CPU limits, hostname and kernel
// release), with no PCI scan, device-node checks, NVML, metadata request or
// plugin search, so the cpu backend can describe its device cheaply when it
// opens. The device is the "cpu:0" entry Discover would report: Cores is the
// CPUs this process may use, and Memory.Total is the effective limit,
// min(MemTotal, cgroup memory limit), with Memory.Source "/proc/meminfo" or
// "cgroup" (Host.Memory.EffectiveSource names the file). Host.Cloud is left
// empty: deciding whether this is a GCE VM needs the PCI scan.
//
// As with Discover, the error is non-nil only when inspection cannot start:
// opts.Root does not exist or is not a directory, or ctx has ended. Files
// that cannot be read become the device's Problems (code
// "cpu-probe-failed", and "cpuinfo-unreadable" when no CPU was described).
func CPU(ctx context.Context, opts Options) (device.Info, Host, error) {
	if err := checkRoot(opts.Root); err != nil {
		return device.Info{}, Host{}, err
	}
	if err := ctx.Err(); err != nil {
		return device.Info{}, Host{}, fmt.Errorf("discover: %w", err)
	}
	d := newRun(opts)
	d.rep = &Report{Root: opts.Root}
	p := Probe{Name: ProbeCPU}
	d.probeCPU(ctx, &p)
	info := d.cpuDevice()
	if p.Err != "" {
		info.Problems = append(info.Problems, device.Problem{
			Code: "cpu-probe-failed", Severity: device.SeverityWarning,
			Message: "reading the CPU and memory description failed: " + p.Err,
		})
	}
	return info, d.rep.Host, nil
}

// cpuDevice is the host CPU as a device.
func (d *run) cpuDevice() device.Info {
	c := d.rep.Host.CPU
	m := d.rep.Host.Memory
	info := device.Info{
		ID:         "cpu:0",
		Platform:   device.CPU,
		Kind:       c.Model,
		Cores:      c.LogicalCPUs,
		Features:   slices.Clone(c.Features),
		CoreOnChip: -1,
	}
	if c.AllowedCPUs > 0 && c.AllowedCPUs < c.LogicalCPUs {
		info.Cores = c.AllowedCPUs
	}
	src := "/proc/meminfo"
	if m.EffectiveSource != "" && m.EffectiveSource != "/proc/meminfo" {
		src = "cgroup"
	}
	if m.EffectiveBytes > 0 {
		info.Memory = device.Memory{Total: m.EffectiveBytes, Source: src}
	}
	info.SetAttr(device.Attribute{Name: "logical_cpus", Value: c.LogicalCPUs, Source: "/proc/cpuinfo"})
	info.SetAttr(device.Attribute{Name: "physical_cores", Value: c.PhysicalCores, Source: "/proc/cpuinfo"})
	info.SetAttr(device.Attribute{Name: "sockets", Value: c.Sockets, Source: "/proc/cpuinfo"})
	if c.CgroupCPULimit > 0 {
		info.SetAttr(device.Attribute{Name: "cgroup_cpu_limit", Value: c.CgroupCPULimit, Source: c.CgroupCPUSource})
	}
	if c.LogicalCPUs == 0 {
		info.Problems = append(info.Problems, device.Problem{
			Code: "cpuinfo-unreadable", Severity: device.SeverityWarning,
			Message: "could not read the CPU description from " + d.path("/proc/cpuinfo"),
		})
	}
	return info
}
