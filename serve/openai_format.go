package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/llm/grammar"
)

// Structured output (docs/structured-output.md): response_format
// {"type": "json_object"} or {"type": "json_schema", "json_schema":
// {"name", "schema", "strict"}} on both endpoints (completions take it as
// vLLM does). The schema is compiled by llm/grammar once per distinct
// schema (a small LRU of compiled grammars per model, each holding its
// mask cache), and every sequence of the request gets its own
// grammar.Matcher, which the engine asks for the allowed tokens before
// each step (llm.Constraint). The text is the tokens' exact bytes.

// oaiFormat is the response_format field, kept raw so that a wrong shape
// is a 400 naming it.
type oaiFormat struct {
	ResponseFormat json.RawMessage `json:"response_format"`
}

// grammarCacheSize is how many compiled schemas a model keeps; each holds
// a mask cache of up to grammar.MaskCacheBytes.
const grammarCacheSize = 8

// formatState is a generator's structured-output state: the vocabulary's
// byte trie (built on first use) and the compiled grammars, most recently
// used last.
type formatState struct {
	once     sync.Once
	vocab    *grammar.Vocab
	vocabErr error
	mu       sync.Mutex
	keys     []string
	grammars map[string]*grammar.Grammar
}

// formatVocab returns the generator's grammar vocabulary, built once from
// its tokenizer with the model's end-of-sequence ids (those the engine
// stops on).
func (g *generator) formatVocab() (*grammar.Vocab, error) {
	f := &g.format
	f.once.Do(func() { f.vocab, f.vocabErr = grammar.FromTokenizer(g.tok, g.model.Config.EOS) })
	return f.vocab, f.vocabErr
}

// compiled returns the grammar of schema, compiling it on a cache miss.
func (f *formatState) compiled(schema []byte) (*grammar.Grammar, error) {
	key := string(schema)
	f.mu.Lock()
	if gr, ok := f.grammars[key]; ok {
		f.touch(key)
		f.mu.Unlock()
		return gr, nil
	}
	f.mu.Unlock()
	gr, err := grammar.Compile(schema) // outside the lock: a large schema takes a while
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.grammars == nil {
		f.grammars = map[string]*grammar.Grammar{}
	}
	if _, ok := f.grammars[key]; !ok {
		f.grammars[key] = gr
		f.keys = append(f.keys, key)
		if len(f.keys) > grammarCacheSize {
			delete(f.grammars, f.keys[0])
			f.keys = f.keys[1:]
		}
	}
	return gr, nil
}

// touch moves key to the most recently used end.
func (f *formatState) touch(key string) {
	for i, k := range f.keys {
		if k == key {
			f.keys = append(append(f.keys[:i:i], f.keys[i+1:]...), key)
			return
		}
	}
}

// formatSchema reads response_format into the schema to compile (nil for
// none or {"type": "text"}), each wrong shape a 400 naming the field.
func (q *oaiRequest) formatSchema() ([]byte, error) {
	raw := bytes.TrimSpace(q.ResponseFormat)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, paramErr("response_format", "response_format must be an object with a type (text, json_object or json_schema): %v", err)
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return []byte(`{"type":"json_object"}`), nil
	case "json_schema":
		if rf.JSONSchema == nil {
			return nil, paramErr("response_format", "response_format of type json_schema needs json_schema: {\"name\": ..., \"schema\": {...}}")
		}
		s := bytes.TrimSpace(rf.JSONSchema.Schema)
		if len(s) == 0 || string(s) == "null" {
			return nil, paramErr("response_format", "response_format.json_schema.schema is required (a JSON schema object)")
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, s); err != nil {
			return nil, paramErr("response_format", "response_format.json_schema.schema is not JSON: %v", err)
		}
		return buf.Bytes(), nil
	}
	return nil, paramErr("response_format", "response_format.type must be text, json_object or json_schema, got %q", rf.Type)
}

// applyFormat sets r's constraint from response_format: each sequence a
// grammar.Matcher of the compiled schema, its text the tokens' bytes.
func (q *oaiRequest) applyFormat(g *generator, r *llm.Request) error {
	schema, err := q.formatSchema()
	if err != nil || schema == nil {
		return err
	}
	return constrainRequest(g, r, schema, "response_format")
}

// constrainRequest constrains r to schema (compiled through the
// generator's cache); a schema that does not compile is a 400 naming
// param and the keyword at fault.
func constrainRequest(g *generator, r *llm.Request, schema []byte, param string) error {
	gr, err := g.format.compiled(schema)
	if err != nil {
		var se *grammar.SchemaError
		if errors.As(err, &se) {
			return paramErr(param, "%s: %v", param, se)
		}
		return paramErr(param, "%s: %v", param, err)
	}
	v, err := g.formatVocab()
	if err != nil {
		return &errs.Error{Kind: errs.Internal, Op: "serve", Err: fmt.Errorf("model %s: building the vocabulary for constrained decoding: %w", g.name, err)}
	}
	r.NewConstraint = func() llm.Constraint { return grammar.NewMatcher(gr, v) }
	r.NewDetokenizer = func() llm.Detokenizer { return llm.NewByteDetokenizer(v.Token) }
	return nil
}
