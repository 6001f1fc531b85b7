package serve

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tensorbridge/tensorbridge/llm"
)

// Log-probabilities on the OpenAI endpoints
// (https://platform.openai.com/docs/api-reference): chat completions'
// logprobs: true with top_logprobs: k (content[] of {token, logprob,
// bytes, top_logprobs}), completions' logprobs: k in the legacy format
// ({tokens, token_logprobs, top_logprobs, text_offset}), and with echo the
// prompt's (its first token's logprob null). k is at most
// llm.MaxLogprobs. The engine computes them on the device from the raw
// logits (llm/logprobs.go).

// lpSpec is what a request asks for: logprobs on, k alternatives, and
// (completions) the prompt echoed.
type lpSpec struct {
	on   bool
	top  int
	echo bool
}

// notFiniteLogprob stands for a log-probability JSON cannot carry (-inf,
// NaN), as vLLM reports them (-9999.0).
const notFiniteLogprob = -9999.0

func jsonLogprob(f float32) float64 {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return notFiniteLogprob
	}
	return float64(f)
}

// isNull reports whether a raw field is absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// logprobCount reads an integer count field in [0, llm.MaxLogprobs].
func logprobCount(raw json.RawMessage, field string) (int, error) {
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, paramErr(field, "%s must be an integer in [0, %d], got %s", field, llm.MaxLogprobs, truncRaw(raw))
	}
	if n < 0 || n > llm.MaxLogprobs {
		return 0, paramErr(field, "%s must be in [0, %d], got %d", field, llm.MaxLogprobs, n)
	}
	return int(n), nil
}

// truncRaw is a raw JSON value for an error message, cut to 40 bytes.
func truncRaw(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// logprobSpec reads logprobs, top_logprobs and echo. Chat: logprobs a
// boolean, top_logprobs an integer that needs logprobs true when above 0
// (vLLM's check, vllm/entrypoints/openai/protocol.py); completions:
// logprobs an integer, no top_logprobs.
func (q *oaiRequest) logprobSpec(chat bool) (lpSpec, error) {
	var s lpSpec
	if chat {
		if !isNull(q.Logprobs) {
			if err := json.Unmarshal(q.Logprobs, &s.on); err != nil {
				return s, paramErr("logprobs", "logprobs must be a boolean on chat completions (top_logprobs: k asks for alternatives), got %s", truncRaw(q.Logprobs))
			}
		}
		if isNull(q.TopLogprobs) {
			return s, nil
		}
		k, err := logprobCount(q.TopLogprobs, "top_logprobs")
		if err != nil {
			return s, err
		}
		if k > 0 && !s.on {
			return s, paramErr("top_logprobs", "top_logprobs needs logprobs set to true")
		}
		s.top = k
		return s, nil
	}
	if !isNull(q.TopLogprobs) {
		return s, paramErr("top_logprobs", "top_logprobs is a chat completions field; completions take logprobs: an integer in [0, %d]", llm.MaxLogprobs)
	}
	s.echo = q.Echo
	if isNull(q.Logprobs) {
		return s, nil
	}
	k, err := logprobCount(q.Logprobs, "logprobs")
	s.on, s.top = err == nil, k
	return s, err
}

// lpEntry is one token's log-probability for the answer: null for the
// prompt's first token, which has none.
type lpEntry struct {
	id   int
	lp   float32
	top  []llm.TopLogprob
	null bool
}

// tokenText is a token's text and raw bytes: a byte-level token that
// holds part of a multi-byte character gives those bytes, and its text
// the bytes with U+FFFD for what is not valid UTF-8.
func (o *oaiOut) tokenText(id int) (string, []byte) {
	b, ok := o.g.tok.TokenBytes(id)
	if !ok {
		s := o.g.tok.Decode([]int{id}, false)
		return s, []byte(s)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), b
}

// byteInts is a token's bytes as OpenAI gives them: a list of integers,
// not base64.
func byteInts(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// chatLogprob is one entry of OpenAI's chat logprobs.content, and of its
// top_logprobs.
type chatLogprob struct {
	Token       string         `json:"token"`
	Logprob     float64        `json:"logprob"`
	Bytes       []int          `json:"bytes"`
	TopLogprobs *[]chatLogprob `json:"top_logprobs,omitempty"`
}

func (o *oaiOut) chatEntry(id int, lp float32) chatLogprob {
	s, b := o.tokenText(id)
	return chatLogprob{Token: s, Logprob: jsonLogprob(lp), Bytes: byteInts(b)}
}

// chatLogprobs is chat's logprobs object for entries.
func (o *oaiOut) chatLogprobs(es []lpEntry) map[string]any {
	content := make([]chatLogprob, 0, len(es))
	for _, e := range es {
		c := o.chatEntry(e.id, e.lp)
		top := make([]chatLogprob, 0, len(e.top))
		for _, t := range e.top {
			top = append(top, o.chatEntry(t.ID, t.Logprob))
		}
		c.TopLogprobs = &top
		content = append(content, c)
	}
	return map[string]any{"content": content, "refusal": nil}
}

// orderedLogprobs is one position's {token: logprob} map of the legacy
// format, in order (best first), a token text given once.
type orderedLogprobs []struct {
	tok string
	lp  float64
}

func (m orderedLogprobs) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	seen := map[string]bool{}
	for _, kv := range m {
		if seen[kv.tok] {
			continue
		}
		seen[kv.tok] = true
		if len(seen) > 1 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(kv.tok)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.WriteString(strconv.FormatFloat(kv.lp, 'g', -1, 64))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// completionLogprobs is the legacy logprobs object for entries whose
// text starts *offset characters (code points, as Python counts them)
// into the choice's text, which it advances past them: each position's
// top map holds the k alternatives and the chosen token (OpenAI: "up to
// logprobs+1 elements").
func (o *oaiOut) completionLogprobs(es []lpEntry, offset *int) map[string]any {
	toks := make([]string, 0, len(es))
	lps := make([]*float64, 0, len(es))
	tops := make([]*orderedLogprobs, 0, len(es))
	offs := make([]int, 0, len(es))
	for _, e := range es {
		s, _ := o.tokenText(e.id)
		toks, offs = append(toks, s), append(offs, *offset)
		*offset += utf8.RuneCountInString(s)
		if e.null {
			lps, tops = append(lps, nil), append(tops, nil)
			continue
		}
		lp := jsonLogprob(e.lp)
		lps = append(lps, &lp)
		m := orderedLogprobs{}
		chosen := false
		for _, t := range e.top {
			ts, _ := o.tokenText(t.ID)
			m = append(m, struct {
				tok string
				lp  float64
			}{ts, jsonLogprob(t.Logprob)})
			chosen = chosen || t.ID == e.id
		}
		if !chosen {
			m = append(m, struct {
				tok string
				lp  float64
			}{s, lp})
		}
		tops = append(tops, &m)
	}
	return map[string]any{"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs}
}

// promptEntries is the echoed prompt's entries: its first token null,
// then each later token's logprob and alternatives.
func promptEntries(prompt []int, pl []llm.PromptLogprob) []lpEntry {
	if len(prompt) == 0 {
		return nil
	}
	es := []lpEntry{{id: prompt[0], null: true}}
	for _, p := range pl {
		es = append(es, lpEntry{id: p.ID, lp: p.Logprob, top: p.Top})
	}
	return es
}

// genEntries is a piece's generated tokens as entries.
func genEntries(ids []int, lps []float32, tops [][]llm.TopLogprob) []lpEntry {
	es := make([]lpEntry, len(ids))
	for i, id := range ids {
		es[i] = lpEntry{id: id, lp: lps[i]}
		if i < len(tops) {
			es[i].top = tops[i]
		}
	}
	return es
}

// echoText is the prompt as echo returns it: the prompt string as sent,
// or the decoded ids of a token-id prompt.
func (q *oaiRequest) echoText(g *generator, ids []int) string {
	var text string
	if json.Unmarshal(q.Prompt, &text) == nil {
		return text
	}
	var texts []string
	if json.Unmarshal(q.Prompt, &texts) == nil && len(texts) == 1 {
		return texts[0]
	}
	return g.tok.Decode(ids, false)
}
