package capi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
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

func TestCompileExecute(t *testing.T) {
	c := cpu(t)
	devs := devices(t, c)
	ctx := context.Background()
	exe, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	defer exe.Destroy()

	ex, err := exe.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ex.NumOutputs(); err != nil || n != 2 {
		t.Errorf("NumOutputs = %d, %v; want 2", n, err)
	}
	if ts, err := ex.OutputElementTypes(); err != nil || !reflect.DeepEqual(ts, []ElementType{F32, F32}) {
		t.Errorf("OutputElementTypes = %v, %v; want [f32 f32]", ts, err)
	}
	if ds, err := ex.OutputDims(); err != nil || !reflect.DeepEqual(ds, [][]int64{{2, 2}, {2, 2}}) {
		t.Errorf("OutputDims = %v, %v; want [[2 2] [2 2]]", ds, err)
	}
	if name, err := ex.Name(); err != nil || name != "add_dot" {
		t.Errorf("Name = %q, %v; want add_dot (the module name)", name, err)
	}
	if r, err := ex.NumReplicas(); err != nil || r != 1 {
		t.Errorf("NumReplicas = %d, %v", r, err)
	}
	if kinds, err := ex.OutputMemoryKinds(); errors.Is(err, ErrUnimplemented) { // XLA CPU plugin at API 0.81
		t.Logf("output memory kinds: %v", err)
	} else if err != nil || !reflect.DeepEqual(kinds, []string{"device", "device"}) {
		t.Errorf("OutputMemoryKinds = %v, %v", kinds, err)
	}
	ms, err := ex.CompiledMemoryStats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compiled memory stats: %+v", ms)
	// Two 2×2 f32 arguments are 32 bytes; two 2×2 f32 outputs at least 32.
	if ms.Argument != 32 || ms.Output < 32 {
		t.Errorf("argument %d bytes (want 32), output %d (want ≥ 32)", ms.Argument, ms.Output)
	}
	cost, err := ex.CostAnalysis()
	switch {
	case errors.Is(err, ErrUnimplemented): // the XLA CPU plugin's answer
		t.Logf("cost analysis: %v", err)
	case err != nil:
		t.Fatal(err)
	default:
		t.Logf("cost analysis: %v", cost)
		// HloCostAnalysis counts 4 flops for the add and 2·2·2·2 = 16 for the dot.
		if f, ok := Lookup(cost, "flops").(float32); ok && f != 20 {
			t.Errorf("flops = %v; want 20", f)
		}
	}
	if sz, err := ex.SizeOfGeneratedCode(); err != nil || sz < 0 {
		t.Errorf("SizeOfGeneratedCode = %d, %v", sz, err)
	}

	x, y := [4]float32{1, 2, 3, 4}, [4]float32{5, 6, 7, 8}
	ad, err := exe.AddressableDevices()
	if err != nil || len(ad) != 1 {
		t.Fatalf("AddressableDevices = %v, %v; want one device", ad, err)
	}
	bx := upload(t, c, ad[0], []int64{2, 2}, x[:]...)
	by := upload(t, c, ad[0], []int64{2, 2}, y[:]...)
	defer bx.Destroy()
	defer by.Destroy()
	out, err := exe.Execute(ctx, [][]*Buffer{{bx, by}}, nil)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if len(out) != 1 || len(out[0]) != 2 {
		t.Fatalf("outputs %v; want 1 device × 2", out)
	}
	wantSum, wantDot := addDotWant(x, y)
	if got := toF32(t, out[0][0]); !reflect.DeepEqual(got, wantSum) {
		t.Errorf("x+y = %v, want %v", got, wantSum)
	}
	if got := toF32(t, out[0][1]); !reflect.DeepEqual(got, wantDot) {
		t.Errorf("x·y = %v, want %v", got, wantDot)
	}
	for _, b := range out[0] {
		if d, _ := b.Device(); d != ad[0] {
			t.Errorf("output on %v, want %v", d, ad[0])
		}
		b.Destroy()
	}
	_ = devs

	t.Run("argument count mismatch", func(t *testing.T) {
		_, err := exe.Execute(ctx, [][]*Buffer{{bx}}, nil)
		var pe *Error
		if !errors.As(err, &pe) {
			t.Fatalf("error %v is not a *Error", err)
		}
		t.Logf("one argument for two parameters: %v", err)
	})
}

func TestExecuteOnTwoDevices(t *testing.T) {
	c := cpu(t)
	devs := devices(t, c)
	ctx := context.Background()
	assign := [][]int{{devs[1].ID()}, {devs[0].ID()}} // replica 0 on device 1, replica 1 on device 0
	exe, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{NumReplicas: 2, DeviceAssignment: assign})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	defer exe.Destroy()
	ad, err := exe.AddressableDevices()
	if err != nil || len(ad) != 2 {
		t.Fatalf("AddressableDevices = %v, %v", ad, err)
	}
	got, err := exe.DeviceAssignment()
	if err != nil {
		t.Fatal(err)
	}
	if want := (DeviceAssignment{Replicas: 2, Partitions: 1, Devices: assign}); !reflect.DeepEqual(got, want) {
		t.Errorf("DeviceAssignment = %+v, want %+v", got, want)
	}
	inputs := [][2][4]float32{{{1, 2, 3, 4}, {5, 6, 7, 8}}, {{-1, 0, 2, 9}, {3, 3, -4, 1}}}
	args := make([][]*Buffer, 2)
	for d := range args {
		args[d] = []*Buffer{
			upload(t, c, ad[d], []int64{2, 2}, inputs[d][0][:]...),
			upload(t, c, ad[d], []int64{2, 2}, inputs[d][1][:]...),
		}
		defer args[d][0].Destroy()
		defer args[d][1].Destroy()
	}
	out, err := exe.Execute(ctx, args, &ExecuteOptions{LaunchID: 7})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	for d := range out {
		wantSum, wantDot := addDotWant(inputs[d][0], inputs[d][1])
		if g := toF32(t, out[d][0]); !reflect.DeepEqual(g, wantSum) {
			t.Errorf("device %v: x+y = %v, want %v", ad[d], g, wantSum)
		}
		if g := toF32(t, out[d][1]); !reflect.DeepEqual(g, wantDot) {
			t.Errorf("device %v: x·y = %v, want %v", ad[d], g, wantDot)
		}
		for _, b := range out[d] {
			if dev, _ := b.Device(); dev != ad[d] {
				t.Errorf("output of list %d on %v, want %v", d, dev, ad[d])
			}
			b.Destroy()
		}
	}
}

func TestSerializeDeserialize(t *testing.T) {
	c := cpu(t)
	ctx := context.Background()
	exe, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blob, err := exe.Serialize()
	if err != nil {
		t.Fatalf("Serialize: %v", err)
	}
	if err := exe.Destroy(); err != nil {
		t.Fatal(err)
	}
	t.Logf("serialized executable: %d bytes", len(blob))
	back, err := c.DeserializeAndLoad(ctx, blob, nil)
	if err != nil {
		t.Fatalf("DeserializeAndLoad: %v", err)
	}
	defer back.Destroy()
	ad, err := back.AddressableDevices()
	if err != nil || len(ad) != 1 {
		t.Fatalf("AddressableDevices = %v, %v", ad, err)
	}
	x, y := [4]float32{2, -3, 5, 7}, [4]float32{11, 13, -17, 19}
	bx := upload(t, c, ad[0], []int64{2, 2}, x[:]...)
	by := upload(t, c, ad[0], []int64{2, 2}, y[:]...)
	defer bx.Destroy()
	defer by.Destroy()
	out, err := back.Execute(ctx, [][]*Buffer{{bx, by}}, nil)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	wantSum, wantDot := addDotWant(x, y)
	if g := toF32(t, out[0][0]); !reflect.DeepEqual(g, wantSum) {
		t.Errorf("x+y = %v, want %v", g, wantSum)
	}
	if g := toF32(t, out[0][1]); !reflect.DeepEqual(g, wantDot) {
		t.Errorf("x·y = %v, want %v", g, wantDot)
	}
	out[0][0].Destroy()
	out[0][1].Destroy()

	if _, err := c.DeserializeAndLoad(ctx, []byte("not an executable"), nil); err == nil {
		t.Error("DeserializeAndLoad of garbage succeeded")
	} else if CodeOf(err) == CodeOK || CodeOf(err) == CodeUnknown && !strings.Contains(err.Error(), "PJRT_Executable_DeserializeAndLoad") {
		t.Errorf("garbage: untyped error %v", err)
	} else {
		t.Logf("garbage executable: %v", err)
	}
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

func TestDonation(t *testing.T) {
	c := cpu(t)
	dev := devices(t, c)[0]
	ctx := context.Background()
	// tf.aliasing_output = 0 lets the runtime reuse %x's memory for output 0.
	const prog = `module @donate {
  func.func public @main(%x: tensor<4xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4xf32> {
    %c = stablehlo.constant dense<1.0> : tensor<4xf32>
    %0 = stablehlo.add %x, %c : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}`
	exe, err := c.Compile(ctx, MLIR(prog), CompileOptions{DeviceAssignment: [][]int{{dev.ID()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Destroy()
	for _, tc := range []struct {
		name        string
		opts        *ExecuteOptions
		wantDeleted bool
	}{
		{"donated", nil, true},
		{"kept with non_donatable_input_indices", &ExecuteOptions{NonDonatable: []int{0}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := upload(t, c, dev, []int64{4}, 1, 2, 3, 4)
			defer in.Destroy()
			out, err := exe.Execute(ctx, [][]*Buffer{{in}}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer out[0][0].Destroy()
			if g := toF32(t, out[0][0]); !reflect.DeepEqual(g, []float32{2, 3, 4, 5}) {
				t.Errorf("x+1 = %v", g)
			}
			deleted, err := in.IsDeleted()
			if err != nil {
				t.Fatal(err)
			}
			if deleted != tc.wantDeleted {
				t.Errorf("input deleted = %v, want %v", deleted, tc.wantDeleted)
			}
			if !deleted {
				if g := toF32(t, in); !reflect.DeepEqual(g, []float32{1, 2, 3, 4}) {
					t.Errorf("kept input now holds %v", g)
				}
			}
		})
	}
	in := upload(t, c, dev, []int64{4}, 1, 2, 3, 4)
	defer in.Destroy()
	if _, err := exe.Execute(ctx, [][]*Buffer{{in}}, &ExecuteOptions{NonDonatable: []int{1}}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("non-donatable index out of range: %v; want INVALID_ARGUMENT", err)
	}
}

func TestPortableExecutableOnChosenDevice(t *testing.T) {
	c := cpu(t)
	devs := devices(t, c)
	ctx := context.Background()
	exe, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{Portable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Destroy()
	dev := devs[len(devs)-1]
	x, y := [4]float32{1, 1, 1, 1}, [4]float32{2, 0, 0, 2}
	bx := upload(t, c, dev, []int64{2, 2}, x[:]...)
	by := upload(t, c, dev, []int64{2, 2}, y[:]...)
	defer bx.Destroy()
	defer by.Destroy()
	out, err := exe.Execute(ctx, [][]*Buffer{{bx, by}}, &ExecuteOptions{Device: dev})
	if err != nil {
		t.Fatalf("Execute on %v: %v", dev, err)
	}
	wantSum, wantDot := addDotWant(x, y)
	if g := toF32(t, out[0][0]); !reflect.DeepEqual(g, wantSum) {
		t.Errorf("x+y = %v, want %v", g, wantSum)
	}
	if g := toF32(t, out[0][1]); !reflect.DeepEqual(g, wantDot) {
		t.Errorf("x·y = %v, want %v", g, wantDot)
	}
	if d, _ := out[0][0].Device(); d != dev {
		t.Errorf("output on %v, want %v", d, dev)
	}
	out[0][0].Destroy()
	out[0][1].Destroy()
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

func TestConcurrentUse(t *testing.T) {
	c := cpu(t)
	devs := devices(t, c)
	ctx := context.Background()
	exe, err := c.Compile(ctx, MLIR(progAddDot), CompileOptions{Portable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Destroy()
	var wg sync.WaitGroup
	errs := make(chan error, len(devs))
	for g, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				x := [4]float32{float32(g), float32(i), 1, 2}
				y := [4]float32{3, 4, float32(g * i), 5}
				bx, err := c.BufferFromHost(ctx, dev, F32, []int64{2, 2}, f32(x[:]...), ImmutableUntilTransferCompletes)
				if err != nil {
					errs <- err
					return
				}
				by, err := c.BufferFromHost(ctx, dev, F32, []int64{2, 2}, f32(y[:]...), ImmutableOnlyDuringCall)
				if err != nil {
					errs <- err
					return
				}
				out, err := exe.Execute(ctx, [][]*Buffer{{bx, by}}, &ExecuteOptions{Device: dev})
				if err != nil {
					errs <- err
					return
				}
				raw, err := out[0][1].ToHostBytes(ctx)
				if err != nil {
					errs <- err
					return
				}
				_, wantDot := addDotWant(x, y)
				if got, _ := FromBytes[float32](raw); !reflect.DeepEqual(got, wantDot) {
					errs <- fmt.Errorf("goroutine %d iteration %d: x·y = %v, want %v", g, i, got, wantDot)
					return
				}
				for _, b := range []*Buffer{bx, by, out[0][0], out[0][1]} {
					if err := b.Destroy(); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
