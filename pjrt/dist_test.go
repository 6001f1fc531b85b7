package pjrt

import (
	"bytes"
	"context"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/pjrt/lower"
)

func needDevices(t *testing.T, eng *Engine, n int) {
	t.Helper()
	if eng.NumDevices() < n {
		testreq.Skipf(t, "the XLA CPU client has %d device(s), the test needs %d", eng.NumDevices(), n)
	}
}

// TestSPMDAllReduce runs one replica per host device: each adds its own
// input into an all-reduce, so both get the element-wise sum.
func TestSPMDAllReduce(t *testing.T) {
	eng := cpuEngine(t)
	needDevices(t, eng, 2)
	for _, assign := range [][]backends.DeviceNum{{0, 1}, {1, 0}} {
		b := eng.Builder("spmd").(*Builder)
		if err := b.DistributedSPMD(2); err != nil {
			t.Fatal(err)
		}
		if err := b.DeviceAssignment(assign...); err != nil {
			t.Fatal(err)
		}
		x, _ := b.Parameter("x", shapes.Make(dtypes.Float32, 2), nil)
		n, _ := b.Parameter("n", shapes.Make(dtypes.Int32), nil)
		sums, err := b.AllReduce([]op{x, n}, backends.ReduceOpSum, [][]int{{0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		mx, err := b.AllReduce([]op{n}, backends.ReduceOpMax, [][]int{{0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		exe, err := b.Compile(append(sums, mx...), nil)
		if err != nil {
			t.Fatal(err)
		}
		// Inputs are device-major in assignment order: replica 0 then 1.
		in0 := upload(t, eng, int(assign[0]), vec(f32s(1, 2)), scalar(int32(5)))
		in1 := upload(t, eng, int(assign[1]), vec(f32s(10, 20)), scalar(int32(-3)))
		res, err := exe.Execute(append(in0, in1...), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 6 {
			t.Fatalf("%d outputs, want 3 per replica", len(res))
		}
		for r := range 2 {
			dev, err := eng.BufferDeviceNum(res[r*3])
			if err != nil {
				t.Fatal(err)
			}
			if dev != assign[r] {
				t.Errorf("assignment %v: replica %d output on device %d", assign, r, dev)
			}
		}
		outs := download(t, eng, res)
		for r := range 2 {
			checkOut(t, outs[r*3], vec(f32s(11, 22)), 0)
			checkOut(t, outs[r*3+1], scalar(int32(2)), 0)
			checkOut(t, outs[r*3+2], scalar(int32(5)), 0)
		}
		exe.Finalize()
	}
}

// TestAutoSharding partitions a program over two host devices with Shardy:
// x is split along its only axis, each device holding half.
func TestAutoSharding(t *testing.T) {
	eng := cpuEngine(t)
	needDevices(t, eng, 2)
	b := eng.Builder("shardy").(*Builder)
	if err := b.DistributedAutoSharding(backends.Mesh{Name: "mesh", AxesSizes: []int{2}, AxesNames: []string{"d"}}); err != nil {
		t.Fatal(err)
	}
	spec := &backends.ShardingSpec{Mesh: "mesh", Axes: [][]string{{"d"}}}
	x, err := b.Parameter("x", shapes.Make(dtypes.Float32, 4), spec)
	if err != nil {
		t.Fatal(err)
	}
	two, _ := b.Constant([]float32{2})
	y, _ := b.Mul(x, two)
	total, _ := b.ReduceSum(y)
	exe, err := b.Compile([]op{y, total}, []*backends.ShardingSpec{spec, {Mesh: "mesh"}})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	in0 := upload(t, eng, 0, vec(f32s(1, 2)))
	in1 := upload(t, eng, 1, vec(f32s(3, 4)))
	res, err := exe.Execute(append(in0, in1...), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	outs := download(t, eng, res)
	if len(outs) != 4 {
		t.Fatalf("%d outputs, want 2 per device", len(outs))
	}
	// y stays sharded: device 0 has 2*[1,2], device 1 has 2*[3,4]; the sum
	// 2*(1+2+3+4) is replicated.
	checkOut(t, outs[0], vec(f32s(2, 4)), 0)
	checkOut(t, outs[2], vec(f32s(6, 8)), 0)
	checkOut(t, outs[1], scalar(float32(20)), 0)
	checkOut(t, outs[3], scalar(float32(20)), 0)
}

// TestPortableOnOtherDevice runs a single-device program on device 1.
func TestPortableOnOtherDevice(t *testing.T) {
	eng := cpuEngine(t)
	needDevices(t, eng, 2)
	exe := compileOn(t, eng, "neg", un((*Builder).Neg), vec(f32s(1)))
	defer exe.Finalize()
	if !exe.Program().Portable() || !exe.CompileOptions().Portable {
		t.Fatal("single-device program is not portable")
	}
	in := upload(t, eng, 1, vec(f32s(1)))
	res, err := exe.Execute(in, []bool{true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if dev, _ := eng.BufferDeviceNum(res[0]); dev != 1 {
		t.Errorf("output on device %d, want 1", dev)
	}
	// The donated input is finalized.
	if _, err := eng.BufferShape(in[0]); err == nil {
		t.Error("donated input still usable")
	}
	checkOut(t, download(t, eng, res)[0], vec(f32s(-1)), 0)

	// An input on device 0 given for a run on device 1 is moved.
	in = upload(t, eng, 0, vec(f32s(4)))
	res, err = exe.Execute(in, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if dev, _ := eng.BufferDeviceNum(res[0]); dev != 1 {
		t.Errorf("output on device %d, want 1", dev)
	}
	checkOut(t, download(t, eng, res)[0], vec(f32s(-4)), 0)
	if _, err := eng.BufferShape(in[0]); err != nil {
		t.Errorf("non-donated input finalized: %v", err)
	}
}

// TestFixedDevice compiles a single-device program for device 1 only.
func TestFixedDevice(t *testing.T) {
	eng := cpuEngine(t)
	needDevices(t, eng, 2)
	b := eng.Builder("fixed").(*Builder)
	if err := b.DeviceAssignment(1); err != nil {
		t.Fatal(err)
	}
	x, _ := b.Parameter("x", shapes.Make(dtypes.Int32, 2), nil)
	y, _ := b.Add(x, x)
	exe, err := b.Compile([]op{y}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	res, err := exe.Execute(upload(t, eng, 1, vec([]int32{3, 4})), nil, 0) // defaultDevice ignored
	if err != nil {
		t.Fatal(err)
	}
	if dev, _ := eng.BufferDeviceNum(res[0]); dev != 1 {
		t.Errorf("output on device %d, want 1", dev)
	}
	checkOut(t, download(t, eng, res)[0], vec([]int32{6, 8}), 0)
}

// TestSerializeReload serializes a compiled program, loads it back and
// checks both give bit-identical results, and that the text is kept.
func TestSerializeReload(t *testing.T) {
	eng := cpuEngine(t)
	build := func(b *Builder, p []op) ([]op, error) {
		e, _ := b.Exp(p[0])
		d, _ := b.Dot(p[1], p[1])
		s, err := b.ReduceSum(e)
		return []op{e, d, s}, err
	}
	inputs := []in{vec(f32s(0.1, -0.7, 2.3)), mat(f32s(0.5, 1.25, -3, 7), 2, 2)}
	exe := compileOn(t, eng, "serialize", build, inputs...)
	defer exe.Finalize()
	blob, err := exe.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	if len(blob) == 0 {
		t.Fatal("empty serialization")
	}
	again, err := eng.LoadExecutable(context.Background(), exe.Program(), blob)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Finalize()
	if !bytes.Equal(again.StableHLO(), exe.StableHLO()) {
		t.Error("reloaded executable has a different program text")
	}
	if text, ok := StableHLO(again); !ok || !bytes.Contains(text, []byte("stablehlo.exponential")) {
		t.Errorf("StableHLO(reloaded) = %q, %v", text, ok)
	}
	resA, err := exe.Execute(upload(t, eng, 0, inputs...), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	resB, err := again.Execute(upload(t, eng, 0, inputs...), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := download(t, eng, resA), download(t, eng, resB)
	for i := range a {
		if err := sameValues(b[i].flat, a[i].flat, 0); err != nil {
			t.Errorf("output %d differs after reload: %v", i, err)
		}
	}
	if _, err := eng.LoadExecutable(context.Background(), exe.Program(), []byte("not an executable")); err == nil {
		t.Error("garbage accepted as a serialized executable")
	}
}

// TestCompileHook checks a hook sees the program and can reuse a
// serialized executable instead of compiling.
func TestCompileHook(t *testing.T) {
	eng := cpuEngine(t)
	cache := map[string][]byte{}
	compiles := 0
	eng.SetCompileHook(func(ctx context.Context, prog *lower.Program, compile func(context.Context) (*Executable, error)) (*Executable, error) {
		if blob, ok := cache[string(prog.Text)]; ok {
			return eng.LoadExecutable(ctx, prog, blob)
		}
		compiles++
		exe, err := compile(ctx)
		if err != nil {
			return nil, err
		}
		blob, err := exe.Serialize()
		if err != nil {
			return nil, err
		}
		cache[string(prog.Text)] = blob
		return exe, nil
	})
	defer eng.SetCompileHook(nil)
	for range 2 {
		outs := run(t, eng, "hooked", un((*Builder).Sqrt), vec(f32s(9, 16)))
		checkOut(t, outs[0], vec(f32s(3, 4)), 0)
	}
	if compiles != 1 || len(cache) != 1 {
		t.Errorf("%d compiles, %d cached programs; want 1 and 1", compiles, len(cache))
	}
}
