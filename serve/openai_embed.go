package serve

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/oip"
	"github.com/tensorbridge/tensorbridge/llm"
)

// POST /v1/embeddings (https://platform.openai.com/docs/api-reference/embeddings/create):
// each input's final hidden states pooled into one L2-normalised vector
// (llm.Embedder), on the served checkpoint's weights, without going
// through its generation engine.

// Bounds of an embeddings request, OpenAI's documented ones: at most 2048
// inputs, and 300,000 tokens summed over them (each within the context).
const (
	maxEmbedInputs      = 2048
	maxEmbedTotalTokens = 300_000
)

// embedBytesPerValue is what the in-flight budget is charged per value of
// the answer: the float32 and its JSON text (at most 15 bytes with its
// comma), or its base64.
const embedBytesPerValue = 4 + 16

// embedRequest is the request body. Dimensions is refused unless it is
// the model's own size (no truncation is done).
type embedRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     *int64          `json:"dimensions"`
	User           string          `json:"user"`
}

// embedState is a generator's embedder, made on the first request (its
// buckets are the engine's, known once the engine is warm) and freed by
// close.
type embedState struct {
	pooling llm.Pooling // resolved when the checkpoint is loaded
	mu      sync.Mutex
	em      *llm.Embedder
	closed  bool
}

// get returns the embedder, making it the first time.
func (st *embedState) get(g *generator, eng *llm.Engine) (*llm.Embedder, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, &errs.UnavailableError{Name: g.name, Reason: "the model is shutting down"}
	}
	if st.em == nil {
		em, err := llm.NewEmbedder(g.model, llm.EmbedOptions{Pooling: st.pooling, Buckets: eng.PromptBuckets()})
		if err != nil {
			return nil, err
		}
		st.em = em
	}
	return st.em, nil
}

// close frees the embedder's programs after the run in progress.
func (st *embedState) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	if st.em != nil {
		_ = st.em.Close()
	}
}

// oaiEmbeddings serves POST /v1/embeddings.
func (s *Server) oaiEmbeddings(w http.ResponseWriter, r *http.Request) {
	res := &reservation{b: s.budget}
	defer res.done()
	var q embedRequest
	if err := s.readGenBody(r, res, &q); err != nil {
		writeOAIError(w, err)
		return
	}
	g, err := s.lookupGen(q.Model, "")
	if err != nil {
		s.met.unknownModel.Inc()
		writeOAIError(w, err)
		return
	}
	// A large batch may outlast the write timeout: the deadline is set
	// for the write itself, once the answer is ready.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	body, err := s.embed(r, g, &q, res)
	_ = rc.SetWriteDeadline(time.Now().Add(s.opts.Limits.WriteTimeout))
	if err != nil {
		code := writeOAIError(w, err)
		g.met.requests.WithLabelValues("embeddings", fmt.Sprint(code)).Inc()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	g.met.requests.WithLabelValues("embeddings", "200").Inc()
}

// embed checks q, runs the embedder and returns the answer's JSON.
func (s *Server) embed(r *http.Request, g *generator, q *embedRequest, res *reservation) ([]byte, error) {
	prompts, err := embedInputs(q.Input, g)
	if err != nil {
		return nil, err
	}
	ntok, err := checkEmbedInputs(prompts, g.context)
	if err != nil {
		return nil, err
	}
	eng := g.eng.Load()
	if eng == nil || !s.Ready() {
		return nil, &errs.UnavailableError{Name: g.name, Reason: "the model is not ready (warming up, or the server is shutting down)"}
	}
	em, err := g.emb.get(g, eng)
	if err != nil {
		return nil, err
	}
	b64, err := q.base64(em.Dimensions())
	if err != nil {
		return nil, err
	}
	res.release(res.held) // the body is no longer needed; the answer is charged instead
	if err := res.grow(int64(len(prompts)) * int64(em.Dimensions()) * embedBytesPerValue); err != nil {
		return nil, err
	}
	// The client leaving, or the drain deadline, ends the batch between runs.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.genCtx, cancel)()
	vecs, err := em.Embed(ctx, prompts)
	if errors.Is(err, tensorbridge.ErrClosed) {
		err = &errs.UnavailableError{Name: g.name, Reason: "the model is shutting down", Err: err}
	}
	if err != nil {
		return nil, err
	}
	return embedAnswer(g.name, vecs, ntok, b64)
}

// base64 reads encoding_format ("float", the default, or "base64") and
// refuses dimensions other than the model's own, hidden.
func (q *embedRequest) base64(hidden int) (bool, error) {
	if q.Dimensions != nil && *q.Dimensions != int64(hidden) {
		return false, paramErr("dimensions", "dimensions is not supported: this model's embeddings have %d dimensions and are not shortened, got %d", hidden, *q.Dimensions)
	}
	if q.EncodingFormat == nil {
		return false, nil
	}
	switch *q.EncodingFormat {
	case "float":
		return false, nil
	case "base64":
		return true, nil
	}
	return false, paramErr("encoding_format", "encoding_format must be \"float\" or \"base64\", got %q", oip.Clip(*q.EncodingFormat))
}

// embedInputs reads input: a string, a list of strings, a list of token
// ids or a list of lists of ids. Strings are tokenized with the
// tokenizer's default special tokens and nothing appended.
func embedInputs(raw json.RawMessage, g *generator) ([][]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, paramErr("input", "input is required")
	}
	const want = "input must be a string, a list of strings, a list of token ids or a list of lists of token ids"
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return tokenizeInputs([]string{text}, g)
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, paramErr("input", want)
	}
	if len(items) == 0 {
		return nil, paramErr("input", "input must not be an empty list")
	}
	if len(items) > maxEmbedInputs {
		return nil, paramErr("input", "input has %d items: at most %d are allowed", len(items), maxEmbedInputs)
	}
	switch first := bytes.TrimSpace(items[0]); {
	case len(first) > 0 && first[0] == '"':
		var texts []string
		if json.Unmarshal(raw, &texts) != nil {
			return nil, paramErr("input", want)
		}
		return tokenizeInputs(texts, g)
	case len(first) > 0 && first[0] == '[':
		var lists [][]int
		if json.Unmarshal(raw, &lists) != nil {
			return nil, paramErr("input", want)
		}
		return lists, nil
	default:
		var ids []int
		if json.Unmarshal(raw, &ids) != nil {
			return nil, paramErr("input", want)
		}
		return [][]int{ids}, nil
	}
}

// tokenizeInputs tokenizes each text, refusing an empty one (as OpenAI).
func tokenizeInputs(texts []string, g *generator) ([][]int, error) {
	out := make([][]int, len(texts))
	for i, t := range texts {
		if t == "" {
			return nil, paramErr("input", "input[%d] is an empty string", i)
		}
		ids, err := g.tok.Encode(t, true)
		if err != nil {
			return nil, paramErr("input", "input[%d]: %v", i, err)
		}
		out[i] = ids
	}
	return out, nil
}

// checkEmbedInputs refuses an input of no tokens or of more than the
// context, and more than maxEmbedTotalTokens in all; it returns the
// tokens in all. (The embedder checks the ids against the vocabulary.)
func checkEmbedInputs(prompts [][]int, context int) (int, error) {
	total := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return 0, paramErr("input", "input[%d] has no tokens", i)
		}
		if len(p) > context {
			return 0, paramErr("input", "This model's maximum context length is %d tokens, however input[%d] has %d tokens. Please reduce its length.", context, i, len(p))
		}
		total += len(p)
		if total > maxEmbedTotalTokens {
			return 0, paramErr("input", "the inputs hold more than %d tokens in all, the most allowed per request", maxEmbedTotalTokens)
		}
	}
	return total, nil
}

// embedAnswer is OpenAI's answer: the list of embeddings (float32 numbers,
// or base64 of their little-endian bytes, which OpenAI's client decodes
// as numpy float32) and the usage.
func embedAnswer(model string, vecs [][]float32, ntok int, b64 bool) ([]byte, error) {
	type item struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	data := make([]item, len(vecs))
	for i, v := range vecs {
		data[i] = item{Object: "embedding", Index: i, Embedding: v}
		if b64 {
			raw := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(x))
			}
			data[i].Embedding = base64.StdEncoding.EncodeToString(raw)
		}
	}
	return json.Marshal(map[string]any{"object": "list", "data": data, "model": model,
		"usage": map[string]int{"prompt_tokens": ntok, "total_tokens": ntok}})
}
