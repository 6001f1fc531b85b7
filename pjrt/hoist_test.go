package pjrt

import (
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/pjrt/lower"
)

// TestHoistedConstantsRun runs programs whose large constants are hoisted
// and checks the results by exact integer arithmetic: c[i] = i, so
// x + c with x = 1 is i+1, and the sum of c is n(n-1)/2.
func TestHoistedConstantsRun(t *testing.T) {
	eng := cpuEngine(t)
	const n = lower.HoistThreshold
	c := make([]float32, n)
	ones := make([]float32, n)
	want := make([]float32, n)
	for i := range c {
		c[i], ones[i], want[i] = float32(i), 1, float32(i+1)
	}
	exe := compileOn(t, eng, "hoisted", func(b *Builder, p []backends.Op) ([]backends.Op, error) {
		k, err := b.Constant(c, n)
		if err != nil {
			return nil, err
		}
		sum, err := b.Add(p[0], k)
		if err != nil {
			return nil, err
		}
		total, err := b.ReduceSum(k, 0)
		return []backends.Op{sum, total}, err
	}, vec(ones))
	defer exe.Finalize()
	if got := len(exe.Program().Constants); got != 1 {
		t.Fatalf("%d hoisted constants, want 1", got)
	}
	if names, _ := exe.Inputs(); len(names) != 1 {
		t.Fatalf("Inputs() = %v, want only the user's parameter", names)
	}
	for dev := range 2 {
		bufs := upload(t, eng, dev, vec(ones))
		res, err := exe.Execute(bufs, nil, backends.DeviceNum(dev))
		if err != nil {
			t.Fatalf("device %d: %v", dev, err)
		}
		_ = eng.BufferFinalize(bufs[0])
		outs := download(t, eng, res)
		if err := sameValues(outs[0].flat, want, 0); err != nil {
			t.Errorf("device %d: x + c: %v", dev, err)
		}
		if err := sameValues(outs[1].flat, []float32{n * (n - 1) / 2}, 0); err != nil {
			t.Errorf("device %d: sum(c): %v", dev, err)
		}
	}
}

// TestCacheKeyFollowsHoistedWeights checks that programs differing only in
// the values of a hoisted constant have the same text but different disk
// cache keys.
func TestCacheKeyFollowsHoistedWeights(t *testing.T) {
	eng := cpuEngine(t)
	prog := func(v float32) *lower.Program {
		b := eng.Builder("w").(*Builder)
		flat := make([]float32, lower.HoistThreshold)
		for i := range flat {
			flat[i] = v
		}
		k, err := b.Constant(flat, len(flat))
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.Finish([]backends.Op{k}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p1, p2 := prog(1), prog(2)
	if string(p1.Text) != string(p2.Text) {
		t.Fatalf("texts differ; the values should not be in Text")
	}
	k1, err := cpuBackend.cacheKey(p1)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := cpuBackend.cacheKey(p2)
	if err != nil {
		t.Fatal(err)
	}
	if k1.WeightsDigest == "" || k1.Digest() == k2.Digest() {
		t.Errorf("keys do not follow the weights: digests %q, %q", k1.WeightsDigest, k2.WeightsDigest)
	}
}

// TestHoistedConstantsSPMD checks that a hoisted constant reaches every
// replica of an SPMD program: each replica computes x + c with c[i] = i,
// exact in float32.
func TestHoistedConstantsSPMD(t *testing.T) {
	eng := cpuEngine(t)
	needDevices(t, eng, 2)
	const n = lower.HoistThreshold
	c := make([]float32, n)
	for i := range c {
		c[i] = float32(i)
	}
	b := eng.Builder("spmd-hoisted").(*Builder)
	if err := b.DistributedSPMD(2); err != nil {
		t.Fatal(err)
	}
	x, err := b.Parameter("x", shapes.Make(dtypes.Float32, n), nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := b.Constant(c, n)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := b.Add(x, k)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile([]backends.Op{sum}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Finalize()
	if got := len(exe.(*Executable).Program().Constants); got != 1 {
		t.Fatalf("%d hoisted constants, want 1", got)
	}
	base := [2]float32{1, 100}
	var inputs []backends.Buffer
	for r := range 2 {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = base[r]
		}
		inputs = append(inputs, upload(t, eng, r, vec(xs))...)
	}
	res, err := exe.Execute(inputs, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		_ = eng.BufferFinalize(in)
	}
	outs := download(t, eng, res)
	for r := range 2 {
		want := make([]float32, n)
		for i := range want {
			want[i] = base[r] + float32(i)
		}
		if err := sameValues(outs[r].flat, want, 0); err != nil {
			t.Errorf("replica %d: %v", r, err)
		}
	}
}
