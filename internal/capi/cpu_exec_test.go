package capi

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// Compile-and-execute tests against the XLA CPU plugin: executing on one and
// two devices, serialization, donation, portable executables, concurrent
// use.

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
