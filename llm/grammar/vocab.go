package grammar

import (
	"fmt"
	"slices"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// Vocab is the byte string of every token id of a tokenizer, in a trie, built
// once per tokenizer and shared by all grammars and matchers (it is
// immutable). Ids with no bytes (special tokens, holes) are never allowed;
// the EOS ids are allowed exactly when the JSON value is complete.
type Vocab struct {
	toks [][]byte
	eos  []int
	// The trie, nodes in breadth-first order: node i has label lbl[i], children
	// kids[kidOff[i]:kidOff[i+1]] and the tokens ids[idOff[i]:idOff[i+1]]
	// spelling exactly the path to it. Node 0 is the root.
	lbl    []byte
	kidOff []int32
	kids   []int32
	idOff  []int32
	ids    []int32
	maxLen int
	// string fast path (fastpath.go)
	pureUpTo [][]uint32
	longPure []longPure
	closers  []closer
	// keys without escapes
	pureKey    []uint32
	keyClosers []closer
}

// NewVocab builds a Vocab from each id's bytes (nil or empty: never
// allowed) and the EOS ids.
func NewVocab(tokens [][]byte, eos []int) (*Vocab, error) {
	if len(eos) == 0 {
		return nil, fmt.Errorf("grammar: vocabulary: no EOS token id: %w", errs.ErrInvalidInput)
	}
	for _, id := range eos {
		if id < 0 || id >= len(tokens) {
			return nil, fmt.Errorf("grammar: vocabulary: EOS id %d outside the vocabulary of %d: %w", id, len(tokens), errs.ErrInvalidInput)
		}
	}
	v := &Vocab{toks: make([][]byte, len(tokens)), eos: slices.Clone(eos)}
	for id, b := range tokens {
		if len(b) > 0 && !slices.Contains(eos, id) {
			v.toks[id] = slices.Clone(b)
			v.maxLen = max(v.maxLen, len(b))
		}
	}
	v.buildTrie()
	v.strProfile()
	return v, nil
}

// FromTokenizer builds the Vocab of a tokenizer: each id's bytes as
// (*tokenizer.Tokenizer).TokenBytes gives them, special tokens excluded.
// eos lists the EOS ids (generation_config.json may add some to the
// tokenizer's); empty means the tokenizer's own.
func FromTokenizer(t *tokenizer.Tokenizer, eos []int) (*Vocab, error) {
	if len(eos) == 0 {
		eos = t.EOS()
	}
	toks := make([][]byte, t.VocabSize())
	for id := range toks {
		if t.IsSpecial(id) {
			continue
		}
		toks[id], _ = t.TokenBytes(id)
	}
	return NewVocab(toks, eos)
}

// Size is the number of ids; Words the uint32 words a mask of them takes.
func (v *Vocab) Size() int  { return len(v.toks) }
func (v *Vocab) Words() int { return (len(v.toks) + 31) / 32 }

// EOS returns the end-of-sequence ids.
func (v *Vocab) EOS() []int { return slices.Clone(v.eos) }

// Token returns the bytes of id (nil for a special, EOS or unknown id).
func (v *Vocab) Token(id int) []byte {
	if id < 0 || id >= len(v.toks) {
		return nil
	}
	return v.toks[id]
}

// CoversBytes reports whether every single byte is a token, which makes
// every output the grammar allows spellable; a vocabulary without it may
// leave a matcher with an empty mask.
func (v *Vocab) CoversBytes() bool {
	n := 0
	for _, c := range v.kids[v.kidOff[0]:v.kidOff[1]] {
		if v.idOff[c+1] > v.idOff[c] {
			n++
		}
	}
	return n == 256
}

type buildNode struct {
	kids map[byte]*buildNode
	ids  []int32
}

func (v *Vocab) buildTrie() {
	root := &buildNode{}
	for id, b := range v.toks {
		n := root
		for _, c := range b {
			if n.kids == nil {
				n.kids = map[byte]*buildNode{}
			}
			k := n.kids[c]
			if k == nil {
				k = &buildNode{}
				n.kids[c] = k
			}
			n = k
		}
		if len(b) > 0 {
			n.ids = append(n.ids, int32(id))
		}
	}
	v.flatten(root, 0)
	v.kidOff = append(v.kidOff, int32(len(v.kids)))
	v.idOff = append(v.idOff, int32(len(v.ids)))
}

// flatten lays the trie out breadth-first, so that each node's children
// are contiguous in kids.
func (v *Vocab) flatten(root *buildNode, lbl byte) {
	type item struct {
		n   *buildNode
		lbl byte
	}
	queue := []item{{root, lbl}}
	for i := 0; i < len(queue); i++ {
		it := queue[i]
		v.lbl = append(v.lbl, it.lbl)
		v.kidOff = append(v.kidOff, int32(len(v.kids)))
		v.idOff = append(v.idOff, int32(len(v.ids)))
		v.ids = append(v.ids, it.n.ids...)
		for c := 0; c < 256; c++ {
			if k := it.n.kids[byte(c)]; k != nil {
				v.kids = append(v.kids, int32(len(queue)))
				queue = append(queue, item{k, byte(c)})
			}
		}
	}
}
