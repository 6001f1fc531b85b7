package peft

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseConfig: any bytes give a config that validates or an error,
// never a panic; a config that parses writes JSON that parses again.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{peftConfig, with("target_modules", `"(q|v)_proj"`), with("use_rslora", "true"),
		with("r", "1e300"), with("rank_pattern", `{"a": 1}`), `{}`, `null`, `{"r": 8}`, ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("adapter_config.json", data)
		if err != nil {
			return
		}
		out, err := c.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseConfig("again", out)
		if err != nil {
			t.Fatalf("written config does not parse: %v\n%s", err, out)
		}
		if !sameConfig(c, c2) {
			t.Fatalf("read %+v, wrote and read %+v", c, c2)
		}
	})
}

// fuzzModules is a two-layer base with q and v projections.
var fuzzModules = []Module{
	{"model.layers.0.self_attn.q_proj", 4, 4}, {"model.layers.0.self_attn.v_proj", 4, 2},
	{"model.layers.1.self_attn.q_proj", 4, 4}, {"model.layers.1.self_attn.v_proj", 4, 2},
}

// FuzzReadAdapter: any adapter_model.safetensors beside a good config is
// read or refused with an error, never a panic, and what is read has the
// sizes the base says.
func FuzzReadAdapter(f *testing.F) {
	cfg := &Config{PeftType: "LORA", R: 2, Alpha: 4, TargetModules: Targets{List: []string{"q_proj", "v_proj"}}}
	a, err := Init(cfg, fuzzModules, 1)
	if err != nil {
		f.Fatal(err)
	}
	seedDir := f.TempDir()
	if err := a.Write(context.Background(), seedDir); err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(filepath.Join(seedDir, WeightsFile))
	f.Add(good)
	f.Add(good[:len(good)-3])
	bad := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(bad, uint64(len(good)))
	f.Add(bad)
	f.Add([]byte{})
	cfgJSON, _ := cfg.MarshalJSON()
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decode(ConfigFile, cfgJSON, WeightsFile, bytes.NewReader(data), int64(len(data)), fuzzModules)
		if err != nil {
			return
		}
		for _, l := range got.Layers {
			if len(l.A) != cfg.R*l.In || len(l.B) != l.Out*cfg.R {
				t.Fatalf("%s: A %d B %d values", l.Name, len(l.A), len(l.B))
			}
		}
	})
}
