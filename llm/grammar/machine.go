package grammar

// The automaton is a set of parse stacks (several only while anyOf
// alternatives overlap); each stack is a list of frames, one per value being
// written, the root frame at the bottom. A byte steps every stack; stacks
// that reject it are dropped. Every frame is kept completable, so an empty
// set means the byte is not allowed.

// frame is the parse state of one value. Fields unused by its kind stay
// zero, so equal states compare equal.
type frame struct {
	node  int32
	ph    uint8 // phase within the value
	ws    uint8 // whitespace run so far
	u8n   uint8 // UTF-8 continuation bytes still due
	u8lo  uint8 // range of the next continuation byte
	u8hi  uint8
	esc   uint8 // string: 1 after '\', 2..5 in \uXXXX
	neg   bool  // number: minus sign seen
	nd    uint8 // number: integer digits
	nf    uint8 // number: fraction digits
	n     int32 // string: characters; array: items; object: next property index
	t     int32 // enum and object key: trie node (-1 off the trie)
	sel   int32 // object: property whose value comes next (-1 extra)
	v, fr int64 // number: integer part, fraction digits as an integer; \u code
}

// state is a set of stacks: stack i is fr[off[i]:off[i+1]].
type state struct {
	fr  []frame
	off []int32
}

func (s *state) reset()      { s.fr = s.fr[:0]; s.off = append(s.off[:0], 0) }
func (s *state) empty() bool { return len(s.off) <= 1 }
func (s *state) n() int      { return len(s.off) - 1 }
func (s *state) stack(i int) []frame {
	return s.fr[s.off[i]:s.off[i+1]]
}
func (s *state) push1(st []frame) {
	s.fr = append(s.fr, st...)
	s.off = append(s.off, int32(len(s.fr)))
}

func (s *state) copyFrom(o *state) {
	s.fr = append(s.fr[:0], o.fr...)
	s.off = append(s.off[:0], o.off...)
}

type action uint8

const (
	aOK     action = iota // byte consumed, frame stays
	aReject               // byte not allowed
	aPush                 // a child frame was pushed; it must consume the byte
	aDone                 // byte consumed and the value is complete: pop
	aRefeed               // value complete before this byte: pop, parent consumes it
	aFork                 // union: each alternative must consume the byte
)

// stepSet computes dst = src stepped by byte b, without duplicate stacks.
func (g *Grammar) stepSet(dst, src *state, b byte) {
	dst.reset()
	for i := 0; i < src.n(); i++ {
		start := len(dst.fr)
		dst.fr = append(dst.fr, src.stack(i)...)
		g.run(dst, start, b)
	}
	if dst.n() > 1 {
		dst.dedupe()
	}
}

// run steps the stack dst.fr[start:] by b; an accepted stack is closed by
// appending its end to dst.off, a rejected one is truncated away.
func (g *Grammar) run(dst *state, start int, b byte) {
	for {
		top := len(dst.fr) - 1
		if top < start {
			dst.fr = dst.fr[:start]
			return
		}
		f := &dst.fr[top]
		nd := &g.nodes[f.node]
		if f.ph == 0 && (nd.kind == kObject || nd.kind == kArray) && top-start >= maxContainers {
			dst.fr = dst.fr[:start] // recursive $ref: no deeper containers
			return
		}
		switch g.stepFrame(dst, f, nd, b) {
		case aOK:
			dst.off = append(dst.off, int32(len(dst.fr)))
			return
		case aReject:
			dst.fr = dst.fr[:start]
			return
		case aPush:
			if len(dst.fr)-start > maxStack {
				dst.fr = dst.fr[:start]
				return
			}
		case aDone:
			dst.fr = dst.fr[:top]
			dst.off = append(dst.off, int32(len(dst.fr)))
			return
		case aRefeed:
			dst.fr = dst.fr[:top]
		case aFork:
			g.fork(dst, start, top, nd, b)
			return
		}
	}
}

// fork replaces the union frame on top by each alternative that can start
// with b and steps each copy.
func (g *Grammar) fork(dst *state, start, top int, nd *node, b byte) {
	base := append([]frame(nil), dst.fr[start:top]...)
	dst.fr = dst.fr[:start]
	for _, alt := range nd.alts {
		if !g.nodes[alt].first[b] || dst.n() >= maxAlternatives {
			continue
		}
		s := len(dst.fr)
		dst.fr = append(dst.fr, base...)
		dst.fr = append(dst.fr, frame{node: alt})
		g.run(dst, s, b)
	}
}

func (g *Grammar) stepFrame(dst *state, f *frame, nd *node, b byte) action {
	switch nd.kind {
	case kRoot:
		if f.ph != 0 {
			return aReject
		}
		f.ph = 1
		dst.fr = append(dst.fr, frame{node: nd.alts[0]})
		return aPush
	case kObject:
		return g.stepObject(dst, f, nd, b)
	case kArray:
		return stepArray(dst, f, nd, b)
	case kString:
		if f.ph == 0 {
			if b != '"' {
				return aReject
			}
			f.ph = 1
			return aOK
		}
		return stepString(f, nd.minLen, nd.maxLen, true, b)
	case kNumber:
		return stepNumber(f, &nd.num, b)
	case kEnum:
		return stepEnum(f, nd.values, b)
	case kUnion:
		if nd.pick != nil {
			alt := nd.pick[b]
			if alt < 0 {
				return aReject
			}
			*f = frame{node: nd.alts[alt]}
			return g.stepFrame(dst, f, &g.nodes[f.node], b)
		}
		return aFork
	}
	return aReject
}

func isWS(b byte) bool { return b == ' ' || b == '\n' || b == '\r' || b == '\t' }

// whitespace consumes b as part of a bounded run.
func whitespace(f *frame) action {
	if f.ws >= MaxWhitespace {
		return aReject
	}
	f.ws++
	return aOK
}

// stepArray: phases 0 before '[', 1 after '[', 2 after an item, 3 after ','.
func stepArray(dst *state, f *frame, nd *node, b byte) action {
	if f.ph == 0 {
		if b != '[' {
			return aReject
		}
		f.ph = 1
		return aOK
	}
	if isWS(b) {
		return whitespace(f)
	}
	f.ws = 0
	switch {
	case b == ']' && f.ph != 3 && f.n >= nd.minItems:
		return aDone
	case b == ',' && f.ph == 2 && (nd.maxItems < 0 || f.n < nd.maxItems):
		f.ph = 3
		return aOK
	case f.ph == 1 && nd.maxItems != 0, f.ph == 3:
		f.ph = 2
		if nd.maxItems >= 0 || f.n < nd.minItems {
			f.n++ // counted exactly while a bound needs it
		}
		dst.fr = append(dst.fr, frame{node: nd.item})
		return aPush
	}
	return aReject
}

// stepEnum walks the trie of the allowed serializations.
func stepEnum(f *frame, t *trie, b byte) action {
	next := t.child(f.t, b)
	if next < 0 {
		if t.nodes[f.t].term >= 0 {
			return aRefeed
		}
		return aReject
	}
	f.t = next
	if t.nodes[next].term >= 0 && len(t.nodes[next].edges) == 0 {
		return aDone
	}
	return aOK
}

// canStop reports whether some stack is a complete JSON text.
func (g *Grammar) canStop(s *state) bool {
	for i := 0; i < s.n(); i++ {
		if g.stackCanStop(s.stack(i)) {
			return true
		}
	}
	return false
}

func (g *Grammar) stackCanStop(st []frame) bool {
	for k := len(st) - 1; k >= 0; k-- {
		f := &st[k]
		nd := &g.nodes[f.node]
		switch nd.kind {
		case kRoot:
			return f.ph == 1
		case kNumber:
			if !numComplete(f, &nd.num) {
				return false
			}
		case kEnum:
			if nd.values.nodes[f.t].term < 0 {
				return false
			}
		default:
			return false
		}
	}
	return false
}

// dedupe drops stacks equal to an earlier one.
func (s *state) dedupe() {
	w := 1
	for i := 1; i < s.n(); i++ {
		st := s.stack(i)
		dup := false
		for j := 0; j < w && !dup; j++ {
			dup = equalStacks(s.fr[s.off[j]:s.off[j+1]], st)
		}
		if dup {
			continue
		}
		ws := s.off[w]
		copy(s.fr[ws:], st)
		s.off[w+1] = ws + int32(len(st))
		w++
	}
	s.off = s.off[:w+1]
	s.fr = s.fr[:s.off[w]]
}

func equalStacks(a, b []frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
