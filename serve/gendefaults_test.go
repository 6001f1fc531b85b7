package serve_test

import (
	"fmt"
	"testing"

	"github.com/tensorbridge/tensorbridge/serve"
)

// TestOpenAIGenerationDefaults: a completion that sets no temperature on a
// checkpoint whose generation_config.json asks for no sampling (the
// fixture's sets no do_sample) samples with OpenAI's defaults, temperature
// 1 and no top-k, as vLLM serves it: the same seed gives the same text as
// the request that spells those settings out, and not transformers' greedy
// text on every prompt. (Injected fault: transformers' greedy default for
// unset fields matched greedy on every prompt and failed here.)
func TestOpenAIGenerationDefaults(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	greedy := 0
	n := 0
	for i, ref := range f.refs {
		if ref.Chat {
			continue
		}
		n++
		var unset, spelled oaiChunk
		decodeJSON(t, postJSON(t, gs.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":48,"seed":3}`, gs.name, ref.Text)), 200, &unset)
		decodeJSON(t, postJSON(t, gs.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":48,"seed":3,"temperature":1,"top_k":0}`, gs.name, ref.Text)), 200, &spelled)
		if len(unset.Choices) != 1 || len(spelled.Choices) != 1 || unset.Choices[0].Text != spelled.Choices[0].Text {
			t.Errorf("prompt %d: unset sampling fields gave %+v, temperature 1 without top-k %+v", i, unset.Choices, spelled.Choices)
			continue
		}
		if unset.Choices[0].Text == ref.Decoded {
			greedy++
		}
	}
	if n == 0 || greedy == n {
		t.Errorf("%d of %d prompts gave transformers' greedy text with no temperature set: the OpenAI default is sampling", greedy, n)
	}
}
