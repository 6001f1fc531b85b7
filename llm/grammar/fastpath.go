package grammar

// Strings are most of a JSON document and the costliest state to mask: a
// string body allows almost every token, so the trie walk visits most of
// the vocabulary. A token's fate there does not depend on the grammar: read
// from a clean string body (no escape or UTF-8 sequence pending), it is
// either rejected, "pure" (stays inside the string, adding some number of
// characters) or closes the string with its first unescaped quote, the rest
// of its bytes going to the enclosing value. So the Vocab keeps, once,
// cumulative masks of pure tokens by character count and the list of
// closing tokens; the mask of a string state is then a copied mask plus the
// closing tokens whose remainder the enclosing stack accepts (computed once
// per enclosing stack and cached) and whose character counts fit.

// strChars is the largest character count with a cumulative mask; pure
// tokens with more characters are listed apart.
const strChars = 32

type closer struct {
	id   int32
	pre  int32 // characters before the closing quote
	tail int32 // offset of the bytes after it
}

type longPure struct{ id, chars int32 }

// readString reads b from a clean string body: the action that ended the
// read (aOK: all of b stayed inside), the characters read and the offset
// after the last byte read.
func readString(b []byte, escapes bool) (action, int32, int32) {
	f := frame{}
	act := aOK
	i := 0
	for ; i < len(b) && act == aOK; i++ {
		act = stepString(&f, 0, 1<<30, escapes, b[i])
	}
	return act, f.n, int32(i)
}

// strProfile classifies every token as read from a clean string body, and
// from a clean key (no escapes, no length).
func (v *Vocab) strProfile() {
	w := v.Words()
	v.pureUpTo = make([][]uint32, strChars+1)
	for c := range v.pureUpTo {
		v.pureUpTo[c] = make([]uint32, w)
	}
	v.pureKey = make([]uint32, w)
	for id, b := range v.toks {
		if len(b) == 0 {
			continue
		}
		switch act, _, i := readString(b, false); act {
		case aDone:
			v.keyClosers = append(v.keyClosers, closer{id: int32(id), tail: i})
		case aOK:
			v.pureKey[id>>5] |= 1 << (id & 31)
		}
		act, n, i := readString(b, true)
		f := frame{n: n}
		switch {
		case act == aDone:
			v.closers = append(v.closers, closer{id: int32(id), pre: f.n, tail: i})
		case act != aOK:
		case f.n > strChars:
			v.longPure = append(v.longPure, longPure{int32(id), f.n})
		default:
			for c := f.n; c <= strChars; c++ {
				v.pureUpTo[c][id>>5] |= 1 << (id & 31)
			}
		}
	}
}

// stringMask fills m.mask for a state that is one stack whose top is a
// clean string body, and reports whether it applied.
func (m *Matcher) stringMask() bool {
	if m.cur.n() != 1 {
		return false
	}
	st := m.cur.stack(0)
	f := st[len(st)-1]
	nd := &m.g.nodes[f.node]
	if nd.kind != kString || f.ph != 1 || f.u8n != 0 || f.esc != 0 {
		return false
	}
	v := m.v
	rem := int32(1 << 30)
	if nd.maxLen >= 0 {
		rem = nd.maxLen - f.n
	}
	copy(m.mask, v.pureUpTo[min(rem, strChars)])
	if rem > strChars {
		for _, p := range v.longPure {
			if p.chars <= rem {
				m.mask[p.id>>5] |= 1 << (p.id & 31)
			}
		}
	}
	for _, ci := range m.closersAfter(st[:len(st)-1], v.closers, 'Q') {
		c := &v.closers[ci]
		if c.pre <= rem && f.n+c.pre >= nd.minLen {
			m.mask[c.id>>5] |= 1 << (c.id & 31)
		}
	}
	return true
}

// keyMask fills m.mask for a state that is one stack whose top is an
// object reading a clean extra key off the trie of declared names (so any
// key is allowed, as in json_object), and reports whether it applied.
func (m *Matcher) keyMask() bool {
	if m.cur.n() != 1 {
		return false
	}
	st := m.cur.stack(0)
	f := st[len(st)-1]
	nd := &m.g.nodes[f.node]
	if nd.kind != kObject || f.ph != oKey || f.u8n != 0 || !nd.extraOK(f.n) {
		return false
	}
	if f.t >= 0 && (f.t != 0 || len(nd.keys.nodes[0].edges) != 0 || nd.keys.nodes[0].term != -1) {
		return false
	}
	copy(m.mask, m.v.pureKey)
	after := append(m.tmpStack[:0], st...)
	top := &after[len(after)-1]
	top.sel = -1
	top.ph, top.t, top.u8lo, top.u8hi = oColon, 0, 0, 0
	m.tmpStack = after
	for _, ci := range m.closersAfter(after, m.v.keyClosers, 'K') {
		id := m.v.keyClosers[ci].id
		m.mask[id>>5] |= 1 << (id & 31)
	}
	return true
}

// closersAfter lists the closing tokens whose bytes after the quote the
// stack st accepts, cached per stack.
func (m *Matcher) closersAfter(st []frame, list []closer, tag byte) []int32 {
	ps := &m.ps
	ps.reset()
	ps.push1(st)
	m.pkey = ps.appendKey(append(m.pkey[:0], tag))
	if ok, hit := m.cache.getList(m.pkey); hit {
		return ok
	}
	var ok []int32
	var a, b state
	for ci, c := range list {
		a.copyFrom(ps)
		for _, x := range m.v.toks[c.id][c.tail:] {
			m.g.stepSet(&b, &a, x)
			a, b = b, a
			if a.empty() {
				break
			}
		}
		if !a.empty() {
			ok = append(ok, int32(ci))
		}
	}
	m.cache.putList(m.pkey, ok)
	return ok
}
