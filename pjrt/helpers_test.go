package pjrt

import (
	"context"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"math"
	"math/cmplx"
	"os"
	"reflect"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/x448/float16"

	"github.com/tensorbridge/tensorbridge/driver"
)

const installHint = "run scripts/install-plugins.sh xla-cpu"

// The tests share one XLA CPU client with two host devices: creating a
// client costs about a second and the plugin is loaded once per process.
var (
	cpuOnce    sync.Once
	cpuBackend *Backend
	cpuErr     error
)

func TestMain(m *testing.M) {
	if role := os.Getenv(clusterRoleEnv); role != "" {
		os.Exit(clusterWorker(role))
	}
	code := m.Run()
	if cpuBackend != nil {
		_ = cpuBackend.Close()
	}
	os.Exit(code)
}

// cpuEngine returns the shared XLA CPU engine (2 devices), or skips the
// test when the plugin is not installed.
func cpuEngine(t testing.TB) *Engine {
	t.Helper()
	d := &Driver{Kind: Kinds[0]}
	if _, err := d.FindPlugin(); err != nil {
		testreq.Skipf(t, "XLA CPU plugin not installed (%s): %v", installHint, err)
	}
	cpuOnce.Do(func() {
		b, err := d.Open(context.Background(), &driver.Options{Config: "devices=2", MemoryFraction: 0.9})
		if err != nil {
			cpuErr = err
			return
		}
		cpuBackend = b.(*Backend)
	})
	if cpuErr != nil {
		t.Fatalf("opening xla-cpu: %v", cpuErr)
	}
	return cpuBackend.eng
}

// in is a test input: a flat slice and its dimensions.
type in struct {
	flat any
	dims []int
}

func vec(flat any) in { return in{flat, []int{reflect.ValueOf(flat).Len()}} }

func scalar(v any) in {
	s := reflect.MakeSlice(reflect.SliceOf(reflect.TypeOf(v)), 1, 1)
	s.Index(0).Set(reflect.ValueOf(v))
	return in{s.Interface(), nil}
}

func mat(flat any, dims ...int) in { return in{flat, dims} }

func (i in) shape() shapes.Shape {
	return shapes.Make(dtypes.FromGoType(reflect.TypeOf(i.flat).Elem()), i.dims...)
}

// out is an output read back: its shape and flat values.
type out struct {
	shape shapes.Shape
	flat  any
}

type buildFn func(b *Builder, p []backends.Op) ([]backends.Op, error)

func one(f func(b *Builder, p []backends.Op) (backends.Op, error)) buildFn {
	return func(b *Builder, p []backends.Op) ([]backends.Op, error) {
		o, err := f(b, p)
		return []backends.Op{o}, err
	}
}

// compileOn builds and compiles a program with one parameter per input.
func compileOn(t testing.TB, eng *Engine, name string, build buildFn, inputs ...in) *Executable {
	t.Helper()
	b := eng.Builder(name).(*Builder)
	var params []backends.Op
	for i, x := range inputs {
		p, err := b.Parameter(fmt.Sprintf("in%d", i), x.shape(), nil)
		if err != nil {
			t.Fatalf("Parameter %d: %v", i, err)
		}
		params = append(params, p)
	}
	outs, err := build(b, params)
	if err != nil {
		t.Fatalf("building %s: %v", name, err)
	}
	exe, err := b.Compile(outs, nil)
	if err != nil {
		t.Fatalf("compiling %s: %v", name, err)
	}
	return exe.(*Executable)
}

// upload places inputs on device dev.
func upload(t testing.TB, eng *Engine, dev int, inputs ...in) []backends.Buffer {
	t.Helper()
	var bufs []backends.Buffer
	for i, x := range inputs {
		buf, err := eng.BufferFromFlatData(backends.DeviceNum(dev), x.flat, x.shape())
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		bufs = append(bufs, buf)
	}
	return bufs
}

// download reads buffers back to the host and finalizes them.
func download(t testing.TB, eng *Engine, bufs []backends.Buffer) []out {
	t.Helper()
	var res []out
	for i, buf := range bufs {
		s, err := eng.BufferShape(buf)
		if err != nil {
			t.Fatalf("output %d: %v", i, err)
		}
		flat := reflect.MakeSlice(reflect.SliceOf(s.DType.GoType()), s.Size(), s.Size()).Interface()
		if err := eng.BufferToFlatData(buf, flat); err != nil {
			t.Fatalf("output %d: %v", i, err)
		}
		if err := eng.BufferFinalize(buf); err != nil {
			t.Fatalf("output %d: finalize: %v", i, err)
		}
		res = append(res, out{s, flat})
	}
	return res
}

// run compiles build for the inputs, runs it on device 0 and returns the
// outputs.
func run(t testing.TB, eng *Engine, name string, build buildFn, inputs ...in) []out {
	t.Helper()
	exe := compileOn(t, eng, name, build, inputs...)
	defer exe.Finalize()
	bufs := upload(t, eng, 0, inputs...)
	res, err := exe.Execute(bufs, nil, 0)
	if err != nil {
		t.Fatalf("executing %s: %v", name, err)
	}
	for _, b := range bufs {
		_ = eng.BufferFinalize(b)
	}
	return download(t, eng, res)
}

// sameValues compares flat slices element by element: exactly, except
// that NaN equals NaN and, when tol > 0, floats may differ by tol relative
// (or absolute below 1).
func sameValues(got, want any, tol float64) error {
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	if gv.Type() != wv.Type() {
		return fmt.Errorf("got %T, want %T", got, want)
	}
	if gv.Len() != wv.Len() {
		return fmt.Errorf("got %d values %v, want %d %v", gv.Len(), got, wv.Len(), want)
	}
	for i := range gv.Len() {
		g, w := gv.Index(i).Interface(), wv.Index(i).Interface()
		if !sameValue(g, w, tol) {
			return fmt.Errorf("element %d: got %v, want %v (all: got %v, want %v)", i, g, w, got, want)
		}
	}
	return nil
}

func sameValue(g, w any, tol float64) bool {
	closeF := func(a, b float64) bool {
		switch {
		case math.IsNaN(a) || math.IsNaN(b):
			return math.IsNaN(a) && math.IsNaN(b)
		case a == b:
			return math.Signbit(a) == math.Signbit(b) || tol > 0
		case math.IsInf(a, 0) || math.IsInf(b, 0):
			return false
		}
		return tol > 0 && math.Abs(a-b) <= tol*max(1, math.Abs(b))
	}
	switch w := w.(type) {
	case float32:
		return closeF(float64(g.(float32)), float64(w))
	case float64:
		return closeF(g.(float64), w)
	case float16.Float16:
		return closeF(float64(g.(float16.Float16).Float32()), float64(w.Float32()))
	case bfloat16.BFloat16:
		return closeF(float64(g.(bfloat16.BFloat16).Float32()), float64(w.Float32()))
	case complex64:
		gc := g.(complex64)
		return closeF(float64(real(gc)), float64(real(w))) && closeF(float64(imag(gc)), float64(imag(w)))
	case complex128:
		gc := g.(complex128)
		return closeF(real(gc), real(w)) && closeF(imag(gc), imag(w)) || (cmplx.IsNaN(gc) && cmplx.IsNaN(w))
	}
	return reflect.DeepEqual(g, w)
}

// checkOut compares one output with the expected shape and values.
func checkOut(t testing.TB, o out, want in, tol float64) {
	t.Helper()
	if ws := want.shape(); !o.shape.Equal(ws) {
		t.Errorf("shape %s, want %s", o.shape, ws)
		return
	}
	if err := sameValues(o.flat, want.flat, tol); err != nil {
		t.Error(err)
	}
}

var (
	nan32 = float32(math.NaN())
	inf32 = float32(math.Inf(1))
	negZ  = float32(math.Copysign(0, -1))
)
