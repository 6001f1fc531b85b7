package sft

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// qwen2 is a real tokenizer with a ChatML template kept in the repository,
// so these tests need no fixtures.
func qwen2(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(filepath.Join("..", "tokenizer", "testdata", "tokenizers", "qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// brokenTemplate's generation prompt ("assistant:") is not how it starts an
// assistant turn ("<|im_start|>assistant: "), so no span is defined.
const brokenTemplate = "{% for m in messages %}<|im_start|>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" +
	"{% if add_generation_prompt %}assistant:{% endif %}"

// TestBadInput: each bad file is a *LineError naming the file and the
// first bad line, matching errs.ErrInvalidInput, and its message names
// what is wrong.
func TestBadInput(t *testing.T) {
	tok := qwen2(t)
	broken, err := tok.WithChatTemplate(brokenTemplate)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := write("long.jsonl", append([]byte(`{"text": "fine"}`+"\n"+`{"text": "`), bytes.Repeat([]byte("a"), MaxLineBytes)...))
	bad := func(name string) string { return filepath.Join("testdata", "bad", name) }
	cases := []struct {
		name    string
		path    string
		tok     *tokenizer.Tokenizer
		seqLen  int
		line    int
		mention string
		prefix  int // the *PrefixError's message index, or -1 for none
	}{
		{"not JSON", bad("not-json.jsonl"), tok, 64, 2, "JSON", -1},
		{"none of the shapes", bad("no-shape.jsonl"), tok, 64, 3, `"input", "output"`, -1},
		{"two shapes", bad("two-shapes.jsonl"), tok, 64, 1, "more than one", -1},
		{"text not a string", bad("text-not-string.jsonl"), tok, 64, 2, "number", -1},
		{"prompt without completion", bad("prompt-no-completion.jsonl"), tok, 64, 1, "completion", -1},
		{"completion null", bad("completion-null.jsonl"), tok, 64, 1, "null", -1},
		{"bad role", bad("bad-role.jsonl"), tok, 64, 1, "robot", -1},
		{"no assistant message", bad("no-assistant.jsonl"), tok, 64, 1, "assistant", -1},
		{"messages not an array", bad("messages-not-array.jsonl"), tok, 64, 1, "string", -1},
		{"message with another key", bad("message-extra-key.jsonl"), tok, 64, 1, "name", -1},
		{"content not a string", bad("content-not-string.jsonl"), tok, 64, 1, "messages[0]", -1},
		{"assistant first", bad("assistant-first.jsonl"), tok, 64, 1, "messages[0]", -1},
		{"empty completion", bad("no-target.jsonl"), tok, 64, 2, "no target", -1},
		{"prompt fills seq-len", filepath.Join("testdata", "prompt.jsonl"), tok, 4, 1, "seq-len 4", -1},
		{"blank line", bad("blank-line.jsonl"), tok, 64, 2, "blank", -1},
		{"array", bad("array.jsonl"), tok, 64, 1, "array", -1},
		{"null", bad("null.jsonl"), tok, 64, 1, "null", -1},
		{"two values on a line", bad("two-values.jsonl"), tok, 64, 1, "JSON", -1},
		{"empty file", bad("empty.jsonl"), tok, 64, 0, "no rows", -1},
		{"not UTF-8", write("latin1.jsonl", []byte("{\"text\": \"caf\xe9\"}\n")), tok, 64, 1, "UTF-8", -1},
		{"line too long", long, tok, 64, 2, "longer than", -1},
		{"no template", filepath.Join("testdata", "messages.jsonl"), noTemplate(t), 64, 1, "chat template", -1},
		{"prefix mismatch", filepath.Join("testdata", "messages.jsonl"), broken, 64, 1, "messages[1]", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(context.Background(), c.path, c.tok, c.seqLen)
			if !errors.Is(err, errs.ErrInvalidInput) {
				t.Fatalf("error %v is not errs.ErrInvalidInput", err)
			}
			var le *LineError
			if !errors.As(err, &le) || le.File != c.path || le.Line != c.line {
				t.Fatalf("error %v: want a *LineError at %s:%d", err, c.path, c.line)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error %q does not mention %q", err, c.mention)
			}
			var pe *PrefixError
			if got := errors.As(err, &pe); got != (c.prefix >= 0) || (got && pe.Message != c.prefix) {
				t.Errorf("error %v: want a *PrefixError at messages[%d] (-1: none)", err, c.prefix)
			}
		})
	}
}

// noTemplate is the repository's gpt2 tokenizer without its chat template.
func noTemplate(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	dir := filepath.Join("..", "tokenizer", "testdata", "tokenizers", "gpt2")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromJSON(tj, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.HasChatTemplate() {
		t.Fatal("gpt2 tokenizer.json alone has a chat template")
	}
	return tok
}

// TestReadArguments: a seq-len that cannot hold a prediction, a missing
// tokenizer and a cancelled context are errors before any row.
func TestReadArguments(t *testing.T) {
	tok := qwen2(t)
	text := filepath.Join("testdata", "text.jsonl")
	if _, err := Read(context.Background(), text, tok, 1); !errors.Is(err, errs.ErrInvalidInput) {
		t.Errorf("seq-len 1: %v, want errs.ErrInvalidInput", err)
	}
	if _, err := Read(context.Background(), text, nil, 64); !errors.Is(err, errs.ErrInvalidInput) {
		t.Errorf("nil tokenizer: %v, want errs.ErrInvalidInput", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Read(ctx, text, tok, 64); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	if _, err := Read(context.Background(), filepath.Join("testdata", "missing.jsonl"), tok, 64); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestWithChatTemplate: an override that does not compile is
// errs.ErrUnsupported, and a working one leaves the original tokenizer's
// template alone.
func TestWithChatTemplate(t *testing.T) {
	tok := qwen2(t)
	if _, err := tok.WithChatTemplate("{% for m in messages %}{{ m.content "); !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("broken template: %v, want errs.ErrUnsupported", err)
	}
	msgs := []tokenizer.Message{{Role: "user", Content: "hi"}}
	before, err := tok.ApplyChatTemplate(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	other, err := tok.WithChatTemplate("{% for m in messages %}[{{ m.content }}]{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := other.ApplyChatTemplate(msgs, true); got != "[hi]" {
		t.Errorf("override renders %q, want %q", got, "[hi]")
	}
	if after, _ := tok.ApplyChatTemplate(msgs, true); after != before {
		t.Errorf("original renders %q after the override, %q before", after, before)
	}
}
