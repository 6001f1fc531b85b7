package llm

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/shard"
)

// TestFineTuneTrainSplits: over a model axis of 2, a LoRA fine-tune's
// tensors split as Megatron's pattern has them (Shoeybi et al. 2019,
// https://arxiv.org/abs/1909.08053 §3; torch [out, in] matrices):
// column-parallel projections (q, k, v, gate, up) and the vocabulary
// matrices by rows, row-parallel ones (o, down) by columns, norms and the
// rope tables whole; each adapter follows its projection (B by rows where
// W is by rows, A by columns where W is by columns, the other whole). A
// full fine-tune's trained tensors split as the same weights do as
// constants.
func TestFineTuneTrainSplits(t *testing.T) {
	b := testBackend(t)
	m, err := Load(context.Background(), b, filepath.Join(fixtureDir(t), "llama"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rows, cols, whole := shard.Plan{shard.Model, ""}, shard.Plan{"", shard.Model}, shard.Plan{"", ""}
	want := []struct {
		suffix string
		plan   shard.Plan
	}{
		{"q_proj.lora_A.weight", whole}, {"q_proj.lora_B.weight", rows},
		{"k_proj.lora_A.weight", whole}, {"k_proj.lora_B.weight", rows},
		{"v_proj.lora_A.weight", whole}, {"v_proj.lora_B.weight", rows},
		{"gate_proj.lora_A.weight", whole}, {"gate_proj.lora_B.weight", rows},
		{"up_proj.lora_A.weight", whole}, {"up_proj.lora_B.weight", rows},
		{"o_proj.lora_A.weight", cols}, {"o_proj.lora_B.weight", whole},
		{"down_proj.lora_A.weight", cols}, {"down_proj.lora_B.weight", whole},
		{"q_proj.weight", rows}, {"k_proj.weight", rows}, {"v_proj.weight", rows},
		{"gate_proj.weight", rows}, {"up_proj.weight", rows},
		{"o_proj.weight", cols}, {"down_proj.weight", cols},
		{"embed_tokens.weight", rows}, {"lm_head.weight", rows},
		{"input_layernorm.weight", shard.Plan{""}}, {"post_attention_layernorm.weight", shard.Plan{""}},
		{"model.norm.weight", shard.Plan{""}}, {"rope.cos", whole},
	}
	planOf := func(name string) shard.Plan {
		for _, w := range want {
			if strings.HasSuffix(name, w.suffix) {
				return w.plan
			}
		}
		return nil
	}
	var mods []LoRAModule
	for _, mod := range m.Config.Modules() {
		mods = append(mods, LoRAModule{Module: mod, A: make([]float32, 2*mod.In), B: make([]float32, mod.Out*2)})
	}
	lora, err := NewFineTune(m, &LoRA{Rank: 2, Scale: 1, Modules: mods}, nil)
	if err != nil {
		t.Fatal(err)
	}
	full, err := NewFineTune(m, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	specs := weightSpecs(m.Config)
	for _, tc := range []struct {
		name string
		f    *FineTune
	}{{"lora", lora}, {"full", full}} {
		t.Run(tc.name, func(t *testing.T) {
			trained, consts, _ := tc.f.TrainSplits(2)
			names := map[int]string{}
			for i, p := range tc.f.TrainParams() {
				names[i] = p.Name
			}
			check := func(what, name string, got shard.Plan) {
				w := planOf(name)
				if w == nil {
					t.Errorf("%s %s: not in the test's table", what, name)
				} else if !slices.Equal(got, w) {
					t.Errorf("%s %s: split %v, want %v", what, name, got, w)
				}
			}
			for i, pl := range trained {
				check("trained", names[i], pl)
			}
			if tc.f.lora != nil {
				if len(consts) != len(specs)+2 {
					t.Fatalf("%d constant plans, want %d (weights and rope tables)", len(consts), len(specs)+2)
				}
				for i, s := range specs {
					check("constant", s.name, consts[i])
				}
				for _, pl := range consts[len(specs):] {
					check("constant", "rope.cos", pl)
				}
			} else if len(trained) != len(specs) || len(consts) != 2 {
				t.Fatalf("%d trained and %d constant plans, want %d and 2 (the rope tables)", len(trained), len(consts), len(specs))
			}
		})
	}
}

// TestLoadOnHost: LoadOptions.OnHost keeps every weight in host memory
// (none on device 0), with the same values as a load onto the device, and
// refuses a mesh.
func TestLoadOnHost(t *testing.T) {
	dir := filepath.Join(fixtureDir(t), "llama")
	b := testBackend(t)
	ctx := context.Background()
	host, err := Load(ctx, b, dir, LoadOptions{OnHost: true})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	dev, err := Load(ctx, b, dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if len(host.weights) != len(dev.weights) {
		t.Fatalf("%d host weights, %d on the device", len(host.weights), len(dev.weights))
	}
	for i, w := range host.weights {
		if w.IsOnDevice(0) {
			t.Fatalf("weight %d is on device 0, want host memory only", i)
		}
		var a, d []byte
		if err := w.ConstBytes(func(b []byte) { a = bytes.Clone(b) }); err != nil {
			t.Fatal(err)
		}
		if err := dev.weights[i].ConstBytes(func(b []byte) { d = bytes.Clone(b) }); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, d) {
			t.Errorf("weight %d: host bytes differ from the device load's", i)
		}
	}
	if _, err := Load(ctx, b, dir, LoadOptions{OnHost: true, Mesh: shard.Mesh{Data: 1, Model: 2}}); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("OnHost with a mesh: %v, want ErrUnsupported", err)
	}
}
