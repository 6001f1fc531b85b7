package peft

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/safetensors"
)

// The references: adapters saved by PEFT 0.15.2 and the weights its
// merge_and_unload produced (scripts/gen-finetune-fixtures.py, installed
// by scripts/setup-finetune-fixtures.sh into
// ~/.cache/tensorbridge/finetune-fixtures), for the tiny checkpoints of
// scripts/setup-llm-fixtures.sh.

var archs = []string{"llama", "mistral", "qwen2", "qwen3"}

// fixtureDirs returns the fine-tuning and LLM fixture directories,
// skipping (failing under TENSORBRIDGE_REQUIRE_TESTDATA=1) without them.
func fixtureDirs(t testing.TB) (ft, llm string) {
	home, _ := os.UserHomeDir()
	ft = os.Getenv("TENSORBRIDGE_FINETUNE_FIXTURES")
	if ft == "" {
		ft = filepath.Join(home, ".cache", "tensorbridge", "finetune-fixtures")
	}
	llm = os.Getenv("TENSORBRIDGE_LLM_FIXTURES")
	if llm == "" {
		llm = filepath.Join(home, ".cache", "tensorbridge", "llm-fixtures")
	}
	if _, err := os.Stat(filepath.Join(ft, "qwen3", "refs.json")); err != nil {
		testreq.Skipf(t, "fine-tuning fixtures not installed (scripts/setup-finetune-fixtures.sh): %v", err)
	}
	return ft, llm
}

// baseModules lists a checkpoint's attention and MLP projections from its
// config.json, as transformers' Llama/Mistral/Qwen2/Qwen3 modules have
// them (q_proj [heads·head_dim, hidden], k/v_proj [kv_heads·head_dim,
// hidden], o_proj [hidden, heads·head_dim], gate/up [inter, hidden],
// down [hidden, inter]).
func baseModules(t testing.TB, dir string) []Module {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Hidden  int `json:"hidden_size"`
		Inter   int `json:"intermediate_size"`
		Layers  int `json:"num_hidden_layers"`
		Heads   int `json:"num_attention_heads"`
		KV      int `json:"num_key_value_heads"`
		HeadDim int `json:"head_dim"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	if c.HeadDim == 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	var out []Module
	for l := range c.Layers {
		p := func(s string) string { return "model.layers." + strconv.Itoa(l) + "." + s }
		out = append(out,
			Module{p("self_attn.q_proj"), c.Hidden, c.Heads * c.HeadDim},
			Module{p("self_attn.k_proj"), c.Hidden, c.KV * c.HeadDim},
			Module{p("self_attn.v_proj"), c.Hidden, c.KV * c.HeadDim},
			Module{p("self_attn.o_proj"), c.Heads * c.HeadDim, c.Hidden},
			Module{p("mlp.gate_proj"), c.Hidden, c.Inter},
			Module{p("mlp.up_proj"), c.Hidden, c.Inter},
			Module{p("mlp.down_proj"), c.Inter, c.Hidden})
	}
	return out
}

// baseWeight reads a float32 tensor of a checkpoint (one file or sharded
// with model.safetensors.index.json).
func baseWeight(t testing.TB, dir, name string) []float32 {
	file := filepath.Join(dir, "model.safetensors")
	if raw, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(dir, idx.WeightMap[name])
	}
	h, err := safetensors.Read(file)
	if err != nil {
		t.Fatal(err)
	}
	ten := h.Tensors[name]
	if ten == nil || ten.DType != safetensors.F32 {
		t.Fatalf("%s: no float32 tensor %q", file, name)
	}
	data, _ := os.ReadFile(file)
	out := make([]float32, ten.Elements)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[ten.Begin+4*int64(i):]))
	}
	return out
}

// refs is the part of refs.json these tests use.
type refs struct {
	Hyper struct {
		R       int      `json:"r"`
		Alpha   float64  `json:"lora_alpha"`
		Targets []string `json:"target_modules"`
	} `json:"hyper"`
	Merged struct {
		Weights map[string]struct {
			Shape []int     `json:"shape"`
			Data  []float64 `json:"data"`
		} `json:"weights"`
	} `json:"merged"`
}

func readRefs(t testing.TB, dir string) *refs {
	raw, err := os.ReadFile(filepath.Join(dir, "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r refs
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}
