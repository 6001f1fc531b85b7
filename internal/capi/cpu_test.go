package capi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
)

// Tests against a real plugin: the XLA CPU PJRT plugin that
// scripts/install-plugins.sh xla-cpu installs. All tests share one plugin
// and one client with numCPUDevices devices.

const numCPUDevices = 4

var (
	cpuOnce   sync.Once
	cpuClient *Client
	cpuErr    error
	cpuSkip   string
)

// cpu returns the shared CPU client, or skips the test when the plugin is
// not installed.
func cpu(t testing.TB) *Client {
	t.Helper()
	cpuOnce.Do(func() {
		path, err := FindPlugin("cpu")
		if err != nil {
			cpuSkip = "plugin not installed: run scripts/install-plugins.sh xla-cpu (" + err.Error() + ")"
			return
		}
		p, err := Load(path)
		if err != nil {
			cpuErr = err
			return
		}
		cpuClient, cpuErr = p.NewClient(context.Background(), []NamedValue{{OptCPUDeviceCount, numCPUDevices}})
	})
	if cpuSkip != "" {
		testreq.Skipf(t, "%s", cpuSkip)
	}
	if cpuErr != nil {
		t.Fatalf("CPU plugin: %v", cpuErr)
	}
	return cpuClient
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cpuClient != nil {
		if err := cpuClient.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing CPU client:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// f32 returns the bytes of float32 values.
func f32(v ...float32) []byte { return append([]byte(nil), Bytes(v)...) }

// toF32 reads a buffer back as float32 values.
func toF32(t *testing.T, b *Buffer) []float32 {
	t.Helper()
	raw, err := b.ToHostBytes(context.Background())
	if err != nil {
		t.Fatalf("ToHostBytes: %v", err)
	}
	v, err := FromBytes[float32](raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func upload(t *testing.T, c *Client, dev *Device, dims []int64, v ...float32) *Buffer {
	t.Helper()
	b, err := c.BufferFromHost(context.Background(), dev, F32, dims, f32(v...), ImmutableUntilTransferCompletes)
	if err != nil {
		t.Fatalf("BufferFromHost: %v", err)
	}
	return b
}

func devices(t *testing.T, c *Client) []*Device {
	t.Helper()
	ds, err := c.AddressableDevices()
	if err != nil {
		t.Fatalf("AddressableDevices: %v", err)
	}
	if len(ds) < 2 {
		t.Fatalf("want ≥ 2 devices, have %d", len(ds))
	}
	return ds
}

// progAddDot returns x+y and x·y for 2×2 f32 matrices.
const progAddDot = `module @add_dot {
  func.func public @main(%x: tensor<2x2xf32>, %y: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) {
    %s = stablehlo.add %x, %y : tensor<2x2xf32>
    %d = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    return %s, %d : tensor<2x2xf32>, tensor<2x2xf32>
  }
}`

// addDotWant computes progAddDot's results by hand-written arithmetic on
// small integers, which float32 represents exactly.
func addDotWant(x, y [4]float32) (sum, dot []float32) {
	sum = []float32{x[0] + y[0], x[1] + y[1], x[2] + y[2], x[3] + y[3]}
	dot = []float32{
		x[0]*y[0] + x[1]*y[2], x[0]*y[1] + x[1]*y[3],
		x[2]*y[0] + x[3]*y[2], x[2]*y[1] + x[3]*y[3],
	}
	return sum, dot
}

func TestPluginVersionAndAttributes(t *testing.T) {
	c := cpu(t)
	p := c.Plugin()
	major, minor := p.Version()
	if major != 0 || minor < 1 {
		t.Errorf("PJRT API %d.%d; want 0.x", major, minor)
	}
	if want := apiOffFunctions + 8*p.NumFunctions(); want != p.APIStructSize() {
		t.Errorf("NumFunctions %d does not account for struct_size %d", p.NumFunctions(), p.APIStructSize())
	}
	attrs, err := p.Attributes()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plugin %s: PJRT C API %d.%d, PJRT_Api %d bytes (%d functions), extensions %v, attributes %v",
		filepath.Base(p.Path()), major, minor, p.APIStructSize(), p.NumFunctions(), p.Extensions(), attrs)
	v, ok := Lookup(attrs, "stablehlo_current_version").([]int64)
	if !ok || len(v) != 3 {
		t.Errorf("stablehlo_current_version = %#v; want a 3-element []int64", Lookup(attrs, "stablehlo_current_version"))
	}
	if _, ok := Lookup(attrs, "xla_version").(int64); !ok {
		t.Errorf("xla_version = %#v; want int64", Lookup(attrs, "xla_version"))
	}
	for _, fn := range []string{"PJRT_Client_Compile", "PJRT_LoadedExecutable_Execute", "PJRT_Executable_Serialize"} {
		if !p.HasFunction(fn) {
			t.Errorf("HasFunction(%q) = false", fn)
		}
	}
	// Loading the same file again gives the same plugin (Initialize runs once).
	again, err := Load(p.Path())
	if err != nil || again != p {
		t.Errorf("second Load = %p, %v; want the first plugin %p", again, err, p)
	}
}

func TestClientAndDevices(t *testing.T) {
	c := cpu(t)
	name, err := c.PlatformName()
	if err != nil || name != "cpu" {
		t.Errorf("PlatformName = %q, %v; want cpu", name, err)
	}
	ver, err := c.PlatformVersion()
	if err != nil {
		t.Error(err)
	}
	if pi, err := c.ProcessIndex(); err != nil || pi != 0 {
		t.Errorf("ProcessIndex = %d, %v; want 0", pi, err)
	}
	all, err := c.Devices()
	if err != nil {
		t.Fatal(err)
	}
	addr, err := c.AddressableDevices()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != numCPUDevices || len(addr) != numCPUDevices {
		t.Fatalf("%d devices, %d addressable; asked for %d with %s", len(all), len(addr), numCPUDevices, OptCPUDeviceCount)
	}
	t.Logf("platform %q version %q", name, ver)
	for i, d := range all {
		desc := d.Description()
		t.Logf("device %d: %+v", i, desc)
		if desc.ID != i || desc.ProcessIndex != 0 || desc.Kind != "cpu" {
			t.Errorf("device %d: id %d process %d kind %q; want id %d, process 0, kind cpu", i, desc.ID, desc.ProcessIndex, desc.Kind, i)
		}
		if want := fmt.Sprintf("CpuDevice(id=%d)", i); desc.ToString != want {
			t.Errorf("device %d ToString %q, want %q", i, desc.ToString, want)
		}
		if addr[i] != d {
			t.Errorf("device %d: addressable list holds another *Device", i)
		}
		if ok, err := d.IsAddressable(); err != nil || !ok {
			t.Errorf("device %d IsAddressable = %v, %v", i, ok, err)
		}
		mems, err := d.Memories()
		if err != nil {
			t.Fatal(err)
		}
		def, err := d.DefaultMemory()
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]bool{}
		for _, m := range mems {
			kinds[m.Kind] = true
		}
		if !kinds["device"] || def.Kind != "device" {
			t.Errorf("device %d memories %+v default %+v; want a \"device\" memory as default", i, mems, def)
		}
	}
	d2, err := c.LookupDevice(2)
	if err != nil || d2 != all[2] {
		t.Errorf("LookupDevice(2) = %v, %v; want %v", d2, err, all[2])
	}
	// A known option with the wrong type is refused before the plugin sees
	// it (the 0.81 CPU plugin aborts the process on it); an unknown option is
	// the plugin's to judge.
	if _, err := c.Plugin().NewClient(context.Background(), []NamedValue{{OptCPUDeviceCount, "four"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("cpu_device_count=\"four\": %v; want INVALID_ARGUMENT", err)
	}
	if c2, err := c.Plugin().NewClient(context.Background(), []NamedValue{{OptCPUDeviceCount, 2}}); err != nil {
		t.Errorf("second client with 2 devices: %v", err)
	} else {
		if ds, err := c2.Devices(); err != nil || len(ds) != 2 {
			t.Errorf("second client: %d devices, %v; want 2", len(ds), err)
		}
		if err := c2.Close(); err != nil {
			t.Error(err)
		}
		if _, err := c2.Devices(); !errors.Is(err, ErrClosed) {
			t.Errorf("Devices after Close: %v; want ErrClosed", err)
		}
	}
	da, err := c.DefaultDeviceAssignment(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(da) != 2 || len(da[0]) != 1 || da[0][0] == da[1][0] {
		t.Errorf("DefaultDeviceAssignment(2,1) = %v; want two distinct devices", da)
	}
}

func TestMemoryStats(t *testing.T) {
	c := cpu(t)
	d := devices(t, c)[0]
	ms, err := d.MemoryStats()
	switch {
	case errors.Is(err, ErrUnimplemented):
		// What the XLA CPU plugin answers: it has no allocator statistics.
		var pe *Error
		if !errors.As(err, &pe) || pe.Func != "PJRT_Device_MemoryStats" || pe.Message == "" {
			t.Errorf("error %#v lacks the function name or the plugin's message", err)
		}
		t.Logf("CPU plugin memory stats: %v", err)
	case err != nil:
		t.Fatalf("MemoryStats: %v", err)
	default:
		if ms.BytesInUse < 0 {
			t.Errorf("BytesInUse = %d", ms.BytesInUse)
		}
		t.Logf("CPU plugin memory stats: %+v", ms)
	}
}

func TestTransferRoundTrip(t *testing.T) {
	c := cpu(t)
	devs := devices(t, c)
	ctx := context.Background()
	pattern := func(n int) []byte { // deterministic, every byte distinct mod 251
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i % 251)
		}
		return b
	}
	cases := []struct {
		name string
		typ  ElementType
		dims []int64
		data []byte
	}{
		{"f32 2x3", F32, []int64{2, 3}, f32(1, -2, 3.5, 0, 1e-30, 65504)},
		{"f32 scalar", F32, nil, f32(42)},
		{"f32 empty", F32, []int64{0, 3}, nil},
		{"s32 4", S32, []int64{4}, Bytes([]int32{-1, 0, 1, 1 << 30})},
		{"f64 2x2", F64, []int64{2, 2}, Bytes([]float64{1.25, -2, 3e300, 0})},
		{"u8 3x5x7", U8, []int64{3, 5, 7}, pattern(105)},
		{"pred 5", Pred, []int64{5}, []byte{1, 0, 1, 1, 0}},
		{"bf16 4", BF16, []int64{4}, []byte{0x80, 0x3f, 0x00, 0x40, 0x40, 0x40, 0x80, 0xbf}}, // 1, 2, 3, -1
		{"s64 3", S64, []int64{3}, Bytes([]int64{-1 << 62, 7, 0})},
	}
	for i, tc := range cases {
		for _, sem := range []HostBufferSemantics{ImmutableOnlyDuringCall, ImmutableUntilTransferCompletes} {
			t.Run(fmt.Sprintf("%s/sem%d", tc.name, sem), func(t *testing.T) {
				dev := devs[i%len(devs)]
				b, err := c.BufferFromHost(ctx, dev, tc.typ, tc.dims, tc.data, sem)
				if err != nil {
					t.Fatalf("BufferFromHost: %v", err)
				}
				defer b.Destroy()
				if got, err := b.ElementType(); err != nil || got != tc.typ {
					t.Errorf("ElementType = %v, %v; want %v", got, err, tc.typ)
				}
				wantDims := tc.dims
				if wantDims == nil {
					wantDims = []int64{}
				}
				if got, err := b.Dims(); err != nil || !reflect.DeepEqual(got, wantDims) {
					t.Errorf("Dims = %v, %v; want %v", got, err, wantDims)
				}
				if got, err := b.Device(); err != nil || got != dev {
					t.Errorf("Device = %v, %v; want %v", got, err, dev)
				}
				if n, err := b.OnDeviceSize(); err != nil || n < int64(len(tc.data)) {
					t.Errorf("OnDeviceSize = %d, %v; want ≥ %d", n, err, len(tc.data))
				}
				got, err := b.ToHostBytes(ctx)
				if err != nil {
					t.Fatalf("ToHostBytes: %v", err)
				}
				if len(got) != len(tc.data) || string(got) != string(tc.data) {
					t.Errorf("round trip: got % x, want % x", got, tc.data)
				}
				// A cancellable context takes the staging path.
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				got2 := make([]byte, len(tc.data))
				if err := b.ToHost(cctx, got2); err != nil || string(got2) != string(tc.data) {
					t.Errorf("ToHost with cancellable ctx: % x, %v", got2, err)
				}
			})
		}
	}

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			call func() error
		}{
			{"short data", func() error {
				_, err := c.BufferFromHost(ctx, devs[0], F32, []int64{2}, f32(1), ImmutableOnlyDuringCall)
				return err
			}},
			{"negative dim", func() error {
				_, err := c.BufferFromHost(ctx, devs[0], F32, []int64{-1}, nil, ImmutableOnlyDuringCall)
				return err
			}},
			{"sub-byte type", func() error {
				_, err := c.BufferFromHost(ctx, devs[0], S4, []int64{2}, []byte{0}, ImmutableOnlyDuringCall)
				return err
			}},
			{"zero copy", func() error {
				_, err := c.BufferFromHost(ctx, devs[0], F32, []int64{1}, f32(1), immutableZeroCopy)
				return err
			}},
			{"nil device", func() error {
				_, err := c.BufferFromHost(ctx, nil, F32, []int64{1}, f32(1), ImmutableOnlyDuringCall)
				return err
			}},
			{"wrong dst size", func() error {
				b := upload(t, c, devs[0], []int64{2}, 1, 2)
				defer b.Destroy()
				return b.ToHost(ctx, make([]byte, 4))
			}},
		} {
			if err := tc.call(); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s: error %v; want INVALID_ARGUMENT", tc.name, err)
			}
		}
	})

	t.Run("use after destroy", func(t *testing.T) {
		b := upload(t, c, devs[0], []int64{1}, 1)
		if err := b.Destroy(); err != nil {
			t.Fatal(err)
		}
		if err := b.Destroy(); err != nil {
			t.Errorf("second Destroy: %v", err)
		}
		if _, err := b.Dims(); !errors.Is(err, ErrClosed) {
			t.Errorf("Dims after Destroy: %v; want ErrClosed", err)
		}
	})

	t.Run("copy to device", func(t *testing.T) {
		b := upload(t, c, devs[0], []int64{3}, 1, 2, 3)
		defer b.Destroy()
		b2, err := b.CopyToDevice(ctx, devs[1])
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Destroy()
		if d, _ := b2.Device(); d != devs[1] {
			t.Errorf("copy on %v, want %v", d, devs[1])
		}
		if got := toF32(t, b2); !reflect.DeepEqual(got, []float32{1, 2, 3}) {
			t.Errorf("copy holds %v", got)
		}
	})
}

func TestCompileErrorIsTyped(t *testing.T) {
	c := cpu(t)
	ctx := context.Background()
	bad := []string{
		"this is not MLIR",
		// Well-formed MLIR, ill-typed StableHLO: adding f32 to s32.
		`func.func public @main(%a: tensor<2xf32>, %b: tensor<2xi32>) -> tensor<2xf32> {
  %0 = stablehlo.add %a, %b : (tensor<2xf32>, tensor<2xi32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}`,
	}
	for i, src := range bad {
		_, err := c.Compile(ctx, MLIR(src), CompileOptions{})
		var pe *Error
		if !errors.As(err, &pe) {
			t.Fatalf("program %d: error %v is not a *Error", i, err)
		}
		if pe.Func != "PJRT_Client_Compile" || pe.Message == "" || pe.Code == CodeOK {
			t.Errorf("program %d: %#v; want Func PJRT_Client_Compile, a code and the plugin's message", i, pe)
		}
		t.Logf("program %d: code %v: %s", i, pe.Code, pe.Message)
	}
	// The process and the client keep working.
	exe, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{})
	if err != nil {
		t.Fatalf("compile after errors: %v", err)
	}
	exe.Destroy()

	if _, err := c.Compile(ctx, Program{Format: "mlir"}, CompileOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty program: %v; want INVALID_ARGUMENT", err)
	}
	if _, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{Portable: true, NumReplicas: 2}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("portable with 2 replicas: %v; want INVALID_ARGUMENT", err)
	}
}

func TestWrongDeviceBufferIsTyped(t *testing.T) {
	c := cpu(t)
	devs := devices(t, c)
	ctx := context.Background()
	exe, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{DeviceAssignment: [][]int{{devs[0].ID()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Destroy()
	bx := upload(t, c, devs[1], []int64{2, 2}, 1, 2, 3, 4)
	by := upload(t, c, devs[1], []int64{2, 2}, 1, 2, 3, 4)
	defer bx.Destroy()
	defer by.Destroy()
	out, err := exe.Execute(ctx, [][]*Buffer{{bx, by}}, nil)
	if err == nil {
		for _, b := range out[0] {
			b.Destroy()
		}
		t.Fatal("executing with buffers on the wrong device succeeded")
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Code == CodeOK || pe.Message == "" {
		t.Fatalf("error %#v is not a typed plugin error", err)
	}
	t.Logf("wrong device: %v", err)
}

func TestCancelledContext(t *testing.T) {
	c := cpu(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{}); !errors.Is(err, context.Canceled) || CodeOf(err) != CodeCancelled {
		t.Errorf("Compile with a cancelled context: %v; want context.Canceled", err)
	}
}

func TestCPUTopology(t *testing.T) {
	c := cpu(t)
	topo, err := c.Topology()
	if err != nil {
		t.Logf("client topology: %v", err)
	} else {
		name, _ := topo.PlatformName()
		descs, err := topo.DeviceDescriptions()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("client topology: platform %q, %d devices", name, len(descs))
		if len(descs) != numCPUDevices {
			t.Errorf("topology has %d devices, client %d", len(descs), numCPUDevices)
		}
		topo.Destroy() // owned by the client: must be a no-op
		if _, err := c.PlatformName(); err != nil {
			t.Errorf("client broken after Destroy of its topology: %v", err)
		}
	}
	_, err = c.Plugin().NewTopology(context.Background(), "cpu", nil)
	t.Logf("CPU plugin PJRT_TopologyDescription_Create: %v", err)
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "pjrt_c_api_garbage_plugin.so")
	junk := make([]byte, 4096)
	if _, err := rand.Read(junk); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, junk, 0o755); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.so")
	if err := os.WriteFile(empty, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	var libm string // a real shared library without GetPjrtApi
	for _, p := range []string{"/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6", "/lib64/libm.so.6"} {
		if _, err := os.Stat(p); err == nil {
			libm = p
			break
		}
	}
	cases := []struct {
		path   string
		wantOp string
	}{
		{garbage, "dlopen"},
		{empty, "dlopen"},
		{filepath.Join(dir, "missing.so"), "open"},
		{dir, "open"},
	}
	if libm != "" {
		cases = append(cases, struct {
			path   string
			wantOp string
		}{libm, "dlsym GetPjrtApi"})
	}
	for _, tc := range cases {
		p, err := Load(tc.path)
		var le *LoadError
		if !errors.As(err, &le) {
			t.Errorf("Load(%s) = %v, %v; want a *LoadError", tc.path, p, err)
			continue
		}
		if le.Op != tc.wantOp || le.Path != tc.path {
			t.Errorf("Load(%s): op %q path %q; want op %q", tc.path, le.Op, le.Path, tc.wantOp)
		}
		t.Logf("%v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.so")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v; want fs.ErrNotExist", err)
	}
}

func TestPluginTooOld(t *testing.T) {
	c := cpu(t)
	// A plugin whose PJRT_Api ends right before PJRT_Compile (offset 752),
	// as one built from a header older than that function would.
	old := *c.Plugin()
	old.apiSize = 752
	_, err := old.fn(fnCompile)
	if !errors.Is(err, ErrPluginTooOld) || !strings.Contains(err.Error(), "too old for PJRT_Compile") {
		t.Errorf("fn(PJRT_Compile) on a short table: %v; want ErrPluginTooOld naming PJRT_Compile", err)
	}
	if _, err := old.fn(fnTopologyDescriptionAttributes); err != nil { // offset 744: still inside
		t.Errorf("fn(PJRT_TopologyDescription_Attributes) at offset 744: %v", err)
	}
	old.fns[fnExecutableName] = 0 // inside the table but NULL
	if _, err := old.fn(fnExecutableName); !errors.Is(err, ErrUnimplemented) {
		t.Errorf("NULL entry: %v; want UNIMPLEMENTED", err)
	}
}
