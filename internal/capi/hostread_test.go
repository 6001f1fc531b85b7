package capi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestDenseRowMajor(t *testing.T) {
	cases := []struct {
		name  string
		m2m   []int64
		rank  int
		tiles uintptr
		typ   int32
		want  bool
	}{
		{"scalar", nil, 0, 0, 0, true},
		{"vector", []int64{0}, 1, 0, 0, true},
		{"row-major 3-D", []int64{2, 1, 0}, 3, 0, 0, true},
		{"column-major 2-D", []int64{0, 1}, 2, 0, 0, false},
		{"channels-last permutation", []int64{1, 3, 2, 0}, 4, 0, 0, false},
		{"tiled", []int64{1, 0}, 2, 1, 0, false},
		{"strides type", []int64{1, 0}, 2, 0, 1, false},
		{"rank mismatch", []int64{1, 0}, 3, 0, 0, false},
	}
	for _, c := range cases {
		if got := denseRowMajor(c.typ, c.tiles, c.m2m, c.rank); got != c.want {
			t.Errorf("%s: denseRowMajor = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestGetMemoryLayoutArgsLayout checks the argument struct against
// pjrt_c_api.h: PJRT_Buffer_MemoryLayout is 80 bytes (a 56-byte union of
// the tiled and strided descriptions after struct_size and
// extension_start, then a 4-byte enum and padding), and the layout field
// of PJRT_Buffer_GetMemoryLayout_Args starts at byte 24.
func TestGetMemoryLayoutArgsLayout(t *testing.T) {
	if s := reflect.TypeFor[cBufferMemoryLayout]().Size(); s != 80 {
		t.Errorf("PJRT_Buffer_MemoryLayout is %d bytes, want 80", s)
	}
	if f, _ := reflect.TypeFor[cBufferGetMemoryLayoutArgs]().FieldByName("layout"); f.Offset != 24 {
		t.Errorf("layout at %d, want 24", f.Offset)
	}
	if s := structSizeOf[cBufferGetMemoryLayoutArgs](); s != 104 {
		t.Errorf("struct_size %d, want 104", s)
	}
	if s := structSizeOf[cBufferIsOnCpuArgs](); s != 25 {
		t.Errorf("PJRT_Buffer_IsOnCpu_Args struct_size %d, want 25", s)
	}
}

// TestReadInPlace checks that the CPU plugin's buffers are read where they
// lie (the path ToHost takes for them) and give the bytes uploaded.
func TestReadInPlace(t *testing.T) {
	c := cpu(t)
	devs := devices(t, c)
	ctx := context.Background()
	for _, tc := range []struct {
		typ  ElementType
		dims []int64
		data []byte
	}{
		{F32, []int64{2, 3}, f32(1, -2, 3.5, 0, 1e-30, 65504)},
		{F32, nil, f32(42)},
		{S64, []int64{3}, Bytes([]int64{-1 << 62, 7, 0})},
		{U8, []int64{2, 2, 2}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
	} {
		buf, err := c.BufferFromHost(ctx, devs[0], tc.typ, tc.dims, tc.data, ImmutableOnlyDuringCall)
		if err != nil {
			t.Fatal(err)
		}
		h, err := buf.handle("test")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(tc.data))
		ok, err := buf.readInPlace(ctx, h, got)
		if err != nil || !ok {
			t.Errorf("%v %v: readInPlace = %v, %v; want a read in place", tc.typ, tc.dims, ok, err)
		} else if !reflect.DeepEqual(got, tc.data) {
			t.Errorf("%v %v: read %v, want %v", tc.typ, tc.dims, got, tc.data)
		}
		// A destination of the wrong size is left to ToHost's check.
		if ok, _ := buf.readInPlace(ctx, h, make([]byte, len(tc.data)+1)); ok {
			t.Errorf("%v %v: read in place into a destination of the wrong size", tc.typ, tc.dims)
		}
		if err := buf.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadInPlaceWhileDestroyed reads a buffer from several goroutines
// while another destroys it: every read gives the uploaded bytes or
// ErrClosed, never freed memory.
func TestReadInPlaceWhileDestroyed(t *testing.T) {
	c := cpu(t)
	devs := devices(t, c)
	ctx := context.Background()
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i % 251)
	}
	for round := range 20 {
		buf, err := c.BufferFromHost(ctx, devs[0], U8, []int64{int64(len(want))}, want, ImmutableOnlyDuringCall)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 4)
		for range 4 {
			go func() {
				got := make([]byte, len(want))
				for range 5 {
					err := buf.ToHost(ctx, got)
					if errors.Is(err, ErrClosed) {
						break
					}
					if err != nil {
						errc <- err
						return
					}
					if !bytes.Equal(got, want) {
						errc <- fmt.Errorf("round %d: read bytes differ from the upload", round)
						return
					}
				}
				errc <- nil
			}()
		}
		if err := buf.Destroy(); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCloseDefersForAbandonedExecution gives up waiting for a long
// execution (its context ends) and closes the client at once: Close must
// return without waiting for the plugin, and the client must be destroyed
// only when the execution ends, not under it (which crashed the process 2
// times in 3 before commit 40244f3). Fault injected: with the Execute's
// hold removed, the process crashed; with Close waiting (the commit's
// RWMutex), the check that Close returned while the execution still held
// the client failed.
func TestCloseDefersForAbandonedExecution(t *testing.T) {
	cpu(t) // skips without the plugin
	path, err := FindPlugin("cpu")
	if err != nil {
		t.Skip(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	const prog = `func.func public @main(%a: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %0 = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %1 = stablehlo.dot_general %0, %a, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %2 = stablehlo.dot_general %1, %a, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  return %2 : tensor<1024x1024xf32>
}`
	exercised := 0
	for _, async := range []bool{false, true} {
		c, err := p.NewClient(context.Background(), []NamedValue{{OptAsynchronous, async}})
		if err != nil {
			t.Fatal(err)
		}
		devs, err := c.AddressableDevices()
		if err != nil {
			t.Fatal(err)
		}
		exe, err := c.Compile(context.Background(), MLIR(prog), CompileOptions{DeviceAssignment: [][]int{{devs[0].ID()}}})
		if err != nil {
			t.Fatal(err)
		}
		a := make([]float32, 1024*1024)
		for i := range a {
			a[i] = float32(i%7) / 7
		}
		buf, err := c.BufferFromHost(context.Background(), devs[0], F32, []int64{1024, 1024}, Bytes(a), ImmutableOnlyDuringCall)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err = exe.Execute(ctx, [][]*Buffer{{buf}}, nil)
		cancel()
		if err == nil {
			t.Logf("async=%v: the execution finished within 1 ms; the race was not exercised", async)
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("async=%v: Execute: %v, want a deadline error", async, err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("async=%v: Close: %v", async, err)
		}
		n, closing := c.holders()
		if !closing {
			t.Fatalf("async=%v: the client is not marked closing after Close", async)
		}
		if n == 0 {
			t.Logf("async=%v: the execution ended before Close; the deferral was not exercised", async)
		} else if c.isDestroyed() {
			t.Fatalf("async=%v: the client was destroyed while an execution held it", async)
		} else {
			exercised++
		}
		// The execution's release destroys the client (after it let go of
		// its hold: wait for the destruction itself, not the count).
		for wait := 0; !c.isDestroyed(); wait++ {
			if wait == 60000 { // 10 minutes
				n, _ = c.holders()
				t.Fatalf("async=%v: the client is still alive, %d holders", async, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n, _ = c.holders(); n != 0 {
			t.Fatalf("async=%v: the client was destroyed with %d holders", async, n)
		}
	}
	if exercised == 0 {
		// Three 1024^3 products take seconds: an execution still running
		// when Close returns is what this test is about.
		t.Fatal("Close returned after every execution ended: it waited for them (or they ran within 1 ms)")
	}
}
