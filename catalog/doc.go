// Package catalog is tensorbridge's static hardware catalog: published facts
// about Google TPUs and NVIDIA and AMD data-center GPUs, keyed by what
// discovery and runtimes report. It also parses Cloud TPU accelerator types
// and slice topologies.
//
// Discovery sees little of a device (a PCI ID, a device node, an environment
// variable); a runtime reports a device_kind string. The catalog turns those
// keys into what they imply: HBM per chip, memory bandwidth, peak dense rates,
// cores, MXU shape, interconnect, chips per host and valid slice shapes. It
// enriches what was found and never invents a device: an unknown key is
// answered with false, not a near match, and an unknown figure is zero.
//
// # Figures and sources
//
// Every figure is a Figure: a value, its Source (the URL of a documentation
// page or of a code file at the version read) and a Note with caveats. A zero value with a
// source means the source states the feature is absent; a zero value without
// one means unknown, and the Note says why (usually: the sources read give no
// figure, or its sources conflict). Conflicts are kept visible in Notes
// rather than resolved silently: for example v5p memory bandwidth is 2765
// GBps in the docs but 2.46e12 B/s in jax's tpu_info.py, and the TPU7x
// devices-per-chip count is left unknown because jax and MaxText disagree.
//
// Units are bytes, bytes per second and operations per second, per chip (per
// physical package for GPUs: an MI250X's figures cover both of its GCDs) and
// dense (no 2:4 sparsity). TPU memory is stored in GiB where jax's tpu_info.py
// shows the binary reading; GPU memory written "80 GB" by its source is
// stored as 80e9 bytes, the smaller reading. Prefer the runtime's own memory
// figure where there is one; the catalog's is the fallback.
//
// The package tests check the embedded data (validate.go: unique keys and
// device kinds, a source on every known figure, plausible magnitudes,
// topologies consistent with dimensions, maximum slice size and chips per
// host), so a bad edit fails the build's tests rather than a user's run.
//
// # Accelerator types and topologies
//
// ParseAcceleratorType reads Cloud TPU accelerator types such as "v4-8",
// "v5litepod-16" or "tpu7x-8". The number counts TensorCores for v2, v3, v4,
// v5p and tpu7x (two per chip), and chips for v5litepod (v5e) and v6e. The
// slice's topology is the one the catalog lists for that chip count; Hosts
// counts TPU VMs: one for single-host shapes, otherwise one per 4 chips.
// ParseTopology, ValidateTopology, NewSlice and ResolveSlice handle the
// topology strings of TPU_TOPOLOGY and gcloud --topology. Errors match
// ErrInvalidAcceleratorType or ErrInvalidTopology with errors.Is and carry the
// input and the reason (*InvalidAcceleratorTypeError, *InvalidTopologyError).
//
// # Known gaps
//
//   - v2 and v3: only TensorCores per chip, chips per host, device_kind, the
//     PCI ID and the v2-8/v3-8 names are documented; memory, rates and
//     topologies are unknown, and larger v2/v3 slices are rejected.
//   - TPU 8i and 8t: device_kind, PCI ID, HBM and bandwidth (and 8i fp8)
//     only; no accelerator-type names are known, so none parse.
//   - v4 topologies stop at XPK's 8x16x16 (2048 chips) although the docs speak
//     of 4096-chip pods; v5p stops at the documented 16x16x24 although XPK
//     also lists 12x24x24 and 16x20x28.
//   - GPU interconnects (NVLink, Infinity Fabric) and chips per host have no
//     figures in the sources read and are unknown.
//   - The V100 entry covers the 16 GB and 32 GB cards; its memory is unknown.
//
// # Sources
//
// Every figure's Source is a public URL (the tests check it), among:
//
//   - Cloud TPU docs: https://cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e,
//     /tpu7x, /system-architecture-tpu-vm; GKE:
//     https://cloud.google.com/kubernetes-engine/docs/concepts/tpus and
//     /concepts/tpu-ironwood.
//   - https://github.com/jax-ml/jax at cec06d116c05: jax/_src/tpu_info.py
//     (per-TensorCore figures, multiplied back to per chip),
//     jax/_src/mesh_utils.py (device_kind strings), jax/_src/hardware_utils.py
//     (PCI IDs).
//   - https://github.com/AI-Hypercomputer/xpk at 02b0c0928aee:
//     src/xpk/core/system_characteristics.py (topology lists, chips per VM,
//     GKE labels, machine types).
//   - https://jax-ml.github.io/scaling-book/tpus/ (ICI per link);
//     https://github.com/ray-project/ray python/ray/_private/accelerators/tpu.py
//     (chips and cores per host).
//   - https://www.nvidia.com/en-us/data-center/h100/ and /h200/;
//     https://developer.nvidia.com/cuda-gpus (compute capability);
//     Lightning-AI/pytorch-lightning src/lightning/fabric/utilities/throughput.py
//     and pytorch/torchtitan torchtitan/tools/utils.py on GitHub (peak rates
//     from datasheets); https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html
//     (AMD CUs, memory, gfx target, peak rates); https://pci-ids.ucw.cz
//     (PCI vendor IDs).
//
// The spec tables of TorchBridge, a project reviewed while building this one, carry no
// sources and several wrong values (TPU v7 with 128 or 256 GB, MI300X given
// the MI325X row, a "13 TB/s" v6e ICI); none of them is used here.
package catalog
