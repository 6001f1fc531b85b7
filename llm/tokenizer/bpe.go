package tokenizer

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is Hugging Face's BPE model
// (https://github.com/huggingface/tokenizers/blob/main/tokenizers/src/models/bpe/model.rs):
// a word is split into characters (or byte-fallback tokens, or the unknown
// token), then the adjacent pair with the lowest merge rank is merged,
// leftmost first, until no pair has a merge.
type bpe struct {
	vocab        map[string]int
	merges       map[[2]int]mergeTo
	unk          int // -1: none
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	byteTok      [256]int

	mu    sync.RWMutex
	cache map[string][]int
}

type mergeTo struct{ rank, id int }

const cacheCap = 10000

type bpeJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

func parseModel(raw json.RawMessage) (*bpe, error) {
	if isNull(raw) {
		return nil, badJSON("model", "missing")
	}
	var m bpeJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, badJSON("model", "%v", err)
	}
	switch m.Type {
	case "BPE":
	case "":
		// Old files omit the type; BPE is recognised by its merges.
		if m.Merges == nil {
			return nil, badJSON("model", "missing type")
		}
	default:
		return nil, unsupported("model", m.Type, "only BPE models are implemented (WordPiece, Unigram and WordLevel are not)")
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, unsupported("model.BPE", "dropout", fmt.Sprintf("dropout %v makes encoding random", *m.Dropout))
	}
	b := &bpe{unk: -1, fuseUnk: m.FuseUnk, byteFallback: m.ByteFallback, ignoreMerges: m.IgnoreMerges,
		cache: make(map[string][]int)}
	if m.ContinuingSubwordPrefix != nil {
		b.prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		b.suffix = *m.EndOfWordSuffix
	}
	if err := json.Unmarshal(m.Vocab, &b.vocab); err != nil || b.vocab == nil {
		return nil, badJSON("model.vocab", "not an object of token to id: %v", err)
	}
	for tok, id := range b.vocab {
		if id < 0 || id > maxID {
			return nil, badJSON("model.vocab", "token %q has id %d outside [0, %d]", tok, id, maxID)
		}
	}
	if m.UnkToken != nil {
		id, ok := b.vocab[*m.UnkToken]
		if !ok {
			return nil, badJSON("model.unk_token", "%q is not in the vocabulary", *m.UnkToken)
		}
		b.unk = id
	}
	for i := range b.byteTok {
		b.byteTok[i] = -1
		if id, ok := b.vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.byteTok[i] = id
		}
	}
	return b, b.parseMerges(m.Merges)
}

// parseMerges reads merges as "a b" strings (tokenizers < 0.20) or ["a", "b"]
// pairs. A later duplicate overrides an earlier one, as collecting into
// tokenizers' HashMap does.
func (b *bpe) parseMerges(raw json.RawMessage) error {
	var items []json.RawMessage
	if !isNull(raw) {
		if err := json.Unmarshal(raw, &items); err != nil {
			return badJSON("model.merges", "not a list: %v", err)
		}
	}
	b.merges = make(map[[2]int]mergeTo, len(items))
	for rank, it := range items {
		var l, r string
		var s string
		var pair []string
		if err := json.Unmarshal(it, &s); err == nil {
			var ok bool
			if l, r, ok = strings.Cut(s, " "); !ok || strings.Contains(r, " ") {
				return badJSON(fmt.Sprintf("model.merges[%d]", rank), "%q is not two tokens separated by one space", s)
			}
		} else if err := json.Unmarshal(it, &pair); err == nil && len(pair) == 2 {
			l, r = pair[0], pair[1]
		} else {
			return badJSON(fmt.Sprintf("model.merges[%d]", rank), "neither \"a b\" nor [\"a\", \"b\"]: %s", truncate(string(it)))
		}
		li, lok := b.vocab[l]
		ri, rok := b.vocab[r]
		if !lok || !rok {
			return badJSON(fmt.Sprintf("model.merges[%d]", rank), "token %q or %q is not in the vocabulary", l, r)
		}
		merged := l + strings.TrimPrefix(r, b.prefix)
		if b.prefix == "" {
			merged = l + r
		}
		id, ok := b.vocab[merged]
		if !ok {
			return badJSON(fmt.Sprintf("model.merges[%d]", rank), "merged token %q is not in the vocabulary", merged)
		}
		b.merges[[2]int{li, ri}] = mergeTo{rank: rank, id: id}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// tokenize appends the ids of one pre-tokenised word to dst.
func (b *bpe) tokenize(dst []int, w string) []int {
	if w == "" {
		return dst
	}
	if b.ignoreMerges {
		if id, ok := b.vocab[w]; ok {
			return append(dst, id)
		}
	}
	b.mu.RLock()
	ids, ok := b.cache[w]
	b.mu.RUnlock()
	if ok {
		return append(dst, ids...)
	}
	ids = b.mergeWord(w)
	if len(w) < 256 {
		b.mu.Lock()
		if len(b.cache) < cacheCap {
			b.cache[w] = ids
		}
		b.mu.Unlock()
	}
	return append(dst, ids...)
}

type symbol struct {
	id         int
	prev, next int
	gone       bool
}

// initialSymbols splits w into characters mapped to ids, following
// BPE::merge_word: byte fallback when a character is not in the vocabulary,
// else the unknown token (fused with a preceding one when fuse_unk).
func (b *bpe) initialSymbols(w string) []int {
	ids := make([]int, 0, len(w))
	pendingUnk := false
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		s := w[i : i+n]
		if i > 0 && b.prefix != "" {
			s = b.prefix + s
		}
		if i+n == len(w) && b.suffix != "" {
			s += b.suffix
		}
		i += n
		if id, ok := b.vocab[s]; ok {
			if pendingUnk {
				ids = append(ids, b.unk)
				pendingUnk = false
			}
			ids = append(ids, id)
			continue
		}
		if b.byteFallback && b.allBytes(s) {
			// As in tokenizers, a pending unknown token is not flushed here.
			for j := 0; j < len(s); j++ {
				ids = append(ids, b.byteTok[s[j]])
			}
			continue
		}
		if b.unk >= 0 {
			if pendingUnk && !b.fuseUnk {
				ids = append(ids, b.unk)
			}
			pendingUnk = true
		}
	}
	if pendingUnk {
		ids = append(ids, b.unk)
	}
	return ids
}

func (b *bpe) allBytes(s string) bool {
	for j := 0; j < len(s); j++ {
		if b.byteTok[s[j]] < 0 {
			return false
		}
	}
	return true
}

func (b *bpe) mergeWord(w string) []int {
	ids := b.initialSymbols(w)
	if len(ids) < 2 || len(b.merges) == 0 {
		return ids
	}
	sym := make([]symbol, len(ids))
	for i, id := range ids {
		sym[i] = symbol{id: id, prev: i - 1, next: i + 1}
	}
	sym[len(sym)-1].next = -1
	q := make(mergeQueue, 0, len(ids))
	for i := 0; i+1 < len(ids); i++ {
		if m, ok := b.merges[[2]int{ids[i], ids[i+1]}]; ok {
			q = append(q, mergeItem{pos: i, rank: m.rank, id: m.id})
		}
	}
	heap.Init(&q)
	for q.Len() > 0 {
		top := heap.Pop(&q).(mergeItem)
		s := &sym[top.pos]
		if s.gone || s.next < 0 {
			continue
		}
		nextPos := s.next
		right := sym[nextPos]
		if m, ok := b.merges[[2]int{s.id, right.id}]; !ok || m.id != top.id {
			continue // stale entry
		}
		s.id = top.id
		s.next = right.next
		sym[nextPos].gone = true
		if right.next >= 0 {
			sym[right.next].prev = top.pos
		}
		if s.prev >= 0 {
			if m, ok := b.merges[[2]int{sym[s.prev].id, s.id}]; ok {
				heap.Push(&q, mergeItem{pos: s.prev, rank: m.rank, id: m.id})
			}
		}
		if s.next >= 0 {
			if m, ok := b.merges[[2]int{s.id, sym[s.next].id}]; ok {
				heap.Push(&q, mergeItem{pos: top.pos, rank: m.rank, id: m.id})
			}
		}
	}
	out := ids[:0]
	for i := 0; i >= 0; i = sym[i].next {
		out = append(out, sym[i].id)
	}
	return out
}

type mergeItem struct{ pos, rank, id int }

// mergeQueue orders by rank, then position: the lowest-ranked pair merges
// first, leftmost among equals.
type mergeQueue []mergeItem

func (q mergeQueue) Len() int { return len(q) }
func (q mergeQueue) Less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].pos < q[j].pos
}
func (q mergeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *mergeQueue) Push(x any)   { *q = append(*q, x.(mergeItem)) }
func (q *mergeQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}
