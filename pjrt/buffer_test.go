package pjrt

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/x448/float16"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/capi"
	"github.com/tensorbridge/tensorbridge/pjrt/lower"
)

// TestBufferRoundTrip copies every dtype to a device and back.
func TestBufferRoundTrip(t *testing.T) {
	eng := cpuEngine(t)
	for _, x := range []in{
		vec([]bool{true, false, true}),
		vec([]int8{-128, 0, 127}), vec([]int16{-32768, 1}), vec([]int32{-1, 1 << 30}), vec([]int64{-1 << 62, 3}),
		vec([]uint8{0, 255}), vec([]uint16{65535}), vec([]uint32{1 << 31}), vec([]uint64{1 << 63}),
		vec([]float16.Float16{float16.Fromfloat32(1.5), float16.Fromfloat32(-65504)}),
		vec([]bfloat16.BFloat16{bfloat16.FromFloat32(-2), bfloat16.FromFloat32(0.5)}),
		mat(f32s(1, 2, 3, 4, 5, 6), 2, 3), vec([]float64{1e300, -1e-300}),
		vec([]complex64{complex(1, -1)}), vec([]complex128{complex(2, 3)}),
		mat(f32s(), 0, 4), scalar(int32(7)),
	} {
		s := x.shape()
		t.Run(s.String(), func(t *testing.T) {
			bufs := upload(t, eng, 1%eng.NumDevices(), x)
			if dev, err := eng.BufferDeviceNum(bufs[0]); err != nil || int(dev) != 1%eng.NumDevices() {
				t.Errorf("BufferDeviceNum = %d, %v", dev, err)
			}
			got := download(t, eng, bufs)[0]
			checkOut(t, got, x, 0)
		})
	}
}

// TestBufferThroughProgram checks half-precision values survive a program.
func TestBufferThroughProgram(t *testing.T) {
	eng := cpuEngine(t)
	h := vec([]float16.Float16{float16.Fromfloat32(1.5), float16.Fromfloat32(-2)})
	bf := vec([]bfloat16.BFloat16{bfloat16.FromFloat32(0.25), bfloat16.FromFloat32(8)})
	outs := run(t, eng, "halves", func(b *Builder, p []op) ([]op, error) {
		x, _ := b.Add(p[0], p[0])
		y, err := b.Mul(p[1], p[1])
		return []op{x, y}, err
	}, h, bf)
	checkOut(t, outs[0], vec([]float16.Float16{float16.Fromfloat32(3), float16.Fromfloat32(-4)}), 0)
	checkOut(t, outs[1], vec([]bfloat16.BFloat16{bfloat16.FromFloat32(0.0625), bfloat16.FromFloat32(64)}), 0)
}

func TestBufferErrors(t *testing.T) {
	eng := cpuEngine(t)
	ctx := context.Background()
	f4 := shapes.Make(dtypes.Float32, 4)
	if _, err := eng.BufferFromFlatData(0, []int32{1, 2, 3, 4}, f4); err == nil {
		t.Error("int32 data for a float32 shape accepted")
	}
	if _, err := eng.BufferFromFlatData(0, f32s(1, 2), f4); err == nil {
		t.Error("2 elements for a 4-element shape accepted")
	}
	if _, err := eng.BufferFromFlatData(0, float32(1), shapes.Make(dtypes.Float32)); err == nil {
		t.Error("a non-slice accepted")
	}
	if _, err := eng.BufferFromFlatData(9, f32s(1, 2, 3, 4), f4); err == nil {
		t.Error("device 9 accepted")
	}
	buf, err := eng.BufferFromFlatData(0, f32s(1, 2, 3, 4), f4)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.BufferToFlatData(buf, make([]float32, 3)); err == nil {
		t.Error("reading into a short slice accepted")
	}
	if err := eng.BufferToFlatData(buf, make([]float64, 4)); err == nil {
		t.Error("reading into a float64 slice accepted")
	}
	if _, err := eng.BufferCopyToDevice(buf, 0); err == nil {
		t.Error("copy to the same device accepted")
	}
	if eng.NumDevices() > 1 {
		cp, err := eng.BufferCopyToDevice(buf, 1)
		if err != nil {
			t.Fatal(err)
		}
		if dev, _ := eng.BufferDeviceNum(cp); dev != 1 {
			t.Errorf("copy on device %d", dev)
		}
		checkOut(t, download(t, eng, []backends.Buffer{cp})[0], vec(f32s(1, 2, 3, 4)), 0)
	}
	if _, _, err := eng.NewSharedBuffer(0, f4); !errors.Is(err, errs.ErrUnsupported) || eng.HasSharedBuffers() {
		t.Errorf("shared buffers: HasSharedBuffers %v, NewSharedBuffer error %v", eng.HasSharedBuffers(), err)
	}
	if _, err := eng.BufferData(buf); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("BufferData: %v", err)
	}
	if err := eng.BufferFinalize(buf); err != nil {
		t.Fatal(err)
	}
	if err := eng.BufferFinalize(buf); err != nil {
		t.Errorf("second finalize: %v", err)
	}
	if _, err := eng.BufferShape(buf); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("shape of a finalized buffer: %v", err)
	}
	if _, err := eng.BufferShape("not a buffer"); err == nil {
		t.Error("a string accepted as a buffer")
	}
	_ = ctx
}

func TestExecuteErrors(t *testing.T) {
	eng := cpuEngine(t)
	exe := compileOn(t, eng, "sum", bin((*Builder).Add), vec(f32s(1, 2)), vec(f32s(1, 2)))
	x := upload(t, eng, 0, vec(f32s(1, 2)))
	var ie *errs.InputError
	if _, err := exe.Execute(x, nil, 0); !errors.As(err, &ie) || ie.Problem != "count" {
		t.Errorf("one input for two: %v", err)
	}
	wrongShape := upload(t, eng, 0, vec(f32s(1, 2)), vec(f32s(1, 2, 3)))
	if _, err := exe.Execute(wrongShape, nil, 0); !errors.As(err, &ie) || ie.Problem != "shape" || !strings.Contains(ie.Name, "#1") {
		t.Errorf("wrong shape: %v", err)
	}
	wrongDType := upload(t, eng, 0, vec(f32s(1, 2)), vec([]int32{1, 2}))
	if _, err := exe.Execute(wrongDType, nil, 0); !errors.As(err, &ie) || ie.Problem != "dtype" {
		t.Errorf("wrong dtype: %v", err)
	}
	if _, err := exe.Execute(append(x, x[0]), []bool{true}, 0); !errors.As(err, &ie) {
		t.Errorf("wrong donate count: %v", err)
	}
	if _, err := exe.Execute(append(x, x[0]), nil, 7); err == nil {
		t.Error("default device 7 accepted")
	}
	exe.Finalize()
	if _, err := exe.Execute(append(x, x[0]), nil, 0); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("execute after Finalize: %v", err)
	}
	if _, err := exe.Serialize(); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("serialize after Finalize: %v", err)
	}
}

// TestCompileError hands the plugin a program it cannot parse.
func TestCompileError(t *testing.T) {
	eng := cpuEngine(t)
	prog := &lower.Program{Name: "broken", Text: []byte("module @broken { func.func @main( }"), NumReplicas: 1, NumPartitions: 1}
	_, err := eng.CompileProgram(context.Background(), prog)
	var ce *errs.CompileError
	if !errors.As(err, &ce) || !errors.Is(err, errs.ErrCompileFailed) {
		t.Fatalf("got %T %v, want *errs.CompileError", err, err)
	}
	var pe *capi.Error
	if ce.Program != "broken" || ce.Backend != "xla-cpu" || !errors.As(err, &pe) || pe.Message == "" {
		t.Errorf("compile error lacks the program, backend or plugin message: %+v", ce)
	}
}

// TestWrap checks how binding errors are classified.
func TestWrap(t *testing.T) {
	oomErr := &capi.Error{Code: capi.CodeResourceExhausted, Func: "PJRT_Client_BufferFromHostBuffer", Message: "Out of memory allocating 4 GiB"}
	err := wrap("tpu", "buffer from host", "tpu device #0", "placing a (Float32)[1 1073741824] array", oomErr)
	var oom *errs.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, errs.ErrOutOfMemory) || oom.Device != "tpu device #0" || !errors.Is(err, capi.ErrResourceExhausted) {
		t.Errorf("RESOURCE_EXHAUSTED: %T %v", err, err)
	}
	if !strings.Contains(err.Error(), "Out of memory allocating 4 GiB") {
		t.Errorf("plugin message lost: %v", err)
	}
	for _, tc := range []struct {
		code capi.Code
		kind errs.Kind
	}{
		{capi.CodeInvalidArgument, errs.InvalidArgument},
		{capi.CodeUnimplemented, errs.Unimplemented},
		{capi.CodeUnavailable, errs.Unavailable},
		{capi.CodeInternal, errs.Internal},
		{capi.CodeNotFound, errs.NotFound},
		{capi.CodeFailedPrecondition, errs.FailedPrecondition},
	} {
		err := wrap("cuda", "execute", "", "", &capi.Error{Code: tc.code, Message: "m", Func: "f"})
		if got := errs.KindOf(err); got != tc.kind {
			t.Errorf("%s: kind %s, want %s", tc.code, got, tc.kind)
		}
	}
	if err := wrap("x", "op", "", "", context.DeadlineExceeded); err != context.DeadlineExceeded {
		t.Errorf("context error rewrapped: %v", err)
	}
	if err := wrap("x", "op", "", "", errors.Join(errors.New("a"), capi.ErrClosed)); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("closed error: %v", err)
	}
	if err := compileError("tpu", "p", oomErr); !errors.As(err, &oom) {
		t.Errorf("compile RESOURCE_EXHAUSTED: %T %v", err, err)
	}
}

// TestCapabilities checks every op of GoMLX's Builder interface is listed.
func TestCapabilities(t *testing.T) {
	c := Capabilities()
	for _, op := range []backends.OpType{backends.OpTypeAllReduce, backends.OpTypeFFT, backends.OpTypeSelectAndScatterMax,
		backends.OpTypeBatchNormGradient, backends.OpTypeRNGBitGenerator, backends.OpTypeEqualTotalOrder, backends.OpTypeDynamicUpdateSlice} {
		if !c.Operations[op] {
			t.Errorf("%s not listed", op)
		}
	}
	if c.Operations[backends.OpTypeAllGather] {
		t.Error("AllGather listed, but GoMLX v0.26.0 has no Builder method for it")
	}
	for _, dt := range []dtypes.DType{dtypes.Bool, dtypes.Float16, dtypes.BFloat16, dtypes.Complex128, dtypes.Uint64} {
		if !c.DTypes[dt] {
			t.Errorf("%s not listed", dt)
		}
	}
}
