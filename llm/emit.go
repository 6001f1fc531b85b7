package llm

import (
	"slices"
	"strings"
)

// emit sends a generated token t (its ID, Logprob and logprob fields
// set) and says why the sequence ends ("" when it goes on).
func (e *Engine) emit(s *seq, t Token) string {
	id := t.ID
	s.n++
	s.last = id
	s.hist = append(s.hist, id)
	stop := slices.Contains(s.stopAll, id)
	conWhy := s.advanceConstraint(id)
	if s.detok != nil && s.n < s.req.Sampling.MinTokens {
		// Stop strings do not match before min_tokens (as vLLM): the
		// text goes out as it comes.
		s.text.WriteString(s.detok.Add(id))
		t.Text, s.text = s.text.String(), strings.Builder{}
	} else if s.detok != nil {
		s.text.WriteString(s.detok.Add(id))
		full := s.text.String()
		if cut := cutStop(full, s.req.StopStrings); len(cut) < len(full) {
			t.Text = cut
			s.text.Reset()
			s.out.send(t)
			s.detok = nil // nothing more to flush
			return "stop"
		}
		keep := holdBack(full, s.req.StopStrings)
		t.Text = full[:len(full)-keep]
		s.text.Reset()
		s.text.WriteString(full[len(full)-keep:])
	}
	s.out.send(t)
	switch {
	case conWhy != "":
		return conWhy
	case stop:
		return "stop"
	case s.n >= s.max || s.pos+1 >= e.m.maxContext:
		return "length"
	}
	return ""
}

// cutStop cuts text before the first stop string it contains.
func cutStop(text string, stops []string) string {
	cut := len(text)
	for _, st := range stops {
		if st == "" {
			continue
		}
		if i := strings.Index(text, st); i >= 0 && i < cut {
			cut = i
		}
	}
	return text[:cut]
}

// holdBack is how many trailing bytes of text may start a stop string and
// must wait for the next token.
func holdBack(text string, stops []string) int {
	keep := 0
	for _, st := range stops {
		for n := min(len(st)-1, len(text)); n > keep; n-- {
			if strings.HasSuffix(text, st[:n]) {
				keep = n
				break
			}
		}
	}
	return keep
}
