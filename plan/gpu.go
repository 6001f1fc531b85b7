package plan

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/tensorbridge/tensorbridge/catalog"
	"github.com/tensorbridge/tensorbridge/internal/capi"
)

// GPUs: the CUDA PJRT plugin (tensorbridge plugins install cuda) creates a
// topology without a GPU from a "partitions x hosts x devices" string and a
// GpuTargetConfigProto in text form (options "topology" and
// "target_config"), and compiles for it; it needs ptxas, from a CUDA 13
// toolkit, for the final step. It reports compiled memory statistics but
// implements no cost analysis (UNIMPLEMENTED), so a GPU plan has memory and
// fit but no FLOPs, roofline or cost per inference.

// envCUDADir names the CUDA toolkit directory (holding bin/ptxas) the
// plugin compiles with; it becomes XLA's --xla_gpu_cuda_data_dir.
const envCUDADir = "TENSORBRIDGE_CUDA_DIR"

// cudaDir is $TENSORBRIDGE_CUDA_DIR, else the directory
// scripts/install-cuda-tools.sh installs ptxas and libdevice into, if it
// holds them.
func cudaDir() string {
	if d := os.Getenv(envCUDADir); d != "" {
		return d
	}
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".local", "share")
	}
	d := filepath.Join(base, "tensorbridge", "cuda")
	if _, err := os.Stat(filepath.Join(d, "bin", "ptxas")); err != nil {
		return ""
	}
	return d
}

// gpuTargets maps the names plan accepts to catalog keys.
var gpuTargets = map[string]string{"h100": "h100-sxm", "h200": "h200"}

// gpuSlice reads "h100-8" (8 GPUs of one host), "h200" (one GPU).
func gpuSlice(s string) (gpu struct {
	key string
	n   int
}, ok bool) {
	name, num, _ := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "-")
	key, ok := gpuTargets[name]
	if !ok {
		return gpu, false
	}
	gpu.key, gpu.n = key, 1
	if num != "" {
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > 8 {
			return gpu, false
		}
		gpu.n = n
	}
	return gpu, true
}

var (
	cudaOnce   sync.Once
	cudaPlugin *capi.Plugin
	cudaErr    error
)

func cudaPJRT() (*capi.Plugin, error) {
	cudaOnce.Do(func() {
		path, err := capi.FindPlugin("cuda")
		if err != nil {
			cudaErr = fmt.Errorf("plan: the CUDA PJRT plugin is not installed (tensorbridge plugins install cuda): %v", err)
			return
		}
		cudaPlugin, cudaErr = capi.Load(path)
	})
	return cudaPlugin, cudaErr
}

// targetConfig writes a GpuTargetConfigProto for a Hopper GPU from the
// catalog's memory, bandwidth and SM count; the per-SM limits are those of
// compute capability 9.0 (CUDA C++ Programming Guide, "Technical
// Specifications per Compute Capability",
// https://docs.nvidia.com/cuda/cuda-c-programming-guide/).
func targetConfig(acc catalog.Accelerator) (string, error) {
	if !acc.Memory.Known() || !acc.MemoryBandwidth.Known() || !acc.Cores.Known() || acc.ComputeCapability.Value != "9.0" {
		return "", fmt.Errorf("plan: no GPU target description for %s (needs memory, bandwidth, SM count and compute capability 9.0 in the catalog)", acc.Name)
	}
	return fmt.Sprintf(`gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: %d
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: %d
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: %d
  shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 minor: 0 }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info { major: 9 }
device_description_str: %q
`, acc.Cores.Value, int64(acc.MemoryBandwidth.Value), acc.Memory.Value, acc.Name), nil
}

func openGPU(ctx context.Context, g struct {
	key string
	n   int
}) (catalog.Slice, catalog.Accelerator, *topology, error) {
	acc, ok := catalog.Lookup(g.key)
	if !ok {
		return catalog.Slice{}, acc, nil, fmt.Errorf("plan: no catalog entry %q", g.key)
	}
	cfg, err := targetConfig(acc)
	if err != nil {
		return catalog.Slice{}, acc, nil, err
	}
	p, err := cudaPJRT()
	if err != nil {
		return catalog.Slice{}, acc, nil, err
	}
	shape := fmt.Sprintf("1x1x%d", g.n)
	top, err := openNamedTopology(ctx, p, "cuda", []capi.NamedValue{{Name: "topology", Value: shape}, {Name: "target_config", Value: cfg}})
	if err != nil {
		return catalog.Slice{}, acc, nil, err
	}
	top.gpu = true
	top.name = "cuda:" + shape
	if top.hbm == 0 {
		top.hbm = int64(acc.Memory.Value)
	}
	return catalog.Slice{Generation: acc.Generation, Name: fmt.Sprintf("%s-%d", g.key, g.n), Chips: g.n, Hosts: 1, ChipsPerHost: g.n}, acc, top, nil
}
