package llm

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// TestPromptLogitsRefusesLength: a prompt PromptLogits cannot compute (no
// tokens, or more than the context holds) is a *RequestError matching
// errs.ErrInvalidInput, refused before anything compiles; the context's
// own length is accepted. Injected fault: the check returning a plain
// fmt.Errorf (as it did before) fails both refusal cases on errors.Is.
func TestPromptLogitsRefusesLength(t *testing.T) {
	dir := filepath.Join(fixtureDir(t), "llama")
	ctx := context.Background()
	m, err := Load(ctx, testBackend(t), dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	n := m.MaxContext()
	for _, tc := range []struct {
		name   string
		tokens int
		ok     bool
	}{
		{"empty", 0, false},
		{"past the context", n + 1, false},
		{"the whole context", n, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg, err := m.PromptLogits(ctx, make([]int, tc.tokens)) // token 0 is in every vocabulary
			if tc.ok {
				if err != nil || len(lg) != tc.tokens*m.Config.Vocab {
					t.Fatalf("%d tokens: %d logits, err %v; want %d×vocab %d, nil", tc.tokens, len(lg), err, tc.tokens, m.Config.Vocab)
				}
				return
			}
			var re *RequestError
			if !errors.Is(err, errs.ErrInvalidInput) || !errors.As(err, &re) {
				t.Fatalf("%d tokens (context %d): err %v (%T), want a *RequestError matching ErrInvalidInput", tc.tokens, n, err, err)
			}
		})
	}
}
