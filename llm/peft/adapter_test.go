package peft

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// TestReadPEFTAdapters reads every adapter PEFT saved for the four
// checkpoints: the config's values, one layer per q_proj and v_proj in
// module order, and each matrix's size.
func TestReadPEFTAdapters(t *testing.T) {
	ft, llm := fixtureDirs(t)
	for _, arch := range archs {
		mods := baseModules(t, filepath.Join(llm, arch))
		ref := readRefs(t, filepath.Join(ft, arch))
		for _, name := range []string{"adapter0", "lora-text", "lora-prompt", "lora-messages"} {
			t.Run(arch+"/"+name, func(t *testing.T) {
				a, err := Read(filepath.Join(ft, arch, name), mods)
				if err != nil {
					t.Fatal(err)
				}
				c := a.Config
				if c.R != ref.Hyper.R || c.Alpha != ref.Hyper.Alpha || c.PeftType != "LORA" || c.UseRSLoRA || c.Dropout != 0 {
					t.Errorf("config %+v, want r %d alpha %v", c, ref.Hyper.R, ref.Hyper.Alpha)
				}
				if got := c.Scale(); got != ref.Hyper.Alpha/float64(ref.Hyper.R) {
					t.Errorf("scale %v", got)
				}
				var want []string
				for _, m := range mods {
					if strings.HasSuffix(m.Name, ".q_proj") || strings.HasSuffix(m.Name, ".v_proj") {
						want = append(want, m.Name)
					}
				}
				var got []string
				for _, l := range a.Layers {
					got = append(got, l.Name)
					if len(l.A) != c.R*l.In || len(l.B) != l.Out*c.R {
						t.Errorf("%s: A %d B %d values", l.Name, len(l.A), len(l.B))
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("layers %v, want %v", got, want)
				}
			})
		}
	}
}

// TestMergeMatchesPEFT: the base weight plus the adapter PEFT saved,
// merged by Merge, equals PEFT's merge_and_unload weight (layer 0's q_proj
// and v_proj) to float32 rounding. This checks Read's values, Scale and
// Merge against PEFT at once.
func TestMergeMatchesPEFT(t *testing.T) {
	ft, llm := fixtureDirs(t)
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			base := filepath.Join(llm, arch)
			a, err := Read(filepath.Join(ft, arch, "adapter0"), baseModules(t, base))
			if err != nil {
				t.Fatal(err)
			}
			ref := readRefs(t, filepath.Join(ft, arch))
			weights := map[string][]float32{}
			for _, l := range a.Layers {
				weights[l.Name] = baseWeight(t, base, l.Name+".weight")
			}
			orig := slices.Clone(weights["model.layers.0.self_attn.q_proj"])
			if err := a.Merge(weights); err != nil {
				t.Fatal(err)
			}
			for name, want := range ref.Merged.Weights {
				got := weights[name]
				if len(got) != len(want.Data) {
					t.Fatalf("%s: %d values, PEFT %d", name, len(got), len(want.Data))
				}
				var worst float64
				for i := range got {
					worst = max(worst, math.Abs(float64(got[i])-want.Data[i])/max(math.Abs(want.Data[i]), 1))
				}
				if worst > 1e-6 {
					t.Errorf("%s: merged weight off PEFT's by %.3g", name, worst)
				}
			}
			if slices.Equal(orig, weights["model.layers.0.self_attn.q_proj"]) {
				t.Errorf("the adapter changed nothing: the fixture's B is zero?")
			}
		})
	}
}

// TestWriteMatchesPEFT: an adapter read from PEFT's files and written
// again has the same adapter_model.safetensors, byte for byte (PEFT's
// writer puts the tensors in name order, which is module order for these
// two-layer models), and a config that reads back equal.
func TestWriteMatchesPEFT(t *testing.T) {
	ft, llm := fixtureDirs(t)
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			mods := baseModules(t, filepath.Join(llm, arch))
			src := filepath.Join(ft, arch, "lora-text")
			a, err := Read(src, mods)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "out")
			if err := a.Write(context.Background(), dir); err != nil {
				t.Fatal(err)
			}
			want, _ := os.ReadFile(filepath.Join(src, WeightsFile))
			got, _ := os.ReadFile(filepath.Join(dir, WeightsFile))
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from PEFT's (%d against %d bytes)", WeightsFile, len(got), len(want))
			}
			b, err := Read(dir, mods)
			if err != nil {
				t.Fatal(err)
			}
			if !sameConfig(&a.Config, &b.Config) || len(a.Layers) != len(b.Layers) {
				t.Fatalf("read back %+v, wrote %+v", b.Config, a.Config)
			}
			for i := range a.Layers {
				if !slices.Equal(a.Layers[i].A, b.Layers[i].A) || !slices.Equal(a.Layers[i].B, b.Layers[i].B) {
					t.Errorf("%s: values changed", a.Layers[i].Name)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

func sameConfig(a, b *Config) bool {
	return a.PeftType == b.PeftType && a.TaskType == b.TaskType && a.BaseModel == b.BaseModel && a.R == b.R &&
		a.Alpha == b.Alpha && a.Dropout == b.Dropout && a.UseRSLoRA == b.UseRSLoRA &&
		slices.Equal(a.TargetModules.List, b.TargetModules.List) && a.TargetModules.Regex == b.TargetModules.Regex &&
		a.TargetModules.IsRe == b.TargetModules.IsRe && bytes.Equal(compactB(a.AutoMapping), compactB(b.AutoMapping))
}

func compactB(v []byte) []byte {
	if v == nil {
		return nil
	}
	return []byte(compact(v))
}

// TestReadOtherBase: an adapter read against another base model's
// modules is an InputError naming the module and both shapes, or the
// tensor the base has no module for.
func TestReadOtherBase(t *testing.T) {
	ft, llm := fixtureDirs(t)
	llama := baseModules(t, filepath.Join(llm, "llama"))
	for _, tc := range []struct {
		name    string
		adapter string
		mods    []Module
		want    []string
	}{
		// qwen3's heads are 32 wide, llama's 16: q_proj's B is [128, 8], not [64, 8].
		{"shape", "qwen3", llama, []string{"model.layers.0.self_attn.q_proj", "[64, 8]", "[128 8]"}},
		{"extra layer", "llama", llama[:7], []string{"model.layers.1.self_attn.q_proj.lora_A.weight", "another base model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(filepath.Join(ft, tc.adapter, "adapter0"), tc.mods)
			var ie *errs.InputError
			if !errors.As(err, &ie) || !errors.Is(err, errs.ErrInvalidInput) {
				t.Fatalf("got %v, want an InputError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not say %q", err, w)
				}
			}
		})
	}
}
