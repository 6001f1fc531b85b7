#!/usr/bin/env python3
"""Writes the synthetic host fixtures under hosts/<name>/ beside this script
(internal/discovertest/testdata/hosts, embedded by package discovertest).

Each host's filesystem is stored as root.txtar (txtar: "-- path --" then the
file's content; "-- path -> target --" is a symbolic link). discovertest
materialises it into a temporary directory, because PCI addresses contain ':'
(not allowed in Go module file paths) and /proc/<pid>/fd entries are links.
Sidecar JSON files (env.json, metadata.json, nvml.json, nodes.json) sit next
to it. Facts and their sources are in each host's SOURCE.md.

Usage: python3 gen_fixtures.py            # rewrite every synthetic host
       python3 gen_fixtures.py record     # record THIS machine as cpu-only
Setup tool only; nothing runs it at test time.
"""
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTS = os.path.join(HERE, "hosts")


class Tree:
    def __init__(self):
        self.files = {}  # path -> content
        self.links = {}  # path -> target

    def file(self, path, content=""):
        self.files[path.lstrip("/")] = content

    def link(self, path, target):
        self.links[path.lstrip("/")] = target

    def pci(self, addr, vendor, device, cls, numa=-1, driver=None, iommu=None):
        d = "sys/bus/pci/devices/" + addr
        self.file(d + "/vendor", "0x%04x\n" % vendor)
        self.file(d + "/device", "0x%04x\n" % device)
        self.file(d + "/class", "0x%06x\n" % cls)
        self.file(d + "/numa_node", "%d\n" % numa)
        if driver:
            self.link(d + "/driver", "../../../bus/pci/drivers/" + driver)
        if iommu is not None:
            self.link(d + "/iommu_group", "../../../kernel/iommu_groups/%d" % iommu)

    def write(self, name):
        out = os.path.join(HOSTS, name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "root.txtar"), "w") as f:
            f.write("Filesystem root of host %s; see SOURCE.md.\n" % name)
            for p in sorted(set(self.files) | set(self.links)):
                if p in self.links:
                    f.write("-- %s -> %s --\n" % (p, self.links[p]))
                    continue
                c = self.files[p]
                f.write("-- %s --\n" % p)
                if c and not c.endswith("\n"):
                    c += "\n"
                f.write(c)


def sidecar(name, fname, obj):
    with open(os.path.join(HOSTS, name, fname), "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def cpuinfo(model, sockets, cores, threads, flags, vendor="GenuineIntel"):
    """Synthetic /proc/cpuinfo: logical CPUs numbered socket-major."""
    blocks, n = [], 0
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                blocks.append(
                    "processor\t: %d\nvendor_id\t: %s\nmodel name\t: %s\n"
                    "physical id\t: %d\nsiblings\t: %d\ncore id\t\t: %d\n"
                    "cpu cores\t: %d\nflags\t\t: %s\n" %
                    (n, vendor, model, s, cores * threads, c, cores, flags))
                n += 1
    return "\n".join(blocks) + "\n"


def meminfo(total_kb, avail_kb):
    return ("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\n"
            % (total_kb, avail_kb, avail_kb))


SYN_MODEL = "SYNTHETIC x86-64 CPU (fixture; host CPU not in sources)"
SYN_FLAGS = "fpu tsc sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c"


def common(t, hostname, product=None, cpus=(1, 4, 2), mem_kb=(67108864, 60000000),
           thp="[always] madvise never"):
    s, c, th = cpus
    t.file("proc/cpuinfo", cpuinfo(SYN_MODEL, s, c, th, SYN_FLAGS))
    t.file("proc/meminfo", meminfo(*mem_kb))
    t.file("proc/self/cgroup", "0::/\n")
    t.file("proc/self/status", "Name:\tdiscover\nCpus_allowed_list:\t0-%d\n" % (s * c * th - 1))
    t.file("proc/sys/kernel/hostname", hostname + "\n")
    t.file("proc/sys/kernel/osrelease", "6.8.0-1015-gcp\n")
    t.file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    t.file("sys/fs/cgroup/memory.max", "max\n")
    t.file("sys/kernel/mm/transparent_hugepage/enabled", thp + "\n")
    if product:
        t.file("sys/class/dmi/id/product_name", product + "\n")
        t.file("sys/class/dmi/id/bios_vendor", "Google\n")
        t.file("sys/class/dmi/id/sys_vendor", "Google\n")
    # Every GCE VM has a gVNIC (1ae0:0042); it must not count as a TPU.
    if product:
        t.file("sys/bus/pci/devices/0000:00:03.0/vendor", "0x1ae0\n")
        t.file("sys/bus/pci/devices/0000:00:03.0/device", "0x0042\n")
        t.file("sys/bus/pci/devices/0000:00:03.0/class", "0x020000\n")
        t.file("sys/bus/pci/devices/0000:00:03.0/numa_node", "0\n")
        t.link("sys/bus/pci/devices/0000:00:03.0/driver", "../../../bus/pci/drivers/gve")


def tpu_env_text(d):
    return "".join("%s: '%s'\n" % (k, v.replace("'", "''")) for k, v in d.items())


def tpu_accel(name, n, device_id, gen_env, extra=None):
    """A TPU VM with /dev/accelN nodes (v4 style), reached by metadata."""
    t = Tree()
    common(t, "t1v-n-" + name.removeprefix("synthetic-") + "-w-0", product="Google Compute Engine")
    for i in range(n):
        t.pci("0000:00:%02x.0" % (4 + i), 0x1ae0, device_id, 0x120000, numa=0)
        t.file("dev/accel%d" % i)
    if extra:
        extra(t)
    return t


def write_v4():
    md = {
        "instance/attributes/accelerator-type": "v4-8",
        "instance/attributes/agent-worker-number": "0",
        "instance/attributes/worker-network-endpoints": "unknown:unknown:10.130.0.2",
        "instance/attributes/tpu-env": tpu_env_text({
            "ACCELERATOR_TYPE": "v4-8", "CHIPS_PER_HOST_BOUNDS": "2,2,1", "HOST_BOUNDS": "1,1,1",
            "TOPOLOGY": "2x2x1", "TPU_CHIPS_PER_PROCESS_BOUNDS": "2,2,1", "TPU_PROCESS_BOUNDS": "1,1,1",
            "TPU_RUNTIME_METRICS_PORTS": "8431,8432,8433,8434", "TPU_TOPOLOGY_ALT": "false",
            "TPU_TOPOLOGY_WRAP": "false,false,false", "TYPE": "V4", "WORKER_ID": "0",
            "ZONE": "us-central2-b", "NODE_ID": "fixture-v4-8", "RUNTIME_VERSION": "tpu-ubuntu2204-base",
        }),
    }
    for name, busy in (("synthetic-tpu-v4", False), ("synthetic-tpu-v4-busy", True)):
        def extra(t, busy=busy):
            if busy:
                t.file("proc/4242/comm", "python3\n")
                t.link("proc/4242/fd/17", "/dev/accel0")
                t.link("proc/4242/fd/0", "/dev/null")
                t.file("proc/4300/comm", "bash\n")
                t.link("proc/4300/fd/0", "/dev/pts/0")
        t = tpu_accel(name, 4, 0x005E, "v4", extra)
        t.write(name)
        nodes = {"/dev/accel%d" % i: {"mode": "0666", "uid": 0, "gid": 0} for i in range(4)}
        sidecar(name, "nodes.json", nodes)
        if busy:
            sidecar(name, "env.json", {"TENSORBRIDGE_NO_METADATA": "1"})
        else:
            sidecar(name, "env.json", {})
            sidecar(name, "metadata.json", md)


def tpu_vfio(name, chips, device_id, numa_split, hostname, product="Google Compute Engine",
             cpus=(1, 4, 2), mem_kb=(67108864, 60000000), thp="[always] madvise never"):
    t = Tree()
    common(t, hostname, product=product, cpus=cpus, mem_kb=mem_kb, thp=thp)
    for i in range(chips):
        addr = "0000:00:%02x.0" % (4 + i)
        t.pci(addr, 0x1ae0, device_id, 0x120000, numa=(0 if i < numa_split else 1),
              driver="vfio-pci", iommu=i)
        t.file("dev/vfio/%d" % i)
    t.file("dev/vfio/vfio")
    return t


def vfio_nodes(chips, mode="0666"):
    n = {"/dev/vfio/%d" % i: {"mode": mode, "uid": 0, "gid": 0} for i in range(chips)}
    n["/dev/vfio/vfio"] = {"mode": "0666", "uid": 0, "gid": 0}
    return n


def write_v5e():
    # ct5lp-hightpu-8t: 224 vCPU, 384 GB, 2 NUMA nodes (https://cloud.google.com/tpu/docs/v5e).
    t = tpu_vfio("synthetic-tpu-v5litepod-8", 8, 0x0063, 4, "t1v-n-v5e8-w-0", cpus=(2, 56, 2),
                 mem_kb=(396000000, 380000000), thp="always [madvise] never")
    t.write("synthetic-tpu-v5litepod-8")
    sidecar("synthetic-tpu-v5litepod-8", "nodes.json", vfio_nodes(8))
    sidecar("synthetic-tpu-v5litepod-8", "env.json", {})
    sidecar("synthetic-tpu-v5litepod-8", "metadata.json", {
        "instance/attributes/accelerator-type": "v5litepod-8",
        "instance/attributes/agent-worker-number": "0",
        "instance/attributes/worker-network-endpoints": "unknown:unknown:10.164.0.7",
        "instance/attributes/tpu-env": tpu_env_text({
            "ACCELERATOR_TYPE": "v5litepod-8", "CHIPS_PER_HOST_BOUNDS": "2,4,1", "HOST_BOUNDS": "1,1,1",
            "TOPOLOGY": "2x4", "WORKER_ID": "0", "ZONE": "us-west4-a", "TYPE": "V5LITE_POD",
        }),
    })


def write_v5p():
    # ct5p-hightpu-4t: 208 vCPU, 448 GB (https://cloud.google.com/tpu/docs/v5p).
    t = tpu_vfio("synthetic-tpu-v5p", 4, 0x0062, 2, "t1v-n-v5p8-w-0", cpus=(2, 52, 2),
                 mem_kb=(462000000, 450000000))
    t.write("synthetic-tpu-v5p")
    sidecar("synthetic-tpu-v5p", "nodes.json", vfio_nodes(4))
    sidecar("synthetic-tpu-v5p", "env.json", {})
    sidecar("synthetic-tpu-v5p", "metadata.json", {
        "instance/attributes/accelerator-type": "v5p-8",
        "instance/attributes/agent-worker-number": "0",
        "instance/attributes/worker-network-endpoints": "unknown:unknown:10.128.0.9",
        "instance/attributes/tpu-env": tpu_env_text({
            "ACCELERATOR_TYPE": "v5p-8", "CHIPS_PER_HOST_BOUNDS": "2,2,1", "HOST_BOUNDS": "1,1,1",
            "TOPOLOGY": "2x2x1", "WORKER_ID": "0", "ZONE": "us-east5-a",
        }),
    })


def write_v6e():
    # A GKE pod on a ct6e-standard-8t node: GKE injects the TPU_* variables
    # and TPU_SKIP_MDS_QUERY (read by jax's GkeTpuCluster).
    t = tpu_vfio("synthetic-tpu-v6e-8", 8, 0x006F, 4, "v6e-job-0")
    t.write("synthetic-tpu-v6e-8")
    sidecar("synthetic-tpu-v6e-8", "nodes.json", vfio_nodes(8))
    sidecar("synthetic-tpu-v6e-8", "env.json", {
        "TPU_ACCELERATOR_TYPE": "v6e-8", "TPU_TOPOLOGY": "2x4", "TPU_WORKER_ID": "0",
        "TPU_WORKER_HOSTNAMES": "v6e-job-0.v6e-job", "TPU_CHIPS_PER_HOST_BOUNDS": "2,4,1",
        "TPU_HOST_BOUNDS": "1,1,1", "TPU_SKIP_MDS_QUERY": "true",
        "TPU_RUNTIME_METRICS_PORTS": "8431,8432,8433,8434,8435,8436,8437,8438",
        "TPU_TOPOLOGY_WRAP": "false,false,false", "TPU_TOPOLOGY_ALT": "false",
        "HOME": "/root",
    })


def write_tpu7x():
    # Worker 1 of a 2-host tpu7x-16 slice on GKE (4 chips per VM, 2 NUMA).
    t = tpu_vfio("synthetic-tpu7x", 4, 0x0076, 2, "tpu7x-job-1")
    t.write("synthetic-tpu7x")
    sidecar("synthetic-tpu7x", "nodes.json", vfio_nodes(4))
    sidecar("synthetic-tpu7x", "env.json", {
        "TPU_ACCELERATOR_TYPE": "tpu7x-16", "TPU_TOPOLOGY": "2x2x2", "TPU_WORKER_ID": "1",
        "TPU_WORKER_HOSTNAMES": "tpu7x-job-0.tpu7x-job,tpu7x-job-1.tpu7x-job",
        "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1", "TPU_HOST_BOUNDS": "1,1,2",
        "TPU_SKIP_MDS_QUERY": "true",
    })


# della H100 host (published "PLI Nodes" note): Xeon Platinum 8468,
# 2 sockets x 48 cores, 1 thread per core; this flags line.
DELLA_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr "
               "sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good "
               "nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl smx "
               "est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer "
               "aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault epb cat_l3 cat_l2 cdp_l3 "
               "invpcid_single cdp_l2 ssbd mba ibrs ibpb stibp ibrs_enhanced fsgsbase tsc_adjust bmi1 avx2 smep bmi2 "
               "erms invpcid cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb intel_pt avx512cd "
               "sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total "
               "cqm_mbm_local split_lock_detect avx_vnni avx512_bf16 wbnoinvd dtherm ida arat pln pts hwp "
               "hwp_act_window hwp_epp hwp_pkg_req avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes "
               "vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid bus_lock_detect cldemote "
               "movdiri movdir64b enqcmd fsrm md_clear serialize tsxldtrk pconfig arch_lbr amx_bf16 avx512_fp16 "
               "amx_tile amx_int8 flush_l1d arch_capabilities")

H100_BUSES = ["16", "17", "40", "41", "96", "97", "c0", "c1"]
# Device minors need not follow PCI order (published `grep 'Device Minor'`
# listing shows 07->2, 0b->3, 48->0, 4c->1, 88->6, 8b->7, c8->4 ...).
H100_MINORS = [2, 3, 0, 1, 6, 7, 4, 5]


def write_nvidia():
    name = "synthetic-nvidia-8xh100"
    t = Tree()
    t.file("proc/cpuinfo", cpuinfo("Intel(R) Xeon(R) Platinum 8468", 2, 48, 1, DELLA_FLAGS))
    # numactl -H: node 0 size 515020 MB, node 1 516037 MB -> 1031057 MiB.
    t.file("proc/meminfo", meminfo(1031057 * 1024, 990000000))
    t.file("proc/self/cgroup", "0::/\n")
    t.file("proc/self/status", "Name:\tdiscover\nCpus_allowed_list:\t0-95\n")
    t.file("proc/sys/kernel/hostname", "gpu-node-01\n")
    t.file("proc/sys/kernel/osrelease", "5.15.0-105-generic\n")
    t.file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    t.file("sys/fs/cgroup/memory.max", "68719476736\n")
    t.file("sys/fs/cgroup/cpu.max", "3200000 100000\n")
    for i, b in enumerate(H100_BUSES):
        addr = "0000:%s:00.0" % b
        t.pci(addr, 0x10DE, 0x2330, 0x030200, numa=(0 if i < 4 else 1), driver="nvidia")
        t.file("proc/driver/nvidia/gpus/%s/information" % addr,
               "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t %d\nGPU UUID: \t GPU-00000000-0000-4000-8000-00000000000%d\n"
               "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\n"
               "Device Minor: \t %d\nGPU Excluded:\t No\n" % (100 + i, i, addr, H100_MINORS[i]))
        t.file("dev/nvidia%d" % i)
    # Four NVSwitches: NVIDIA bridge functions (class 0x0680), not GPUs.
    for i, b in enumerate(["05", "06", "07", "08"]):
        t.pci("0000:%s:00.0" % b, 0x10DE, 0x22A3, 0x068000, numa=0, driver="nvidia-nvswitch")
    t.file("dev/nvidiactl")
    t.file("dev/nvidia-uvm")
    t.write(name)
    nodes = {"/dev/nvidia%d" % i: {"mode": "0666", "uid": 0, "gid": 0} for i in range(8)}
    nodes["/dev/nvidiactl"] = {"mode": "0666", "uid": 0, "gid": 0}
    nodes["/dev/nvidia-uvm"] = {"mode": "0666", "uid": 0, "gid": 0}
    sidecar(name, "nodes.json", nodes)
    sidecar(name, "env.json", {})
    mib = 81559 * 1024 * 1024
    sidecar(name, "nvml.json", {
        "library": "libnvidia-ml.so.1",
        "driver_version": "545.23.08",
        "devices": [{
            "index": i,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-00000000-0000-4000-8000-00000000000%d" % i,
            "pci_bus_id": "00000000:%s:00.0" % b.upper(),
            "pci_device_id": 0x233010DE,
            "pci_subsystem_id": 0x16C110DE,
            "memory_total": mib,
            "memory_used": 2 * 1024 * 1024,
            "memory_free": mib - 2 * 1024 * 1024,
        } for i, b in enumerate(H100_BUSES)],
    })


def write_nvidia_no_nvml():
    name = "synthetic-nvidia-no-nvml"
    t = Tree()
    common(t, "gpu-box", cpus=(1, 8, 2))
    # A container whose memory cgroup (v1) is limited to 16 GiB.
    t.file("proc/self/cgroup", "5:cpu,cpuacct:/docker/f00d\n4:memory:/docker/f00d\n0::/\n")
    t.file("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    t.file("sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "9223372036854771712\n")
    t.file("sys/fs/cgroup/memory/docker/f00d/memory.limit_in_bytes", "17179869184\n")
    t.file("sys/fs/cgroup/cpu,cpuacct/docker/f00d/cpu.cfs_quota_us", "400000\n")
    t.file("sys/fs/cgroup/cpu,cpuacct/docker/f00d/cpu.cfs_period_us", "100000\n")
    t.pci("0000:01:00.0", 0x10DE, 0x2331, 0x030200, numa=0, driver="nvidia")
    t.pci("0000:02:00.0", 0x10DE, 0x2331, 0x030200, numa=0)
    t.file("dev/nvidia0")
    t.file("dev/nvidiactl")
    t.file("dev/nvidia-uvm")
    t.write(name)
    sidecar(name, "nodes.json", {
        "/dev/nvidia0": {"mode": "0666", "uid": 0, "gid": 0},
        "/dev/nvidiactl": {"mode": "0666", "uid": 0, "gid": 0},
        "/dev/nvidia-uvm": {"mode": "0666", "uid": 0, "gid": 0},
    })
    sidecar(name, "env.json", {})


def write_amd():
    name = "synthetic-amd-mi300x"
    t = Tree()
    common(t, "mi300x-node", cpus=(2, 4, 1))
    t.file("etc/group", "root:x:0:\nvideo:x:44:\nrender:x:109:\n")
    t.file("sys/class/kfd/kfd/topology/nodes/0/properties",
           "cpu_cores_count 4\nsimd_count 0\nmem_banks_count 1\ngfx_target_version 0\nvendor_id 0\n"
           "device_id 0\nlocation_id 0\ndomain 0\ndrm_render_minor 0\n")
    buses = [0x0c, 0x22, 0x38, 0x5c, 0x9f, 0xaf, 0xbf, 0xdf]
    vram = 192 * 1024 ** 3
    for i, b in enumerate(buses):
        addr = "0000:%02x:00.0" % b
        t.pci(addr, 0x1002, 0x74A1, 0x120000, numa=(0 if i < 4 else 1), driver="amdgpu")
        t.file("sys/bus/pci/devices/%s/mem_info_vram_total" % addr, "%d\n" % vram)
        n = "sys/class/kfd/kfd/topology/nodes/%d" % (i + 1)
        t.file(n + "/properties",
               "cpu_cores_count 0\nsimd_count 1216\nmem_banks_count 1\nwave_front_size 64\n"
               "array_count 32\nsimd_arrays_per_engine 1\nsimd_per_cu 4\ngfx_target_version 90402\n"
               "vendor_id 4098\ndevice_id 29857\nlocation_id %d\ndomain 0\ndrm_render_minor %d\n"
               "num_xcc 8\nunique_id %d\n" % (b << 8, 128 + i, 1000 + i))
        t.file(n + "/mem_banks/0/properties", "heap_type 1\nsize_in_bytes %d\nwidth 8192\n" % vram)
        t.file("dev/dri/renderD%d" % (128 + i))
    t.file("dev/kfd")
    t.write(name)
    nodes = {"/dev/dri/renderD%d" % (128 + i): {"mode": "0660", "uid": 0, "gid": 109} for i in range(8)}
    nodes["/dev/kfd"] = {"mode": "0660", "uid": 0, "gid": 109}
    sidecar(name, "nodes.json", nodes)
    sidecar(name, "env.json", {})


def write_gce_cpu():
    # A GCE VM without accelerators: DMI says Google, and its only Google
    # PCI function is the gVNIC network card (1ae0:0042, class 0x020000),
    # which shares the TPU chips' vendor ID and must not count as a TPU.
    name = "synthetic-gce-cpu-gvnic"
    t = Tree()
    common(t, "cpu-vm-0", product="Google Compute Engine", cpus=(1, 2, 2),
           mem_kb=(16393932, 15500000), thp="always [madvise] never")
    t.write(name)
    sidecar(name, "env.json", {})
    sidecar(name, "metadata.json", {"instance/attributes/": "ssh-keys\n"})


def record_cpu_only():
    """Copies this machine's relevant files verbatim."""
    t = Tree()

    def copy(p):
        if os.path.isfile(p):
            with open(p, errors="replace") as f:
                t.file(p, f.read())
            return True
        return False

    for p in ("/proc/cpuinfo", "/proc/meminfo", "/proc/self/cgroup", "/proc/self/status",
              "/proc/sys/kernel/hostname", "/proc/sys/kernel/osrelease",
              "/sys/kernel/mm/transparent_hugepage/enabled",
              "/sys/class/dmi/id/product_name", "/sys/class/dmi/id/bios_vendor", "/sys/class/dmi/id/sys_vendor"):
        copy(p)
    for d in sorted(glob.glob("/sys/bus/pci/devices/*")):
        for f in ("vendor", "device", "class", "numa_node"):
            copy(os.path.join(d, f))
        for l in ("driver", "iommu_group"):
            if os.path.islink(os.path.join(d, l)):
                t.link(os.path.join(d, l), os.readlink(os.path.join(d, l)))
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(","):
                if c in ("memory", "cpu"):
                    base = "/sys/fs/cgroup/" + c
                    rel = path
                    while True:
                        for fn in ("memory.limit_in_bytes", "cpu.cfs_quota_us", "cpu.cfs_period_us"):
                            copy(base + rel.rstrip("/") + "/" + fn)
                        if rel in ("/", ""):
                            break
                        rel = os.path.dirname(rel)
    for p in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/unified/memory.max"):
        copy(p)
    for pat in ("/dev/accel*", "/dev/vfio/*", "/dev/nvidia*", "/dev/kfd", "/dev/dri/renderD*"):
        for p in glob.glob(pat):
            t.file(p)
    t.write("cpu-only")
    sidecar("cpu-only", "env.json", {})


if __name__ == "__main__":
    if sys.argv[1:] == ["record"]:
        record_cpu_only()
    else:
        write_v4()
        write_v5e()
        write_v5p()
        write_v6e()
        write_tpu7x()
        write_nvidia()
        write_nvidia_no_nvml()
        write_amd()
        write_gce_cpu()
