package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Hugging Face tokenizers compiles Split and Replace regexes with Oniguruma
// (https://github.com/huggingface/tokenizers/blob/main/tokenizers/src/utils/onig.rs),
// a backtracking engine whose \s, \d and \w are Unicode-aware. Go's RE2 lacks
// look-around and its Perl classes are ASCII-only. The three split patterns
// that ship with nearly every byte-level BPE checkpoint (GPT-2's, Llama 3's and
// Qwen2's) use the look-ahead \s+(?!\S), so they are implemented below as
// hand-written scanners that follow the regexes' backtracking semantics.
// Other patterns whose only look-around is a top-level \s+(?!\S) alternative
// run through altMatcher; any other regex is translated to RE2 (Unicode
// classes spelled out) when that keeps its meaning, and refused otherwise.

// Published pre-tokenisation patterns, byte for byte as they appear in
// tokenizer.json files.
const (
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// matcher finds the non-overlapping matches of a pattern, leftmost first.
type matcher interface {
	findAll(s string) [][2]int
}

// scanner is a hand-written matcher for one of the published patterns. Every
// rune starts a match under these patterns, so matches tile the input.
type scanner struct {
	at func(s string, i int) int // end of the match starting at i (> i)
}

func (m scanner) findAll(s string) [][2]int {
	out := make([][2]int, 0, len(s)/4+1)
	for i := 0; i < len(s); {
		j := m.at(s, i)
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

func gpt2Scanner() scanner { return scanner{at: gpt2At} }
func llama3Scanner() scanner {
	return scanner{at: func(s string, i int) int { return llamaAt(s, i, 3) }}
}
func qwen2Scanner() scanner {
	return scanner{at: func(s string, i int) int { return llamaAt(s, i, 1) }}
}

// knownScanner returns the scanner for a published pattern, if it is one.
func knownScanner(re string) (matcher, bool) {
	switch re {
	case gpt2Pattern:
		return gpt2Scanner(), true
	case llama3Pattern:
		return llama3Scanner(), true
	case qwen2Pattern:
		return qwen2Scanner(), true
	}
	return nil, false
}

// Character classes as Oniguruma defines them for UTF-8 text: \s is the
// White_Space property (which unicode.IsSpace implements), \p{L} and \p{N}
// the general categories.
func isL(r rune) bool { return unicode.IsLetter(r) }
func isN(r rune) bool { return unicode.IsNumber(r) }
func isS(r rune) bool { return unicode.IsSpace(r) }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runEnd returns the end of the run of runes satisfying f that starts at i,
// taking at most max runes (max < 0: no limit).
func runEnd(s string, i int, f func(rune) bool, max int) int {
	for n := 0; i < len(s) && n != max; n++ {
		r, w := runeAt(s, i)
		if !f(r) {
			break
		}
		i += w
	}
	return i
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d after the apostrophe at i and
// returns the match end, or i. With fold, letters match case-insensitively
// under Unicode simple case folding (so 'ſ' matches 's').
func contraction(s string, i int, fold bool) int {
	if i >= len(s) || s[i] != '\'' {
		return i
	}
	for _, suf := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
		if j, ok := hasFoldPrefix(s, i+1, suf, fold); ok {
			return j
		}
	}
	return i
}

func hasFoldPrefix(s string, i int, lit string, fold bool) (int, bool) {
	for _, want := range lit {
		r, w := runeAt(s, i)
		if w == 0 {
			return i, false
		}
		if r != want && !(fold && foldEq(r, want)) {
			return i, false
		}
		i += w
	}
	return i, true
}

// foldEq reports whether r and want (ASCII lowercase) are equal under simple
// case folding.
func foldEq(r, want rune) bool {
	for f := unicode.SimpleFold(want); f != want; f = unicode.SimpleFold(f) {
		if f == r {
			return true
		}
	}
	return false
}

// gpt2At implements
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ at i.
func gpt2At(s string, i int) int {
	if j := contraction(s, i, false); j > i {
		return j
	}
	r0, w0 := runeAt(s, i)
	j := i
	if r0 == ' ' {
		if r1, _ := runeAt(s, i+1); r1 >= 0 && !isS(r1) {
			j = i + 1
		}
	}
	r, _ := runeAt(s, j)
	switch {
	case isL(r):
		return runEnd(s, j, isL, -1)
	case isN(r):
		return runEnd(s, j, isN, -1)
	case isOther(r):
		return runEnd(s, j, isOther, -1)
	}
	return whitespaceAt(s, i, w0)
}

// whitespaceAt implements \s+(?!\S)|\s+ at i (s[i] is white space of width w0):
// the whole run if it ends the text, else the run less its last rune if that
// leaves at least one, else the run.
func whitespaceAt(s string, i, w0 int) int {
	end := runEnd(s, i, isS, -1)
	if end == len(s) {
		return end
	}
	_, lw := utf8.DecodeLastRuneInString(s[:end])
	if end-lw > i {
		return end - lw
	}
	return end
}

// llamaAt implements Llama 3's pattern (maxDigits 3) and Qwen2's (maxDigits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ at i.
func llamaAt(s string, i int, maxDigits int) int {
	if j := contraction(s, i, true); j > i {
		return j
	}
	r0, w0 := runeAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r0) {
		return runEnd(s, i, isL, -1)
	}
	if r0 != '\r' && r0 != '\n' && !isN(r0) {
		if r1, _ := runeAt(s, i+w0); r1 >= 0 && isL(r1) {
			return runEnd(s, i+w0, isL, -1)
		}
	}
	// \p{N}{1,N}
	if isN(r0) {
		return runEnd(s, i, isN, maxDigits)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if r0 == ' ' {
		j = i + 1
	}
	if r, _ := runeAt(s, j); r >= 0 && isOther(r) {
		j = runEnd(s, j, isOther, -1)
		return runEnd(s, j, func(r rune) bool { return r == '\r' || r == '\n' }, -1)
	}
	// r0 is white space here.
	// \s*[\r\n]+ : the run up to and including its last \r or \n.
	end := runEnd(s, i, isS, -1)
	if k := strings.LastIndexAny(s[i:end], "\r\n"); k >= 0 {
		return i + k + 1
	}
	return whitespaceAt(s, i, w0)
}

// compileOnigSubset compiles an Oniguruma regex with Go's regexp when the
// translation keeps its meaning: \s, \d, \w (and their negations outside
// classes) are spelled as Unicode classes, ^ and $ become line anchors as in
// Ruby syntax; look-around, atomic groups, possessive quantifiers, back
// references, \b, \h and POSIX brackets are refused.
func compileOnigSubset(src string) (*regexp.Regexp, error) {
	t, err := translateOnig(src)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(t)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %v", src, err)
	}
	if re.MatchString("") {
		return nil, errEmptyMatch(src)
	}
	return re, nil
}

// errEmptyMatch refuses a regex that can match the empty string: where
// Oniguruma's iteration and RE2's place empty matches differ, and splits
// depend on them. No published pre-tokenizer pattern matches empty.
func errEmptyMatch(src string) error {
	return fmt.Errorf("regex %q can match the empty string, which is not supported", src)
}

// translateOnig rewrites an Oniguruma regex in RE2 syntax (see
// compileOnigSubset).
func translateOnig(src string) (string, error) {
	const space = `\t-\r\x{85}\p{Z}`
	var b strings.Builder
	inClass := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '\\':
			if i+1 >= len(src) {
				return "", fmt.Errorf("regex %q ends in a backslash", src)
			}
			i++
			switch e := src[i]; e {
			case 's':
				b.WriteString(wrap(space, inClass, false))
			case 'w':
				if inClass {
					b.WriteString(onigWordInClass)
				} else {
					b.WriteString("[" + onigWordInClass + onigLatin1Word + "]")
				}
			case 'd':
				b.WriteString(`\p{Nd}`)
			case 'D':
				b.WriteString(`\P{Nd}`)
			case 'S', 'W':
				if inClass {
					return "", fmt.Errorf("regex %q: \\%c inside a character class has no RE2 equivalent", src, e)
				}
				cls := space
				if e == 'W' {
					cls = onigWordInClass + onigLatin1Word
				}
				b.WriteString(wrap(cls, false, true))
			case 'b', 'B', 'h', 'H', 'R', 'X', 'G', 'K', 'k', 'g', '1', '2', '3', '4', '5', '6', '7', '8', '9':
				return "", fmt.Errorf("regex %q: \\%c is not supported", src, e)
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		case inClass && c == '[':
			return "", fmt.Errorf("regex %q: nested character classes and POSIX brackets are not supported", src)
		case inClass && c == '&' && i+1 < len(src) && src[i+1] == '&':
			return "", fmt.Errorf("regex %q: class intersection is not supported", src)
		case inClass && c == ']':
			inClass = false
			b.WriteByte(c)
		case !inClass && c == '[':
			inClass = true
			b.WriteByte(c)
			// A ']' right after '[' or '[^' is a literal.
			if i+1 < len(src) && src[i+1] == '^' {
				i++
				b.WriteByte('^')
			}
			if i+1 < len(src) && src[i+1] == ']' {
				i++
				b.WriteString(`\]`)
			}
		case !inClass && c == '(' && i+1 < len(src) && src[i+1] == '?':
			rest := src[i+2:]
			if strings.HasPrefix(rest, "=") || strings.HasPrefix(rest, "!") || strings.HasPrefix(rest, "<") ||
				strings.HasPrefix(rest, ">") || strings.HasPrefix(rest, "~") || strings.HasPrefix(rest, "#") {
				return "", fmt.Errorf("regex %q: look-around, atomic groups and comments are not supported", src)
			}
			b.WriteByte(c)
		case !inClass && c == '^':
			b.WriteString(`(?m:^)`)
		case !inClass && c == '$':
			b.WriteString(`(?m:$)`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func wrap(cls string, inClass, negate bool) string {
	if inClass {
		return cls
	}
	if negate {
		return "[^" + cls + "]"
	}
	return "[" + cls + "]"
}

// Oniguruma's \w, measured against tokenizers 0.22.1 over all code points:
// outside a bracket it is Alphabetic, marks, decimal digits and connector
// punctuation plus the Latin-1 numbers ¹²³¼½¾; inside a bracket ([^\w\s])
// without those six.
var onigWordInClass = `\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}` + rangesClass(unicode.Other_Alphabetic)

const onigLatin1Word = `\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE}`

// rangesClass spells a range table as the inside of an RE2 character class.
func rangesClass(t *unicode.RangeTable) string {
	var b strings.Builder
	for _, r := range t.R16 {
		writeRanges(&b, rune(r.Lo), rune(r.Hi), rune(r.Stride))
	}
	for _, r := range t.R32 {
		writeRanges(&b, rune(r.Lo), rune(r.Hi), rune(r.Stride))
	}
	return b.String()
}

func writeRanges(b *strings.Builder, lo, hi, stride rune) {
	if stride == 1 {
		fmt.Fprintf(b, `\x{%X}-\x{%X}`, lo, hi)
		return
	}
	for r := lo; r <= hi; r += stride {
		fmt.Fprintf(b, `\x{%X}`, r)
	}
}

func isAlphabetic(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r)
}

// isOnigWordInClass is Oniguruma's \w inside a bracket.
func isOnigWordInClass(r rune) bool {
	return isAlphabetic(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r)
}

// isOnigWord is Oniguruma's \w outside a bracket.
func isOnigWord(r rune) bool {
	switch r {
	case 0xB2, 0xB3, 0xB9, 0xBC, 0xBD, 0xBE:
		return true
	}
	return isOnigWordInClass(r)
}

// lookaheadWS is the one look-around the published split patterns use.
const lookaheadWS = `\s+(?!\S)`

// splitAlternatives splits a regex at its top-level '|'.
func splitAlternatives(src string) []string {
	var alts []string
	depth, inClass, start := 0, false, 0
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
			if i+1 < len(src) && src[i+1] == '^' {
				i++
			}
			if i+1 < len(src) && src[i+1] == ']' {
				i++
			}
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == '|' && depth == 0:
			alts = append(alts, src[start:i])
			start = i + 1
		}
	}
	return append(alts, src[start:])
}

// altMatcher runs a top-level alternation in which one alternative is
// \s+(?!\S) and the others are RE2-expressible, with a backtracking engine's
// semantics: at the leftmost position where any alternative matches, the
// first alternative (in order) that matches there wins. The alternatives
// before and after the look-ahead are each compiled as one anchored RE2
// program, which keeps their order.
type altMatcher struct {
	before, after *regexp.Regexp // nil when there are none
}

// newAltMatcher returns a matcher for src if it has the shape above.
func newAltMatcher(src string) (matcher, bool, error) {
	alts := splitAlternatives(src)
	k := -1
	for i, a := range alts {
		if a == lookaheadWS {
			if k >= 0 {
				return nil, false, nil
			}
			k = i
		}
	}
	if k < 0 {
		return nil, false, nil
	}
	var m altMatcher
	for part, list := range [][]string{alts[:k], alts[k+1:]} {
		if len(list) == 0 {
			continue
		}
		var tr []string
		for _, a := range list {
			t, err := translateOnig(a)
			if err != nil {
				return nil, true, err
			}
			if strings.Contains(t, "(?m:^)") || strings.Contains(t, "(?m:$)") {
				return nil, true, fmt.Errorf("regex %q: anchors beside a look-ahead are not supported", src)
			}
			tr = append(tr, "(?:"+t+")")
		}
		re, err := regexp.Compile(`\A(?:` + strings.Join(tr, "|") + `)`)
		if err != nil {
			return nil, true, fmt.Errorf("regex %q: %v", src, err)
		}
		if re.MatchString("") {
			return nil, true, errEmptyMatch(src)
		}
		if part == 0 {
			m.before = re
		} else {
			m.after = re
		}
	}
	return m, true, nil
}

func (m altMatcher) at(s string, i int) (int, bool) {
	if m.before != nil {
		if loc := m.before.FindStringIndex(s[i:]); loc != nil {
			return i + loc[1], true
		}
	}
	// \s+(?!\S): the white-space run if it ends the text, else the run less
	// its last rune (which the look-ahead then sees), if that leaves any.
	if r, w := runeAt(s, i); w > 0 && isS(r) {
		end := runEnd(s, i, isS, -1)
		if end == len(s) {
			return end, true
		}
		if _, lw := utf8.DecodeLastRuneInString(s[:end]); end-lw > i {
			return end - lw, true
		}
	}
	if m.after != nil {
		if loc := m.after.FindStringIndex(s[i:]); loc != nil {
			return i + loc[1], true
		}
	}
	return 0, false
}

func (m altMatcher) findAll(s string) [][2]int {
	var out [][2]int
	for i := 0; i < len(s); {
		if j, ok := m.at(s, i); ok && j > i {
			out = append(out, [2]int{i, j})
			i = j
			continue
		}
		_, w := runeAt(s, i)
		i += w
	}
	return out
}
