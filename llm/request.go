package llm

import (
	"errors"

	"github.com/tensorbridge/tensorbridge/errs"
)

// SamplingParams choose how each token is drawn. The zero value is greedy.
type SamplingParams struct {
	Temperature float32 // 0: greedy (argmax)
	TopK        int     // 0: off
	TopP        float32 // 0 or 1: off
	MinP        float32 // 0: off
	Seed        uint32
	// Penalties and biases (penalty.go): PresencePenalty and
	// FrequencyPenalty in [-2, 2] (0: off), over the generated tokens;
	// RepetitionPenalty > 0 (0 or 1: off), over prompt and generated
	// tokens; LogitBias adds to token ids' logits (at most MaxLogitBias
	// entries, each in [-100, 100]).
	PresencePenalty   float32
	FrequencyPenalty  float32
	RepetitionPenalty float32
	LogitBias         map[int]float32
	// MinTokens masks the stop ids (EOS unless IgnoreEOS, and StopIDs)
	// and keeps stop strings from matching until that many tokens are
	// generated.
	MinTokens int
}

// Request is one generation.
type Request struct {
	Prompt    []int
	MaxTokens int // 0: up to the context length; more than it leaves is a *RequestError
	Sampling  SamplingParams
	// StopIDs end the sequence (besides the model's end-of-sequence ids
	// unless IgnoreEOS); the stop token is reported. At most MaxStopIDs.
	StopIDs   []int
	IgnoreEOS bool
	// StopStrings end the sequence when the detokenized text contains one;
	// the text is cut before it. They need EngineOptions.NewDetokenizer:
	// without one, Generate refuses them (ErrNoDetokenizer).
	StopStrings []string
	// TopLogprobs is how many alternatives each generated token's event
	// carries (Token.Top, best first), 0..MaxLogprobs; PromptLogprobs asks
	// for the prompt tokens' log-probabilities (Token.Prompt, on the first
	// token's event) with TopLogprobs alternatives each (logprobs.go).
	TopLogprobs    int
	PromptLogprobs bool
	// Adapter names the LoRA adapter (LoadOptions.Adapters) to generate
	// with; "" is the base model.
	Adapter string
	// NewConstraint, when set, makes each sequence's Constraint
	// (constrain.go): structured output. NewDetokenizer, when set,
	// replaces the engine's detokenizer for this request.
	NewConstraint  func() Constraint
	NewDetokenizer func() Detokenizer
}

// Token is one event of a generation's stream. A token has ID >= 0; the
// last event has Finish set ("stop", "length", "cancelled" or "error",
// with Err) and ID -1, and may carry text held back until the end.
type Token struct {
	ID      int
	Text    string
	Logprob float32
	Top     []TopLogprob    // Request.TopLogprobs alternatives, best first
	Prompt  []PromptLogprob // the first token's, with Request.PromptLogprobs
	Finish  string
	Err     error
}

// Detokenizer turns ids into text incrementally (llm/tokenizer's
// StreamDecoder).
type Detokenizer interface {
	Add(id int) string
	Flush() string
}

// ErrQueueFull is returned by Generate when the wait queue is full.
var ErrQueueFull = errors.New("llm: the request queue is full")

// ErrEngineClosed is returned by Generate after Close.
var ErrEngineClosed = errors.New("llm: the engine is closed")

// ErrNoDetokenizer is wrapped by the *RequestError of a request with stop
// strings on an engine without EngineOptions.NewDetokenizer: stop strings
// are matched on the text, which such an engine never makes.
var ErrNoDetokenizer = errors.New("llm: stop strings need a detokenizer (EngineOptions.NewDetokenizer), and the engine has none")

// RequestError says a request cannot be run (its prompt or max_tokens
// against the model's context, its ids against the vocabulary, stop
// strings without a detokenizer). It matches errs.ErrInvalidInput, and
// the sentinel in Err when there is one.
type RequestError struct {
	Problem string
	Err     error // a sentinel such as ErrNoDetokenizer, or nil
}

func (e *RequestError) Error() string { return "llm: " + e.Problem }

// Unwrap returns the sentinel, if any.
func (e *RequestError) Unwrap() error { return e.Err }

// Is makes a RequestError match errs.ErrInvalidInput.
func (e *RequestError) Is(target error) bool { return target == errs.ErrInvalidInput }
