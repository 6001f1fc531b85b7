package sft

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// FuzzRead: no file panics the reader; every failure is errs.ErrInvalidInput
// (a *LineError), and every row read is consistent: as many flags as ids,
// at most seq-len of them, a target after the first token, and a batch of
// the rows has labels only where the flags say.
func FuzzRead(f *testing.F) {
	for _, dir := range []string{"testdata", filepath.Join("testdata", "bad")} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte(`{"messages": [{"role": "user", "content": "<|im_start|>"}, {"role": "assistant", "content": "<|im_end|>"}]}`))
	f.Add([]byte("{\"text\": \"\\ud800\"}\r\n{\"prompt\": \"\", \"completion\": \"\\u0000x\"}"))
	tok := qwen2(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		const seqLen = 16
		rows, err := read(context.Background(), bytes.NewReader(data), "fuzz.jsonl", tok, seqLen)
		if err != nil {
			var le *LineError
			if !errors.Is(err, errs.ErrInvalidInput) || !errors.As(err, &le) {
				t.Fatalf("error %v is not a *LineError", err)
			}
			return
		}
		for i, r := range rows {
			if len(r.IDs) != len(r.Targets) || len(r.IDs) > seqLen || len(r.IDs) < 2 {
				t.Fatalf("row %d: %d ids, %d flags (seq-len %d)", i, len(r.IDs), len(r.Targets), seqLen)
			}
		}
		b, err := MakeBatch(rows, 1, len(rows), 0, -5)
		if err != nil {
			t.Fatal(err)
		}
		if b.Targets == 0 {
			t.Fatal("a batch of every row has no target")
		}
	})
}
