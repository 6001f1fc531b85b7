package serve_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/llm/peft"
	"github.com/tensorbridge/tensorbridge/serve"
)

// TestServeAdapters: a checkpoint served with a PEFT adapter answers
// "model": NAME with the adapter (the greedy text of the adapter merged
// into the weights, served on its own) and the checkpoint's own name with
// the base model (transformers' greedy text), requests of both in flight
// together; /v1/models lists the adapter with its parent.
func TestServeAdapters(t *testing.T) {
	f := loadLLMFixture(t, "llama")
	home, _ := os.UserHomeDir()
	adapter := filepath.Join(home, ".cache", "tensorbridge", "finetune-fixtures", "llama", "adapter0")
	if _, err := os.Stat(adapter); err != nil {
		testreq.Skipf(t, "fine-tuning fixtures not installed (scripts/setup-finetune-fixtures.sh): %v", err)
	}
	merged := filepath.Join(t.TempDir(), "merged")
	if err := saveMerged(f.dir, adapter, merged); err != nil {
		t.Fatal(err)
	}
	gs := startGen(t, f, serve.Options{Generators: []serve.GeneratorSource{{Dir: f.dir,
		Load:   llm.LoadOptions{Adapters: []llm.AdapterSource{{Name: "tuned", Dir: adapter}}},
		Engine: llm.EngineOptions{MaxSequences: 4, MaxQueue: 16}}}})
	ms := startGen(t, &llmFixture{dir: merged, refs: f.refs}, serve.Options{})
	complete := func(url, model string, i int) string {
		body, _ := json.Marshal(map[string]any{"model": model, "prompt": f.refs[i].PromptID, "max_tokens": len(f.refs[i].TokenIDs),
			"temperature": 0, "ignore_eos": true})
		resp := postJSON(t, url+"/v1/completions", string(body))
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, raw)
		}
		var out struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
			t.Fatalf("%s: %s", model, raw)
		}
		return out.Choices[0].Text
	}
	for i, r := range f.refs {
		if r.Chat {
			continue
		}
		done := make(chan string)
		go func() { done <- complete(gs.url, "tuned", i) }()
		base := complete(gs.url, gs.name, i)
		tuned := <-done
		if base != r.Decoded {
			t.Errorf("prompt %d, base model: %q, transformers %q", i, base, r.Decoded)
		}
		if want := complete(ms.url, ms.name, i); tuned != want || tuned == base {
			t.Errorf("prompt %d, adapter: %q, merged %q (base %q)", i, tuned, want, base)
		}
	}
	resp, err := http.Get(gs.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct{ ID, Parent string } `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(models.Data, func(m struct{ ID, Parent string }) bool { return m.ID == "tuned" && m.Parent == gs.name }) {
		t.Errorf("/v1/models: %+v, want the adapter tuned with parent %s", models.Data, gs.name)
	}
}

// saveMerged writes the checkpoint dir with the adapter merged in.
func saveMerged(dir, adapter, dst string) error {
	c, err := llm.LoadConfig(dir)
	if err != nil {
		return err
	}
	ad, err := peft.Read(adapter, c.PEFTModules())
	if err != nil {
		return err
	}
	return llm.SaveCheckpoint(context.Background(), dir, dst, nil, ad)
}
