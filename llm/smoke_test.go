package llm

import (
	"context"
	"os"
	"testing"

	"github.com/tensorbridge/tensorbridge"
	_ "github.com/tensorbridge/tensorbridge/pjrt"
)

func TestSmoke(t *testing.T) {
	dir := os.Getenv("LLM_SMOKE_DIR")
	if dir == "" {
		t.Skip("no LLM_SMOKE_DIR")
	}
	ctx := context.Background()
	be := os.Getenv("TENSORBRIDGE_TEST_BACKEND")
	if be == "" {
		be = "cpu"
	}
	b, err := tensorbridge.Open(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := Load(ctx, b, dir, LoadOptions{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	lg, err := m.PromptLogits(ctx, []int{1, 5, 7, 9})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(lg[:5], lg[len(lg)-5:])
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ch, err := e.Generate(ctx, Request{Prompt: []int{1, 5, 7, 9}, MaxTokens: 10, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for tk := range ch {
		if tk.ID >= 0 {
			ids = append(ids, tk.ID)
		} else if tk.Err != nil {
			t.Fatal(tk.Err)
		}
	}
	t.Log(ids)
}
