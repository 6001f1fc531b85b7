package serve

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/oip"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/llm/grammar"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// The OpenAI-compatible API (https://platform.openai.com/docs/api-reference:
// completions, chat/completions, models) and the Open Inference
// Protocol's generate extension (KServe's
// docs/predict-api/v2/generate_rest.yaml in https://github.com/kserve/kserve),
// served for checkpoint directories.

// registerGenerate adds the generation endpoints to mux.
func (s *Server) registerGenerate(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/models", s.oaiModels)
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.oaiGenerate(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.oaiGenerate(w, r, true) })
	mux.HandleFunc("POST /v1/embeddings", s.oaiEmbeddings)
	mux.HandleFunc("/v1/", oaiNoRoute) // an unknown path, or a known one with another method
	mux.HandleFunc("/v1", oaiNoRoute)
	for _, prefix := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		mux.HandleFunc("POST "+prefix+"/generate", func(w http.ResponseWriter, r *http.Request) { s.oipGenerate(w, r, false) })
		mux.HandleFunc("POST "+prefix+"/generate_stream", func(w http.ResponseWriter, r *http.Request) { s.oipGenerate(w, r, true) })
	}
}

// genJSONLimits bound a generation request's JSON shape before it is
// decoded (a chat has one object per message and per content part).
// Its depth leaves room for a response_format schema nested as deep as
// llm/grammar takes (two JSON levels per subschema), so that a deeper one
// is refused naming the schema's limit.
var genJSONLimits = oip.JSONLimits{Depth: 8 + 2*grammar.MaxSchemaDepth + 8, Objects: 4096, Keys: 16384}

// genBytesPerToken bounds a generation body by the longest context
// served: a prompt that fills the context takes a few bytes per token
// (JSON escapes included), so more than this many bytes per token of
// context cannot be a prompt that fits, and is not read or tokenized
// (the tokenizer runs at about 2 MB/s here and allocates a slot per
// token).
const genBytesPerToken = 64

// genBodyLimit is the largest generation request body: MaxMessageBytes,
// or less: 64 bytes per token of the longest context, at least 1 MiB.
func (s *Server) genBodyLimit() int64 {
	longest := 0
	for _, g := range s.gens {
		longest = max(longest, g.context)
	}
	return min(int64(s.opts.MaxMessageBytes), max(1<<20, int64(longest)*genBytesPerToken))
}

// readGenBody reads a generation request's JSON body within the request
// byte limit and the in-flight byte budget, and decodes it into v.
func (s *Server) readGenBody(r *http.Request, res *reservation, v any) error {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return &UnsupportedMediaError{Encoding: ce}
	}
	limit := s.genBodyLimit()
	if r.ContentLength > limit {
		return &TooLargeError{Limit: limit, Got: r.ContentLength}
	}
	body, err := readBody(r.Body, limit, res)
	if err != nil {
		return err
	}
	if err := oip.CheckJSON(body, genJSONLimits); err != nil {
		return paramErr("", "malformed JSON request: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return paramErr("", "malformed JSON request: %v", err)
	}
	if dec.More() {
		return paramErr("", "malformed JSON request: data after the JSON object")
	}
	return nil
}

// lookupGen finds a generator by name (and version "" or "1").
func (s *Server) lookupGen(name, version string) (*generator, error) {
	g, ok := s.gens[name]
	if !ok {
		g, ok = s.adapterGen(name)
	}
	if !ok {
		names := slices.Sorted(maps.Keys(s.gens))
		return nil, &errs.Error{Kind: errs.NotFound, Op: "serve",
			Err: fmt.Errorf("the model %q does not exist; this server generates with %s", name, strings.Join(names, ", "))}
	}
	if version != "" && version != ModelVersion {
		return nil, &errs.Error{Kind: errs.NotFound, Op: "serve",
			Err: fmt.Errorf("model %q has no version %q; its only version is %s", name, version, ModelVersion)}
	}
	return g, nil
}

// metadata describes a generator for the v2 protocol's model metadata:
// the generate extension's text_input and text_output, as Triton reports
// its LLM models.
func (g *generator) metadata() oip.ModelMetadata {
	return oip.ModelMetadata{Name: g.name, Versions: []string{ModelVersion}, Platform: "tensorbridge_llm",
		Inputs:  []oip.TensorMetadata{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}}},
		Outputs: []oip.TensorMetadata{{Name: "text_output", Datatype: "BYTES", Shape: []int64{-1}}}}
}

// oaiModels lists the generators; 503 until warm-up has ended.
func (s *Server) oaiModels(w http.ResponseWriter, r *http.Request) {
	if !s.Ready() {
		writeOAIError(w, &errs.UnavailableError{Name: "server", Reason: "warming up (or shutting down)"})
		return
	}
	type entry struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		MaxLen  int    `json:"max_model_len"`
		Parent  string `json:"parent,omitempty"` // an adapter's base model, as vLLM lists LoRA modules
	}
	list := []entry{}
	for _, name := range s.genOrder {
		g := s.gens[name]
		list = append(list, entry{ID: name, Object: "model", Created: g.created, OwnedBy: "tensorbridge", MaxLen: g.context})
		for _, a := range g.model.Adapters() {
			list = append(list, entry{ID: a, Object: "model", Created: g.created, OwnedBy: "tensorbridge", MaxLen: g.context, Parent: name})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": list})
}

// oaiRequest holds the fields of completions and chat completions.
type oaiRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Messages []chatMessage   `json:"messages"`
	N        *int64          `json:"n"`
	Stream   bool            `json:"stream"`
	// Completions: an integer k (the sampled token's log-probability and
	// k alternatives); chat: a boolean, with top_logprobs: k
	// (openai_logprobs.go). Raw, so that a wrong type is a 400 naming it.
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs json.RawMessage `json:"top_logprobs"`
	Echo        bool            `json:"echo"`
	BestOf      *int64          `json:"best_of"`
	sampling
	oaiExtras
	oaiFormat
	oaiTools
}

// chatMessage is one message; content is a string or a list of text parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// Tool calling (openai_tools.go): an assistant's tool_calls, a tool
	// result's tool_call_id, and a name.
	Name       string          `json:"name"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// text returns the message's content as one string.
func (m chatMessage) text(i int) (string, error) {
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", paramErr(fmt.Sprintf("messages[%d].content", i), "messages[%d].content must be a string or a list of text parts", i)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", paramErr(fmt.Sprintf("messages[%d].content", i), "messages[%d]: content parts of type %q are not supported (only text)", i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// promptIDs tokenizes a completions prompt (a string, a list of one
// string, or a list of token ids) or a chat's messages through the chat
// template.
func (q *oaiRequest) promptIDs(g *generator, chat bool) ([]int, error) {
	if chat {
		if len(q.Messages) == 0 {
			return nil, paramErr("messages", "messages is required and must not be empty")
		}
		if ids, ok, err := q.toolPromptIDs(g); ok {
			return ids, err
		}
		msgs := make([]tokenizer.Message, len(q.Messages))
		for i, m := range q.Messages {
			text, err := m.text(i)
			if err != nil {
				return nil, err
			}
			msgs[i] = tokenizer.Message{Role: m.Role, Content: text}
		}
		ids, err := g.tok.EncodeChat(msgs, true)
		if err != nil {
			return nil, paramErr("messages", "%v", err)
		}
		return ids, nil
	}
	if len(q.Prompt) == 0 || string(q.Prompt) == "null" {
		return nil, paramErr("prompt", "prompt is required")
	}
	var text string
	if err := json.Unmarshal(q.Prompt, &text); err == nil {
		return g.tok.Encode(text, true)
	}
	var texts []string
	if err := json.Unmarshal(q.Prompt, &texts); err == nil {
		if len(texts) != 1 {
			return nil, paramErr("prompt", "a list prompt must hold exactly one string (one completion per request), got %d", len(texts))
		}
		return g.tok.Encode(texts[0], true)
	}
	var ids []int
	if err := json.Unmarshal(q.Prompt, &ids); err == nil {
		return ids, nil
	}
	return nil, paramErr("prompt", "prompt must be a string, a list of one string, or a list of token ids")
}

// checkUnsupported refuses what the server does not do, naming it.
func (q *oaiRequest) checkUnsupported(chat bool) error {
	if q.BestOf != nil && *q.BestOf != 1 {
		return paramErr("best_of", "only best_of=1 is supported, got %d", *q.BestOf)
	}
	if q.Echo && chat {
		return paramErr("echo", "echo is a completions field (chat completions do not echo)")
	}
	if chat && q.Prompt != nil {
		return paramErr("prompt", "chat completions take messages, not prompt")
	}
	if !chat && q.Messages != nil {
		return paramErr("messages", "completions take prompt, not messages (use /v1/chat/completions)")
	}
	return nil
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// usage is OpenAI's token accounting.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (st genStats) usage() *usage {
	return &usage{PromptTokens: st.prompt, CompletionTokens: st.completion, TotalTokens: st.prompt + st.completion}
}

// oaiGenerate serves /v1/completions (chat false) and
// /v1/chat/completions.
func (s *Server) oaiGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	endpoint := "completions"
	if chat {
		endpoint = "chat_completions"
	}
	res := &reservation{b: s.budget}
	defer res.done()
	var q oaiRequest
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
	fail := func(err error) {
		code := writeOAIError(w, err)
		g.met.requests.WithLabelValues(endpoint, fmt.Sprint(code)).Inc()
	}
	if err := q.checkUnsupported(chat); err != nil {
		fail(err)
		return
	}
	lp, err := q.logprobSpec(chat)
	if err != nil {
		fail(err)
		return
	}
	if err := q.readTools(g, chat); err != nil {
		fail(err)
		return
	}
	if q.plan.active() && lp.on && q.Stream {
		fail(paramErr("logprobs", "logprobs are not streamed with tools (the answer is held until it ends); ask without stream"))
		return
	}
	ids, err := q.promptIDs(g, chat)
	if err != nil {
		fail(err)
		return
	}
	includeUsage, err := q.includeUsage()
	if err != nil {
		fail(err)
		return
	}
	req, err := q.sampling.toRequest(g, ids)
	if q.Model != g.name {
		req.Adapter = q.Model // lookupGen found an adapter of g
	}
	if err == nil {
		err = q.applyExtras(g, &req)
	}
	if err == nil {
		err = q.applyFormat(g, &req)
	}
	if err == nil {
		err = q.applyTools(g, &req)
	}
	if err != nil {
		fail(err)
		return
	}
	req.TopLogprobs, req.PromptLogprobs = lp.top, lp.echo && lp.on
	n, err := q.choices(g, lp)
	if err != nil {
		fail(err)
		return
	}
	res.done() // the body is no longer held
	o := &oaiOut{s: s, g: g, w: w, rc: http.NewResponseController(w), chat: chat, lp: lp, includeUsage: includeUsage,
		id: newID(map[bool]string{false: "cmpl-", true: "chatcmpl-"}[chat]), created: time.Now().Unix()}
	o.tools = q.plan
	if lp.echo {
		o.echo, o.prompt = q.echoText(g, ids), ids
	}
	_ = o.rc.SetWriteDeadline(time.Time{}) // set per write instead: generation outlasts the server's write timeout
	defer o.cutWritesAtDrain()()
	var st genStats
	if n > 1 {
		st, err = o.runChoices(r.Context(), req, n, q.Stream)
	} else if q.Stream {
		st, err = s.runGeneration(r.Context(), g, req, o.streamEvent)
		if err == nil {
			o.streamEnd(st)
		}
	} else {
		st, err = s.runGeneration(r.Context(), g, req, o.collect)
		if err == nil {
			o.writeWhole(st)
		}
	}
	if err != nil {
		fail(err)
		return
	}
	g.met.requests.WithLabelValues(endpoint, "200").Inc()
}

// oaiOut writes one request's answer: server-sent chunks as events
// arrive, or one JSON object at the end.
type oaiOut struct {
	s        *Server
	g        *generator
	w        http.ResponseWriter
	rc       *http.ResponseController
	chat     bool
	lp       lpSpec
	echo     string // the prompt's text, with echo
	prompt   []int  // the prompt's ids, with echo
	echoSent bool   // the echo went out in a stream's first chunk
	lpOffset int    // text_offset of the next token (completions' logprobs)
	// includeUsage: stream_options.include_usage (a last chunk with the
	// usage, "usage": null on the others).
	includeUsage bool
	index        int       // the choice's index (openai_choices.go)
	tools        *toolPlan // tools and tool_choice (openai_tools.go); nil: none
	parent       *oaiOut   // a choice's writer: the request's oaiOut
	id           string
	created      int64
	started      bool // stream headers written
	roleSent     bool

	text    strings.Builder
	tokens  []int
	lps     []float32
	tops    [][]llm.TopLogprob
	promptL []llm.PromptLogprob
	finish  string
	err     error
}

func (o *oaiOut) object() string {
	if o.chat {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

// logprobsJSON is a piece's log-probabilities in the endpoint's format
// (nil when not asked for); completions' text offsets continue from the
// previous piece's.
func (o *oaiOut) logprobsJSON(es []lpEntry) any {
	if !o.lp.on {
		return nil
	}
	if o.chat {
		return o.chatLogprobs(es)
	}
	return o.completionLogprobs(es, &o.lpOffset)
}

// choice is one choice of a chunk or a whole answer.
func (o *oaiOut) choice(text string, es []lpEntry, finish string, whole bool) map[string]any {
	c := map[string]any{"index": o.index, "logprobs": o.logprobsJSON(es), "finish_reason": nil}
	if finish != "" {
		c["finish_reason"] = finish
	}
	switch {
	case !o.chat:
		c["text"] = text
	case whole:
		c["message"] = map[string]any{"role": "assistant", "content": text}
		o.toolMessage(c, text)
	default:
		d := map[string]any{"content": text}
		if !o.roleSent {
			d["role"] = "assistant"
			o.roleSent = true
		}
		c["delta"] = d
	}
	return c
}

// sse writes one server-sent event and flushes it, within the write
// timeout.
func (o *oaiOut) sse(data []byte) error {
	if o.parent != nil { // one choice of n (openai_choices.go)
		return o.parent.sse(data)
	}
	if !o.started {
		h := o.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		o.w.WriteHeader(http.StatusOK)
		o.started = true
	}
	_ = o.rc.SetWriteDeadline(o.writeDeadline())
	if _, err := fmt.Fprintf(o.w, "data: %s\n\n", data); err != nil {
		return err
	}
	return o.rc.Flush()
}

// drainWriteGrace is how long a write may still take once the stream
// drain deadline has passed.
const drainWriteGrace = time.Second

// writeDeadline is the deadline of the next write: the write timeout, or
// drainWriteGrace once the stream drain deadline has passed.
func (o *oaiOut) writeDeadline() time.Time {
	if o.s.genCtx.Err() != nil {
		return time.Now().Add(drainWriteGrace)
	}
	return time.Now().Add(o.s.opts.Limits.WriteTimeout)
}

// cutWritesAtDrain shortens the deadline of a write already blocked on a
// client that does not read when the stream drain deadline passes, so
// that the drain ends within StreamDrainTimeout plus drainWriteGrace
// rather than the write timeout. It returns the function that stops it.
func (o *oaiOut) cutWritesAtDrain() func() bool {
	return context.AfterFunc(o.s.genCtx, func() { _ = o.rc.SetWriteDeadline(time.Now().Add(drainWriteGrace)) })
}

func (o *oaiOut) chunk(choices []any, u *usage) error {
	m := map[string]any{"id": o.id, "object": o.object(), "created": o.created, "model": o.g.name, "choices": choices}
	o.usageField(m, u)
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return o.sse(b)
}

// streamEvent sends one event as a chunk; an engine error mid-stream is
// sent as an error event (the status line has gone).
func (o *oaiOut) streamEvent(ev genEvent) error {
	if ev.err != nil && ev.finish == "error" {
		_, e := oaiErrorFor(&errs.Error{Kind: errs.Internal, Op: "generate", Err: ev.err})
		b, _ := json.Marshal(map[string]oaiError{"error": e})
		return o.sse(b)
	}
	if o.tools.active() {
		return o.toolStreamEvent(ev)
	}
	es := genEntries(ev.ids, ev.logprob, ev.top)
	text := ev.text
	if o.lp.echo && !o.echoSent && ev.ids != nil {
		// The prompt goes out with the first token, as vLLM streams it.
		o.echoSent = true
		text = o.echo + text
		if o.lp.on {
			es = append(promptEntries(o.prompt, ev.prompt), es...)
		}
	}
	return o.chunk([]any{o.choice(text, es, ev.finish, false)}, nil)
}

// streamEnd sends the usage chunk when stream_options.include_usage
// asks for it (OpenAI's shape: empty choices and the usage), then [DONE].
func (o *oaiOut) streamEnd(st genStats) {
	if o.includeUsage {
		if err := o.chunk([]any{}, st.usage()); err != nil {
			return
		}
	}
	_ = o.sse([]byte("[DONE]"))
}

// collect gathers a non-streaming answer.
func (o *oaiOut) collect(ev genEvent) error {
	o.text.WriteString(ev.text)
	o.tokens = append(o.tokens, ev.ids...)
	o.lps = append(o.lps, ev.logprob...)
	o.tops = append(o.tops, ev.top...)
	if ev.prompt != nil {
		o.promptL = ev.prompt
	}
	if ev.finish != "" {
		o.finish = ev.finish
	}
	if ev.err != nil && ev.finish == "error" {
		o.err = ev.err
	}
	return nil
}

func (o *oaiOut) writeWhole(st genStats) { o.writeChoices([]*oaiOut{o}, st) }

// writeChoices writes the whole answer of choices (one oaiOut each, o's
// own when n = 1), or the first one's error.
func (o *oaiOut) writeChoices(choices []*oaiOut, st genStats) {
	list := make([]any, len(choices))
	for i, c := range choices {
		if c.err != nil {
			writeOAIError(o.w, &errs.Error{Kind: errs.Internal, Op: "generate", Err: c.err})
			return
		}
		list[i] = c.wholeChoice()
	}
	object := "text_completion"
	if o.chat {
		object = "chat.completion"
	}
	_ = o.rc.SetWriteDeadline(o.writeDeadline())
	writeJSON(o.w, http.StatusOK, map[string]any{"id": o.id, "object": object, "created": o.created, "model": o.g.name,
		"choices": list, "usage": st.usage()})
}

// wholeChoice is the collected answer as a choice of a whole response.
func (o *oaiOut) wholeChoice() map[string]any {
	es := genEntries(o.tokens, o.lps, o.tops)
	text := o.text.String()
	if o.lp.echo {
		text = o.echo + text
		if o.lp.on {
			es = append(promptEntries(o.prompt, o.promptL), es...)
		}
	}
	return o.choice(text, es, o.finish, true)
}

// oipGenerateRequest is KServe's generate request: text_input and
// parameters (the sampling fields above).
type oipGenerateRequest struct {
	ID         string   `json:"id"`
	TextInput  *string  `json:"text_input"`
	Parameters sampling `json:"parameters"`
}

// oipGenerate serves /v2/models/{m}/generate and generate_stream:
// text_output whole, or one server-sent event per piece (no [DONE], as
// Triton's generate_stream).
func (s *Server) oipGenerate(w http.ResponseWriter, r *http.Request, stream bool) {
	endpoint := "generate"
	if stream {
		endpoint = "generate_stream"
	}
	g, err := s.lookupGen(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		s.met.unknownModel.Inc()
		writeErr(w, err)
		return
	}
	res := &reservation{b: s.budget}
	defer res.done()
	fail := func(err error) {
		code := genStatus(err)
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", retryAfter(retryAfterSeconds(err)))
		}
		writeError(w, code, err.Error())
		g.met.requests.WithLabelValues(endpoint, fmt.Sprint(code)).Inc()
	}
	var q oipGenerateRequest
	if err := s.readGenBody(r, res, &q); err != nil {
		fail(err)
		return
	}
	if q.TextInput == nil {
		fail(paramErr("text_input", "text_input is required"))
		return
	}
	ids, err := g.tok.Encode(*q.TextInput, true)
	if err != nil {
		fail(err)
		return
	}
	req, err := q.Parameters.toRequest(g, ids)
	if err != nil {
		fail(err)
		return
	}
	if name := r.PathValue("model"); name != g.name {
		req.Adapter = name // lookupGen found an adapter of g
	}
	res.done()
	o := &oaiOut{s: s, g: g, w: w, rc: http.NewResponseController(w)}
	_ = o.rc.SetWriteDeadline(time.Time{})
	defer o.cutWritesAtDrain()()
	head := map[string]any{"model_name": g.name, "model_version": ModelVersion}
	if q.ID != "" {
		head["id"] = q.ID
	}
	out := func(text, finish string) map[string]any {
		m := maps.Clone(head)
		m["text_output"] = text
		if finish != "" {
			m["finish_reason"] = finish
		}
		return m
	}
	var st genStats
	if stream {
		st, err = s.runGeneration(r.Context(), g, req, func(ev genEvent) error {
			if ev.err != nil && ev.finish == "error" {
				b, _ := json.Marshal(map[string]string{"error": ev.err.Error()})
				return o.sse(b)
			}
			b, err := json.Marshal(out(ev.text, ev.finish))
			if err != nil {
				return err
			}
			return o.sse(b)
		})
	} else {
		st, err = s.runGeneration(r.Context(), g, req, o.collect)
		if err == nil {
			if o.err != nil {
				err = &errs.Error{Kind: errs.Internal, Op: "generate", Err: o.err}
			} else {
				m := out(o.text.String(), o.finish)
				m["prompt_tokens"], m["completion_tokens"] = st.prompt, st.completion
				_ = o.rc.SetWriteDeadline(o.writeDeadline())
				writeJSON(w, http.StatusOK, m)
			}
		}
	}
	if err != nil {
		fail(err)
		return
	}
	g.met.requests.WithLabelValues(endpoint, "200").Inc()
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// genDrainContext is cancelled StreamDrainTimeout after the drain starts,
// ending the generations still running.
func (s *Server) startGenDrain() {
	if len(s.gens) == 0 {
		return
	}
	time.AfterFunc(s.opts.StreamDrainTimeout, func() {
		s.log.Info("stream drain deadline passed: cancelling running generations", "timeout", s.opts.StreamDrainTimeout.String())
		s.genCancel()
	})
}
