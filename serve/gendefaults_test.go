package serve_test

import (
	"fmt"
	"testing"

	"github.com/tensorbridge/tensorbridge/serve"
)

// TestOpenAIGenerationDefaults: a completion that sets no temperature
// takes the checkpoint's generation_config.json defaults, as transformers'
// generate does: the fixture's file sets no do_sample, so the completion
// is transformers' greedy text. (Injected fault: the OpenAI default
// temperature 1 this replaced samples other text and fails here.)
func TestOpenAIGenerationDefaults(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{})
	for i, ref := range f.refs {
		if ref.Chat {
			continue
		}
		var c oaiChunk
		decodeJSON(t, postJSON(t, gs.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":48,"seed":3}`, gs.name, ref.Text)), 200, &c)
		if len(c.Choices) != 1 || c.Choices[0].Text != ref.Decoded {
			t.Errorf("prompt %d: got %+v, want transformers' greedy text %q", i, c.Choices, ref.Decoded)
		}
	}
}
