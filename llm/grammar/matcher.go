package grammar

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/tensorbridge/tensorbridge/errs"
)

// MaskCacheBytes bounds the masks a Grammar keeps per Vocab; when full the
// cache is emptied and refilled.
const MaskCacheBytes = 64 << 20

// maskCache maps a parse state (serialized) to its token mask.
type maskCache struct {
	mu    sync.RWMutex
	m     map[string][]uint32
	lists map[string][]int32 // closing tokens per enclosing stack (fastpath.go)
	bytes int
}

func (g *Grammar) cacheFor(v *Vocab) *maskCache {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cache == nil {
		g.cache = map[*Vocab]*maskCache{}
	}
	c := g.cache[v]
	if c == nil {
		c = &maskCache{m: map[string][]uint32{}, lists: map[string][]int32{}}
		g.cache[v] = c
	}
	return c
}

func (c *maskCache) get(key []byte, dst []uint32) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.m[string(key)]
	if ok {
		copy(dst, m)
	}
	return ok
}

func (c *maskCache) put(key []byte, mask []uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bytes+4*len(mask) > MaskCacheBytes {
		clear(c.m)
		clear(c.lists)
		c.bytes = 0
	}
	c.m[string(key)] = append([]uint32(nil), mask...)
	c.bytes += 4*len(mask) + len(key)
}

func (c *maskCache) getList(key []byte) ([]int32, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	l, ok := c.lists[string(key)]
	return l, ok
}

func (c *maskCache) putList(key []byte, l []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bytes+4*len(l) > MaskCacheBytes {
		clear(c.m)
		clear(c.lists)
		c.bytes = 0
	}
	c.lists[string(key)] = l
	c.bytes += 4*len(l) + len(key)
}

// Matcher follows one generated sequence through a Grammar. It is not safe
// for concurrent use; Matchers of one Grammar and Vocab share a mask cache
// and may run in parallel.
type Matcher struct {
	g        *Grammar
	v        *Vocab
	cache    *maskCache
	cur      state
	next     state
	bufs     []state // per trie depth, for Mask
	key      []byte
	pkey     []byte
	tmpStack []frame
	ps       state // enclosing stack (fastpath.go)
	mask     []uint32
	slow     bool // tests: always walk the trie
	ended    bool // an EOS token was accepted
}

// NewMatcher returns a Matcher at the start of the output.
func NewMatcher(g *Grammar, v *Vocab) *Matcher {
	m := &Matcher{g: g, v: v, cache: g.cacheFor(v), bufs: make([]state, v.maxLen+1)}
	m.mask = make([]uint32, v.Words())
	m.Reset()
	return m
}

// Reset returns the matcher to the start of the output.
func (m *Matcher) Reset() {
	m.cur.reset()
	m.cur.push1([]frame{{node: 0}})
	m.ended = false
}

// Mask sets in dst (bit id%32 of word id/32) exactly the tokens that may
// come next: those whose bytes keep the output a prefix of a valid
// document, and the EOS ids when it is complete. dst should hold
// Vocab.Words() words; a shorter one gets the leading words only (which
// only forbids more), words beyond are zeroed. It does not allocate once
// the state's mask is cached.
func (m *Matcher) Mask(dst []uint32) {
	clear(dst)
	if m.ended {
		return
	}
	if !m.slow && (m.stringMask() || m.keyMask()) {
		copy(dst, m.mask) // cheap enough not to cache
		return
	}
	m.key = m.cur.appendKey(m.key[:0])
	if m.cache.get(m.key, m.mask) {
		copy(dst, m.mask)
		return
	}
	clear(m.mask)
	m.walk(0, &m.cur, 0)
	if m.g.canStop(&m.cur) {
		for _, id := range m.v.eos {
			m.mask[id>>5] |= 1 << (id & 31)
		}
	}
	m.cache.put(m.key, m.mask)
	copy(dst, m.mask)
}

// walk visits the children of vocabulary trie node n from parse state st,
// marking the tokens that end at accepted nodes and descending while the
// state survives.
func (m *Matcher) walk(n int32, st *state, depth int) {
	v := m.v
	nxt := &m.bufs[depth]
	for _, c := range v.kids[v.kidOff[n]:v.kidOff[n+1]] {
		m.g.stepSet(nxt, st, v.lbl[c])
		if nxt.empty() {
			continue
		}
		for _, id := range v.ids[v.idOff[c]:v.idOff[c+1]] {
			m.mask[id>>5] |= 1 << (id & 31)
		}
		if v.kidOff[c+1] > v.kidOff[c] {
			m.walk(c, nxt, depth+1)
		}
	}
}

// Advance moves past token id. An id the mask would not allow is an error
// matching errs.ErrInvalidInput, and leaves the matcher as it was.
func (m *Matcher) Advance(id int) error {
	if m.ended {
		return fmt.Errorf("grammar: token %d after the end of the output: %w", id, errs.ErrInvalidInput)
	}
	if id < 0 || id >= m.v.Size() {
		return fmt.Errorf("grammar: token %d outside the vocabulary of %d: %w", id, m.v.Size(), errs.ErrInvalidInput)
	}
	for _, e := range m.v.eos {
		if id == e {
			if !m.g.canStop(&m.cur) {
				return fmt.Errorf("grammar: end of sequence before the JSON value is complete: %w", errs.ErrInvalidInput)
			}
			m.ended = true
			return nil
		}
	}
	b := m.v.toks[id]
	if len(b) == 0 {
		return fmt.Errorf("grammar: token %d is special or has no text: %w", id, errs.ErrInvalidInput)
	}
	m.next.copyFrom(&m.cur)
	for _, c := range b {
		m.g.stepSet(&m.bufs[0], &m.next, c)
		m.next, m.bufs[0] = m.bufs[0], m.next
		if m.next.empty() {
			return fmt.Errorf("grammar: token %d (%q) does not fit the schema here: %w", id, b, errs.ErrInvalidInput)
		}
	}
	m.cur, m.next = m.next, m.cur
	return nil
}

// CanStop reports whether the output so far is a complete value, so that
// EOS may come next (or has).
func (m *Matcher) CanStop() bool { return m.ended || m.g.canStop(&m.cur) }

// Done reports that generation must stop: EOS was accepted, or no byte can
// extend the output (the value is complete and closed).
func (m *Matcher) Done() bool {
	if m.ended {
		return true
	}
	for c := 0; c < 256; c++ {
		m.g.stepSet(&m.next, &m.cur, byte(c))
		if !m.next.empty() {
			return false
		}
	}
	return true
}

// appendKey serializes the state for the mask cache.
func (s *state) appendKey(k []byte) []byte {
	for i := 0; i < s.n(); i++ {
		k = append(k, 0xFF)
		for _, f := range s.stack(i) {
			k = binary.LittleEndian.AppendUint32(k, uint32(f.node))
			k = append(k, f.ph, f.ws, f.u8n, f.u8lo, f.u8hi, f.esc, f.nd, f.nf)
			if f.neg {
				k = append(k, 1)
			} else {
				k = append(k, 0)
			}
			k = binary.LittleEndian.AppendUint32(k, uint32(f.n))
			k = binary.LittleEndian.AppendUint32(k, uint32(f.t))
			k = binary.LittleEndian.AppendUint32(k, uint32(f.sel))
			k = binary.LittleEndian.AppendUint64(k, uint64(f.v))
			k = binary.LittleEndian.AppendUint64(k, uint64(f.fr))
		}
	}
	return k
}
