package sft

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// reference is one file of scripts/sft_reference.py's output: every row of
// a testdata JSONL file as transformers tokenizes it by the package's rules.
type reference struct {
	SeqLen       int     `json:"seq_len"`
	Data         string  `json:"data"`
	ChatTemplate *string `json:"chat_template"`
	Rows         []struct {
		Line         int    `json:"line"`
		IDs          []int  `json:"ids"`
		Targets      []int  `json:"targets"`
		Error        string `json:"error"`
		MessageIndex *int   `json:"message_index"`
	} `json:"rows"`
}

// cacheDir returns $env or ~/.cache/tensorbridge/name.
func cacheDir(env, name string) string {
	if d := os.Getenv(env); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "tensorbridge", name)
}

// refCase is one reference file and the tokenizer it was made with.
type refCase struct {
	name     string // <dir>/<file> under finetune-fixtures/sft
	tokDir   string
	template bool // the reference overrides the chat template (messages-chatml)
}

func refCases() []refCase {
	llmDir := cacheDir("TENSORBRIDGE_LLM_FIXTURES", "llm-fixtures")
	var cs []refCase
	for _, arch := range []string{"llama", "mistral", "qwen2", "qwen3"} {
		for _, f := range []string{"text", "prompt", "messages"} {
			cs = append(cs, refCase{arch + "/" + f, filepath.Join(llmDir, arch), false})
		}
		cs = append(cs, refCase{arch + "/messages-chatml", filepath.Join(llmDir, arch), true})
	}
	for _, name := range []string{"qwen2", "llama2", "llama3", "mistral"} {
		for _, f := range []string{"text", "prompt", "messages"} {
			cs = append(cs, refCase{"repo-" + name + "/" + f, filepath.Join("..", "tokenizer", "testdata", "tokenizers", name), false})
		}
	}
	return cs
}

func loadRef(t *testing.T, c refCase) (*reference, *tokenizer.Tokenizer) {
	t.Helper()
	path := filepath.Join(cacheDir("TENSORBRIDGE_FINETUNE_FIXTURES", "finetune-fixtures"), "sft", c.name+".json")
	raw, err := os.ReadFile(path)
	if err != nil {
		testreq.Skipf(t, "sft references not installed (scripts/setup-finetune-fixtures.sh runs scripts/sft_reference.py): %v", err)
	}
	var ref reference
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tok, err := tokenizer.Load(c.tokDir)
	if err != nil {
		testreq.Skipf(t, "tokenizer %s not installed (scripts/setup-llm-fixtures.sh): %v", c.tokDir, err)
	}
	if c.template {
		if tok, err = tok.WithChatTemplate(*ref.ChatTemplate); err != nil {
			t.Fatal(err)
		}
	}
	return &ref, tok
}

// TestMatchesTransformers: every row of the testdata files, on the four
// fixture tokenizers and four real tokenizers with their chat templates,
// has the ids and targets transformers gives by the same rules, and the
// rows the reference rejects are rejected (a prefix mismatch at the same
// message). Files without a rejected row also go through Read whole.
func TestMatchesTransformers(t *testing.T) {
	for _, c := range refCases() {
		t.Run(c.name, func(t *testing.T) {
			ref, tok := loadRef(t, c)
			data, err := os.ReadFile(filepath.Join("testdata", ref.Data))
			if err != nil {
				t.Fatal(err)
			}
			lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
			if len(lines) != len(ref.Rows) {
				t.Fatalf("testdata/%s has %d lines, the reference %d: re-run scripts/setup-finetune-fixtures.sh", ref.Data, len(lines), len(ref.Rows))
			}
			clean := true
			for i, row := range ref.Rows {
				ex, lerr := encodeLine(tok, lines[i], ref.SeqLen)
				if row.Error != "" {
					clean = false
					checkRejected(t, row.Line, row.Error, row.MessageIndex, lerr)
					continue
				}
				if lerr != nil {
					t.Errorf("line %d: %v; transformers accepts it", row.Line, lerr)
					continue
				}
				checkRow(t, row.Line, ex, row.IDs, row.Targets)
			}
			if clean {
				got, err := Read(context.Background(), filepath.Join("testdata", ref.Data), tok, ref.SeqLen)
				if err != nil {
					t.Fatal(err)
				}
				for i, row := range ref.Rows {
					checkRow(t, row.Line, got[i], row.IDs, row.Targets)
				}
			}
		})
	}
}

func checkRejected(t *testing.T, line int, want string, msg *int, lerr *LineError) {
	t.Helper()
	if lerr == nil {
		t.Errorf("line %d: accepted; transformers rejects it: %s", line, want)
		return
	}
	if msg == nil {
		return
	}
	var pe *PrefixError
	if !errors.As(lerr, &pe) || pe.Message != *msg {
		t.Errorf("line %d: %v; want a prefix mismatch at messages[%d] (%s)", line, lerr, *msg, want)
	}
}

func checkRow(t *testing.T, line int, ex Example, ids, targets []int) {
	t.Helper()
	got := make([]int, len(ex.Targets))
	for i, b := range ex.Targets {
		if b {
			got[i] = 1
		}
	}
	if !slices.Equal(ex.IDs, ids) {
		t.Errorf("line %d: ids\n got %v\nwant %v", line, ex.IDs, ids)
	}
	if !slices.Equal(got, targets) {
		t.Errorf("line %d: targets\n got %v\nwant %v", line, got, targets)
	}
}
