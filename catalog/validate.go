package catalog

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/tensorbridge/tensorbridge/device"
)

// requiredGenerations are the keys other packages rely on; validate fails if
// one is missing.
var requiredGenerations = []string{
	"v2", "v3", "v4", "v5e", "v5p", "v6e", "tpu7x",
	"v100", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200",
	"mi250x", "mi300x",
}

// validate checks the embedded catalog for internal consistency and returns
// every problem found, joined. It checks: unique generation keys, device
// kinds and accelerator-type prefixes; a source on every known figure and an
// explanation on every unknown memory, bandwidth, bf16 and core figure;
// plausible magnitudes (catching unit slips such as GB/s stored as B/s);
// vendor, platform and PCI vendor agreeing; and, for TPUs, topologies that
// agree with the dimension count, the maximum slice and the chips per host.
// The package tests call it, so a bad edit of the data fails them rather
// than a user's run.
func validate() error { return validateEntries(entries) }

func validateEntries(es []Accelerator) error {
	var errs []error
	addf := func(format string, args ...any) { errs = append(errs, fmt.Errorf("catalog: "+format, args...)) }

	keys := map[string]bool{}
	kinds := map[string]string{}
	prefixes := map[string]string{}
	for i := range es {
		e := &es[i]
		g := e.Generation
		if g == "" || g != strings.ToLower(g) || strings.ContainsAny(g, " \t\r\n") {
			addf("entry %d: generation key %q must be non-empty, lower case, without spaces", i, g)
		}
		if keys[g] {
			addf("%s: duplicate generation key", g)
		}
		keys[g] = true
		if e.Name == "" {
			addf("%s: empty display name", g)
		}
		wantPlatform, wantPCI, wantCore := vendorRules(e.Vendor)
		if wantPlatform == "" {
			addf("%s: unknown vendor %q", g, e.Vendor)
		} else {
			if e.Platform != wantPlatform {
				addf("%s: vendor %s implies platform %s, got %q", g, e.Vendor, wantPlatform, e.Platform)
			}
			if e.PCIVendorID.Value != wantPCI || e.PCIVendorID.Source == "" {
				addf("%s: PCI vendor ID: want 0x%04x with a source, got 0x%04x (source %q)",
					g, wantPCI, e.PCIVendorID.Value, e.PCIVendorID.Source)
			}
			if e.CoreKind != wantCore {
				addf("%s: core kind: want %q for %s, got %q", g, wantCore, e.Vendor, e.CoreKind)
			}
		}

		if len(e.DeviceKinds) == 0 {
			addf("%s: no device_kind strings", g)
		}
		for _, k := range e.DeviceKinds {
			n := NormalizeKind(k.Value)
			if n == "" {
				addf("%s: empty device_kind", g)
				continue
			}
			if other, dup := kinds[n]; dup {
				addf("%s: device_kind %q already belongs to %s", g, k.Value, other)
			}
			kinds[n] = g
		}

		walkFigures(reflect.ValueOf(*e), "", func(path string, v reflect.Value, fg figure) {
			if fg.figureKnown() && fg.figureSource() == "" {
				addf("%s: %s has a value but no source", g, path)
			}
			if src := fg.figureSource(); src != "" {
				if err := checkCitation(src); err != nil {
					addf("%s: %s: %v", g, path, err)
				}
			}
			val := v.FieldByName("Value")
			switch val.Kind() {
			case reflect.Float64:
				if x := val.Float(); math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
					addf("%s: %s = %v is not a finite non-negative number", g, path, x)
				}
			case reflect.Int:
				if val.Int() < 0 {
					addf("%s: %s = %d is negative", g, path, val.Int())
				}
			}
		})

		explained := func(name string, known bool, note string) {
			if !known && note == "" {
				addf("%s: %s is unknown and has no note saying why", g, name)
			}
		}
		explained("Memory", e.Memory.Known(), e.Memory.Note)
		explained("MemoryBandwidth", e.MemoryBandwidth.Known(), e.MemoryBandwidth.Note)
		explained("PeakBF16", e.PeakBF16.Known(), e.PeakBF16.Note)
		explained("Cores", e.Cores.Known(), e.Cores.Note)

		// Magnitudes: published per-chip figures of every generation in the
		// catalog fall well inside these ranges, a unit slip does not.
		inRange := func(name string, x, lo, hi float64) {
			if x != 0 && (x < lo || x > hi) {
				addf("%s: %s = %g outside the plausible range [%g, %g]; check its unit", g, name, x, lo, hi)
			}
		}
		inRange("Memory", float64(e.Memory.Value), 1<<30, 1<<40)
		inRange("MemoryBandwidth", e.MemoryBandwidth.Value, 1e11, 1e14)
		for _, r := range []struct {
			name string
			x    float64
		}{{"PeakBF16", e.PeakBF16.Value}, {"PeakFP16", e.PeakFP16.Value}, {"PeakFP8", e.PeakFP8.Value}, {"PeakINT8", e.PeakINT8.Value}} {
			inRange(r.name, r.x, 1e13, 1e17)
		}
		inRange("VMEMPerCore", float64(e.VMEMPerCore.Value), 1<<20, 1<<30)
		inRange("Cores", float64(e.Cores.Value), 1, 1024)

		switch e.Platform {
		case device.CUDA:
			if !e.ComputeCapability.Known() {
				addf("%s: NVIDIA entry without compute capability", g)
			}
		case device.ROCm:
			if !e.GFXTarget.Known() {
				addf("%s: AMD entry without gfx target", g)
			}
		}

		if e.TPU != nil {
			if e.Platform != device.TPU {
				addf("%s: TPU slice rules on a %s entry", g, e.Platform)
			}
			p := e.TPU.AcceleratorType.Value
			if other, dup := prefixes[p]; dup && p != "" {
				addf("%s: accelerator-type prefix %q already belongs to %s", g, p, other)
			}
			prefixes[p] = g
			for _, err := range validateSlices(e) {
				errs = append(errs, fmt.Errorf("catalog: %s: %w", g, err))
			}
		}
	}
	for _, k := range requiredGenerations {
		if !keys[k] {
			addf("required generation %q missing", k)
		}
	}
	return errors.Join(errs...)
}

func vendorRules(v Vendor) (device.Platform, uint16, string) {
	switch v {
	case Google:
		return device.TPU, 0x1ae0, "TensorCore"
	case NVIDIA:
		return device.CUDA, 0x10de, "SM"
	case AMD:
		return device.ROCm, 0x1002, "CU"
	}
	return "", 0, ""
}

func validateSlices(e *Accelerator) []error {
	var errs []error
	addf := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	r := e.TPU
	if !validPrefix(r.AcceleratorType.Value) {
		addf("accelerator-type prefix %q is not v<digits>[a-z] or tpu<digits>[a-z]", r.AcceleratorType.Value)
	}
	coresPerChip := 1
	switch r.SuffixCounts.Value {
	case SuffixChips:
	case SuffixTensorCores:
		if !e.Cores.Known() {
			addf("suffix counts TensorCores but TensorCores per chip is unknown")
			return errs
		}
		coresPerChip = e.Cores.Value
	default:
		addf("suffix unit %q is neither %q nor %q", r.SuffixCounts.Value, SuffixTensorCores, SuffixChips)
	}
	if !e.Cores.Known() {
		addf("slice rules need TensorCores per chip")
	}
	single, multi, perHost := r.SingleHostMaxChips.Value, r.MultiHostChipsPerHost.Value, e.ChipsPerHost.Value
	if single <= 0 || multi <= 0 || perHost <= 0 {
		addf("single-host max (%d), multi-host chips per host (%d) and chips per host (%d) must all be known",
			single, multi, perHost)
		return errs
	}
	if single > perHost || multi > perHost {
		addf("single-host max %d or multi-host chips per host %d exceeds chips per host %d", single, multi, perHost)
	}
	checkChips := func(what string, chips int) {
		if chips > single && chips%multi != 0 {
			addf("%s: %d chips is multi-host but not a multiple of %d chips per host", what, chips, multi)
		}
	}
	if (len(r.Topologies) == 0) == (len(r.Sizes) == 0) {
		addf("exactly one of Topologies and Sizes must be set")
	}
	if len(r.Topologies) > 0 {
		if r.TopologiesSource == "" {
			addf("topologies without a source")
		} else if err := checkCitation(r.TopologiesSource); err != nil {
			addf("topologies: %v", err)
		}
		dims := r.Dims.Value
		if dims != 2 && dims != 3 {
			addf("topology dimension count %d is neither 2 nor 3", dims)
		}
		prev := 0
		for _, t := range r.Topologies {
			if len(t) != dims {
				addf("topology %s has %d dimensions, want %d", t, len(t), dims)
			}
			for _, d := range t {
				if d < 1 || d > maxTopologyDim {
					addf("topology %s has dimension %d outside [1, %d]", t, d, maxTopologyDim)
				}
			}
			if pt, err := ParseTopology(t.String()); err != nil || !pt.Equal(t) {
				addf("topology %s does not survive ParseTopology(String()): %v", t, err)
			}
			c := t.Chips()
			if c <= prev {
				addf("topology %s (%d chips) is not after the previous one (%d chips): "+
					"topologies must ascend with distinct chip counts", t, c, prev)
			}
			prev = c
			checkChips("topology "+t.String(), c)
		}
		if m := r.MaxSliceChips.Value; m != 0 && prev != m {
			addf("largest topology has %d chips but MaxSliceChips is %d", prev, m)
		}
		if p := r.PodChips.Value; p != 0 && prev > p {
			addf("largest topology has %d chips, more than the pod's %d", prev, p)
		}
	}
	if len(r.Sizes) > 0 && r.SizesSource == "" {
		addf("sizes without a source")
	} else if r.SizesSource != "" {
		if err := checkCitation(r.SizesSource); err != nil {
			addf("sizes: %v", err)
		}
	}
	for _, z := range r.Sizes {
		if z <= 0 || z%coresPerChip != 0 {
			addf("size %d must be a positive multiple of %d", z, coresPerChip)
			continue
		}
		checkChips(fmt.Sprintf("size %d", z), z/coresPerChip)
	}
	return errs
}

// walkFigures calls visit for every Figure reachable from v (struct fields,
// slices of figures, non-nil pointers), with a dotted path for messages.
func walkFigures(v reflect.Value, path string, visit func(string, reflect.Value, figure)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			walkFigures(v.Elem(), path, visit)
		}
	case reflect.Struct:
		if fg, ok := v.Interface().(figure); ok {
			visit(path, v, fg)
			return
		}
		for i := 0; i < v.NumField(); i++ {
			sf := v.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			p := sf.Name
			if path != "" {
				p = path + "." + sf.Name
			}
			walkFigures(v.Field(i), p, visit)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			walkFigures(v.Index(i), fmt.Sprintf("%s[%d]", path, i), visit)
		}
	}
}

// checkCitation checks that a source names where a reader can check it:
// it starts with an https URL or a file of the tensorbridge repository (a
// relative path without ".."), and it points at nothing outside the
// repository (the team's notes under shared/, section numbers of a
// document that is not in it). Remarks may follow the first citation.
func checkCitation(src string) error {
	ref, _, _ := strings.Cut(strings.TrimSpace(src), " ")
	ref = strings.TrimRight(ref, ";,")
	switch {
	case strings.HasPrefix(ref, "https://") && len(ref) > len("https://x.y"):
	case ref != "" && !strings.HasPrefix(ref, "/") && !strings.Contains(ref, "..") &&
		!strings.HasPrefix(ref, "shared/") && strings.Contains(ref, "/") && strings.Contains(ref, "."):
		// a repository file such as docs/pjrt-findings.md
	default:
		return fmt.Errorf("source %q does not start with an https URL or a file of this repository", src)
	}
	for _, bad := range []string{"shared/", "§", "hardware-and-runtimes.md", "torchbridge-review.md"} {
		if strings.Contains(src, bad) {
			return fmt.Errorf("source %q cites %q, which is not in this repository: cite the public URL", src, bad)
		}
	}
	return nil
}
