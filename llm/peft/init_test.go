package peft

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/safetensors"
)

// TestInit: A is uniform on ±1/sqrt(in) (PEFT's kaiming_uniform_ with
// a = sqrt(5)): inside the bound, reaching near it, with the uniform
// distribution's variance bound²/3; B is zero; the same seed gives the
// same adapter and another seed another.
func TestInit(t *testing.T) {
	mods := []Module{{"model.layers.0.self_attn.q_proj", 256, 64}, {"model.layers.0.mlp.up_proj", 64, 512}, {"model.layers.0.self_attn.v_proj", 256, 32}}
	cfg := &Config{PeftType: "LORA", R: 16, Alpha: 32, TargetModules: Targets{List: []string{"q_proj", "v_proj"}}}
	a, err := Init(cfg, mods, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Layers) != 2 || a.Layers[0].Name != mods[0].Name || a.Layers[1].Name != mods[2].Name {
		t.Fatalf("layers %+v", a.Layers)
	}
	for _, l := range a.Layers {
		bound := 1 / math.Sqrt(float64(l.In))
		var sum, sq, top float64
		for _, v := range l.A {
			x := float64(v)
			if math.Abs(x) > bound {
				t.Fatalf("%s: %v outside ±%v", l.Name, x, bound)
			}
			sum, sq, top = sum+x, sq+x*x, max(top, math.Abs(x))
		}
		n := float64(len(l.A))
		mean, variance := sum/n, sq/n-(sum/n)*(sum/n)
		// n = 4096: the mean's standard error is bound/sqrt(3n) ≈ 0.009·bound.
		if math.Abs(mean) > 0.05*bound || math.Abs(variance/(bound*bound/3)-1) > 0.1 || top < 0.99*bound {
			t.Errorf("%s: mean %v variance %v max %v; want 0, %v, ~%v", l.Name, mean, variance, top, bound*bound/3, bound)
		}
		if slices.ContainsFunc(l.B, func(v float32) bool { return v != 0 }) || len(l.B) != l.Out*cfg.R {
			t.Errorf("%s: B is not %d zeros", l.Name, l.Out*cfg.R)
		}
	}
	same, _ := Init(cfg, mods, 7)
	other, _ := Init(cfg, mods, 8)
	if !slices.Equal(same.Layers[1].A, a.Layers[1].A) || slices.Equal(other.Layers[1].A, a.Layers[1].A) {
		t.Errorf("seed 7 twice differs, or seed 8 equals seed 7")
	}
	if _, err := Init(&Config{PeftType: "LORA", R: 0, TargetModules: cfg.TargetModules}, mods, 1); !errors.Is(err, errs.ErrInvalidInput) {
		t.Errorf("r = 0: %v", err)
	}
	// Written and read back, the adapter is unchanged.
	dir := t.TempDir()
	if err := a.Write(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	b, err := Read(dir, mods)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Layers[0].A, a.Layers[0].A) || !sameConfig(&a.Config, &b.Config) {
		t.Errorf("read back differs")
	}
}

// TestMerge: exact small cases worked by hand, and the size checks.
func TestMerge(t *testing.T) {
	// W [2, 3], A [1, 3] = [1 2 3], B [2, 1] = [1; -2], scale 0.5:
	// scale·B·A = [0.5 1 1.5; -1 -2 -3].
	w := []float32{1, 1, 1, 0, 0, 0}
	if err := Merge(w, 2, 3, []float32{1, 2, 3}, []float32{1, -2}, 1, 0.5); err != nil {
		t.Fatal(err)
	}
	if want := []float32{1.5, 2, 2.5, -1, -2, -3}; !slices.Equal(w, want) {
		t.Errorf("got %v, want %v", w, want)
	}
	// Rank 2, rounding once: 1 + (2^-24·1 + 2^-24·1) = 1 + 2^-23, which
	// float32 holds; adding each rank term to a float32 W in turn would
	// round 1 + 2^-24 back to 1 twice.
	w = []float32{1}
	tiny := float32(math.Ldexp(1, -24))
	if err := Merge(w, 1, 1, []float32{tiny, tiny}, []float32{1, 1}, 2, 1); err != nil {
		t.Fatal(err)
	}
	if w[0] != 1+float32(math.Ldexp(1, -23)) {
		t.Errorf("got %v, want 1+2^-23", w[0])
	}
	for _, tc := range []struct {
		name       string
		w, a, b    []float32
		out, in, r int
	}{
		{"short W", make([]float32, 5), make([]float32, 3), make([]float32, 2), 2, 3, 1},
		{"short A", make([]float32, 6), make([]float32, 2), make([]float32, 2), 2, 3, 1},
		{"long B", make([]float32, 6), make([]float32, 3), make([]float32, 3), 2, 3, 1},
		{"r zero", make([]float32, 6), nil, nil, 2, 3, 0},
	} {
		orig := slices.Clone(tc.w)
		err := Merge(tc.w, tc.out, tc.in, tc.a, tc.b, tc.r, 1)
		if !errors.Is(err, errs.ErrInvalidInput) || !slices.Equal(orig, tc.w) {
			t.Errorf("%s: got %v", tc.name, err)
		}
	}
}

// TestWriteRefusesBadAdapter: a layer whose matrices do not match its
// rank and sizes is refused and nothing is written.
func TestWriteRefusesBadAdapter(t *testing.T) {
	a := &Adapter{Config: Config{PeftType: "LORA", R: 2, Alpha: 4, TargetModules: Targets{List: []string{"q_proj"}}},
		Layers: []Layer{{Module: Module{"model.layers.0.self_attn.q_proj", 3, 2}, A: make([]float32, 6), B: make([]float32, 3)}}}
	dir := filepath.Join(t.TempDir(), "out")
	if err := a.Write(context.Background(), dir); !errors.Is(err, errs.ErrInvalidInput) {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s was created", dir)
	}
}

// TestReadHalfPrecision: an adapter saved in BF16 or F16 (PEFT saves the
// dtype the adapter was trained in) reads as the same float32 values;
// the values are exact in both formats.
func TestReadHalfPrecision(t *testing.T) {
	mods := []Module{{"model.layers.0.self_attn.q_proj", 2, 3}}
	cfg := Config{PeftType: "LORA", R: 1, Alpha: 2, TargetModules: Targets{List: []string{"q_proj"}}}
	A, B := []float32{0.5, -1.25}, []float32{3, -0.0625, 96}
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F16} {
		dir := t.TempDir()
		if err := (&Adapter{Config: cfg, Layers: []Layer{{Module: mods[0], A: A, B: B}}}).Write(context.Background(), dir); err != nil {
			t.Fatal(err)
		}
		err := safetensors.Write(filepath.Join(dir, WeightsFile), []safetensors.NamedTensor{
			{Name: TensorName(mods[0].Name, "A"), DType: dt, Shape: []int64{1, 2}, Float32: A},
			{Name: TensorName(mods[0].Name, "B"), DType: dt, Shape: []int64{3, 1}, Float32: B},
		}, map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		a, err := Read(dir, mods)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Layers[0].A, A) || !slices.Equal(a.Layers[0].B, B) {
			t.Errorf("%s: read A %v B %v", dt, a.Layers[0].A, a.Layers[0].B)
		}
	}
}
