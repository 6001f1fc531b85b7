package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestChatTemplateStyles renders templates written in the styles of Qwen3
// (namespace, reversed slices, string methods, think-stripping), Llama 3.1
// (is defined / none, system extraction, comments), Gemma (role mapping,
// raise_exception) and Zephyr (trim_blocks and lstrip_blocks over line
// statements) and compares with transformers' apply_chat_template
// (testdata/tokenizers/templates.json).
func TestChatTemplateStyles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "tokenizers", "templates.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Templates map[string]string `json:"templates"`
		Cases     []struct {
			Template string    `json:"template"`
			Messages []Message `json:"messages"`
			Gen      bool      `json:"add_generation_prompt"`
			Text     *string   `json:"text"`
			Error    string    `json:"error"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	tok, _ := load(t, "llama3")
	compiled := map[string]*chatTemplate{}
	for name, src := range fx.Templates {
		ct, err := compileChat(src, tok.tokens)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		compiled[name] = ct
	}
	for _, c := range fx.Cases {
		got, err := compiled[c.Template].render(c.Messages, c.Gen)
		if c.Text == nil {
			if err == nil {
				t.Errorf("%s %v: want error %q, got %q", c.Template, c.Messages, c.Error, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %v gen=%v: %v", c.Template, c.Messages, c.Gen, err)
		} else if got != *c.Text {
			t.Errorf("%s %v gen=%v\n got %q\nwant %q", c.Template, c.Messages, c.Gen, got, *c.Text)
		}
	}
}

// TestConcurrentUse encodes, decodes and renders from several goroutines at
// once (run with -race): the BPE cache is the only shared mutable state.
func TestConcurrentUse(t *testing.T) {
	tok, e := load(t, "llama3")
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func() {
			for _, c := range e.Encode {
				ids, err := tok.Encode(c.Text, true)
				if err != nil {
					done <- err
					return
				}
				_ = tok.Decode(ids, true)
				if _, err := tok.ApplyChatTemplate([]Message{{Role: "user", Content: c.Text}}, true); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestTemplateRange: range works as Python's, and is bounded as in Jinja2's
// sandbox, which transformers renders in. The fault injected is a template
// asking for 10^12 items at load, which the library's own range would try
// to allocate.
func TestTemplateRange(t *testing.T) {
	cases := []struct {
		src, want string
	}{
		{"{% for i in range(3) %}{{ i }}{% endfor %}", "012"},
		{"{% for i in range(2, 11, 3) %}{{ i }},{% endfor %}", "2,5,8,"},
		{"{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}", "531"},
		{"{% for i in range(3, 3) %}x{% endfor %}", ""},
	}
	for _, c := range cases {
		ct, err := compileChat(c.src, specialNames{})
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if got, err := ct.render(probe, true); err != nil || got != c.want {
			t.Errorf("%s = %q, %v; want %q", c.src, got, err, c.want)
		}
	}
	if _, err := compileChat("{% for i in range(1000000000000) %}{% endfor %}", specialNames{}); err == nil {
		t.Error("a 10^12-item range loaded")
	}
}
