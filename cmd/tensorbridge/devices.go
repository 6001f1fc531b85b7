package main

import (
	"github.com/tensorbridge/tensorbridge/shard"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/catalog"
	"github.com/tensorbridge/tensorbridge/cluster"
	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/errs"
)

func init() {
	register(command{name: "devices", summary: "list the accelerators and CPU of this host, with problems", run: runDevices})
}

// discoveryFlags are the flags every command that inspects the host shares.
type discoveryFlags struct {
	root       string
	noMetadata bool
}

func (f *discoveryFlags) options() discover.Options {
	return discover.Options{Root: f.root, SkipMetadata: f.noMetadata}
}

func addDiscoveryFlags(fsFlags interface {
	StringVar(*string, string, string, string)
	BoolVar(*bool, string, bool, string)
}, f *discoveryFlags) {
	fsFlags.StringVar(&f.root, "root", "", "inspect another host's tree (a recorded or fixture root) instead of / (sysfs, /dev, /proc under it)")
	fsFlags.BoolVar(&f.noMetadata, "no-metadata", false, "do not query the GCE metadata server (also TENSORBRIDGE_NO_METADATA=1)")
}

// devicesOutput is the --json document of `tensorbridge devices`.
type devicesOutput struct {
	*discover.Report
	// Accelerators counts TPU chips and GPUs found.
	Accelerators int `json:"accelerators"`
	// Summary is one sentence on what was found.
	Summary string `json:"summary"`
	// Backend, when --backend is given, is what the opened backend reports.
	Backend *backendDevices `json:"backend,omitempty"`
	// Cluster is the multi-process job's bootstrap, every value with its
	// source, when one of more than one process is configured.
	Cluster *cluster.Config `json:"cluster,omitempty"`
	// Plugins replaces the report's list: each file with the backend that
	// loads it, as `plugins list --json` gives them.
	Plugins []devicePlugin `json:"plugins"`
}

// devicePlugin is a PJRT plugin file found on the search path (not
// loaded). Name is the plugin's own name ("cpu" for
// pjrt_c_api_cpu_plugin.so); Backend is the --backend that loads it
// ("xla-cpu"), the name every command shows; "" when no backend does.
type devicePlugin struct {
	discover.PluginFile
	Backend string `json:"backend,omitempty"`
}

// devicePlugins names each plugin file by its backend (see devicePlugin).
func devicePlugins(files []discover.PluginFile) []devicePlugin {
	out := make([]devicePlugin, len(files))
	for i, f := range files {
		out[i] = devicePlugin{PluginFile: f, Backend: backendOf(f.Name)}
	}
	return out
}

type backendDevices struct {
	Selection tensorbridge.Selection `json:"selection"`
	Devices   []device.Info          `json:"devices"`
	// Mesh lists the devices (indices into Devices) in the order a mesh
	// takes them: by coordinates, so that neighbours on the chip
	// interconnect are consecutive (package shard); absent when the
	// runtime reports no coordinates.
	Mesh []int `json:"mesh,omitempty"`
	// Process is the backend's place in its job: addressable devices
	// against those of the whole job.
	Process tensorbridge.ProcessInfo `json:"process"`
}

func runDevices(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("devices", stderr, "[--json] [--backend NAME] [--root DIR] [--no-metadata] [cluster flags]")
	asJSON := fs.Bool("json", false, "print JSON")
	backend := fs.String("backend", "", "also open this backend (or auto) and list the devices its runtime reports (in a multi-process job, every process must do so: opening joins the job)")
	var df discoveryFlags
	addDiscoveryFlags(fs, &df)
	var cf clusterFlags
	addClusterFlags(fs, &cf)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	rep, err := discover.Discover(ctx, df.options())
	if err != nil {
		return err
	}
	out := devicesOutput{Report: rep, Plugins: devicePlugins(rep.Plugins)}
	enrichFromCatalog(rep.Devices)
	for _, d := range rep.Devices {
		if d.Platform != device.CPU {
			out.Accelerators++
		}
	}
	out.Summary = summarize(rep, out.Accelerators)
	// The job, bootstrapped as doctor --cluster does, from the TPU
	// environment this discovery already read.
	co, err := cf.options()
	if err != nil {
		return err
	}
	co.TPU = func(context.Context) (*discover.TPUEnvironment, error) { return &rep.TPU, nil }
	cfg, err := cluster.Bootstrap(ctx, co)
	if err != nil {
		return err
	}
	if cfg.MultiProcess() {
		out.Cluster = cfg
	}
	if *backend != "" {
		var opts []tensorbridge.Option
		if cfg.MultiProcess() {
			opts = append(opts, tensorbridge.WithCluster(joinOptions(co)), tensorbridge.WithClusterSecurity(co.Security))
		}
		b, err := tensorbridge.Open(ctx, *backend, opts...)
		if err != nil {
			return err
		}
		defer b.Close()
		bd := b.Devices()
		enrichFromCatalog(bd)
		out.Backend = &backendDevices{Selection: b.Selection(), Devices: bd, Mesh: meshOrder(bd), Process: b.Process()}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printDevices(stdout, &out)
	return nil
}

// enrichFromCatalog adds the catalog's figures to each accelerator whose
// generation discovery recognised, labelled with their source, beside what
// discovery itself saw.
func enrichFromCatalog(devs []device.Info) {
	for i := range devs {
		d := &devs[i]
		a, ok := catalog.Lookup(d.Generation)
		if !ok && d.Platform != device.CPU {
			a, ok = catalog.ByDeviceKind(d.Kind) // a runtime's device_kind
		}
		if !ok {
			continue
		}
		add := func(name string, v any, src string) {
			if _, exists := d.Attr(name); !exists {
				d.Attributes = append(d.Attributes, device.Attribute{Name: name, Value: v, Source: "catalog: " + src})
			}
		}
		if a.Memory.Known() {
			add("catalog_memory_bytes", a.Memory.Value, a.Memory.Source)
		}
		if a.MemoryBandwidth.Known() {
			add("catalog_memory_bandwidth_bytes_per_s", a.MemoryBandwidth.Value, a.MemoryBandwidth.Source)
		}
		if a.PeakBF16.Known() {
			add("catalog_peak_bf16_flops", a.PeakBF16.Value, a.PeakBF16.Source)
		}
		if d.Memory.Total == 0 && a.Memory.Known() {
			d.Memory = device.Memory{Total: uint64(a.Memory.Value), Source: "catalog"}
		}
	}
}

// summarize says in one sentence what was found, and for an empty result
// what each accelerator probe saw.
func summarize(rep *discover.Report, accels int) string {
	if accels > 0 {
		counts := map[string]int{}
		var order []string
		for _, d := range rep.Devices {
			if d.Platform == device.CPU {
				continue
			}
			k := d.Kind
			if counts[k] == 0 {
				order = append(order, k)
			}
			counts[k]++
		}
		var parts []string
		for _, k := range order {
			parts = append(parts, fmt.Sprintf("%d x %s", counts[k], k))
		}
		return "found " + strings.Join(parts, ", ")
	}
	var why []string
	for _, name := range []string{discover.ProbePCI, discover.ProbeDeviceNodes, discover.ProbeNVML, discover.ProbeKFD} {
		p, ok := rep.Probe(name)
		if !ok {
			continue
		}
		switch {
		case p.Skipped != "":
			why = append(why, fmt.Sprintf("%s skipped (%s)", name, p.Skipped))
		case p.Err != "":
			why = append(why, fmt.Sprintf("%s: %s", name, p.Err))
		default:
			why = append(why, fmt.Sprintf("%s found %d", name, p.Found))
		}
	}
	return "no accelerator found: " + strings.Join(why, "; ")
}

func printDevices(w io.Writer, out *devicesOutput) {
	rep := out.Report
	h := rep.Host
	fmt.Fprintf(w, "Host %s", orDash(h.Hostname))
	if h.Kernel != "" {
		fmt.Fprintf(w, " (Linux %s)", h.Kernel)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPLATFORM\tKIND\tGENERATION\tMEMORY\tCORES\tSTATUS")
	for _, d := range rep.Devices {
		mem := "-"
		if d.Memory.Total > 0 {
			mem = errs.Bytes(d.Memory.Total)
			if d.Memory.Source != "" {
				mem += " (" + d.Memory.Source + ")"
			}
		}
		cores := "-"
		if d.Cores > 0 {
			cores = fmt.Sprint(d.Cores)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.Platform, orDash(d.Kind), orDash(d.Generation), mem, cores, status(d))
	}
	tw.Flush()
	for _, d := range rep.Devices {
		if d.Platform == device.CPU && len(d.Features) > 0 {
			fmt.Fprintf(w, "%s features: %s\n", d.ID, strings.Join(d.Features, " "))
		}
		for _, p := range d.Problems {
			fmt.Fprintf(w, "%s %s\n", d.ID, p)
		}
	}
	fmt.Fprintln(w, capitalize(out.Summary)+".")
	if t := rep.TPU; t.AcceleratorType != "" || t.Topology != "" {
		fmt.Fprintf(w, "TPU slice: %s", joinNonEmpty(", ", t.AcceleratorType, t.Topology))
		if t.SliceChips > 0 {
			fmt.Fprintf(w, ", %d chips", t.SliceChips)
		}
		if t.Hosts > 0 {
			fmt.Fprintf(w, " on %d hosts", t.Hosts)
		}
		if t.WorkerID != nil {
			fmt.Fprintf(w, ", this is worker %d", *t.WorkerID)
		}
		fmt.Fprintln(w)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "host %s\n", p)
	}
	if len(out.Plugins) > 0 {
		fmt.Fprintln(w, "PJRT plugins on the search path (not loaded), by the backend that loads them:")
		for _, p := range out.Plugins {
			if p.Backend == "" {
				fmt.Fprintf(w, "  %-8s %s (%s; no backend loads a %q plugin)\n", "-", p.Path, p.Source, p.Name)
				continue
			}
			fmt.Fprintf(w, "  %-8s %s (%s)\n", p.Backend, p.Path, p.Source)
		}
	}
	if out.Cluster != nil {
		fmt.Fprintln(w, "\nMulti-process job (bootstrap, each value with its source):")
		printBootstrap(w, out.Cluster)
	}
	if b := out.Backend; b != nil {
		fmt.Fprintf(w, "\nBackend %s reports:\n", b.Selection.Chosen)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tMEMORY\tATTRIBUTES")
		for _, d := range b.Devices {
			var attrs []string
			for _, a := range d.Attributes {
				attrs = append(attrs, fmt.Sprintf("%s=%v [%s]", a.Name, a.Value, a.Source))
			}
			mem := "-"
			if d.Memory.Total > 0 {
				mem = errs.Bytes(d.Memory.Total) + " (" + d.Memory.Source + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.ID, d.Kind, mem, strings.Join(attrs, " "))
		}
		tw.Flush()
		if p := b.Process; p.Count > 1 {
			fmt.Fprintf(w, "Process %d of %d: %d addressable device(s) here, %d in the job %v by process; the runtime lists %d\n",
				p.Index, p.Count, p.AddressableDevices, p.JobDevices, p.ProcessDevices, p.RuntimeDevices)
		}
		if len(b.Mesh) > 0 {
			fmt.Fprintf(w, "Mesh order (by coordinates; --mesh data=D,model=M takes them data-major): %v\n", b.Mesh)
		}
	}
}

// meshOrder returns the device indices ordered by coordinates, or nil
// when no device has coordinates.
func meshOrder(devs []device.Info) []int {
	ids := make([]int, len(devs))
	coords := make([][]int, len(devs))
	any := false
	for i, d := range devs {
		ids[i], coords[i] = i, d.Coords
		any = any || len(d.Coords) > 0
	}
	if !any {
		return nil
	}
	return shard.Coords(ids, coords, nil)
}

func status(d device.Info) string {
	worst := -1
	for _, p := range d.Problems {
		worst = max(worst, int(p.Severity))
	}
	switch {
	case worst < 0:
		return "ok"
	case worst == int(device.SeverityError):
		return fmt.Sprintf("unusable (%d problems)", len(d.Problems))
	default:
		return fmt.Sprintf("ok with %d warnings", len(d.Problems))
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
