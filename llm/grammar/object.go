package grammar

// Object phases.
const (
	oStart = iota // before '{'
	oOpen         // after '{'
	oKey          // inside a key
	oColon        // after a key
	oValue        // after ':'
	oAfter        // after a member's value
	oComma        // after ','
)

// extraOK: an extra key may come next (all required properties are written;
// extra keys come after the declared ones).
func (nd *node) extraOK(idx int32) bool {
	return nd.extra >= 0 && nd.firstReq[idx] == int32(len(nd.props))
}

// closable: '}' may come next.
func (nd *node) closable(idx int32) bool { return nd.firstReq[idx] == int32(len(nd.props)) }

func (nd *node) hasCandidate(idx int32) bool {
	if nd.extraOK(idx) {
		return true
	}
	for j := idx; j < int32(len(nd.props)) && j <= nd.firstReq[idx]; j++ {
		if nd.props[j].node >= 0 {
			return true
		}
	}
	return false
}

// candidate: property j may come next: not before idx, not past the first
// required one still due.
func (nd *node) candidate(j, idx int32) bool {
	return j >= idx && j <= nd.firstReq[idx] && j < int32(len(nd.props)) && nd.props[j].node >= 0
}

func (nd *node) candidateBelow(t, idx int32) bool {
	for _, j := range nd.keys.nodes[t].below {
		if nd.candidate(j, idx) {
			return true
		}
	}
	return false
}

func (g *Grammar) stepObject(dst *state, f *frame, nd *node, b byte) action {
	switch f.ph {
	case oStart:
		if b != '{' {
			return aReject
		}
		f.ph = oOpen
		return aOK
	case oKey:
		return stepKey(f, nd, b)
	}
	if isWS(b) {
		return whitespace(f)
	}
	f.ws = 0
	switch {
	case b == '}' && (f.ph == oOpen || f.ph == oAfter) && nd.closable(f.n):
		return aDone
	case b == '"' && (f.ph == oOpen || f.ph == oComma) && nd.hasCandidate(f.n):
		f.ph, f.t, f.sel = oKey, 0, 0
		return aOK
	case b == ',' && f.ph == oAfter && nd.hasCandidate(f.n):
		f.ph = oComma
		return aOK
	case b == ':' && f.ph == oColon:
		f.ph = oValue
		return aOK
	case f.ph == oValue:
		child := nd.extra
		if f.sel >= 0 {
			child, f.n = nd.props[f.sel].node, f.sel+1
		} else {
			f.n = int32(len(nd.props))
		}
		f.ph, f.sel = oAfter, 0
		dst.fr = append(dst.fr, frame{node: child})
		return aPush
	}
	return aReject
}

// stepKey consumes a byte of a key: a string without escapes, tracked on
// the trie of declared names. At the closing quote the key selects a
// declared property that may come next, or an extra key when allowed and
// the name is not declared.
func stepKey(f *frame, nd *node, b byte) action {
	extra := nd.extraOK(f.n)
	if b == '"' && f.u8n == 0 {
		term := int32(-1)
		if f.t >= 0 {
			term = nd.keys.nodes[f.t].term
		}
		switch {
		case term >= 0 && nd.candidate(term, f.n):
			f.sel = term
		case term == -1 && extra:
			f.sel = -1
		default:
			return aReject
		}
		f.ph, f.t, f.u8lo, f.u8hi = oColon, 0, 0, 0
		return aOK
	}
	if stepString(f, 0, -1, false, b) != aOK {
		return aReject
	}
	if f.t >= 0 {
		f.t = nd.keys.child(f.t, b)
	}
	if f.t >= 0 && !extra && !nd.candidateBelow(f.t, f.n) {
		return aReject
	}
	if f.t < 0 && !extra {
		return aReject
	}
	return aOK
}
