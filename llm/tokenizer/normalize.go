package tokenizer

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a piece of input text before pre-tokenisation, as the
// normalizers of Hugging Face tokenizers do
// (https://huggingface.co/docs/tokenizers/api/normalizers). Offsets are not
// tracked: this package returns ids only.
type normalizer interface {
	normalize(s string) string
}

type seqNormalizer []normalizer

func (q seqNormalizer) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// prependNormalizer adds a prefix to non-empty text (an empty piece stays
// empty, as in NormalizedString::prepend).
type prependNormalizer string

func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

type formNormalizer struct{ f norm.Form }

func (n formNormalizer) normalize(s string) string { return n.f.String(s) }

// lowercaseNormalizer lowercases rune by rune with Unicode's full lowercase
// mapping, as Rust's char::to_lowercase does (no final-sigma context).
type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == 'İ' { // the one rune whose full lowercase mapping is two runes
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// stripNormalizer removes leading and/or trailing Unicode white space.
type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// pattern is tokenizers' Pattern for Replace and Split: {"String": s} or
// {"Regex": r}.
type pattern struct {
	lit string
	re  *regexp.Regexp
}

// findAll returns the byte ranges of non-overlapping matches, leftmost first.
func (p pattern) findAll(s string) [][2]int {
	var out [][2]int
	if p.re != nil {
		for _, m := range p.re.FindAllStringIndex(s, -1) {
			if m[1] > m[0] {
				out = append(out, [2]int{m[0], m[1]})
			}
		}
		return out
	}
	if p.lit == "" {
		return nil
	}
	for i := 0; ; {
		j := strings.Index(s[i:], p.lit)
		if j < 0 {
			return out
		}
		out = append(out, [2]int{i + j, i + j + len(p.lit)})
		i += j + len(p.lit)
	}
}

// replacer pairs a pattern with its replacement.
type replacer struct {
	p       pattern
	content string
}

func (r replacer) apply(s string) string {
	if r.p.re != nil {
		return r.p.re.ReplaceAllLiteralString(s, r.content)
	}
	if r.p.lit == "" {
		return s
	}
	return strings.ReplaceAll(s, r.p.lit, r.content)
}

type replaceNorm struct{ r replacer }

func (n replaceNorm) normalize(s string) string { return n.r.apply(s) }

// parsePattern reads {"String": ...} or {"Regex": ...}. A regex goes through
// translateRegex so that Oniguruma's Unicode classes keep their meaning under
// Go's RE2; what cannot be translated is refused.
func parsePattern(component string, raw json.RawMessage) (pattern, error) {
	var p struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return pattern{}, badJSON(component+".pattern", "%v", err)
	}
	switch {
	case p.String != nil:
		return pattern{lit: *p.String}, nil
	case p.Regex != nil:
		re, err := compileOnigSubset(*p.Regex)
		if err != nil {
			return pattern{}, unsupported(component, "Regex", err.Error())
		}
		return pattern{re: re}, nil
	}
	return pattern{}, badJSON(component+".pattern", "neither String nor Regex")
}

func parseNormalizer(raw json.RawMessage, depth int) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	if depth > maxDepth {
		return nil, badJSON("normalizer", "nested deeper than %d", maxDepth)
	}
	var h struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Prepend     *string           `json:"prepend"`
		Pattern     json.RawMessage   `json:"pattern"`
		Content     *string           `json:"content"`
		StripLeft   *bool             `json:"strip_left"`
		StripRight  *bool             `json:"strip_right"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, badJSON("normalizer", "%v", err)
	}
	switch h.Type {
	case "Sequence":
		var q seqNormalizer
		for _, r := range h.Normalizers {
			n, err := parseNormalizer(r, depth+1)
			if err != nil {
				return nil, err
			}
			if n != nil {
				q = append(q, n)
			}
		}
		return q, nil
	case "Prepend":
		if h.Prepend == nil {
			return nil, badJSON("normalizer.Prepend", "missing prepend")
		}
		return prependNormalizer(*h.Prepend), nil
	case "Replace":
		if h.Content == nil || h.Pattern == nil {
			return nil, badJSON("normalizer.Replace", "missing pattern or content")
		}
		p, err := parsePattern("normalizer.Replace", h.Pattern)
		if err != nil {
			return nil, err
		}
		return replaceNorm{replacer{p, *h.Content}}, nil
	case "NFC":
		return formNormalizer{norm.NFC}, nil
	case "NFD":
		return formNormalizer{norm.NFD}, nil
	case "NFKC":
		return formNormalizer{norm.NFKC}, nil
	case "NFKD":
		return formNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Strip":
		return stripNormalizer{left: h.StripLeft == nil || *h.StripLeft, right: h.StripRight == nil || *h.StripRight}, nil
	case "":
		return nil, badJSON("normalizer", "missing type")
	}
	return nil, unsupported("normalizer", h.Type, "supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip")
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
