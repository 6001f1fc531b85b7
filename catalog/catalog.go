package catalog

import (
	"strings"

	"github.com/tensorbridge/tensorbridge/device"
)

// Figure is one published figure together with where it comes from.
//
// The three states of a Figure are:
//
//   - Value is non-zero: the figure, as given by Source.
//   - Value is zero and Source is set: the source states the feature is
//     absent or not native (for example V100 has no bf16 tensor rate, and
//     jax's tpu_info.py gives v5e an fp8 rate of 0).
//   - Value and Source are both empty: unknown. Note says why (the sources read
//     gives no figure, or its sources conflict).
//
// Note carries caveats for known figures too (a second source that
// disagrees, a unit ambiguity), so a caller printing a figure can print its
// doubts with it.
type Figure[T comparable] struct {
	Value  T      `json:"value"`
	Source string `json:"source,omitempty"`
	Note   string `json:"note,omitempty"`
}

// Known reports whether the figure has a non-zero value.
func (f Figure[T]) Known() bool {
	var zero T
	return f.Value != zero
}

// Absent reports whether the source states the feature is absent: a zero
// value that nevertheless carries a source.
func (f Figure[T]) Absent() bool { return !f.Known() && f.Source != "" }

// Methods used by validate to walk every figure of an entry by reflection.
func (f Figure[T]) figureKnown() bool    { return f.Known() }
func (f Figure[T]) figureSource() string { return f.Source }
func (f Figure[T]) figureNote() string   { return f.Note }

type figure interface {
	figureKnown() bool
	figureSource() string
	figureNote() string
}

// Vendor is the maker of an accelerator.
type Vendor string

// Vendors in the catalog.
const (
	Google Vendor = "google"
	NVIDIA Vendor = "nvidia"
	AMD    Vendor = "amd"
)

// Accelerator is the static description of one accelerator chip (TPU) or
// GPU product. All rates are per chip (per physical package for GPUs), dense,
// without sparsity. Units: bytes, bytes per second, operations per second.
//
// A zero Figure means unknown or absent; see Figure for how to tell which.
type Accelerator struct {
	// Generation is the catalog key: "v5e", "tpu7x", "h100-sxm", "mi300x" ...
	// device.Info.Generation holds the same key.
	Generation string `json:"generation"`
	Vendor     Vendor `json:"vendor"`
	// Platform is the runtime family that drives the device.
	Platform device.Platform `json:"platform"`
	// Name is the display name, with the codename where there is one.
	Name string `json:"name"`

	// DeviceKinds are the exact device_kind strings runtimes (PJRT, JAX)
	// report for this accelerator. ByDeviceKind matches them case- and
	// space-insensitively.
	DeviceKinds []Figure[string] `json:"device_kinds"`
	// PCIVendorID is the PCI vendor of the device.
	PCIVendorID Figure[uint16] `json:"pci_vendor_id"`
	// PCIDeviceIDs are PCI device IDs known to belong to this accelerator.
	// One ID can belong to several entries (TPU v2 and v3 share 0x0027).
	PCIDeviceIDs []Figure[uint16] `json:"pci_device_ids,omitempty"`

	// Memory is the on-package memory (HBM) per chip, in bytes.
	Memory Figure[uint64] `json:"memory_bytes"`
	// MemoryType is the memory technology, e.g. "HBM2e".
	MemoryType Figure[string] `json:"memory_type"`
	// MemoryBandwidth is the peak memory bandwidth per chip, bytes/s.
	MemoryBandwidth Figure[float64] `json:"memory_bandwidth"`

	// Peak dense rates per chip, FLOP/s (OP/s for int8).
	PeakBF16 Figure[float64] `json:"peak_bf16"`
	PeakFP16 Figure[float64] `json:"peak_fp16"`
	PeakFP8  Figure[float64] `json:"peak_fp8"`
	PeakINT8 Figure[float64] `json:"peak_int8"`

	// Cores counts the compute cores per chip: TensorCores for a TPU,
	// streaming multiprocessors (NVIDIA) or compute units (AMD) for a GPU.
	Cores Figure[int] `json:"cores"`
	// CoreKind names what Cores counts: "TensorCore", "SM" or "CU".
	CoreKind string `json:"core_kind"`
	// DevicesPerChip is how many runtime devices one chip appears as
	// (a TPU v4 in megacore mode is 1; an MI250X is 2, one per GCD).
	DevicesPerChip Figure[int] `json:"devices_per_chip"`

	// TPU matrix units: MXUs per TensorCore and the MXU's rows and columns.
	MXUsPerCore Figure[int] `json:"mxus_per_core"`
	MXURows     Figure[int] `json:"mxu_rows"`
	MXUCols     Figure[int] `json:"mxu_cols"`
	// VMEMPerCore is the TPU vector memory per TensorCore, bytes.
	VMEMPerCore Figure[uint64] `json:"vmem_per_core_bytes"`

	// ComputeCapability is the CUDA compute capability, e.g. "9.0".
	ComputeCapability Figure[string] `json:"compute_capability"`
	// GFXTarget is the AMD LLVM target, e.g. "gfx942".
	GFXTarget Figure[string] `json:"gfx_target"`

	// Interconnect is the chip-to-chip fabric.
	Interconnect Interconnect `json:"interconnect"`

	// ChipsPerHost is the largest number of chips one host (TPU VM) holds.
	ChipsPerHost Figure[int] `json:"chips_per_host"`

	// TPU holds the Cloud TPU slice rules: accelerator-type naming and valid
	// topologies. Nil for GPUs and for TPUs whose slices the sources read do
	// not describe.
	TPU *TPUSlices `json:"tpu,omitempty"`
}

// Interconnect describes the chip-to-chip fabric of an accelerator.
type Interconnect struct {
	// Kind names the fabric: "ICI", "NVLink", "Infinity Fabric".
	Kind Figure[string] `json:"kind"`
	// Topology is the shape it wires, e.g. "3D torus".
	Topology Figure[string] `json:"topology"`
	// Ports is the number of links per chip.
	Ports Figure[int] `json:"ports"`
	// BandwidthPerChip is the bidirectional bandwidth per chip, bytes/s.
	BandwidthPerChip Figure[float64] `json:"bandwidth_per_chip"`
	// BandwidthPerLink is the one-way bandwidth of one link, bytes/s.
	BandwidthPerLink Figure[float64] `json:"bandwidth_per_link"`
	// LegacyGbpsPerChip is the per-chip figure older pages give in Gbit/s.
	// The unit and direction differ from BandwidthPerChip, so it is kept
	// apart rather than converted.
	LegacyGbpsPerChip Figure[float64] `json:"legacy_gbps_per_chip"`
}

// SuffixUnit says what the number in a Cloud TPU accelerator type counts.
type SuffixUnit string

// The two meanings of the accelerator-type suffix N in "<type>-N".
const (
	SuffixTensorCores SuffixUnit = "tensorcores" // v2, v3, v4, v5p, tpu7x
	SuffixChips       SuffixUnit = "chips"       // v5litepod (v5e), v6e
)

// TPUSlices are the Cloud TPU slice rules of one TPU generation.
type TPUSlices struct {
	// AcceleratorType is the prefix of the Cloud TPU accelerator type
	// ("v5litepod" for v5e, "tpu7x" for Ironwood).
	AcceleratorType Figure[string] `json:"accelerator_type"`
	// SuffixCounts says whether N in "<type>-N" counts TensorCores or chips.
	SuffixCounts Figure[SuffixUnit] `json:"suffix_counts"`
	// Dims is the number of topology dimensions, 2 or 3.
	Dims Figure[int] `json:"dims"`
	// Topologies are the valid slice topologies in ascending chip count,
	// each with a distinct chip count, so a size names one topology.
	Topologies []Topology `json:"topologies,omitempty"`
	// TopologiesSource is where Topologies come from.
	TopologiesSource string `json:"topologies_source,omitempty"`
	// Sizes are accepted suffixes for generations whose topologies the
	// sources read do not give (v2, v3): such slices parse with a nil
	// Topology.
	Sizes []int `json:"sizes,omitempty"`
	// SizesSource is where Sizes come from.
	SizesSource string `json:"sizes_source,omitempty"`
	// MaxSliceChips is the largest single slice, in chips.
	MaxSliceChips Figure[int] `json:"max_slice_chips"`
	// PodChips is the size of a full pod, in chips.
	PodChips Figure[int] `json:"pod_chips"`
	// SingleHostMaxChips is the largest slice served by a single host (VM):
	// slices up to this size have one host holding all their chips.
	SingleHostMaxChips Figure[int] `json:"single_host_max_chips"`
	// MultiHostChipsPerHost is the number of chips per host (VM) in slices
	// larger than SingleHostMaxChips.
	MultiHostChipsPerHost Figure[int] `json:"multi_host_chips_per_host"`
	// GKEAccelerators are the values of the GKE node label
	// cloud.google.com/gke-tpu-accelerator for this generation.
	GKEAccelerators []Figure[string] `json:"gke_accelerators,omitempty"`
	// MachineTypes are the Compute Engine / GKE machine types.
	MachineTypes []Figure[string] `json:"machine_types,omitempty"`
}

// Lookup returns the entry with the given generation key ("v4", "v5e",
// "h100-sxm" ...). Case and surrounding spaces are ignored. The result is a
// copy the caller may modify.
func Lookup(generation string) (Accelerator, bool) {
	g := asciiLower(strings.TrimSpace(generation))
	for i := range entries {
		if entries[i].Generation == g {
			return entries[i].clone(), true
		}
	}
	return Accelerator{}, false
}

// All returns every entry in catalog order: Google TPUs oldest first, then
// NVIDIA, then AMD. The result is a copy.
func All() []Accelerator {
	out := make([]Accelerator, len(entries))
	for i := range entries {
		out[i] = entries[i].clone()
	}
	return out
}

// ByDeviceKind returns the entry whose device_kind strings include kind, as a
// runtime reports it ("TPU v5 lite", "NVIDIA H100 80GB HBM3"). Matching
// ignores case, surrounding spaces and repeated inner spaces, nothing else:
// an unlisted kind returns false rather than a near match. In particular
// "TPU v4 lite" (v4i), "TPU7" and PCIe or NVL variants of SXM parts are not
// matched.
func ByDeviceKind(kind string) (Accelerator, bool) {
	k := NormalizeKind(kind)
	if k == "" {
		return Accelerator{}, false
	}
	for i := range entries {
		for _, dk := range entries[i].DeviceKinds {
			if NormalizeKind(dk.Value) == k {
				return entries[i].clone(), true
			}
		}
	}
	return Accelerator{}, false
}

// ByPCIID returns the entries that list the PCI vendor and device ID, in
// catalog order. The result can hold several entries (TPU v2 and v3 share
// device 0x0027) or none; callers must not pick one of several blindly.
func ByPCIID(vendor, dev uint16) []Accelerator {
	var out []Accelerator
	for i := range entries {
		e := &entries[i]
		if e.PCIVendorID.Value != vendor {
			continue
		}
		for _, id := range e.PCIDeviceIDs {
			if id.Value == dev {
				out = append(out, e.clone())
				break
			}
		}
	}
	return out
}

// NormalizeKind folds a device_kind string for comparison: lower case,
// trimmed, inner runs of white space replaced by one space.
func NormalizeKind(kind string) string {
	return strings.ToLower(strings.Join(strings.Fields(kind), " "))
}

// clone deep-copies an entry so callers cannot change the catalog.
func (a Accelerator) clone() Accelerator {
	c := a
	c.DeviceKinds = append([]Figure[string](nil), a.DeviceKinds...)
	c.PCIDeviceIDs = append([]Figure[uint16](nil), a.PCIDeviceIDs...)
	if a.TPU != nil {
		t := *a.TPU
		t.Topologies = make([]Topology, len(a.TPU.Topologies))
		for i, tp := range a.TPU.Topologies {
			t.Topologies[i] = append(Topology(nil), tp...)
		}
		t.Sizes = append([]int(nil), a.TPU.Sizes...)
		t.GKEAccelerators = append([]Figure[string](nil), a.TPU.GKEAccelerators...)
		t.MachineTypes = append([]Figure[string](nil), a.TPU.MachineTypes...)
		c.TPU = &t
	}
	return c
}
