package pjrt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/capi"
)

// fakeDriver returns a driver of kind k whose search path is only dir and
// whose device nodes are nodes.
func fakeDriver(k Kind, dir string, nodes ...string) *Driver {
	return &Driver{Kind: k, SearchPath: []discover.SearchDir{{Path: dir, Kind: discover.SearchDirectory, Source: "test"}},
		Glob: func(pattern string) ([]string, error) {
			var out []string
			for _, n := range nodes {
				if ok, _ := filepath.Match(pattern, n); ok {
					out = append(out, n)
				}
			}
			return out, nil
		}}
}

func kind(name string) Kind {
	for _, k := range Kinds {
		if k.Name == name {
			return k
		}
	}
	panic("no kind " + name)
}

func TestRegistered(t *testing.T) {
	for _, name := range []string{"xla-cpu", "tpu", "cuda", "rocm"} {
		if _, ok := driver.Lookup(name); !ok {
			t.Errorf("%s not registered", name)
		}
	}
}

func TestProbe(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		kind      string
		files     []string
		nodes     []string
		available bool
		devices   int
		reason    string
	}{
		{"cpu plugin present", "xla-cpu", []string{"pjrt_c_api_cpu_plugin.so"}, nil, true, 0, "pjrt_c_api_cpu_plugin.so"},
		{"cpu plugin missing", "xla-cpu", nil, nil, false, 0, "scripts/install-plugins.sh xla-cpu"},
		{"tpu without device", "tpu", []string{"pjrt_c_api_tpu_plugin.so"}, nil, false, 0, "no tpu device"},
		{"tpu with accel nodes", "tpu", []string{"pjrt_c_api_tpu_plugin.so"}, []string{"/dev/accel0", "/dev/accel1"}, true, 2, "/dev/accel0"},
		{"tpu as libtpu.so", "tpu", []string{"libtpu.so"}, []string{"/dev/vfio/0"}, true, 1, "libtpu.so"},
		{"cuda with gpus", "cuda", []string{"pjrt_c_api_cuda_plugin.so"}, []string{"/dev/nvidia0", "/dev/nvidiactl"}, true, 1, "/dev/nvidia0"},
		{"cuda without plugin", "cuda", []string{"pjrt_c_api_cpu_plugin.so"}, []string{"/dev/nvidia0"}, false, 0, "no cuda PJRT plugin"},
		{"rocm", "rocm", []string{"xla_rocm_plugin.so"}, []string{"/dev/kfd"}, true, 0, "/dev/kfd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(d, f), []byte("not loaded by Probe"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			av := fakeDriver(kind(tc.kind), d, tc.nodes...).Probe(ctx)
			if av.Available != tc.available || av.Devices != tc.devices || !strings.Contains(av.Reason, tc.reason) {
				t.Errorf("Probe = %+v, want available %v, %d devices, reason containing %q", av, tc.available, tc.devices, tc.reason)
			}
		})
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if av := fakeDriver(kind("xla-cpu"), dir).Probe(canceled); av.Available {
		t.Error("Probe with a canceled context says available")
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	var ue *errs.UnavailableError
	// No plugin.
	if _, err := fakeDriver(kind("xla-cpu"), dir).Open(ctx, &driver.Options{}); !errors.As(err, &ue) {
		t.Errorf("no plugin: %T %v", err, err)
	}
	// A file that is not a shared library.
	bad := filepath.Join(dir, "pjrt_c_api_cpu_plugin.so")
	if err := os.WriteFile(bad, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := fakeDriver(kind("xla-cpu"), dir).Open(ctx, &driver.Options{})
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), bad) {
		t.Errorf("garbage plugin: %T %v", err, err)
	}
	// A TPU plugin but no TPU.
	if err := os.WriteFile(filepath.Join(dir, "pjrt_c_api_tpu_plugin.so"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fakeDriver(kind("tpu"), dir).Open(ctx, &driver.Options{}); !errors.As(err, &ue) {
		t.Errorf("tpu without a device: %T %v", err, err)
	}
	// Bad configs.
	for _, cfg := range []string{"devices=0", "devices=x", "bogus=1", "plugin="} {
		_, err := fakeDriver(kind("xla-cpu"), dir).Open(ctx, &driver.Options{Config: cfg})
		if errs.KindOf(err) != errs.InvalidArgument {
			t.Errorf("config %q: %v", cfg, err)
		}
	}
	if _, err := fakeDriver(kind("xla-cpu"), dir).Open(ctx, &driver.Options{Config: "plugin=" + filepath.Join(dir, "missing.so")}); !errors.As(err, &ue) {
		t.Errorf("missing plugin= file: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := fakeDriver(kind("xla-cpu"), dir).Open(canceled, &driver.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	no := false
	for _, tc := range []struct {
		kind, in string
		want     config
		ok       bool
	}{
		{"xla-cpu", "", config{}, true},
		{"xla-cpu", "devices=4", config{devices: 4}, true},
		{"xla-cpu", " devices=2 , plugin=/x/y.so ", config{devices: 2, plugin: "/x/y.so"}, true},
		{"tpu", "plugin=/opt/libtpu.so", config{plugin: "/opt/libtpu.so"}, true},
		{"tpu", "devices=2", config{}, false},
		{"xla-cpu", "devices=-1", config{}, false},
		{"xla-cpu", "devices", config{}, false},
		{"xla-cpu", "nonsense", config{}, false},
		{"xla-cpu", "async=false", config{async: &no}, true},
		{"xla-cpu", "async=maybe", config{}, false},
		{"tpu", "async=false", config{}, false},
		{"xla-cpu", "depthwise=conv", config{tune: tuning{depthwiseConv: true}}, true},
		{"xla-cpu", "depthwise=sum", config{}, true},
		{"xla-cpu", "depthwise=fast", config{}, false},
		{"xla-cpu", "xla.xla_cpu_enable_fast_math=true,xla.xla_backend_optimization_level=2,xla.a=1.5,xla.b=NAME",
			config{tune: tuning{xlaOptions: []capi.OptionOverride{{Name: "xla_cpu_enable_fast_math", Value: true},
				{Name: "xla_backend_optimization_level", Value: int64(2)}, {Name: "a", Value: 1.5}, {Name: "b", Value: "NAME"}}}}, true},
		{"xla-cpu", "xla.a=1,xla.a=2", config{}, false},
		{"xla-cpu", "xla.=1", config{}, false},
		{"xla-cpu", "xla.a", config{}, false},
		{"xla-cpu", "xla.debug_options=x", config{}, false},
	} {
		got, err := parseConfig(kind(tc.kind), tc.in)
		if (err == nil) != tc.ok || (tc.ok && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("parseConfig(%s, %q) = %+v, %v; want %+v, ok %v", tc.kind, tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "devices=2", "plugin=/a.so,devices=1", ",,=", "devices=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseConfig(kind("xla-cpu"), s)
		if err == nil && c.devices < 0 {
			t.Errorf("%q gave negative devices %d", s, c.devices)
		}
		if err == nil && !strings.Contains(s, "plugin=") && c.plugin != "" {
			t.Errorf("%q gave plugin %q", s, c.plugin)
		}
	})
}

// TestDevices checks the XLA CPU plugin's devices as the backend reports them.
func TestDevices(t *testing.T) {
	eng := cpuEngine(t)
	devs, err := cpuBackend.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != eng.NumDevices() || len(devs) != 2 {
		t.Fatalf("%d devices, engine has %d, config asked for 2", len(devs), eng.NumDevices())
	}
	for i, d := range devs {
		if d.Platform != device.CPU || d.Index != i || d.Kind == "" || d.CoreOnChip != -1 || !strings.HasPrefix(d.ID, "cpu:pjrt:") {
			t.Errorf("device %d: %+v", i, d)
		}
		for _, name := range []string{"pjrt_id", "kind", "process_index", "platform", "plugin"} {
			a, ok := d.Attr(name)
			if !ok || a.Source != "pjrt" {
				t.Errorf("device %d: attribute %s = %+v, %v", i, name, a, ok)
			}
		}
	}
	if devs[0].ID == devs[1].ID {
		t.Error("two devices share an ID")
	}
	if got := eng.DeviceDescription(1); !strings.Contains(got, "id 1") {
		t.Errorf("DeviceDescription(1) = %q", got)
	}
	if !strings.Contains(eng.Description(), "xla-cpu") || eng.Name() != "xla-cpu" {
		t.Errorf("Name %q, Description %q", eng.Name(), eng.Description())
	}
	// The CPU plugin may or may not report allocator statistics; either
	// answer must be well formed.
	ms, err := cpuBackend.MemoryStats(context.Background(), 0)
	if err != nil && !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("MemoryStats: %v", err)
	}
	if err == nil && ms.Source != "pjrt" {
		t.Errorf("MemoryStats source %q", ms.Source)
	}
	if _, err := cpuBackend.MemoryStats(context.Background(), 5); errs.KindOf(err) != errs.InvalidArgument {
		t.Errorf("MemoryStats(5): %v", err)
	}
}

// TestDispatch checks that xla-cpu dispatches synchronously by default
// (the pinned plugin knows the create option) and that async= overrides
// it, and that each backend says so.
func TestDispatch(t *testing.T) {
	cpuEngine(t) // skips without the plugin
	if got := cpuBackend.Dispatch(); !strings.HasPrefix(got, "synchronous") {
		t.Errorf("default Dispatch() = %q, want synchronous", got)
	}
	d := &Driver{Kind: kind("xla-cpu")}
	be, err := d.Open(context.Background(), &driver.Options{Config: "async=true"})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if got := be.(*Backend).Dispatch(); got != "asynchronous=true (config)" {
		t.Errorf("async=true: Dispatch() = %q", got)
	}
}
