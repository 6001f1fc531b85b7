package tokenizer

import "strings"

// TokenBytes returns the raw bytes that token id contributes to decoded text
// when it stands in the middle of a sequence, and false for an id the
// vocabulary does not have. The decoder chain of tokenizer.json is applied to
// the token alone: ByteLevel maps each rune back to its byte (so a token
// holding part of a multi-byte character gives those bytes, not U+FFFD),
// ByteFallback turns <0xNN> into its byte, Metaspace and Replace map the
// space marker to a space, Strip applies per token only when the stream is
// not fused. What happens only at a sequence's start (Metaspace dropping the
// prefix space of the first token, a fused Strip) and transformers'
// clean_up_tokenization, which edits text across tokens, are not applied:
// constrained decoding (package llm/grammar) works on this byte stream.
//
// Special added tokens give their content; callers that must never emit
// them check IsSpecial.
func (t *Tokenizer) TokenBytes(id int) ([]byte, bool) {
	if id < 0 || id >= len(t.idToTok) {
		return nil, false
	}
	s := t.idToTok[id]
	if s == "" {
		return nil, false
	}
	if a, ok := t.addedByID[id]; ok && a.Special {
		return []byte(s), true
	}
	var raw []byte
	for _, d := range t.decoders {
		s, raw = tokenBytesStage(d, s, raw)
	}
	if raw != nil {
		return raw, true
	}
	return []byte(s), true
}

// tokenBytesStage applies one decoder to a lone mid-sequence token. Once a
// stage has produced raw bytes (ByteLevel, ByteFallback), later stages see
// them as text again only if they are valid UTF-8, as the streaming chain
// passes text on; raw carries bytes that are not.
func tokenBytesStage(d decSpec, s string, raw []byte) (string, []byte) {
	if raw != nil {
		return s, raw // later stages act on text; raw bytes pass through
	}
	switch p := d.(type) {
	case replaceSpec:
		return p.r.apply(s), nil
	case byteFallbackSpec:
		if b, ok := byteToken(s); ok {
			return "", []byte{b}
		}
	case stripSpec:
		if !p.fused {
			return stripToken(s, p.content, p.start, p.stop), nil
		}
	case metaspaceSpec:
		if p.fused && p.prepend {
			return strings.ReplaceAll(s, string(p.repl), ""), nil
		}
		return strings.ReplaceAll(s, string(p.repl), " "), nil
	case byteLevelSpec:
		out := make([]byte, 0, len(s))
		for _, r := range s {
			b, ok := runeToByte[r]
			if !ok {
				return s, nil // a rune outside the byte alphabet passes as UTF-8
			}
			out = append(out, b)
		}
		return "", out
	}
	return s, nil
}
