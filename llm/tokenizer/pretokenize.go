package tokenizer

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is one split of the input on its way to the model. first says the
// split begins at offset 0 of the original text (Metaspace's "first" prepend
// scheme depends on it).
type piece struct {
	s     string
	first bool
}

// preTokenizer splits pieces further, as Hugging Face's pre-tokenizers do
// (https://huggingface.co/docs/tokenizers/api/pre-tokenizers).
type preTokenizer interface {
	preTokenize(ps []piece) []piece
}

type seqPre []preTokenizer

func (q seqPre) preTokenize(ps []piece) []piece {
	for _, p := range q {
		ps = p.preTokenize(ps)
	}
	return ps
}

// behavior is SplitDelimiterBehavior.
type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

func parseBehavior(component, s string) (behavior, error) {
	switch s {
	case "Removed":
		return removed, nil
	case "Isolated":
		return isolated, nil
	case "MergedWithPrevious":
		return mergedWithPrevious, nil
	case "MergedWithNext":
		return mergedWithNext, nil
	case "Contiguous":
		return contiguous, nil
	}
	return 0, unsupported(component, s, "unknown split behavior")
}

type span struct {
	a, b  int
	match bool
}

// splitBy cuts s at the given matches and applies the behaviour, as
// NormalizedString::split does; empty results are dropped.
func splitBy(p piece, matches [][2]int, beh behavior, invert bool) []piece {
	s := p.s
	if s == "" {
		return nil
	}
	if beh == isolated && !invert {
		return isolate(p, matches)
	}
	spans := make([]span, 0, 2*len(matches)+1)
	prev := 0
	for _, m := range matches {
		if m[0] > prev {
			spans = append(spans, span{prev, m[0], false})
		}
		spans = append(spans, span{m[0], m[1], true})
		prev = m[1]
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	if invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	var out []span
	switch beh {
	case isolated:
		out = spans
	case removed:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case mergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].b = sp.b
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].a = sp.a
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case contiguous:
		prevMatch := false
		for i, sp := range spans {
			if i > 0 && sp.match == prevMatch {
				out[len(out)-1].b = sp.b
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	}
	res := make([]piece, 0, len(out))
	for _, sp := range out {
		if sp.b > sp.a {
			res = append(res, piece{s: s[sp.a:sp.b], first: p.first && sp.a == 0})
		}
	}
	return res
}

// isolate is splitBy for the Isolated behaviour: matches and the gaps between
// them each become a piece (the common case, without the span bookkeeping).
func isolate(p piece, matches [][2]int) []piece {
	s := p.s
	res := make([]piece, 0, 2*len(matches)+1)
	prev := 0
	for _, m := range matches {
		if m[0] > prev {
			res = append(res, piece{s: s[prev:m[0]], first: p.first && prev == 0})
		}
		if m[1] > m[0] {
			res = append(res, piece{s: s[m[0]:m[1]], first: p.first && m[0] == 0})
		}
		prev = m[1]
	}
	if prev < len(s) {
		res = append(res, piece{s: s[prev:], first: p.first && prev == 0})
	}
	return res
}

// runeMatches returns every rune satisfying f as its own match (tokenizers'
// Pattern for char predicates).
func runeMatches(s string, f func(rune) bool) [][2]int {
	var out [][2]int
	for i, r := range s {
		if f(r) {
			out = append(out, [2]int{i, i + utf8.RuneLen(r)})
		}
	}
	return out
}

// splitPre is the Split pre-tokenizer.
type splitPre struct {
	m      matcher
	beh    behavior
	invert bool
}

func (p splitPre) preTokenize(ps []piece) []piece {
	if len(ps) == 1 {
		return splitBy(ps[0], p.m.findAll(ps[0].s), p.beh, p.invert)
	}
	var out []piece
	for _, q := range ps {
		out = append(out, splitBy(q, p.m.findAll(q.s), p.beh, p.invert)...)
	}
	return out
}

// runePre splits on runes satisfying f (Digits, Punctuation, WhitespaceSplit).
type runePre struct {
	f   func(rune) bool
	beh behavior
}

func (p runePre) preTokenize(ps []piece) []piece {
	var out []piece
	for _, q := range ps {
		out = append(out, splitBy(q, runeMatches(q.s, p.f), p.beh, false)...)
	}
	return out
}

// byteLevelPre maps bytes to GPT-2's printable alphabet, after an optional
// prefix space and the GPT-2 split.
type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

func (p byteLevelPre) preTokenize(ps []piece) []piece {
	if !p.addPrefixSpace && !p.useRegex { // map in place
		out := ps[:0]
		for _, q := range ps {
			if q.s != "" {
				q.s = bytesToUnicode(q.s)
				out = append(out, q)
			}
		}
		return out
	}
	var out []piece
	for _, q := range ps {
		if p.addPrefixSpace && q.s != "" && !strings.HasPrefix(q.s, " ") {
			q.s = " " + q.s
		}
		if p.useRegex {
			out = append(out, splitBy(q, gpt2Scanner().findAll(q.s), isolated, false)...)
		} else if q.s != "" {
			out = append(out, q)
		}
	}
	for i := range out {
		out[i].s = bytesToUnicode(out[i].s)
	}
	return out
}

// metaspacePre replaces spaces by the replacement rune, prepends one per the
// prepend scheme, and optionally splits before each replacement.
type metaspacePre struct {
	repl    string
	prepend string // "always", "first", "never"
	split   bool
}

func (p metaspacePre) preTokenize(ps []piece) []piece {
	var out []piece
	for _, q := range ps {
		q.s = strings.ReplaceAll(q.s, " ", p.repl)
		if q.s != "" && !strings.HasPrefix(q.s, p.repl) &&
			(p.prepend == "always" || (p.prepend == "first" && q.first)) {
			q.s = p.repl + q.s
		}
		if p.split {
			out = append(out, splitBy(q, pattern{lit: p.repl}.findAll(q.s), mergedWithNext, false)...)
		} else if q.s != "" {
			out = append(out, q)
		}
	}
	return out
}

// whitespacePre is the Whitespace pre-tokenizer, the regex \w+|[^\w\s]+
// with its matches kept and the rest removed. tokenizers compiles it with the
// regex crate, whose \w is isRustWord.
type whitespacePre struct{}

func (whitespacePre) preTokenize(ps []piece) []piece {
	var out []piece
	for _, q := range ps {
		var ms [][2]int
		s := q.s
		for i := 0; i < len(s); {
			r, w := runeAt(s, i)
			switch {
			case isRustWord(r):
				j := runEnd(s, i, isRustWord, -1)
				ms = append(ms, [2]int{i, j})
				i = j
			case !isS(r):
				j := runEnd(s, i, func(r rune) bool { return !isRustWord(r) && !isS(r) }, -1)
				ms = append(ms, [2]int{i, j})
				i = j
			default:
				i += w
			}
		}
		out = append(out, splitBy(q, ms, removed, true)...)
	}
	return out
}

// isPunc is tokenizers' is_punc: ASCII punctuation or Unicode P*.
func isPunc(r rune) bool {
	if r < 128 {
		return (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126)
	}
	return unicode.IsPunct(r)
}

func parsePreTokenizer(raw json.RawMessage, depth int) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	if depth > maxDepth {
		return nil, badJSON("pre_tokenizer", "nested deeper than %d", maxDepth)
	}
	var h struct {
		Type             string            `json:"type"`
		PreTokenizers    []json.RawMessage `json:"pretokenizers"`
		AddPrefixSpace   *bool             `json:"add_prefix_space"`
		UseRegex         *bool             `json:"use_regex"`
		Pattern          json.RawMessage   `json:"pattern"`
		Behavior         string            `json:"behavior"`
		Invert           bool              `json:"invert"`
		Replacement      *string           `json:"replacement"`
		PrependScheme    *string           `json:"prepend_scheme"`
		Split            *bool             `json:"split"`
		IndividualDigits bool              `json:"individual_digits"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, badJSON("pre_tokenizer", "%v", err)
	}
	switch h.Type {
	case "Sequence":
		var q seqPre
		for _, r := range h.PreTokenizers {
			p, err := parsePreTokenizer(r, depth+1)
			if err != nil {
				return nil, err
			}
			if p != nil {
				q = append(q, p)
			}
		}
		return q, nil
	case "ByteLevel":
		return byteLevelPre{addPrefixSpace: h.AddPrefixSpace != nil && *h.AddPrefixSpace,
			useRegex: h.UseRegex == nil || *h.UseRegex}, nil
	case "Split":
		beh, err := parseBehavior("pre_tokenizer.Split", h.Behavior)
		if err != nil {
			return nil, err
		}
		if h.Pattern == nil {
			return nil, badJSON("pre_tokenizer.Split", "missing pattern")
		}
		var re struct {
			Regex *string `json:"Regex"`
		}
		if json.Unmarshal(h.Pattern, &re) == nil && re.Regex != nil {
			if m, ok := knownScanner(*re.Regex); ok {
				return splitPre{m: m, beh: beh, invert: h.Invert}, nil
			}
			m, ok, err := newAltMatcher(*re.Regex)
			if err != nil {
				return nil, unsupported("pre_tokenizer.Split", "Regex", err.Error())
			}
			if ok {
				return splitPre{m: m, beh: beh, invert: h.Invert}, nil
			}
		}
		p, err := parsePattern("pre_tokenizer.Split", h.Pattern)
		if err != nil {
			return nil, err
		}
		return splitPre{m: p, beh: beh, invert: h.Invert}, nil
	case "Metaspace":
		repl := "▁"
		if h.Replacement != nil {
			repl = *h.Replacement
		}
		if utf8.RuneCountInString(repl) != 1 {
			return nil, badJSON("pre_tokenizer.Metaspace", "replacement %q is not one character", repl)
		}
		scheme := "always"
		if h.PrependScheme != nil {
			scheme = *h.PrependScheme
		} else if h.AddPrefixSpace != nil && !*h.AddPrefixSpace {
			scheme = "never"
		}
		if scheme != "always" && scheme != "first" && scheme != "never" {
			return nil, unsupported("pre_tokenizer.Metaspace", scheme, "prepend_scheme must be always, first or never")
		}
		return metaspacePre{repl: repl, prepend: scheme, split: h.Split == nil || *h.Split}, nil
	case "Digits":
		isDigit := unicode.IsNumber // Rust's char::is_numeric: any \p{N}
		if h.IndividualDigits {
			return runePre{f: isDigit, beh: isolated}, nil
		}
		return runePre{f: isDigit, beh: contiguous}, nil
	case "Punctuation":
		beh := isolated
		if h.Behavior != "" {
			var err error
			if beh, err = parseBehavior("pre_tokenizer.Punctuation", h.Behavior); err != nil {
				return nil, err
			}
		}
		return runePre{f: isPunc, beh: beh}, nil
	case "Whitespace":
		return whitespacePre{}, nil
	case "WhitespaceSplit":
		return runePre{f: unicode.IsSpace, beh: removed}, nil
	case "":
		return nil, badJSON("pre_tokenizer", "missing type")
	}
	return nil, unsupported("pre_tokenizer", h.Type,
		"supported: Sequence, ByteLevel, Split, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit")
}

// GPT-2's reversible byte-to-unicode table
// (https://github.com/openai/gpt-2/blob/master/src/encoder.py): printable
// bytes map to themselves, the others to U+0100 onwards.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

func bytesToUnicode(s string) string {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '!' || c > '~' {
			plain = false
			break
		}
	}
	if plain { // printable ASCII maps to itself
		return s
	}
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteToRune[s[i]])
	}
	return b.String()
}
