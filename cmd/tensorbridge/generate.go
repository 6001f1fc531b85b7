package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
	"github.com/tensorbridge/tensorbridge/shard"
)

func init() {
	register(command{name: "generate", summary: "generate text from a Hugging Face checkpoint directory (Llama, Mistral, Qwen2, Qwen3)", run: generate})
}

// generateResult is --json's output.
type generateResult struct {
	PromptIDs []int   `json:"prompt_ids"`
	TokenIDs  []int   `json:"token_ids"`
	Text      string  `json:"text"`
	TTFTms    float64 `json:"ttft_ms"`
	TPOTms    float64 `json:"tpot_ms"`
	Finish    string  `json:"finish_reason"`
}

func generate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", stderr, "DIR --prompt TEXT [--chat] [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S] [--backend B] [--mesh model=M] [--json]")
	prompt := fs.String("prompt", "", "the prompt text")
	chat := fs.Bool("chat", false, "wrap the prompt as one user message through the checkpoint's chat template")
	maxTokens := fs.Int("max-tokens", 128, "most tokens to generate (unset: generation_config.json's max_new_tokens or max_length, else 128)")
	temperature := fs.Float64("temperature", 1, "sampling temperature; 0: greedy (unset: generation_config.json's, greedy unless it sets do_sample)")
	topP := fs.Float64("top-p", 1, "nucleus sampling mass, in (0, 1] (unset: generation_config.json's)")
	topK := fs.Int("top-k", 0, "sample among the K most likely tokens; 0: all (unset: generation_config.json's, else 50 as in transformers)")
	minP := fs.Float64("min-p", 0, "drop tokens less likely than min-p times the most likely (unset: generation_config.json's)")
	seed := fs.Uint("seed", 0, "the request's random seed")
	backend := fs.String("backend", "", "backend name or auto (default: $TENSORBRIDGE_BACKEND, else auto)")
	asJSON := fs.Bool("json", false, "print only one JSON object: prompt_ids, token_ids, text, ttft_ms, tpot_ms")
	kvBytes := fs.Int64("kv-cache-bytes", 0, "KV cache size cap in bytes (default 512 MiB on CPU backends, else what the memory budget leaves)")
	adapter := fs.String("adapter", "", "generate with the LoRA adapter in this directory (PEFT's files) on the checkpoint's weights")
	quantize := fs.String("quantize", "none", "none, or int8: the layers' linear projections as int8 with a float32 scale per output channel (embeddings and LM head stay in --precision)")
	var sf settingsFlags
	addSettingsFlags(fs, &sf)
	var mf meshFlags
	addMeshFlags(fs, &mf)
	if err := parse(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("want exactly one checkpoint DIR, got %d", fs.NArg())
	}
	switch {
	case *maxTokens < 1:
		return usageErr("--max-tokens must be at least 1")
	case *temperature < 0 || math.IsNaN(*temperature):
		return usageErr("--temperature cannot be negative")
	case *topP <= 0 || *topP > 1:
		return usageErr("--top-p must be in (0, 1]")
	case *topK < 0:
		return usageErr("--top-k cannot be negative")
	case *minP < 0 || *minP > 1:
		return usageErr("--min-p must be in [0, 1]")
	case *seed > math.MaxUint32:
		return usageErr("--seed must fit 32 bits")
	}
	quant, err := llm.ParseQuantization(*quantize)
	if err != nil {
		return usageErr("--quantize: %v", err)
	}
	dir := fs.Arg(0)
	settings, err := sf.settings()
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	ids, err := encodePrompt(tok, *prompt, *chat)
	if err != nil {
		return err
	}
	b, err := tensorbridge.Open(ctx, *backend, tensorbridge.WithSettings(settings), sf.clusterOption())
	if err != nil {
		return err
	}
	defer b.Close()
	mesh, err := generationMesh(mf, len(b.Devices()))
	if err != nil {
		return err
	}
	cfg, err := llm.LoadConfig(dir)
	if err != nil {
		return err
	}
	// Flags left unset take generation_config.json's defaults.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var so llm.SamplingOptions
	so.Seed = uint32(*seed)
	if set["temperature"] {
		so.Temperature = temperature
	}
	if set["top-p"] {
		so.TopP = topP
	}
	if set["top-k"] {
		so.TopK = topK
	}
	if set["min-p"] {
		so.MinP = minP
	}
	sampling := cfg.Generation.Sampling(so)
	if !set["max-tokens"] {
		if n := cfg.Generation.MaxTokens(nil, len(ids), cfg.MaxPositions); n > 0 {
			*maxTokens = n
		}
	}
	// Only the context this request needs is compiled and cached.
	want := pow2AtLeast(len(ids) + *maxTokens)
	lo := llm.LoadOptions{Precision: config.Precision(sf.precision), MaxContext: min(want, cfg.MaxPositions), Mesh: mesh, Quantize: quant}
	adapterName := ""
	if *adapter != "" {
		adapterName = "adapter"
		lo.Adapters = []llm.AdapterSource{{Name: adapterName, Dir: *adapter}}
	}
	m, err := llm.Load(ctx, b, dir, lo)
	if err != nil {
		return err
	}
	defer m.Close()
	e, err := llm.NewEngine(ctx, m, llm.EngineOptions{KVCacheBytes: *kvBytes, MaxSequences: 1, PrefillBuckets: []int{min(pow2AtLeast(len(ids)), m.MaxContext())},
		NewDetokenizer: func() llm.Detokenizer { return tok.NewDecoder(true) }})
	if err != nil {
		return err
	}
	defer e.Close()
	if !*asJSON {
		seqs, toks, bytes := e.Capacity()
		blocks, bs := e.KVBlocks()
		fmt.Fprintf(stderr, "%s on %s (%s): KV cache %d blocks of %d tokens (%d MiB), %d sequence(s) of up to %d tokens\n", cfg.Architecture, b.Name(), m.DType(), blocks, bs, bytes>>20, seqs, toks)
		if mm := m.Mesh(); mm.Model > 1 {
			fmt.Fprintf(stderr, "tensor-parallel over %d devices: %d MiB of weights per device\n", mm.Model, m.WeightBytesPerDevice()>>20)
		}
	}
	if room := m.MaxContext() - len(ids); *maxTokens > room {
		if room < 1 {
			return usageErr("the prompt's %d tokens fill the model's %d-token context", len(ids), m.MaxContext())
		}
		if !*asJSON {
			fmt.Fprintf(stderr, "--max-tokens %d lowered to %d: the context holds %d tokens\n", *maxTokens, room, m.MaxContext())
		}
		*maxTokens = room
	}
	start := time.Now()
	ch, err := e.Generate(ctx, llm.Request{Prompt: ids, MaxTokens: *maxTokens, Sampling: sampling, Adapter: adapterName})
	if err != nil {
		return err
	}
	res := generateResult{PromptIDs: ids, TokenIDs: []int{}}
	var first, last time.Time
	for t := range ch {
		if t.ID >= 0 {
			if first.IsZero() {
				first = time.Now()
			}
			last = time.Now()
			res.TokenIDs = append(res.TokenIDs, t.ID)
		}
		if t.Err != nil {
			return t.Err
		}
		if t.Finish != "" {
			res.Finish = t.Finish
		}
		if !*asJSON && t.Text != "" {
			fmt.Fprint(stdout, t.Text)
		}
	}
	if !first.IsZero() {
		res.TTFTms = float64(first.Sub(start).Microseconds()) / 1000
		if n := len(res.TokenIDs); n > 1 {
			res.TPOTms = float64(last.Sub(first).Microseconds()) / 1000 / float64(n-1)
		}
	}
	if !*asJSON {
		fmt.Fprintln(stdout)
		return nil
	}
	res.Text = tok.Decode(res.TokenIDs, true)
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(res)
}

// encodePrompt tokenizes the prompt, through the chat template with chat.
func encodePrompt(tok *tokenizer.Tokenizer, prompt string, chat bool) ([]int, error) {
	if prompt == "" {
		return nil, usageErr("--prompt is required")
	}
	if !chat {
		return tok.Encode(prompt, true)
	}
	text, err := tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: prompt}}, true)
	if err != nil {
		return nil, err
	}
	// transformers' apply_chat_template(tokenize=True) encodes the rendered
	// text without adding special tokens: the template has them.
	return tok.Encode(text, false)
}

func pow2AtLeast(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

// generationMesh is the mesh --mesh and --strategy ask generation for:
// tensor parallelism only (--mesh model=M, or --strategy tp over every
// device); one device without either. A data axis is refused by llm.Load
// with a *llm.MeshError.
func generationMesh(f meshFlags, devices int) (shard.Mesh, error) {
	one := shard.Mesh{Data: 1, Model: 1}
	switch {
	case f.strategy != "" && f.strategy != "tp":
		return one, usageErr("--strategy %q: generation splits the weights tensor-parallel (--strategy tp or --mesh model=M)", f.strategy)
	case f.mesh != "":
		m, err := shard.ParseMesh(f.mesh)
		if err != nil {
			return one, usageErr("--mesh: %v", err)
		}
		return m, nil
	case f.strategy == "tp":
		return shard.Mesh{Data: 1, Model: devices}, nil
	}
	return one, nil
}
