// Package discover finds the accelerators and describes the host without
// initialising any accelerator runtime.
//
// Discover reads sysfs, /dev, /proc, the environment and, on a GCE VM, the
// metadata server; it asks NVML (through purego, no cgo) what the NVIDIA
// driver reports; and it lists, without loading, the PJRT plugin files on
// the search path. It returns a Report: one device.Info per TPU chip, GPU
// and the host CPU, host facts, the TPU slice environment, the plugin
// files, and one Probe entry per source. The `tensorbridge devices` and
// `doctor` commands print it; the runtime chooses backends from it.
//
// # Why not ask the runtimes
//
// Opening libtpu claims the TPU chips (a chip admits one process at a
// time), and CUDA or HIP initialisation can hang or crash the process.
// Discovery must be cheap, safe and able to explain what is wrong, so it
// reads what the kernel publishes. Ollama's discovery
// (https://github.com/ollama/ollama, its discover package) shows the failure modes this
// package avoids: results that exist only in debug logs, a silent fall
// back to CPU, and negative results cached for the life of the process.
// Here every failure is a value in the Report (Probe.Err, Probe.Skipped,
// device.Info.Problems with a code, a message and an exact fix,
// Report.Problems), and nothing is cached: each call probes afresh.
// Devices are identified by PCI address ("tpu:0000:00:04.0",
// "cuda:0000:16:00.0", "rocm:0000:0c:00.0", "cpu:0"), so IDs are stable
// across runs and across the sources that saw them.
//
// # Probes
//
// In the order they run, each reported in Report.Probes:
//
//   - pci-sysfs: Root/sys/bus/pci/devices/*/{vendor,device,class,numa_node}
//     and the driver and iommu_group links. Google TPU chips (vendor 0x1ae0,
//     device ID to generation, device_kind and TensorCores per chip from
//     catalog.ByPCIID), NVIDIA GPUs (0x10de,
//     display class 0x03), AMD GPUs (0x1002, display or processing
//     accelerator class).
//   - device-nodes: Root/dev/accel*, /dev/vfio/*, /dev/nvidia*, /dev/kfd,
//     /dev/dri/renderD*, /dev/dxg; then Root/proc/*/fd links, to name the
//     process holding a TPU chip (or /tmp/libtpu_lockfile) open.
//   - amd-kfd: Root/sys/class/kfd/kfd/topology/nodes/*/properties, for the
//     gfx target, compute units and render node of each AMD GPU.
//   - nvml: libnvidia-ml.so.1 via purego (nvmlInit_v2, device count,
//     handles, name, UUID, memory, PCI info, driver version, shutdown).
//   - tpu-env: TPU_*, MEGASCALE_*, CLOUD_TPU_TASK_ID and related
//     variables (set by GKE). The accelerator type, from here or from the
//     metadata server, is read with catalog.ParseAcceleratorType; one the
//     catalog rejects ("v5e-8": v5e slices are v5litepod-N) is a
//     Report.Problems entry naming the value, its source and the catalog's
//     reason.
//   - gce-metadata: the metadata server's accelerator-type,
//     agent-worker-number, worker-network-endpoints and tpu-env attributes.
//     Asked only when the host shows evidence of being a GCE VM (DMI says
//     Google, a Google PCI function, TPU_* variables) and nothing disables
//     it (Options.SkipMetadata, TENSORBRIDGE_NO_METADATA=1,
//     TPU_SKIP_MDS_QUERY); otherwise the probe records why it was skipped.
//     Requests go direct (no proxy, no redirects) under a short timeout.
//   - pjrt-plugins: PluginSearchPath and FindPlugins; files are listed,
//     never opened.
//   - cpu: Root/proc/cpuinfo (model, sockets, cores, logical CPUs, SIMD
//     and AMX features), Root/proc/meminfo, Root/proc/self/status
//     (Cpus_allowed_list), and the cgroup v2 memory.max / cpu.max or v1
//     memory.limit_in_bytes / cpu.cfs_quota_us of this process's cgroup,
//     giving the memory limit that actually applies and its source.
//
// # Injecting roots
//
// Every input is an Options field, so a fixture host replays exactly:
// Root prefixes all filesystem paths; Env replaces os.LookupEnv (EnvMap
// wraps a map); MetadataURL points at a test server; NVML takes a
// StaticNVML snapshot; PluginPath replaces the search path; Credentials
// and StatNode decide device-node permission checks, since fixtures cannot
// create device nodes. The fixtures in internal/discovertest/testdata/hosts
// are such recordings: a root.txtar archive of the filesystem plus
// env.json, metadata.json, nvml.json and nodes.json, each with a SOURCE.md
// naming where its facts come from. Package internal/discovertest replays
// them for this module's tests: discovertest.Options(t, "synthetic-tpu-v4").
//
// # CPU only
//
// CPU runs the cpu probe alone and returns the "cpu:0" device and the host
// description, for the cpu backend, which needs them when it opens and has
// no use for a PCI scan, NVML or the metadata server.
//
// # Errors
//
// Discover returns an error only when it cannot inspect at all: Root does
// not exist (errors.Is fs.ErrNotExist) or is not a directory
// (ErrRootNotDir), or ctx ended (the partial report is returned too).
// NVML failures wrap ErrNVMLNotFound or are *NVMLError; metadata failures
// are *MetadataError (possibly wrapping ErrNotMetadataServer); plugin
// search failures are *PluginSearchError. In the Report they appear as
// strings, so the Report marshals to JSON with stable snake_case names.
package discover
