package serve

import (
	"errors"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm/grammar"
)

// FuzzResponseFormat: any response_format value is read without a panic
// into nothing, a schema, or a 400 naming response_format; a schema read
// compiles (through the LRU) or fails with a *grammar.SchemaError that
// matches errs.ErrInvalidInput or errs.ErrUnsupported, never a panic.
func FuzzResponseFormat(f *testing.F) {
	for _, s := range []string{
		`{"type":"json_object"}`, `{"type":"text"}`, `null`, `"json"`, `{"type":"yaml"}`,
		`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"integer","minimum":1}},"required":["a"]}}}`,
		`{"type":"json_schema","json_schema":{"name":"x","schema":{"anyOf":[{"type":"string","maxLength":3},{"enum":[1,2,null]}]}}}`,
		`{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"#/$defs/n","$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}}}}}`,
		`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"a"}}}`,
		`{"type":"json_schema","json_schema":{"schema":5}}`, `{"type":"json_schema"}`, `[1,2]`, `{"type":7}`,
	} {
		f.Add([]byte(s))
	}
	var cache formatState
	f.Fuzz(func(t *testing.T, raw []byte) {
		q := &oaiRequest{oaiFormat: oaiFormat{ResponseFormat: raw}}
		schema, err := q.formatSchema()
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Param != "response_format" {
				t.Fatalf("%q: error %v is not a 400 naming response_format", raw, err)
			}
			return
		}
		if schema == nil {
			return
		}
		if _, err := cache.compiled(schema); err != nil {
			var se *grammar.SchemaError
			if !errors.As(err, &se) || !(errors.Is(err, errs.ErrInvalidInput) || errors.Is(err, errs.ErrUnsupported)) {
				t.Fatalf("%q: compile error %v (%T) is not a typed SchemaError", schema, err, err)
			}
		}
		if len(cache.keys) > grammarCacheSize || len(cache.grammars) != len(cache.keys) {
			t.Fatalf("cache holds %d keys, %d grammars (limit %d)", len(cache.keys), len(cache.grammars), grammarCacheSize)
		}
	})
}

// TestGrammarCacheLRU: the compiled-schema cache keeps the
// grammarCacheSize most recently used schemas, a hit refreshing one.
func TestGrammarCacheLRU(t *testing.T) {
	var c formatState
	schema := func(i int) []byte { return []byte(`{"type":"integer","maximum":` + string(rune('0'+i)) + `}`) }
	first, err := c.compiled(schema(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < grammarCacheSize+1; i++ {
		if i == grammarCacheSize {
			if again, _ := c.compiled(schema(0)); again != first { // a hit: schema 0 is now the newest
				t.Fatal("a cached schema was compiled again")
			}
		}
		if _, err := c.compiled(schema(i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.keys) != grammarCacheSize {
		t.Fatalf("%d schemas kept, want %d", len(c.keys), grammarCacheSize)
	}
	if _, ok := c.grammars[string(schema(1))]; ok {
		t.Error("schema 1, the least recently used, was kept")
	}
	if c.grammars[string(schema(0))] != first {
		t.Error("schema 0, refreshed by a hit, was dropped")
	}
}

// TestMaxChoices: the n limit is llm.MaxChoices, lowered by the source's
// MaxChoices and by the engine's slots.
func TestMaxChoices(t *testing.T) {
	for _, c := range []struct{ maxN, slots, want int }{{0, 0, 16}, {0, 4, 4}, {2, 4, 2}, {100, 32, 16}, {8, 0, 8}} {
		if got := (&generator{maxN: c.maxN, slots: c.slots}).maxChoices(); got != c.want {
			t.Errorf("maxN %d slots %d: %d, want %d", c.maxN, c.slots, got, c.want)
		}
	}
}
