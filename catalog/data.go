package catalog

import "github.com/tensorbridge/tensorbridge/device"

// Sources. Each is the URL of a public page or of a file at the version
// read (a "; "-separated list where a figure has several); validate checks
// that every figure's source is one.
const (
	srcTPUv4     = "https://cloud.google.com/tpu/docs/v4"
	srcTPUv5e    = "https://cloud.google.com/tpu/docs/v5e"
	srcTPUv5p    = "https://cloud.google.com/tpu/docs/v5p"
	srcTPUv6e    = "https://cloud.google.com/tpu/docs/v6e"
	srcTPU7x     = "https://cloud.google.com/tpu/docs/tpu7x"
	srcGKETPU    = "https://cloud.google.com/kubernetes-engine/docs/concepts/tpus"
	srcGKEIronwd = "https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood"
	srcTPUInfo   = "https://github.com/jax-ml/jax/blob/cec06d116c05/jax/_src/tpu_info.py"
	srcMeshUtils = "https://github.com/jax-ml/jax/blob/cec06d116c05/jax/_src/mesh_utils.py"
	srcHWUtils   = "https://github.com/jax-ml/jax/blob/cec06d116c05/jax/_src/hardware_utils.py"
	srcScaling   = "https://jax-ml.github.io/scaling-book/tpus/"
	srcRay       = "https://github.com/ray-project/ray/blob/master/python/ray/_private/accelerators/tpu.py"
	srcXPK       = "https://github.com/AI-Hypercomputer/xpk/blob/02b0c0928aee/src/xpk/core/system_characteristics.py"
	srcTPUNaming = "https://cloud.google.com/tpu/docs/system-architecture-tpu-vm"
	srcIronwdAnn = "https://blog.google/products/google-cloud/ironwood-google-tpu-things-to-know (ICI 9.6 Tb/s)"

	srcGPUTable = "https://github.com/Lightning-AI/pytorch-lightning/blob/master/src/lightning/fabric/utilities/throughput.py; " +
		"https://github.com/pytorch/torchtitan/blob/main/torchtitan/tools/utils.py; https://jax-ml.github.io/scaling-book/gpus/"
	srcH100DS    = "https://www.nvidia.com/en-us/data-center/h100/"
	srcH200DS    = "https://www.nvidia.com/en-us/data-center/h200/"
	srcCUDACC    = "https://developer.nvidia.com/cuda-gpus"
	srcROCm      = "https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html"
	srcB200Mem   = "https://www.nvidia.com/en-us/data-center/dgx-b200/ (1,440 GB for 8 GPUs)"
	srcGPUKind   = "https://github.com/openxla/xla/blob/main/xla/pjrt/gpu/se_gpu_pjrt_client.cc (device_kind is the driver's device name)"
	srcNVName    = "https://github.com/openxla/xla/blob/main/xla/pjrt/gpu/se_gpu_pjrt_client.cc (device_kind is the driver's device name; this spelling was not confirmed on a device)"
	srcAMDName   = "https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html (product name; the runtime's spelling was not confirmed on a device)"
	srcPCIGoogle = "https://pci-ids.ucw.cz/read/PC/1ae0"
	srcPCINVIDIA = "https://pci-ids.ucw.cz/read/PC/10de"
	srcPCIAMD    = "https://pci-ids.ucw.cz/read/PC/1002"
)

// Notes shared by several entries.
const (
	noteNoFigure = "no published figure in the sources read"
	noteOldTPU   = "no figure for this generation in the sources read " +
		"(jax tpu_info.py has a row that was not carried over)"
	noteTPU8    = "not taken from the sources read (only HBM, bandwidth and 8i fp8 of tpu_info.py were)"
	noteGB      = "the source writes GB without saying 1e9 or 2^30 bytes; the decimal (smaller) reading is stored; prefer the runtime's figure"
	noteSMCount = "datasheet value, not cross-checked against a second source"
	noteGPULink = "GPU interconnect figures were not gathered"
)

const (
	gib = uint64(1) << 30
	mib = uint64(1) << 20
)

func f[T comparable](v T, src string) Figure[T] { return Figure[T]{Value: v, Source: src} }

func fn[T comparable](v T, src, note string) Figure[T] {
	return Figure[T]{Value: v, Source: src, Note: note}
}

func unknown[T comparable](note string) Figure[T] { return Figure[T]{Note: note} }

func absent[T comparable](src, note string) Figure[T] { return Figure[T]{Source: src, Note: note} }

func names(src string, vs ...string) []Figure[string] {
	out := make([]Figure[string], len(vs))
	for i, v := range vs {
		out[i] = f(v, src)
	}
	return out
}

func pciIDs(src string, ids ...uint16) []Figure[uint16] {
	out := make([]Figure[uint16], len(ids))
	for i, id := range ids {
		out[i] = f(id, src)
	}
	return out
}

var (
	pciGoogle = f(uint16(0x1ae0), srcPCIGoogle)
	pciNVIDIA = f(uint16(0x10de), srcPCINVIDIA)
	pciAMD    = f(uint16(0x1002), srcPCIAMD)
)

// v5e and v6e slice topologies: [doc] v5e and v6e pages, same list for both.
func liteTopologies() []Topology {
	return []Topology{{1, 1}, {2, 2}, {2, 4}, {4, 4}, {4, 8}, {8, 8}, {8, 16}, {16, 16}}
}

// v4 topologies from XPK's tpu-v4-podslice list (the first five are also in
// the v4 docs).
var v4Topologies = []Topology{
	{2, 2, 1}, {2, 2, 2}, {2, 2, 4}, {2, 4, 4}, {4, 4, 4}, {4, 4, 8}, {4, 8, 8}, {8, 8, 8},
	{8, 8, 12}, {8, 8, 16}, {8, 16, 16},
}

// v5p topologies from XPK's tpu-v5p-slice list, cut at the documented maximum
// single slice 16x16x24. XPK also lists 12x24x24 and 16x20x28, larger than
// that maximum; they are left out until the documentation confirms them.
var v5pTopologies = []Topology{
	{2, 2, 1}, {2, 2, 2}, {2, 2, 4}, {2, 4, 4}, {4, 4, 4}, {4, 4, 8}, {4, 4, 12}, {4, 8, 8},
	{4, 4, 20}, {4, 8, 12}, {4, 4, 28}, {8, 8, 8}, {4, 12, 12}, {4, 8, 20}, {4, 4, 44}, {8, 8, 12},
	{4, 4, 52}, {4, 8, 28}, {4, 12, 20}, {8, 8, 16}, {4, 4, 68}, {8, 12, 12}, {4, 4, 76}, {8, 8, 20},
	{4, 12, 28}, {4, 8, 44}, {4, 4, 92}, {8, 12, 16}, {4, 20, 20}, {4, 8, 52}, {12, 12, 12},
	{8, 8, 28}, {4, 4, 116}, {8, 12, 20}, {4, 4, 124}, {8, 16, 16}, {4, 12, 44}, {4, 8, 68},
	{4, 20, 28}, {12, 12, 16}, {4, 4, 148}, {4, 8, 76}, {4, 12, 52}, {8, 16, 20}, {4, 4, 164},
	{8, 12, 28}, {4, 4, 172}, {8, 8, 44}, {12, 12, 20}, {4, 8, 92}, {4, 4, 188}, {12, 16, 16},
	{4, 28, 28}, {8, 20, 20}, {4, 12, 68}, {8, 8, 52}, {4, 4, 212}, {12, 12, 24}, {4, 20, 44},
	{8, 16, 28}, {4, 12, 76}, {4, 8, 116}, {4, 4, 236}, {12, 16, 20}, {4, 4, 244}, {4, 8, 124},
	{12, 12, 28}, {16, 16, 16}, {4, 20, 52}, {8, 12, 44}, {8, 8, 68}, {4, 12, 92}, {8, 20, 28},
	{12, 16, 24}, {4, 8, 148}, {12, 20, 20}, {8, 8, 76}, {4, 28, 44}, {8, 12, 52}, {16, 16, 20},
	{12, 12, 36}, {4, 8, 164}, {12, 16, 28}, {4, 20, 68}, {4, 8, 172}, {4, 12, 116}, {8, 16, 44},
	{12, 20, 24}, {4, 28, 52}, {8, 8, 92}, {4, 12, 124}, {4, 8, 188}, {4, 20, 76}, {16, 16, 24},
}

// tpu7xTopologies is XPK's tpu7x list: 1x1x1 (tpu7x-standard-1t), the v5p
// list above, and four larger shapes up to the 9216-chip 16x24x24.
func tpu7xTopologies() []Topology {
	out := []Topology{{1, 1, 1}}
	for _, t := range v5pTopologies {
		out = append(out, append(Topology(nil), t...))
	}
	return append(out, Topology{12, 24, 24}, Topology{16, 16, 32}, Topology{16, 20, 28}, Topology{16, 24, 24})
}

func oldTPU(gen, name string) Accelerator {
	return Accelerator{
		Generation:   gen,
		Vendor:       Google,
		Platform:     device.TPU,
		Name:         name,
		DeviceKinds:  names(srcTPUInfo+"; "+srcMeshUtils, "TPU "+gen),
		PCIVendorID:  pciGoogle,
		PCIDeviceIDs: []Figure[uint16]{fn(uint16(0x0027), srcHWUtils, "shared by TPU v2 and v3")},

		Memory:          unknown[uint64](noteOldTPU),
		MemoryType:      unknown[string](noteOldTPU),
		MemoryBandwidth: unknown[float64](noteOldTPU),
		PeakBF16:        unknown[float64](noteOldTPU),
		PeakFP16:        unknown[float64](noteOldTPU),
		PeakFP8:         unknown[float64](noteOldTPU),
		PeakINT8:        unknown[float64](noteOldTPU),

		Cores:          fn(2, srcRay+"; "+srcTPUInfo, "hosts hold 4 chips with 2 TensorCores each"),
		CoreKind:       "TensorCore",
		DevicesPerChip: unknown[int](noteNoFigure),
		MXUsPerCore:    unknown[int](noteOldTPU),
		MXURows:        unknown[int](noteOldTPU),
		MXUCols:        fn(128, srcTPUInfo, "MXU column size is 128 below generation 6"),
		VMEMPerCore:    unknown[uint64](noteOldTPU),

		Interconnect: Interconnect{Kind: unknown[string](noteOldTPU)},
		ChipsPerHost: fn(4, srcRay, "device nodes /dev/accel0..3"),
		TPU: &TPUSlices{
			AcceleratorType:       f(gen, srcTPUNaming),
			SuffixCounts:          f(SuffixTensorCores, srcTPUNaming),
			Dims:                  unknown[int](noteOldTPU),
			Sizes:                 []int{8},
			SizesSource:           srcTPUNaming + " (only " + gen + "-8 is documented)",
			MaxSliceChips:         unknown[int](noteOldTPU),
			PodChips:              unknown[int](noteOldTPU),
			SingleHostMaxChips:    fn(4, srcRay, gen+"-8 is one host of 4 chips"),
			MultiHostChipsPerHost: f(4, srcRay),
		},
	}
}

// entries is the catalog. Order: Google TPUs oldest first, NVIDIA, AMD.
var entries = []Accelerator{
	oldTPU("v2", "Google TPU v2"),
	oldTPU("v3", "Google TPU v3"),
	{
		Generation:   "v4",
		Vendor:       Google,
		Platform:     device.TPU,
		Name:         "Google TPU v4",
		DeviceKinds:  names(srcTPUInfo+"; "+srcMeshUtils, "TPU v4"),
		PCIVendorID:  pciGoogle,
		PCIDeviceIDs: pciIDs(srcHWUtils, 0x005e),

		Memory:          fn(32*gib, srcTPUv4, "32 GiB HBM2; tpu_info.py gives 34.4e9 B"),
		MemoryType:      f("HBM2", srcTPUv4),
		MemoryBandwidth: fn(1200e9, srcTPUv4, "1200 GBps; tpu_info.py gives 1.23e12 B/s"),
		PeakBF16:        f(275e12, srcTPUv4),
		PeakFP16:        unknown[float64](noteNoFigure),
		PeakFP8:         unknown[float64]("no fp8 figure in the v4 docs"),
		PeakINT8: fn(275e12, srcTPUv4, "docs give 275 TOPS but tpu_info.py says int8 is Not Available; "+
			"reported as the doc value, flagged as conflicting"),

		Cores:          fn(2, srcTPUv4+"; "+srcTPUInfo, "megacore: JAX sees one device per chip"),
		CoreKind:       "TensorCore",
		DevicesPerChip: fn(1, srcTPUInfo, "megacore"),
		MXUsPerCore:    f(4, srcTPUInfo),
		MXURows:        f(128, srcTPUv4),
		MXUCols:        f(128, srcTPUv4+"; "+srcTPUInfo),
		VMEMPerCore:    f(16*mib, srcTPUInfo),

		Interconnect: Interconnect{
			Kind:             f("ICI", srcTPUv4),
			Topology:         f("3D mesh/torus", srcTPUv4),
			Ports:            unknown[int](noteNoFigure),
			BandwidthPerChip: unknown[float64](noteNoFigure),
			BandwidthPerLink: fn(4.5e10, srcScaling, "one-way, per link"),
		},
		ChipsPerHost: f(4, srcTPUv4),
		TPU: &TPUSlices{
			AcceleratorType: f("v4", srcTPUv4),
			SuffixCounts:    fn(SuffixTensorCores, srcTPUv4, "N = 2 x chips: v4-8 is 4 chips, 2x2x1"),
			Dims:            f(3, srcTPUv4),
			Topologies:      v4Topologies,
			TopologiesSource: srcXPK + " (tpu-v4-podslice); the first five also in " + srcTPUv4 +
				"; torus when every dimension is a multiple of 4, twisted when 2A=B=C or 2A=2B=C",
			MaxSliceChips: fn(2048, srcXPK, "largest listed topology 8x16x16; the docs speak of pods up to "+
				"4096 chips but no larger topology is listed"),
			PodChips:              f(4096, srcTPUv4),
			SingleHostMaxChips:    fn(4, srcTPUv4, "v4-8 (2x2x1) is one host"),
			MultiHostChipsPerHost: fn(4, srcXPK, "chips_per_vm"),
			GKEAccelerators:       names(srcXPK, "tpu-v4-podslice"),
			MachineTypes:          names(srcXPK, "ct4p-hightpu-4t"),
		},
	},
	{
		Generation:   "v5e",
		Vendor:       Google,
		Platform:     device.TPU,
		Name:         "Google TPU v5e",
		DeviceKinds:  names(srcTPUInfo+"; "+srcMeshUtils, "TPU v5 lite", "TPU v5e"),
		PCIVendorID:  pciGoogle,
		PCIDeviceIDs: pciIDs(srcHWUtils, 0x0063),

		Memory:     fn(16*gib, srcTPUv5e+"; "+srcTPUInfo, "docs write 16 GB; tpu_info.py gives 17.2e9 B, i.e. 16 GiB"),
		MemoryType: f("HBM2", srcTPUv5e),
		MemoryBandwidth: fn(819e9, srcTPUv5e, "819 GBps (newer text: 800 GiBps); tpu_info.py 8.2e11 B/s; "+
			"the sources conflict, 8.19e11 stored"),
		PeakBF16: f(197e12, srcTPUv5e),
		PeakFP16: unknown[float64](noteNoFigure),
		PeakFP8:  absent[float64](srcTPUInfo, "tpu_info.py gives 0 (not native)"),
		PeakINT8: fn(393e12, srcTPUv5e, "docs say 393 TOPS; tpu_info.py 3.94e14"),

		Cores:          f(1, srcTPUv5e+"; "+srcTPUInfo),
		CoreKind:       "TensorCore",
		DevicesPerChip: f(1, srcTPUInfo),
		MXUsPerCore:    f(4, srcTPUInfo),
		MXURows:        f(128, srcTPUv5e),
		MXUCols:        f(128, srcTPUv5e+"; "+srcTPUInfo),
		VMEMPerCore:    f(128*mib, srcTPUInfo),

		Interconnect: Interconnect{
			Kind:             f("ICI", srcTPUv5e),
			Topology:         f("2D torus", srcTPUv5e),
			Ports:            f(4, srcTPUv5e),
			BandwidthPerChip: fn(400e9, srcTPUv5e, "bidirectional"),
			BandwidthPerLink: unknown[float64](noteNoFigure),
			LegacyGbpsPerChip: unknown[float64]("older docs give a Gbps figure believed to be 1600, " +
				"unverified"),
		},
		ChipsPerHost: fn(8, srcTPUv5e, "ct5lp-hightpu-1t/4t/8t hold 1, 4 or 8 chips"),
		TPU: &TPUSlices{
			AcceleratorType:       fn("v5litepod", srcTPUv5e, "serving types v5litepod-1/4/8"),
			SuffixCounts:          fn(SuffixChips, srcTPUv5e, "v5litepod-8 is 8 chips, 2x4"),
			Dims:                  f(2, srcTPUv5e),
			Topologies:            liteTopologies(),
			TopologiesSource:      srcTPUv5e,
			MaxSliceChips:         f(256, srcTPUv5e),
			PodChips:              f(256, srcTPUv5e),
			SingleHostMaxChips:    fn(8, srcTPUv5e, "only 1x1, 2x2 and 2x4 are single-host"),
			MultiHostChipsPerHost: fn(4, srcXPK, "chips_per_vm; the docs' host counts are 8-chip physical hosts"),
			GKEAccelerators: append(names(srcGKETPU, "tpu-v5-lite-podslice"),
				fn("tpu-v5-lite-device", srcGKETPU, "older single-host ct5l-* machines")),
			MachineTypes: names(srcTPUv5e, "ct5lp-hightpu-1t", "ct5lp-hightpu-4t", "ct5lp-hightpu-8t"),
		},
	},
	{
		Generation:   "v5p",
		Vendor:       Google,
		Platform:     device.TPU,
		Name:         "Google TPU v5p",
		DeviceKinds:  names(srcTPUInfo+"; "+srcMeshUtils, "TPU v5", "TPU v5p"),
		PCIVendorID:  pciGoogle,
		PCIDeviceIDs: pciIDs(srcHWUtils, 0x0062),

		Memory:          fn(95*gib, srcTPUv5p, "95 GiB HBM2e; tpu_info.py gives 103e9 B (about 95.9 GiB)"),
		MemoryType:      f("HBM2e", srcTPUv5p),
		MemoryBandwidth: fn(2765e9, srcTPUv5p, "2765 GBps; tpu_info.py gives 2.46e12 B/s, which disagrees"),
		PeakBF16:        fn(459e12, srcTPUv5p, "tpu_info.py 4.59e14"),
		PeakFP16:        unknown[float64](noteNoFigure),
		PeakFP8: fn(459e12, srcTPUv5p, "same rate as bf16, and tpu_info.py gives 0: treat fp8 as emulated "+
			"(the sources conflict)"),
		PeakINT8: fn(918e12, srcTPUv5p, "tpu_info.py 9.18e14"),

		Cores:          fn(2, srcTPUv5p+"; "+srcTPUInfo, "megacore by default: one JAX device per chip"),
		CoreKind:       "TensorCore",
		DevicesPerChip: fn(1, srcTPUInfo, "megacore (default)"),
		MXUsPerCore:    f(4, srcTPUInfo),
		MXURows:        f(128, srcTPUv5p),
		MXUCols:        f(128, srcTPUv5p+"; "+srcTPUInfo),
		VMEMPerCore:    f(64*mib, srcTPUInfo),

		Interconnect: Interconnect{
			Kind:              f("ICI", srcTPUv5p),
			Topology:          fn("3D torus", srcTPUv5p, "twisted tori optional"),
			Ports:             unknown[int](noteNoFigure),
			BandwidthPerChip:  fn(1200e9, srcTPUv5p, "bidirectional"),
			BandwidthPerLink:  unknown[float64](noteNoFigure),
			LegacyGbpsPerChip: fn(4800.0, srcTPUv5p, "older docs, Gbit/s"),
		},
		ChipsPerHost: f(4, srcTPUv5p),
		TPU: &TPUSlices{
			AcceleratorType:  f("v5p", srcTPUv5p),
			SuffixCounts:     fn(SuffixTensorCores, srcTPUv5p, "v5p-8 is 4 chips, 2x2x1; v5p-32 is 16 chips"),
			Dims:             f(3, srcTPUv5p),
			Topologies:       v5pTopologies,
			TopologiesSource: srcXPK + " (tpu-v5p-slice), cut at the documented maximum 16x16x24; slices of one cube or more are built from 4x4x4 cubes (" + srcTPUv5p + ")",
			MaxSliceChips: fn(6144, srcTPUv5p, "16x16x24; XPK also lists 12x24x24 and 16x20x28, "+
				"not included; Multislice reaches 18,432 chips"),
			PodChips:              f(8960, srcTPUv5p),
			SingleHostMaxChips:    fn(4, srcTPUv5p, "v5p-8 (2x2x1) is one host"),
			MultiHostChipsPerHost: fn(4, srcXPK, "chips_per_vm"),
			GKEAccelerators:       names(srcGKETPU, "tpu-v5p-slice"),
			MachineTypes:          names(srcXPK, "ct5p-hightpu-4t"),
		},
	},
	{
		Generation:   "v6e",
		Vendor:       Google,
		Platform:     device.TPU,
		Name:         "Google TPU v6e (Trillium)",
		DeviceKinds:  names(srcTPUInfo+"; "+srcMeshUtils, "TPU v6 lite", "TPU v6e"),
		PCIVendorID:  pciGoogle,
		PCIDeviceIDs: pciIDs(srcHWUtils, 0x006f),

		Memory:          fn(32*gib, srcTPUv6e+"; "+srcTPUInfo, "docs write 32 GB; tpu_info.py gives 34.4e9 B, i.e. 32 GiB"),
		MemoryType:      unknown[string](noteNoFigure),
		MemoryBandwidth: fn(1638e9, srcTPUv6e, "1638 GBps; tpu_info.py 1.64e12 B/s"),
		PeakBF16:        fn(918e12, srcTPUv6e, "tpu_info.py 9.20e14"),
		PeakFP16:        unknown[float64](noteNoFigure),
		PeakFP8:         fn(918e12, srcTPUInfo, "tpu_info.py gives fp8 equal to bf16 (9.20e14); stored at the documented bf16 rate"),
		PeakINT8:        fn(1836e12, srcTPUv6e, "tpu_info.py 1.84e15"),

		Cores:          f(1, srcTPUv6e+"; "+srcTPUInfo),
		CoreKind:       "TensorCore",
		DevicesPerChip: f(1, srcTPUInfo),
		MXUsPerCore:    f(2, srcTPUInfo),
		MXURows:        f(256, srcTPUv6e),
		MXUCols:        f(256, srcTPUv6e+"; "+srcTPUInfo),
		VMEMPerCore:    f(128*mib, srcTPUInfo),

		Interconnect: Interconnect{
			Kind:             f("ICI", srcTPUv6e),
			Topology:         f("2D torus", srcTPUv6e),
			Ports:            f(4, srcTPUv6e),
			BandwidthPerChip: fn(800e9, srcTPUv6e, "bidirectional"),
			BandwidthPerLink: unknown[float64](noteNoFigure),
			LegacyGbpsPerChip: unknown[float64]("older docs give a Gbps figure believed to be 3584, " +
				"unverified"),
		},
		ChipsPerHost: fn(8, srcTPUv6e, "ct6e-standard-1t/4t/8t"),
		TPU: &TPUSlices{
			AcceleratorType:       f("v6e", srcTPUv6e),
			SuffixCounts:          fn(SuffixChips, srcTPUv6e, "v6e-8 is 8 chips, 2x4"),
			Dims:                  f(2, srcTPUv6e),
			Topologies:            liteTopologies(),
			TopologiesSource:      srcTPUv6e + "; " + srcXPK,
			MaxSliceChips:         f(256, srcTPUv6e),
			PodChips:              f(256, srcTPUv6e),
			SingleHostMaxChips:    fn(8, srcTPUv6e, "single-host: 1x1, 2x2, 2x4"),
			MultiHostChipsPerHost: fn(4, srcXPK, "chips_per_vm (ct6e-standard-4t)"),
			GKEAccelerators:       names(srcXPK, "tpu-v6e-slice"),
			MachineTypes:          names(srcTPUv6e, "ct6e-standard-1t", "ct6e-standard-4t", "ct6e-standard-8t"),
		},
	},
	{
		Generation: "tpu7x",
		Vendor:     Google,
		Platform:   device.TPU,
		Name:       "Google TPU7x (Ironwood)",
		// "TPU7" is also defined in jax but no source says it is
		// Ironwood, so it is not listed.
		DeviceKinds:  names(srcTPUInfo+"; "+srcMeshUtils, "TPU7x"),
		PCIVendorID:  pciGoogle,
		PCIDeviceIDs: pciIDs(srcHWUtils, 0x0076),

		Memory:          fn(192*gib, srcTPU7x, "192 GiB HBM3e; tpu_info.py gives 206e9 B"),
		MemoryType:      f("HBM3e", srcTPU7x),
		MemoryBandwidth: fn(7.40e12, srcTPUInfo, "docs give about 7.37-7.4 TB/s"),
		PeakBF16:        fn(2307e12, srcTPU7x, "tpu_info.py 2.31e15"),
		PeakFP16:        unknown[float64](noteNoFigure),
		PeakFP8:         fn(4614e12, srcTPU7x, "tpu_info.py 4.60e15"),
		PeakINT8:        unknown[float64]("n/a in tpu_info.py; no documented figure found"),

		Cores:    fn(2, srcTPU7x+"; "+srcTPUInfo, "no megacore"),
		CoreKind: "TensorCore",
		DevicesPerChip: unknown[int]("sources conflict: tpu_info.py/mesh_utils.py imply 2 (no megacore, core_on_chip 0/1), " +
			"MaxText lists tpu7x-8 with 4 devices; read it at run time"),
		MXUsPerCore: f(2, srcTPUInfo),
		MXURows:     unknown[int]("tpu_info.py gives only the column size"),
		MXUCols:     f(256, srcTPUInfo),
		VMEMPerCore: f(64*mib, srcTPUInfo),

		Interconnect: Interconnect{
			Kind:             f("ICI", srcTPU7x),
			Topology:         f("3D torus", srcTPU7x),
			Ports:            unknown[int](noteNoFigure),
			BandwidthPerChip: fn(1.2e12, srcIronwdAnn, "bidirectional; third-party secondary source"),
			BandwidthPerLink: unknown[float64](noteNoFigure),
		},
		ChipsPerHost: fn(4, srcTPU7x, "2 NUMA nodes and 2 NICs per VM"),
		TPU: &TPUSlices{
			AcceleratorType:  f("tpu7x", srcTPU7x),
			SuffixCounts:     fn(SuffixTensorCores, srcTPU7x, "tpu7x-8 is 4 chips, 2x2x1"),
			Dims:             f(3, srcTPU7x),
			Topologies:       tpu7xTopologies(),
			TopologiesSource: srcXPK + " (tpu7x-standard-1t: 1x1x1; tpu7x-standard-4t: 2x2x1 ... 16x24x24)",
			MaxSliceChips:    fn(9216, srcXPK, "16x24x24"),
			PodChips:         f(9216, srcTPU7x),
			SingleHostMaxChips: fn(4, srcXPK, "chips_per_vm is 1 for 1x1x1 and 4 otherwise; "+
				"the -4t VM holds 2x2x1"),
			MultiHostChipsPerHost: fn(4, srcXPK, "chips_per_vm"),
			GKEAccelerators:       names(srcGKEIronwd, "tpu7x"),
			MachineTypes:          names(srcXPK, "tpu7x-standard-4t", "tpu7x-standard-1t"),
		},
	},
	tpu8("tpu8i", "Google TPU 8i", "TPU8i", 0x0083, 309e9, 8.6e12,
		fn(8.8e15, srcTPUInfo, "fp8; per chip")),
	tpu8("tpu8t", "Google TPU 8t", "TPU8t", 0x007c, 231e9, 6.4e12, unknown[float64](noteTPU8)),

	// NVIDIA.
	{
		Generation:  "v100",
		Vendor:      NVIDIA,
		Platform:    device.CUDA,
		Name:        "NVIDIA V100 SXM2",
		DeviceKinds: append(names(srcGPUKind, "Tesla V100-SXM2-16GB"), f("Tesla V100-SXM2-32GB", srcNVName)),
		PCIVendorID: pciNVIDIA,

		Memory: unknown[uint64]("16 GB and 32 GB HBM2 variants share this key; " +
			"the device_kind names the size (Tesla V100-SXM2-16GB)"),
		MemoryType:      f("HBM2", srcGPUTable),
		MemoryBandwidth: f(900e9, srcGPUTable),
		PeakBF16:        absent[float64](srcGPUTable, "no bf16"),
		PeakFP16:        fn(125e12, srcGPUTable, "tensor core, SXM2 (PCIe: 112)"),
		PeakFP8:         unknown[float64]("no figure in the sources read"),
		PeakINT8:        fn(62e12, srcGPUTable, "DP4A, not tensor core"),

		Cores:             unknown[int](noteNoFigure),
		CoreKind:          "SM",
		DevicesPerChip:    unknown[int](noteNoFigure),
		ComputeCapability: fn("7.0", srcCUDACC, "sm_70"),
		Interconnect:      Interconnect{Kind: unknown[string](noteGPULink)},
		ChipsPerHost:      unknown[int](noteNoFigure),
	},
	nvidiaGPU("a100-40gb", "NVIDIA A100 40GB (SXM)", "8.0",
		f("NVIDIA A100-SXM4-40GB", srcNVName),
		gpuFigs{
			mem: 40e9, memType: "HBM2", bw: fn(1555e9, srcGPUTable, ""),
			bf16: 312e12, fp16: 312e12, int8: 624e12,
			cores: fn(108, srcGPUTable, noteSMCount),
		}),
	nvidiaGPU("a100-80gb", "NVIDIA A100 80GB (SXM)", "8.0",
		f("NVIDIA A100-SXM4-80GB", srcNVName),
		gpuFigs{
			mem: 80e9, memType: "HBM2e", bw: fn(2039e9, srcGPUTable, "SXM; the 80GB PCIe card has 1.935 TB/s"),
			bf16: 312e12, fp16: 312e12, int8: 624e12,
			cores: fn(108, srcGPUTable, noteSMCount),
		}),
	nvidiaGPU("h100-sxm", "NVIDIA H100 SXM", "9.0",
		f("NVIDIA H100 80GB HBM3", srcGPUKind),
		gpuFigs{
			src: srcH100DS, mem: 80e9, memType: "HBM3", bw: fn(3.35e12, srcH100DS, ""),
			bf16: 989.4e12, fp16: 989.4e12, fp8: 1978.9e12, int8: 1978.9e12,
			cores: fn(132, srcH100DS, noteSMCount),
		}),
	nvidiaGPU("h100-pcie", "NVIDIA H100 PCIe", "9.0",
		f("NVIDIA H100 PCIe", srcNVName),
		gpuFigs{
			src: srcH100DS, mem: 80e9, memType: "HBM2e", bw: fn(2.0e12, srcH100DS, ""),
			bf16: 756e12, fp16: 756e12, fp8: 1513e12, int8: 1513e12,
			cores: fn(114, srcH100DS, noteSMCount),
		}),
	nvidiaGPU("h200", "NVIDIA H200 SXM", "9.0",
		f("NVIDIA H200", srcNVName),
		gpuFigs{
			src: srcH200DS, mem: 141e9, memType: "HBM3e", bw: fn(4.8e12, srcH200DS, ""),
			bf16: 989.4e12, fp16: 989.4e12, fp8: 1978.9e12, int8: 1978.9e12,
			cores: unknown[int](noteNoFigure),
		}),
	nvidiaGPU("b200", "NVIDIA B200 (HGX)", "10.0",
		f("NVIDIA B200", srcNVName),
		gpuFigs{
			mem: 192e9, memType: "HBM3e", bw: fn(8e12, srcGPUTable, ""),
			memNote: "192 GB physical; about 180 GB usable on HGX/DGX (" + srcB200Mem + "); use the runtime's figure",
			bf16:    2250e12, fp16: 2250e12, fp8: 4500e12, int8: 4500e12,
			cores: unknown[int](noteNoFigure),
		}),

	// AMD.
	{
		Generation:  "mi250x",
		Vendor:      AMD,
		Platform:    device.ROCm,
		Name:        "AMD Instinct MI250X (OAM)",
		DeviceKinds: names(srcAMDName, "AMD Instinct MI250X"),
		PCIVendorID: pciAMD,

		Memory:          fn(uint64(128e9), srcROCm, "2 x 64 GB, one per GCD; "+noteGB),
		MemoryType:      f("HBM2e", srcROCm),
		MemoryBandwidth: fn(3.2768e12, srcGPUTable, "1.6 TB/s per GCD"),
		PeakBF16:        fn(383e12, srcROCm+"; https://github.com/pytorch/torchtitan/blob/main/torchtitan/tools/utils.py", "191.5 TFLOP/s per GCD"),
		PeakFP16:        f(383e12, srcROCm),
		PeakFP8:         unknown[float64]("no figure in the sources read"),
		PeakINT8:        f(383e12, srcROCm),

		Cores:          fn(220, srcROCm, noteSMCount),
		CoreKind:       "CU",
		DevicesPerChip: fn(2, srcGPUTable, "each GCD appears as its own device with 64 GB"),
		GFXTarget:      fn("gfx90a", srcROCm, "CDNA2"),
		Interconnect:   Interconnect{Kind: unknown[string](noteGPULink)},
		ChipsPerHost:   unknown[int](noteNoFigure),
	},
	{
		Generation:  "mi300x",
		Vendor:      AMD,
		Platform:    device.ROCm,
		Name:        "AMD Instinct MI300X",
		DeviceKinds: names(srcAMDName, "AMD Instinct MI300X"),
		PCIVendorID: pciAMD,

		Memory:          fn(uint64(192e9), srcROCm, noteGB),
		MemoryType:      f("HBM3", srcROCm),
		MemoryBandwidth: f(5.3e12, srcGPUTable),
		PeakBF16:        f(1307.4e12, srcROCm),
		PeakFP16:        f(1307.4e12, srcROCm),
		PeakFP8:         f(2614.9e12, srcROCm),
		PeakINT8:        f(2614.9e12, srcROCm),

		Cores:          fn(304, srcROCm, noteSMCount),
		CoreKind:       "CU",
		DevicesPerChip: unknown[int](noteNoFigure),
		GFXTarget:      fn("gfx942", srcROCm, "CDNA3; MI325X shares gfx942 (256 GB), so key on gfx target plus memory"),
		Interconnect:   Interconnect{Kind: unknown[string](noteGPULink)},
		ChipsPerHost:   unknown[int](noteNoFigure),
	},
}

func tpu8(gen, name, kind string, pci uint16, mem uint64, bw float64, fp8 Figure[float64]) Accelerator {
	return Accelerator{
		Generation:   gen,
		Vendor:       Google,
		Platform:     device.TPU,
		Name:         name,
		DeviceKinds:  names(srcTPUInfo+"; "+srcMeshUtils, kind),
		PCIVendorID:  pciGoogle,
		PCIDeviceIDs: pciIDs(srcHWUtils, pci),

		Memory:          fn(mem, srcTPUInfo, "per chip"),
		MemoryType:      unknown[string](noteTPU8),
		MemoryBandwidth: fn(bw, srcTPUInfo, "per chip"),
		PeakBF16:        unknown[float64](noteTPU8),
		PeakFP16:        unknown[float64](noteTPU8),
		PeakFP8:         fp8,
		PeakINT8:        unknown[float64](noteTPU8),

		Cores:          unknown[int](noteTPU8),
		CoreKind:       "TensorCore",
		DevicesPerChip: unknown[int](noteTPU8),
		MXUsPerCore:    unknown[int](noteTPU8),
		MXURows:        unknown[int](noteTPU8),
		MXUCols:        unknown[int](noteTPU8),
		VMEMPerCore:    unknown[uint64](noteTPU8),
		Interconnect:   Interconnect{Kind: unknown[string](noteTPU8)},
		ChipsPerHost:   unknown[int](noteTPU8),
	}
}

// gpuFigs are the figures of one NVIDIA GPU row (srcGPUTable). src, when set, replaces srcGPUTable as the source of the memory and
// rate figures (the H100 and H200 rows come from their datasheets).
type gpuFigs struct {
	src                   string
	mem                   uint64
	memType, memNote      string
	bw                    Figure[float64]
	bf16, fp16, fp8, int8 float64
	cores                 Figure[int]
}

func nvidiaGPU(gen, name, cc string, kind Figure[string], g gpuFigs) Accelerator {
	src := g.src
	if src == "" {
		src = srcGPUTable
	}
	rate := func(v float64) Figure[float64] {
		if v == 0 {
			return unknown[float64]("no figure in the sources read")
		}
		return f(v, src)
	}
	memNote := g.memNote
	if memNote == "" {
		memNote = noteGB
	}
	return Accelerator{
		Generation:  gen,
		Vendor:      NVIDIA,
		Platform:    device.CUDA,
		Name:        name,
		DeviceKinds: []Figure[string]{kind},
		PCIVendorID: pciNVIDIA,

		Memory:          fn(g.mem, src, memNote),
		MemoryType:      f(g.memType, src),
		MemoryBandwidth: g.bw,
		PeakBF16:        rate(g.bf16),
		PeakFP16:        rate(g.fp16),
		PeakFP8:         rate(g.fp8),
		PeakINT8:        rate(g.int8),

		Cores:             g.cores,
		CoreKind:          "SM",
		DevicesPerChip:    unknown[int](noteNoFigure),
		ComputeCapability: fn(cc, srcCUDACC, "sm_"+stripDot(cc)),
		Interconnect:      Interconnect{Kind: unknown[string](noteGPULink)},
		ChipsPerHost:      unknown[int](noteNoFigure),
	}
}

func stripDot(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '.' {
			out = append(out, s[i])
		}
	}
	return string(out)
}
