package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// GeneratorSource is a Hugging Face checkpoint directory (config.json,
// *.safetensors, tokenizer.json) served for text generation over the
// OpenAI-compatible API and the Open Inference Protocol's generate
// extension.
type GeneratorSource struct {
	// Name is the model's name in requests (default: Dir's base name).
	Name string
	Dir  string
	// Load and Engine size the model and its engine; the server sets
	// Engine.NewDetokenizer from the checkpoint's tokenizer.
	Load   llm.LoadOptions
	Engine llm.EngineOptions
	// Pooling of /v1/embeddings: "" takes the checkpoint's
	// sentence-transformers configuration, else the last token's
	// (llm.ResolvePooling).
	Pooling llm.Pooling
	// MaxChoices is the most choices (OpenAI's n) a request may ask for:
	// 0 or more than llm.MaxChoices is llm.MaxChoices; the engine's
	// sequences bound it too (openai_choices.go).
	MaxChoices int
}

// IsCheckpointDir reports whether path is a directory holding a Hugging
// Face checkpoint (a config.json), which serve loads as a generator.
func IsCheckpointDir(path string) bool {
	return fileExists(filepath.Join(path, "config.json"))
}

// generator is one served checkpoint: its tokenizer and weights from New,
// its engine from Warmup.
type generator struct {
	name    string
	dir     string
	tok     *tokenizer.Tokenizer
	model   *llm.Model
	opts    llm.EngineOptions
	eng     atomic.Pointer[llm.Engine]
	context int // tokens a sequence may hold, prompt included
	created int64
	met     *genMetrics
	running atomic.Int64 // sequences with their first token
	waiting atomic.Int64 // sequences accepted, before their first token
	slots   int
	emb     embedState // /v1/embeddings (openai_embed.go)
	maxN    int        // GeneratorSource.MaxChoices

	format formatState // response_format (openai_format.go)
}

// loadGenerator reads the tokenizer and places the weights on device 0.
func loadGenerator(ctx context.Context, b *tensorbridge.Backend, src GeneratorSource) (*generator, error) {
	if src.Name == "" {
		src.Name = filepath.Base(filepath.Clean(src.Dir))
	}
	tok, err := tokenizer.Load(src.Dir)
	if err != nil {
		return nil, err
	}
	pool, err := llm.ResolvePooling(src.Dir, src.Pooling)
	if err != nil {
		return nil, err
	}
	m, err := llm.Load(ctx, b, src.Dir, src.Load)
	if err != nil {
		return nil, err
	}
	g := &generator{name: src.Name, dir: src.Dir, tok: tok, model: m, opts: src.Engine,
		context: m.MaxContext(), created: time.Now().Unix()}
	g.opts.NewDetokenizer = func() llm.Detokenizer { return tok.NewDecoder(true) }
	g.emb.pooling = pool
	g.maxN = src.MaxChoices
	return g, nil
}

// warmup starts the engine, which compiles and runs every program once
// (with Engine.BackgroundCompile, those a short request needs, the others
// compiling in the background), logging each compiled program.
func (g *generator) warmup(ctx context.Context, log *slog.Logger) error {
	if g.eng.Load() != nil {
		return nil
	}
	start := time.Now()
	opts := g.opts
	if opts.Logger == nil {
		opts.Logger = log.With("model", g.name)
	}
	e, err := llm.NewEngine(ctx, g.model, opts)
	if err != nil {
		return fmt.Errorf("model %s: %w", g.name, err)
	}
	seqs, toks, bytes := e.Capacity()
	blocks, blockSize := e.KVBlocks()
	g.slots = seqs
	g.met.cacheBytes.Set(float64(bytes))
	g.eng.Store(e)
	log.Info("generator ready", "model", g.name, "dir", g.dir, "context", g.context, "kv_cache_sequences", seqs,
		"kv_cache_tokens_per_sequence", toks, "kv_cache_blocks", blocks, "kv_cache_block_size", blockSize,
		"kv_cache_bytes", bytes, "warmup", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// genProgress is a generator's compile progress for /v2/health/ready:
// the programs compiled and pending (llm.Engine.Progress).
type genProgress struct {
	Ready    bool     `json:"ready"`
	Compiled []string `json:"programs_compiled"`
	Pending  []string `json:"programs_pending"`
}

// genProgress is every generator's compile progress; nil without
// generators.
func (s *Server) genProgress() map[string]genProgress {
	if len(s.gens) == 0 {
		return nil
	}
	out := make(map[string]genProgress, len(s.gens))
	for name, g := range s.gens {
		p := genProgress{Compiled: []string{}, Pending: []string{}}
		if e := g.eng.Load(); e != nil {
			cp := e.Progress()
			p.Ready, p.Compiled, p.Pending = true, cp.Compiled, cp.Pending
		}
		out[name] = p
	}
	return out
}

// close stops the engine (running streams end "cancelled") and frees the
// weights.
func (g *generator) close() {
	g.emb.close()
	if e := g.eng.Swap(nil); e != nil {
		_ = e.Close()
	}
	if g.model != nil {
		_ = g.model.Close()
		g.model = nil
	}
}

// setGauges publishes the running and waiting counts and the KV cache's
// slot use.
func (g *generator) setGauges() {
	r, w := g.running.Load(), g.waiting.Load()
	g.met.running.Set(float64(r))
	g.met.waiting.Set(float64(w))
	if g.slots > 0 {
		g.met.cacheUse.Set(float64(r) / float64(g.slots))
	}
}

// Generation metric names (prometheus.io/docs/practices/naming).
const (
	MetricTTFT            = "tensorbridge_llm_time_to_first_token_seconds"
	MetricTPOT            = "tensorbridge_llm_time_per_output_token_seconds"
	MetricGenerated       = "tensorbridge_llm_generated_tokens_total"
	MetricPromptTokens    = "tensorbridge_llm_prompt_tokens_total"
	MetricGenRequests     = "tensorbridge_llm_requests_total"
	MetricRunning         = "tensorbridge_llm_sequences_running"
	MetricWaiting         = "tensorbridge_llm_sequences_waiting"
	MetricKVCacheUse      = "tensorbridge_llm_kv_cache_usage_ratio"
	MetricKVCacheCapacity = "tensorbridge_llm_kv_cache_bytes"
)

// genMetrics are one generator's collectors.
type genMetrics struct {
	ttft, tpot        prometheus.Observer
	generated, prompt prometheus.Counter
	requests          *prometheus.CounterVec
	running, waiting  prometheus.Gauge
	cacheUse          prometheus.Gauge
	cacheBytes        prometheus.Gauge
}

// genCollectors are the server's generation collectors, by model.
type genCollectors struct {
	ttft, tpot        *prometheus.HistogramVec
	generated, prompt *prometheus.CounterVec
	requests          *prometheus.CounterVec
	running, waiting  *prometheus.GaugeVec
	cacheUse          *prometheus.GaugeVec
	cacheBytes        *prometheus.GaugeVec
	prefix            *prefixCollector
}

func newGenCollectors(reg *prometheus.Registry) *genCollectors {
	model := []string{"model"}
	c := &genCollectors{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricTTFT,
			Help: "Time from a generation request's arrival to its first token.", Buckets: durationBuckets}, model),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricTPOT,
			Help: "Time between consecutive output tokens of a sequence.", Buckets: durationBuckets}, model),
		generated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricGenerated,
			Help: "Tokens generated (tokens/s is its rate)."}, model),
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPromptTokens,
			Help: "Prompt tokens of accepted generation requests."}, model),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricGenRequests,
			Help: "Generation requests by model, endpoint and HTTP status."}, []string{"model", "endpoint", "code"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricRunning,
			Help: "Sequences holding a KV-cache slot (past their first token)."}, model),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricWaiting,
			Help: "Sequences accepted and not yet given their first token: the engine's queue depth, prefill included."}, model),
		cacheUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricKVCacheUse,
			Help: "Fraction of the KV cache's sequence slots in use."}, model),
		cacheBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricKVCacheCapacity,
			Help: "Device bytes of the KV cache."}, model),
		prefix: &prefixCollector{},
	}
	reg.MustRegister(c.ttft, c.tpot, c.generated, c.prompt, c.requests, c.running, c.waiting, c.cacheUse, c.cacheBytes, c.prefix)
	return c
}

func (c *genCollectors) forModel(name string) *genMetrics {
	return &genMetrics{ttft: c.ttft.WithLabelValues(name), tpot: c.tpot.WithLabelValues(name),
		generated: c.generated.WithLabelValues(name), prompt: c.prompt.WithLabelValues(name),
		requests: c.requests.MustCurryWith(prometheus.Labels{"model": name}),
		running:  c.running.WithLabelValues(name), waiting: c.waiting.WithLabelValues(name),
		cacheUse: c.cacheUse.WithLabelValues(name), cacheBytes: c.cacheBytes.WithLabelValues(name)}
}

// genRequest is a generation request after parsing: the prompt's ids and
// the engine request.
type genRequest struct {
	prompt []int
	req    llm.Request
}

// ParamError is a bad field of a generation request (400), naming it.
type ParamError struct {
	Param   string
	Message string
}

func (e *ParamError) Error() string { return e.Message }

// Is makes a ParamError match errs.ErrInvalidInput.
func (e *ParamError) Is(target error) bool { return target == errs.ErrInvalidInput }

func paramErr(param, format string, a ...any) error {
	return &ParamError{Param: param, Message: fmt.Sprintf(format, a...)}
}

// genStatus maps a generation error to its HTTP status: the engine's
// typed errors, then the server's.
func genStatus(err error) int {
	var pe *ParamError
	var re *llm.RequestError
	switch {
	case errors.As(err, &pe), errors.As(err, &re):
		return 400
	case errors.Is(err, llm.ErrQueueFull), errors.Is(err, llm.ErrEngineClosed):
		return 503
	}
	code, _ := status(err)
	return code
}

// sampling is the sampling fields every endpoint shares (OpenAI's names;
// vLLM's top_k and min_p).
type sampling struct {
	MaxTokens           *int64   `json:"max_tokens"`
	MaxCompletionTokens *int64   `json:"max_completion_tokens"`
	Temperature         *float64 `json:"temperature"`
	TopP                *float64 `json:"top_p"`
	TopK                *int64   `json:"top_k"`
	MinP                *float64 `json:"min_p"`
	Seed                *int64   `json:"seed"`
	Stop                any      `json:"stop"`
	IgnoreEOS           bool     `json:"ignore_eos"`
}

// Bounds on request fields.
const (
	maxStopStrings = 16
	maxStopBytes   = 256
)

// toRequest checks the fields against their ranges and the model's
// context and builds the engine request for prompt.
func (p *sampling) toRequest(g *generator, prompt []int) (llm.Request, error) {
	r := llm.Request{Prompt: prompt, IgnoreEOS: p.IgnoreEOS}
	if len(prompt) == 0 {
		return r, paramErr("prompt", "the prompt is empty")
	}
	if len(prompt) >= g.context {
		return r, paramErr("prompt", "This model's maximum context length is %d tokens. However, your prompt has %d tokens, which leaves no room for a completion. Please reduce the length of the prompt.", g.context, len(prompt))
	}
	room := int64(g.context - len(prompt))
	maxTok, field := p.MaxTokens, "max_tokens"
	if p.MaxCompletionTokens != nil {
		maxTok, field = p.MaxCompletionTokens, "max_completion_tokens"
	}
	if maxTok != nil {
		switch {
		case *maxTok < 1:
			return r, paramErr(field, "%s must be at least 1, got %d", field, *maxTok)
		case *maxTok > room:
			// vLLM's wording (vllm/entrypoints/openai/serving_engine.py).
			return r, paramErr(field, "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the length of the prompt or completion.",
				g.context, int64(len(prompt))+*maxTok, len(prompt), *maxTok)
		}
		r.MaxTokens = int(*maxTok)
	}
	// Unset fields take the checkpoint's generation_config.json defaults,
	// as transformers' generate does (llm.GenerationConfig).
	var o llm.SamplingOptions
	if p.Temperature != nil {
		if *p.Temperature < 0 || *p.Temperature > 100 {
			return r, paramErr("temperature", "temperature must be in [0, 100], got %g", *p.Temperature)
		}
		o.Temperature = p.Temperature
	}
	if p.TopP != nil {
		if *p.TopP <= 0 || *p.TopP > 1 {
			return r, paramErr("top_p", "top_p must be in (0, 1], got %g", *p.TopP)
		}
		o.TopP = p.TopP
	}
	if p.TopK != nil {
		if *p.TopK < -1 {
			return r, paramErr("top_k", "top_k must be -1 or 0 (off) or positive, got %d", *p.TopK)
		}
		o.TopK = new(int) // -1 and 0: off
		if *p.TopK > 0 {
			*o.TopK = int(min(*p.TopK, int64(g.model.Config.Vocab)))
		}
	}
	if p.MinP != nil {
		if *p.MinP < 0 || *p.MinP > 1 {
			return r, paramErr("min_p", "min_p must be in [0, 1], got %g", *p.MinP)
		}
		o.MinP = p.MinP
	}
	if p.Seed != nil {
		if *p.Seed < 0 || *p.Seed > 1<<32-1 {
			return r, paramErr("seed", "seed must be in [0, 4294967295], got %d", *p.Seed)
		}
		o.Seed = uint32(*p.Seed)
	} else {
		o.Seed = rand.Uint32()
	}
	gen := &g.model.Config.Generation
	if o.Temperature == nil && !gen.DoSample {
		// The checkpoint asks for no sampling of its own: OpenAI's
		// documented defaults (temperature 1, no top-k), as vLLM serves
		// them, rather than transformers' greedy default.
		one := 1.0
		o.Temperature = &one
		if o.TopK == nil {
			o.TopK = new(int)
		}
	}
	r.Sampling = gen.Sampling(o)
	if maxTok == nil {
		r.MaxTokens = gen.MaxTokens(nil, len(prompt), g.context)
	}
	stops, err := stopStrings(p.Stop)
	if err != nil {
		return r, err
	}
	r.StopStrings = stops
	return r, nil
}

// stopStrings reads "stop": null, a string or a list of strings.
func stopStrings(v any) ([]string, error) {
	var list []string
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		list = []string{x}
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, paramErr("stop", "stop must be a string or a list of strings")
			}
			list = append(list, s)
		}
	default:
		return nil, paramErr("stop", "stop must be a string or a list of strings")
	}
	if len(list) > maxStopStrings {
		return nil, paramErr("stop", "at most %d stop strings, got %d", maxStopStrings, len(list))
	}
	var out []string
	for _, s := range list {
		if len(s) > maxStopBytes {
			return nil, paramErr("stop", "a stop string is at most %d bytes, got %d", maxStopBytes, len(s))
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// genEvent is one piece of a generation as the endpoints see it.
type genEvent struct {
	text    string
	ids     []int
	logprob []float32
	top     [][]llm.TopLogprob  // each token's alternatives (Request.TopLogprobs)
	prompt  []llm.PromptLogprob // the prompt's, on the first token (Request.PromptLogprobs)
	finish  string              // "" until the last event
	err     error
}

// genStats are a finished generation's counts.
type genStats struct {
	prompt, completion int
}

// run starts the generation and calls emit for each event, ending with
// one whose finish is set. It returns an error only when the engine
// refuses the request before it starts (emit was not called). ctx ends the
// sequence (the client went away, or the drain deadline passed).
func (s *Server) runGeneration(ctx context.Context, g *generator, r llm.Request, emit func(genEvent) error) (genStats, error) {
	st := genStats{prompt: len(r.Prompt)}
	e := g.eng.Load()
	if e == nil || !s.Ready() {
		return st, &errs.UnavailableError{Name: g.name, Reason: "the model is not ready (warming up, or the server is shutting down)"}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.genCtx, cancel) // the drain deadline cancels streams
	defer stop()
	start := time.Now()
	ch, err := e.Generate(ctx, r)
	if err != nil {
		if errors.Is(err, llm.ErrQueueFull) {
			return st, &QueueFullError{Model: g.name, Size: g.opts.MaxQueue}
		}
		return st, err
	}
	g.met.prompt.Add(float64(len(r.Prompt)))
	g.waiting.Add(1)
	g.setGauges()
	first, last := time.Time{}, time.Time{}
	defer func() {
		if first.IsZero() {
			g.waiting.Add(-1)
		} else {
			g.running.Add(-1)
		}
		g.setGauges()
	}()
	clientGone := false
	for t := range ch {
		ev := genEvent{text: t.Text, finish: t.Finish, err: t.Err}
		if t.ID >= 0 {
			now := time.Now()
			if first.IsZero() {
				first = now
				g.met.ttft.Observe(now.Sub(start).Seconds())
				g.waiting.Add(-1)
				g.running.Add(1)
				g.setGauges()
			} else {
				g.met.tpot.Observe(now.Sub(last).Seconds())
			}
			last = now
			st.completion++
			g.met.generated.Inc()
			ev.ids, ev.logprob, ev.top, ev.prompt = []int{t.ID}, []float32{t.Logprob}, [][]llm.TopLogprob{t.Top}, t.Prompt
		}
		if ev.finish == "cancelled" {
			ev.finish = "abort" // vLLM's finish reason for an aborted sequence
		}
		if clientGone || (ev.text == "" && ev.ids == nil && ev.finish == "") {
			continue
		}
		if err := emit(ev); err != nil {
			// The client cannot be written to: end the sequence and
			// drain the stream so the engine frees its slot.
			clientGone = true
			cancel()
		}
	}
	return st, nil
}

// loadGenerators loads every GeneratorSource; their engines start in
// Warmup.
func (s *Server) loadGenerators(ctx context.Context) error {
	if len(s.opts.Generators) == 0 {
		return nil
	}
	coll := newGenCollectors(s.reg)
	for _, src := range s.opts.Generators {
		g, err := loadGenerator(ctx, s.backend, src)
		if err != nil {
			return err
		}
		if _, dup := s.models[g.name]; dup {
			g.close()
			return &errs.Error{Kind: errs.InvalidArgument, Op: "serve", Err: fmt.Errorf("two models are named %q (%s and %s)", g.name, s.models[g.name].path, g.dir)}
		}
		if old, dup := s.gens[g.name]; dup {
			g.close()
			return &errs.Error{Kind: errs.InvalidArgument, Op: "serve", Err: fmt.Errorf("two models are named %q (%s and %s)", g.name, old.dir, g.dir)}
		}
		if err := s.checkAdapterNames(g); err != nil {
			g.close()
			return err
		}
		g.met = coll.forModel(g.name)
		coll.prefix.add(g)
		// Cold start (llm/coldstart.go): ready after the smallest buckets.
		g.opts.BackgroundCompile = g.opts.BackgroundCompile || s.opts.BackgroundWarmup
		s.gens[g.name] = g
		s.genOrder = append(s.genOrder, g.name)
		s.log.Info("generator loaded", "model", g.name, "dir", g.dir, "architecture", g.model.Config.Architecture,
			"dtype", g.model.DType().String(), "weight_bytes", g.model.WeightBytes(), "context", g.context,
			"mesh", g.model.Mesh().String(), "weight_bytes_per_device", g.model.WeightBytesPerDevice())
	}
	return nil
}
