package train

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

func mustTensor(t testing.TB, dt ir.DType, dims []int, raw []byte) *ir.Tensor {
	t.Helper()
	x, err := ir.TensorFromBytes(dt, dims, raw)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// testCheckpoint holds tensors whose bytes are awkward to round-trip
// through anything but raw bytes: NaN payloads, -0, subnormals, bfloat16,
// int64 extremes, a scalar and an empty tensor.
func testCheckpoint(t testing.TB, step int) *Checkpoint {
	f32 := []uint32{0x7FC00001, 0x80000000, 0x00000001, 0x7F7FFFFF, math.Float32bits(-1.5), 0xFF800000}
	raw := make([]byte, 4*len(f32))
	for i, v := range f32 {
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	cfg := testConfig()
	return &Checkpoint{
		Step:         step,
		Position:     Position{Epoch: 3, Index: 7, Shuffle: true, Seed: -42},
		ModelDigest:  "model-sha",
		ConfigDigest: cfg.Digest(),
		Config:       cfg.Fields(),
		Tensors: map[string]*ir.Tensor{
			"w":          mustTensor(t, ir.Float32, []int{2, 3}, raw),
			"adam.m/w":   mustTensor(t, ir.BFloat16, []int{3}, []byte{0x80, 0x3F, 0xC0, 0x7F, 0x01, 0x00}),
			"step_count": mustTensor(t, ir.Int64, nil, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}),
			"empty":      mustTensor(t, ir.Float32, []int{0, 4}, nil),
			"mask":       mustTensor(t, ir.Bool, []int{2}, []byte{1, 0}),
		},
	}
}

func testConfig() Config {
	o, _ := DefaultOptimizer(AdamW)
	return Config{Loss: Loss{Kind: LossCrossEntropy, Output: "logits", Target: "labels"}, Optimizer: o,
		Schedule: Schedule{Kind: Cosine, WarmupSteps: 10, TotalSteps: 100}, Batch: 8, Data: "sha256:abc"}
}

func sameCheckpoint(t *testing.T, got, want *Checkpoint) {
	t.Helper()
	if got.Step != want.Step || got.Position != want.Position || got.ModelDigest != want.ModelDigest ||
		got.ConfigDigest != want.ConfigDigest || !reflect.DeepEqual(got.Config, want.Config) {
		t.Fatalf("checkpoint metadata %+v, want %+v", got, want)
	}
	if len(got.Tensors) != len(want.Tensors) {
		t.Fatalf("%d tensors, want %d", len(got.Tensors), len(want.Tensors))
	}
	for name, w := range want.Tensors {
		g := got.Tensors[name]
		if g == nil {
			t.Fatalf("tensor %q missing", name)
		}
		gb, _ := ir.TensorBytes(g)
		wb, _ := ir.TensorBytes(w)
		if g.DType() != w.DType() || !reflect.DeepEqual(g.Shape().Dimensions, w.Shape().Dimensions) || !bytes.Equal(gb, wb) {
			t.Errorf("tensor %q: %s %x, want %s %x", name, g.Shape(), gb, w.Shape(), wb)
		}
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := testCheckpoint(t, 120)
	path, err := WriteCheckpoint(context.Background(), dir, want, 0)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "ckpt-000000120.tbck" {
		t.Errorf("path %s", path)
	}
	got, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, got, want)
	if err := got.Check("model-sha", testConfig()); err != nil {
		t.Errorf("Check of the same run: %v", err)
	}
}

// A crash before the rename leaves a temporary file: the newest complete
// checkpoint is still the previous one, and it reads.
func TestCheckpointAtomic(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := LatestCheckpoint(dir); ok || err != nil {
		t.Fatalf("empty dir: ok %v err %v", ok, err)
	}
	if _, ok, err := LatestCheckpoint(filepath.Join(dir, "none")); ok || err != nil {
		t.Fatalf("missing dir: ok %v err %v", ok, err)
	}
	old := testCheckpoint(t, 10)
	if _, err := WriteCheckpoint(context.Background(), dir, old, 0); err != nil {
		t.Fatal(err)
	}
	// What an interrupted WriteCheckpoint of step 20 leaves: part of the
	// new file under its temporary name.
	var buf bytes.Buffer
	if err := encodeCheckpoint(&buf, testCheckpoint(t, 20)); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.CreateTemp(dir, ".ckpt-*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Write(buf.Bytes()[:buf.Len()/2])
	tmp.Close()
	path, ok, err := LatestCheckpoint(dir)
	if err != nil || !ok || filepath.Base(path) != "ckpt-000000010.tbck" {
		t.Fatalf("LatestCheckpoint = %s %v %v, want ckpt-000000010.tbck", path, ok, err)
	}
	got, err := ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, got, old)
	// A failed write (a tensor that cannot be encoded) leaves no file.
	bad := testCheckpoint(t, 30)
	bad.Tensors["nil"] = nil
	if _, err := WriteCheckpoint(context.Background(), dir, bad, 0); err == nil {
		t.Fatal("a nil tensor was written")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("after a failed write the directory holds %d entries, want the old checkpoint and the crash's temp file", len(entries))
	}
}

func TestCheckpointKeep(t *testing.T) {
	for _, c := range []struct {
		keep  int
		steps []int
		want  []string
	}{
		{0, []int{1, 2, 3}, []string{"ckpt-000000001.tbck", "ckpt-000000002.tbck", "ckpt-000000003.tbck"}},
		{2, []int{1, 2, 3, 4, 5}, []string{"ckpt-000000004.tbck", "ckpt-000000005.tbck"}},
		{1, []int{5, 3}, []string{"ckpt-000000005.tbck"}}, // the newest by step, not by write order
		// Steps past 9 digits sort by number, not by name.
		{2, []int{999999999, 1000000000, 1000000001}, []string{"ckpt-1000000000.tbck", "ckpt-1000000001.tbck"}},
	} {
		dir := t.TempDir()
		for _, s := range c.steps {
			if _, err := WriteCheckpoint(context.Background(), dir, testCheckpoint(t, s), c.keep); err != nil {
				t.Fatal(err)
			}
		}
		entries, _ := os.ReadDir(dir)
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("keep %d after steps %v: %v, want %v", c.keep, c.steps, got, c.want)
		}
		latest, _, _ := LatestCheckpoint(dir)
		if filepath.Base(latest) != c.want[len(c.want)-1] {
			t.Errorf("keep %d: latest %s, want %s", c.keep, latest, c.want[len(c.want)-1])
		}
	}
	if _, err := WriteCheckpoint(context.Background(), t.TempDir(), testCheckpoint(t, 1), -1); !errors.Is(err, errs.ErrInvalidInput) {
		t.Errorf("keep -1: %v", err)
	}
}

// Every truncation and every single-byte corruption of a checkpoint is an
// error wrapping ErrInvalidInput, never a panic or a silently different
// checkpoint. (Guard check: with verifySum's comparison disabled, the
// corruptions of tensor bytes pass unnoticed and this test fails.)
func TestCheckpointDamaged(t *testing.T) {
	dir := t.TempDir()
	path, err := WriteCheckpoint(context.Background(), dir, testCheckpoint(t, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	bad := filepath.Join(dir, "bad.tbck")
	check := func(what string, b []byte) {
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadCheckpoint(bad)
		if err == nil || !errors.Is(err, errs.ErrInvalidInput) || !strings.Contains(err.Error(), "bad.tbck") {
			t.Fatalf("%s: %v, want an ErrInvalidInput naming the file", what, err)
		}
	}
	for n := 0; n < len(good); n++ {
		check("truncated", good[:n])
	}
	check("trailing byte", append(append([]byte{}, good...), 0))
	for i := range good {
		b := append([]byte{}, good...)
		b[i] ^= 0x10
		check("corrupt", b)
	}
	if _, err := ReadCheckpoint(filepath.Join(dir, "missing.tbck")); err == nil {
		t.Error("a missing file reads")
	}
}

// FuzzDecodeCheckpoint: arbitrary bytes never panic, and allocation stays
// bounded by the input (the header's sizes are checked against it).
func FuzzDecodeCheckpoint(f *testing.F) {
	var buf bytes.Buffer
	if err := encodeCheckpoint(&buf, testCheckpoint(f, 5)); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(ckptMagic + "\x02\x00\x00\x00\x00\x00\x00\x00{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(bytes.NewReader(b), int64(len(b)))
		if err == nil && c == nil {
			t.Fatal("nil checkpoint without an error")
		}
	})
}

func TestCheckMismatch(t *testing.T) {
	c := testCheckpoint(t, 1)
	other := testConfig()
	other.Optimizer.LR = 3e-4
	other.Batch = 16
	for _, tc := range []struct {
		name   string
		model  string
		cfg    Config
		model2 bool
		fields []string // prefixes of the differing fields, sorted
	}{
		{"same", "model-sha", testConfig(), false, nil},
		{"model", "other-sha", testConfig(), true, nil},
		{"config", "model-sha", other, false, []string{"batch: \"8\" != \"16\"", "lr: \"0.001\" != \"0.0003\""}},
		{"both", "x", other, true, []string{"batch:", "lr:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Check(tc.model, tc.cfg)
			if tc.fields == nil && !tc.model2 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var me *MismatchError
			if !errors.As(err, &me) || !errors.Is(err, errs.ErrInvalidInput) {
				t.Fatalf("%v: want a *MismatchError wrapping ErrInvalidInput", err)
			}
			if me.Model != tc.model2 || len(me.Fields) != len(tc.fields) {
				t.Fatalf("mismatch %+v, want model %v fields %v", me, tc.model2, tc.fields)
			}
			for i, f := range tc.fields {
				if !strings.HasPrefix(me.Fields[i], f) || !strings.Contains(err.Error(), me.Fields[i]) {
					t.Errorf("field %d %q (error %q), want %q", i, me.Fields[i], err, f)
				}
			}
		})
	}
}
