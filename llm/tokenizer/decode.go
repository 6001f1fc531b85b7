package tokenizer

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Decoding is built as a chain of streaming stages, one per Hugging Face
// decoder (https://huggingface.co/docs/tokenizers/api/decoders), followed by
// transformers' clean_up_tokenization when the config asks for it. Decode
// runs the same chain as StreamDecoder over all ids at once, so streaming and
// batch decoding agree by construction; the fixtures check both against the
// Python libraries.
//
// A stage receives token strings; cont marks a piece that continues the
// previous token (after Fuse or ByteLevel the stream is one growing token).

type stage interface {
	push(s string, cont bool)
	end()
}

// decSpec is one parsed decoder; newStage makes a fresh stateful stage.
type decSpec interface {
	newStage(next stage) stage
}

// sink collects the final text.
type sink struct{ b strings.Builder }

func (k *sink) push(s string, _ bool) { k.b.WriteString(s) }
func (k *sink) end()                  {}

// --- Replace ---

type replaceSpec struct {
	r     replacer
	fused bool
}

func (p replaceSpec) newStage(next stage) stage { return &replaceStage{spec: p, next: next} }

type replaceStage struct {
	spec replaceSpec
	next stage
	buf  string
}

func (st *replaceStage) push(s string, cont bool) {
	if !st.spec.fused {
		st.next.push(st.spec.r.apply(s), cont)
		return
	}
	// One growing token: replace complete matches, hold back a suffix that
	// may begin the next match.
	st.buf += s
	pat := st.spec.r.p.lit
	var out strings.Builder
	rest := st.buf
	for {
		j := strings.Index(rest, pat)
		if j < 0 {
			break
		}
		out.WriteString(rest[:j])
		out.WriteString(st.spec.r.content)
		rest = rest[j+len(pat):]
	}
	hold := 0
	for k := min(len(pat)-1, len(rest)); k > 0; k-- {
		if strings.HasSuffix(rest, pat[:k]) {
			hold = k
			break
		}
	}
	out.WriteString(rest[:len(rest)-hold])
	st.buf = rest[len(rest)-hold:]
	if out.Len() > 0 {
		st.next.push(out.String(), true)
	}
}

func (st *replaceStage) end() {
	if st.buf != "" {
		st.next.push(st.buf, true)
		st.buf = ""
	}
	st.next.end()
}

// --- ByteFallback ---

type byteFallbackSpec struct{}

func (byteFallbackSpec) newStage(next stage) stage { return &byteFallbackStage{next: next} }

// byteFallbackStage turns runs of <0xXX> tokens into text: the run's bytes if
// they are valid UTF-8 as a whole, else one U+FFFD per byte token, as
// tokenizers' ByteFallback decoder does. A run is held until it ends.
type byteFallbackStage struct {
	next stage
	run  []byte
}

func byteToken(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(s[3])
	lo, ok2 := hexVal(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func (st *byteFallbackStage) flush() {
	if len(st.run) == 0 {
		return
	}
	if utf8.Valid(st.run) {
		st.next.push(string(st.run), false)
	} else {
		for range st.run {
			st.next.push("\uFFFD", false)
		}
	}
	st.run = st.run[:0]
}

func (st *byteFallbackStage) push(s string, cont bool) {
	if b, ok := byteToken(s); ok && !cont {
		st.run = append(st.run, b)
		return
	}
	st.flush()
	st.next.push(s, cont)
}

func (st *byteFallbackStage) end() { st.flush(); st.next.end() }

// --- Fuse ---

type fuseSpec struct{}

func (fuseSpec) newStage(next stage) stage { return &fuseStage{next: next} }

type fuseStage struct {
	next    stage
	started bool
}

func (st *fuseStage) push(s string, _ bool) {
	st.next.push(s, st.started)
	st.started = true
}
func (st *fuseStage) end() { st.next.end() }

// --- Strip ---

type stripSpec struct {
	content     rune
	start, stop int
	fused       bool
}

func (p stripSpec) newStage(next stage) stage { return &stripStage{spec: p, next: next} }

type stripStage struct {
	spec     stripSpec
	next     stage
	stripped int  // leading runes stripped so far (fused)
	done     bool // leading strip finished (fused)
	tail     []rune
}

func (st *stripStage) push(s string, cont bool) {
	if !st.spec.fused {
		st.next.push(stripToken(s, st.spec.content, st.spec.start, st.spec.stop), cont)
		return
	}
	var out strings.Builder
	for _, r := range s {
		if !st.done {
			if r == st.spec.content && st.stripped < st.spec.start {
				st.stripped++
				continue
			}
			st.done = true
		}
		if st.spec.stop == 0 {
			out.WriteRune(r)
			continue
		}
		if r == st.spec.content {
			st.tail = append(st.tail, r)
			if len(st.tail) > st.spec.stop {
				out.WriteRune(st.tail[0])
				st.tail = st.tail[1:]
			}
			continue
		}
		for _, t := range st.tail {
			out.WriteRune(t)
		}
		st.tail = st.tail[:0]
		out.WriteRune(r)
	}
	if out.Len() > 0 {
		st.next.push(out.String(), true)
	}
}

func (st *stripStage) end() { st.tail = st.tail[:0]; st.next.end() }

// stripToken is tokenizers' Strip decoder on one token.
func stripToken(s string, c rune, start, stop int) string {
	rs := []rune(s)
	a := 0
	for i := 0; i < start && i < len(rs) && rs[i] == c; i++ {
		a = i + 1
	}
	b := len(rs)
	for i := 0; i < stop && len(rs)-i-1 >= 0 && rs[len(rs)-i-1] == c; i++ {
		b = len(rs) - i - 1
	}
	if a > b {
		return ""
	}
	return string(rs[a:b])
}

// --- Metaspace ---

type metaspaceSpec struct {
	repl    rune
	prepend bool // prepend_scheme is not "never"
	fused   bool
}

func (p metaspaceSpec) newStage(next stage) stage { return &metaspaceStage{spec: p, next: next} }

type metaspaceStage struct {
	spec metaspaceSpec
	next stage
	n    int // tokens seen
}

// push maps the replacement rune to a space, except in the first token,
// where every replacement rune is dropped when a prefix was prepended
// (tokenizers' Metaspace::decode_chain).
func (st *metaspaceStage) push(s string, cont bool) {
	if !cont {
		st.n++
	}
	first := st.n == 1 || st.spec.fused
	var b strings.Builder
	for _, r := range s {
		if r == st.spec.repl {
			if first && st.spec.prepend {
				continue
			}
			r = ' '
		}
		b.WriteRune(r)
	}
	st.next.push(b.String(), cont)
}
func (st *metaspaceStage) end() { st.next.end() }

// --- ByteLevel ---

type byteLevelSpec struct{}

func (byteLevelSpec) newStage(next stage) stage { return &byteLevelStage{next: next} }

// byteLevelStage maps each token's runes back to bytes (a token with a rune
// outside the byte alphabet contributes its UTF-8 as is) and decodes the
// byte stream as String::from_utf8_lossy does, holding back an incomplete
// sequence until it completes or proves invalid.
type byteLevelStage struct {
	next    stage
	pending []byte
	buf     []byte
	started bool
}

func (st *byteLevelStage) push(s string, _ bool) {
	mapped := true
	for _, r := range s {
		if _, ok := runeToByte[r]; !ok {
			mapped = false
			break
		}
	}
	st.buf = append(st.buf[:0], st.pending...)
	if mapped {
		for _, r := range s {
			st.buf = append(st.buf, runeToByte[r])
		}
	} else {
		st.buf = append(st.buf, s...)
	}
	text, rest := lossyPrefix(st.buf)
	st.pending = append(st.pending[:0], rest...)
	if text != "" {
		st.next.push(text, st.started)
		st.started = true
	}
}

func (st *byteLevelStage) end() {
	if len(st.pending) > 0 {
		st.next.push("\uFFFD", st.started)
		st.pending = st.pending[:0]
	}
	st.next.end()
}

// lossyPrefix decodes b with U+FFFD for each maximal invalid subpart (the
// Unicode "substitution of maximal subparts" practice that Rust's
// from_utf8_lossy follows) and returns an incomplete trailing sequence apart.
func lossyPrefix(b []byte) (string, []byte) {
	var out strings.Builder
	for i := 0; i < len(b); {
		n, complete := utf8Prefix(b[i:])
		switch {
		case complete:
			out.Write(b[i : i+n])
		case i+n == len(b) && n > 0 && validLead(b[i]):
			return out.String(), b[i:]
		default:
			out.WriteString("\uFFFD")
			if n == 0 {
				n = 1
			}
		}
		i += n
	}
	return out.String(), nil
}

func validLead(c byte) bool { return c >= 0xC2 && c <= 0xF4 }

// utf8Prefix returns the length of the longest prefix of b that begins a
// valid UTF-8 sequence, and whether that sequence is complete.
func utf8Prefix(b []byte) (int, bool) {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c < 0x80:
		return 1, true
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 0, false
	}
	n := 1
	for k := 0; k < need; k++ {
		if n >= len(b) {
			return n, false
		}
		if b[n] < lo || b[n] > hi {
			return n, false
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n, true
}

// --- no decoder: tokens joined by spaces ---

type joinSpec struct{}

func (joinSpec) newStage(next stage) stage { return &joinStage{next: next} }

type joinStage struct {
	next    stage
	started bool
}

func (st *joinStage) push(s string, cont bool) {
	if st.started && !cont {
		st.next.push(" ", true)
	}
	st.started = true
	st.next.push(s, true)
}
func (st *joinStage) end() { st.next.end() }

// --- transformers' clean_up_tokenization ---

// cleanupStage applies transformers' clean_up_tokenization
// (PreTrainedTokenizerBase.clean_up_tokenization) to the stream. Every
// pattern starts with a space and only deletes spaces, so text may be cleaned
// and released up to a cut after which no pattern can begin (see safeCut).
// Whether a cut is safe depends only on the text before it, so positions
// already found unsafe are not scanned again.
type cleanupStage struct {
	next    stage
	buf     []byte
	checked int // cuts at positions <= checked are known to be unsafe
}

var cleanupPairs = [...][2]string{
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
	{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
}

func cleanup(s string) string {
	for _, p := range cleanupPairs {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

// safeAt reports whether cleanup(h) + cleanup(rest) == cleanup(h + rest) for
// any rest: h must not end in a proper prefix of a pattern (" ", " '", " n",
// " n'", " 'v", " 'r"). Since the text before a released cut never ends in a
// space or an apostrophe, looking at the unreleased text alone suffices.
func safeAt(h []byte) bool {
	n := len(h)
	if n == 0 {
		return false
	}
	switch c := h[n-1]; {
	case c == ' ' || c == '\'':
		return false
	case c == 'n':
		return !(n >= 2 && h[n-2] == ' ')
	case c == 'v' || c == 'r':
		return !(n >= 3 && h[n-2] == '\'' && h[n-3] == ' ')
	}
	return true
}

func (st *cleanupStage) push(s string, _ bool) {
	st.buf = append(st.buf, s...)
	cut := 0
	for i := len(st.buf); i > st.checked; i-- {
		if (i == len(st.buf) || utf8.RuneStart(st.buf[i])) && safeAt(st.buf[:i]) {
			cut = i
			break
		}
	}
	if cut > 0 {
		st.next.push(cleanup(string(st.buf[:cut])), true)
		st.buf = append(st.buf[:0], st.buf[cut:]...)
	}
	st.checked = len(st.buf)
}

func (st *cleanupStage) end() {
	if len(st.buf) > 0 {
		st.next.push(cleanup(string(st.buf)), true)
		st.buf = st.buf[:0]
	}
	st.checked = 0
	st.next.end()
}

// parseDecoder flattens the decoder into specs, tracking whether the stream
// is already one token (after Fuse or ByteLevel), where some decoders would
// need the whole text and are refused instead.
func parseDecoder(raw json.RawMessage, fused *bool, depth int) ([]decSpec, error) {
	if isNull(raw) {
		return nil, nil
	}
	if depth > maxDepth {
		return nil, badJSON("decoder", "nested deeper than %d", maxDepth)
	}
	var h struct {
		Type          string            `json:"type"`
		Decoders      []json.RawMessage `json:"decoders"`
		Pattern       json.RawMessage   `json:"pattern"`
		Content       json.RawMessage   `json:"content"`
		Start         int               `json:"start"`
		Stop          int               `json:"stop"`
		Replacement   *string           `json:"replacement"`
		PrependScheme *string           `json:"prepend_scheme"`
		AddPrefix     *bool             `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, badJSON("decoder", "%v", err)
	}
	switch h.Type {
	case "Sequence":
		var out []decSpec
		for _, r := range h.Decoders {
			d, err := parseDecoder(r, fused, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, d...)
		}
		return out, nil
	case "Replace":
		var content string
		if err := json.Unmarshal(h.Content, &content); err != nil {
			return nil, badJSON("decoder.Replace.content", "%v", err)
		}
		if h.Pattern == nil {
			return nil, badJSON("decoder.Replace", "missing pattern")
		}
		p, err := parsePattern("decoder.Replace", h.Pattern)
		if err != nil {
			return nil, err
		}
		if *fused && p.re != nil {
			return nil, unsupported("decoder", "Replace", "a regex replacement after Fuse or ByteLevel")
		}
		if *fused && p.lit == "" {
			return nil, unsupported("decoder", "Replace", "an empty pattern after Fuse or ByteLevel")
		}
		return []decSpec{replaceSpec{r: replacer{p, content}, fused: *fused}}, nil
	case "ByteFallback":
		if *fused {
			return nil, unsupported("decoder", "ByteFallback", "after Fuse or ByteLevel")
		}
		return []decSpec{byteFallbackSpec{}}, nil
	case "Fuse":
		*fused = true
		return []decSpec{fuseSpec{}}, nil
	case "Strip":
		var c string
		if err := json.Unmarshal(h.Content, &c); err != nil || utf8.RuneCountInString(c) != 1 {
			return nil, badJSON("decoder.Strip.content", "want one character")
		}
		if h.Start < 0 || h.Stop < 0 || h.Start > 1<<16 || h.Stop > 1<<16 {
			return nil, badJSON("decoder.Strip", "start %d / stop %d out of range", h.Start, h.Stop)
		}
		r, _ := utf8.DecodeRuneInString(c)
		return []decSpec{stripSpec{content: r, start: h.Start, stop: h.Stop, fused: *fused}}, nil
	case "Metaspace":
		repl := "▁"
		if h.Replacement != nil {
			repl = *h.Replacement
		}
		if utf8.RuneCountInString(repl) != 1 {
			return nil, badJSON("decoder.Metaspace", "replacement %q is not one character", repl)
		}
		prepend := true
		if h.PrependScheme != nil {
			prepend = *h.PrependScheme != "never"
		} else if h.AddPrefix != nil {
			prepend = *h.AddPrefix
		}
		r, _ := utf8.DecodeRuneInString(repl)
		return []decSpec{metaspaceSpec{repl: r, prepend: prepend, fused: *fused}}, nil
	case "ByteLevel":
		if *fused {
			return nil, unsupported("decoder", "ByteLevel", "after Fuse or another ByteLevel")
		}
		*fused = true
		return []decSpec{byteLevelSpec{}}, nil
	case "":
		return nil, badJSON("decoder", "missing type")
	}
	return nil, unsupported("decoder", h.Type, "supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence")
}
