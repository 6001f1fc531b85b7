package discover

import (
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tensorbridge/tensorbridge/catalog"
)

func FuzzParseCPUInfo(f *testing.F) {
	f.Add("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nphysical id\t: 0\ncore id\t\t: 0\nflags\t\t: fpu sse4_2 avx2 avx512f amx_tile\n\nprocessor\t: 1\nphysical id\t: 0\ncore id\t\t: 1\n")
	f.Add("processor\t: 0\nFeatures\t: fp asimd sve2\nCPU implementer\t: 0x41\n")
	f.Add("processor: x\n")
	f.Add(":::\nprocessor:0\nphysical id: 7\ncore id: 7\nphysical id: 8\n")
	f.Fuzz(func(t *testing.T, s string) {
		ci, err := parseCPUInfo(strings.NewReader(s))
		if err != nil {
			return
		}
		n := strings.Count(s, "processor")
		if ci.logical < 1 || ci.logical > n {
			t.Fatalf("logical %d from %d \"processor\" substrings", ci.logical, n)
		}
		if ci.cores < 1 || ci.cores > ci.logical || ci.sockets > ci.cores {
			t.Fatalf("inconsistent counts: %d logical, %d cores, %d sockets", ci.logical, ci.cores, ci.sockets)
		}
		known := map[string]bool{"sse4.2": true}
		for _, k := range simdFeatures {
			known[strings.ReplaceAll(k, "_", "-")] = true
		}
		for _, ft := range ci.features() {
			if !known[ft] {
				t.Fatalf("feature %q is not in simdFeatures", ft)
			}
		}
	})
}

func FuzzParseMemInfo(f *testing.F) {
	f.Add("MemTotal:       24684084 kB\nMemAvailable:   23518028 kB\n")
	f.Add("MemTotal: 18446744073709551615 kB\n")
	f.Add("MemTotal: 1\n")
	f.Fuzz(func(t *testing.T, s string) {
		total, avail, err := parseMemInfo(strings.NewReader(s))
		if err == nil && total == 0 {
			t.Fatalf("no error but MemTotal 0 (avail %d)", avail)
		}
	})
}

// formatTPUEnv writes m in the tpu-env layout, single-quoting values.
func formatTPUEnv(m map[string]string) string {
	var b strings.Builder
	for k, v := range m {
		b.WriteString(k + ": '" + strings.ReplaceAll(v, "'", "''") + "'\n")
	}
	return b.String()
}

func FuzzParseTPUEnv(f *testing.F) {
	f.Add("ACCELERATOR_TYPE: 'v4-256'\nCHIPS_PER_HOST_BOUNDS: '2,2,1'\nHOST_BOUNDS: '2,2,8'\nINJECT_SLICE_BUILDER_FAULT: ''\nWORKER_ID: '0'\n")
	f.Add("A: 'it''s'\r\nB: \"q\\\"\"\nC: bare\n# c\n\n")
	f.Add("A: 'unterminated\nB:'x' y\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, _ := ParseTPUEnv(s)
		for k, v := range m {
			if k == "" || strings.ContainsAny(k, " :\n'\"") {
				t.Fatalf("bad key %q", k)
			}
			if strings.Contains(v, "\n") {
				t.Fatalf("value of %s spans lines: %q", k, v)
			}
		}
		// Writing the result back and parsing it again is lossless, except
		// for values the single-line format cannot carry (leading or
		// trailing CR is stripped as line-ending noise).
		clean := map[string]string{}
		for k, v := range m {
			if !strings.ContainsRune(v, '\r') && utf8.ValidString(v) {
				clean[k] = v
			}
		}
		again, err := ParseTPUEnv(formatTPUEnv(clean))
		if err != nil {
			t.Fatalf("reparse of %q: %v", formatTPUEnv(clean), err)
		}
		if !maps.Equal(again, clean) {
			t.Fatalf("round trip: %v -> %v", clean, again)
		}
		_ = endpointIPs(s)
	})
}

func FuzzTPUEnvValues(f *testing.F) {
	// The TPU_* variables' value formats: accelerator types, bounds
	// ("2,2,1"), topologies ("2x2x1"), host lists. The accelerator type is
	// judged against the catalog's parser: discover must either derive
	// exactly the catalog's slice or report the catalog's reason.
	f.Add("v5litepod-16", "2,2,1", "4x4", "h-0,h-1")
	f.Add("tpu7x-8", "1,1,2", "2x2x1", "")
	f.Add("v5e-8", "2,4,1", "2x4", "a")
	f.Add("V4-256", "2,2,8", "4x4x8", "w-0,w-1")
	f.Add("v99-0", ",,", "x", ",,,")
	f.Fuzz(func(t *testing.T, accel, bounds, topo, hosts string) {
		d := tpuEnvRun(map[string]string{
			"TPU_ACCELERATOR_TYPE": accel, "TPU_TOPOLOGY": topo, "TPU_WORKER_HOSTNAMES": hosts,
			"TPU_HOST_BOUNDS": bounds, "TPU_CHIPS_PER_HOST_BOUNDS": bounds,
		})
		tp := d.rep.TPU
		ps := d.tpuEnvProblems()
		for _, p := range ps {
			if p.Code == "" || p.Message == "" {
				t.Fatalf("problem without code or message: %+v", p)
			}
		}
		invalid, hasInvalid := problemWithCode(ps, "tpu-accelerator-type-invalid")
		slice, err := catalog.ParseAcceleratorType(accel)
		switch {
		case accel == "":
			if hasInvalid || tp.Generation != "" || tp.SliceTensorCores != 0 {
				t.Fatalf("no type, yet generation %q, %d TensorCores, problem %v", tp.Generation, tp.SliceTensorCores, invalid)
			}
		case err != nil:
			var ie *catalog.InvalidAcceleratorTypeError
			if !errors.As(err, &ie) {
				t.Fatalf("catalog error %v is not an *InvalidAcceleratorTypeError", err)
			}
			if !hasInvalid || !strings.Contains(invalid.Message, strconv.Quote(accel)) || !strings.Contains(invalid.Message, ie.Reason) || invalid.Fix == "" {
				t.Fatalf("type %q rejected by the catalog (%s): problem %+v, want one naming the value and the reason", accel, ie.Reason, invalid)
			}
			if tp.Generation != "" || tp.SliceTensorCores != 0 {
				t.Fatalf("invalid type %q gave generation %q, %d TensorCores", accel, tp.Generation, tp.SliceTensorCores)
			}
		default:
			a, _ := catalog.Lookup(slice.Generation)
			if hasInvalid || tp.Generation != slice.Generation || tp.SliceChips != slice.Chips ||
				tp.SliceTensorCores != slice.Chips*a.Cores.Value {
				t.Fatalf("type %q: generation %q, %d chips, %d TensorCores, problem %v; catalog says %+v with %d cores per chip",
					accel, tp.Generation, tp.SliceChips, tp.SliceTensorCores, invalid, slice, a.Cores.Value)
			}
		}
		if _, terr := catalog.ParseTopology(topo); topo != "" {
			if _, has := problemWithCode(ps, "tpu-topology-invalid"); has != (terr != nil) {
				t.Fatalf("topology %q: catalog error %v, tpu-topology-invalid reported: %v", topo, terr, has)
			}
		}
		if (tp.Hosts > 0) != (tp.HostsSource != "") {
			t.Fatalf("hosts %d with source %q", tp.Hosts, tp.HostsSource)
		}
		for _, c := range []struct{ s, sep string }{{bounds, ","}, {topo, "x"}} {
			n, err := dimsProduct(c.s, c.sep)
			if err != nil {
				continue
			}
			want := 1
			for _, p := range strings.Split(strings.TrimSpace(c.s), c.sep) {
				v, _ := strconv.Atoi(strings.TrimSpace(p))
				want *= v
			}
			if n <= 0 || n != want {
				t.Fatalf("dimsProduct(%q) = %d, want %d", c.s, n, want)
			}
			if c.sep == "," && (tp.Hosts != n || tp.HostsSource != "host_bounds") {
				t.Fatalf("host bounds %q: hosts %d (%s), want %d from host_bounds", bounds, tp.Hosts, tp.HostsSource, n)
			}
		}
		for _, h := range splitList(hosts) {
			if h == "" || strings.Contains(h, ",") {
				t.Fatalf("splitList(%q) gave %q", hosts, h)
			}
		}
		if n, err := countCPUList(bounds); err == nil && n <= 0 {
			t.Fatalf("countCPUList(%q) = %d", bounds, n)
		}
	})
}

func FuzzCgroupPaths(f *testing.F) {
	f.Add("4:memory:/process_api/0f41\n0::/\n")
	f.Add("0::/kubepods/pod1\n")
	f.Add("5:cpu,cpuacct:/docker/x\n::\n")
	f.Fuzz(func(t *testing.T, s string) {
		v2, hasV2, v1 := cgroupPaths(s)
		if !hasV2 && v2 != "" {
			t.Fatalf("v2 path %q without a v2 line", v2)
		}
		for c := range v1 {
			if c == "" || strings.Contains(c, ",") {
				t.Fatalf("bad controller %q", c)
			}
		}
	})
}
