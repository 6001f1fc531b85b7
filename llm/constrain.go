package llm

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck
	"github.com/tensorbridge/tensorbridge/ir"
)

// Constrained decoding (structured output): a request with a Constraint
// (llm/grammar's *Matcher, one per sequence) has, before each of its
// steps, the set of tokens it may take next as a bitmask over the
// vocabulary (bit id%32 of word id/32). The mask crosses to the device as
// a [B, ceil(V/32)] int32 block, V/8 bytes a row (32 times less than a
// [B, V] bool mask), and the program expands it to [B, V] (each word
// repeated 32 times, ANDed with the bit of its column) and sets the
// logits of the tokens it forbids to -inf before sampling, after the
// penalties. Rows without a constraint (and padding rows) send all ones.
// The raw log-probabilities reported (logprobs) are not masked: they stay
// the model's, as vLLM reports them. Programs with the mask input are
// variants (decodeKey.mask, prefillKey.mask), compiled on first need.

// Constraint restricts the tokens a sequence may generate; llm/grammar's
// *Matcher implements it. The engine calls Mask before each step of the
// sequence, Advance with each token it takes, and ends the sequence
// ("stop") when Done. The constraint's own end-of-sequence ids should be
// the model's (Config.EOS): a constrained sequence may take one only
// when the constraint allows it.
type Constraint interface {
	// Mask sets in dst (bit id%32 of word id/32) the ids that may come
	// next, clearing the others.
	Mask(dst []uint32)
	// Advance moves past id; an error says id was not allowed.
	Advance(id int) error
	// Done reports that nothing may follow.
	Done() bool
}

// maskWords is the int32 words of a vocabulary mask.
func (e *Engine) maskWords() int { return (e.m.Config.Vocab + 31) / 32 }

// startConstraint gives a sequence of a request with NewConstraint its
// constraint and mask buffer, and its own detokenizer when the request
// has one (the tokens' exact bytes).
func (e *Engine) startConstraint(s *seq) {
	if s.req.NewDetokenizer != nil {
		s.detok = s.req.NewDetokenizer()
	}
	if s.req.NewConstraint == nil {
		return
	}
	s.con = s.req.NewConstraint()
	s.maskBuf = make([]uint32, e.maskWords())
}

// nextMask fills and returns the sequence's mask for its next token (nil
// for an unconstrained one).
func (s *seq) nextMask() []uint32 {
	if s.con == nil {
		return nil
	}
	s.con.Mask(s.maskBuf)
	return s.maskBuf
}

// advanceConstraint moves the sequence's constraint past id and says
// whether the sequence must end: "stop" when the constraint is done (the
// value is complete and nothing may follow, or it took its end of
// sequence), "error" when id was not allowed (the device did not apply
// the mask: a bug, reported rather than sent on), "" otherwise.
func (s *seq) advanceConstraint(id int) string {
	if s.con == nil {
		return ""
	}
	if err := s.con.Advance(id); err != nil {
		s.conErr = fmt.Errorf("llm: constrained decoding took a token the mask forbids: %w", err)
		return "error"
	}
	if s.con.Done() {
		return "stop"
	}
	return ""
}

// anyMask reports whether one of rows is constrained.
func anyMask(rows []row) bool {
	for _, r := range rows {
		if r.mask != nil {
			return true
		}
	}
	return false
}

// maskTensor lays out rows' masks (padded to n rows, all-allowed where a
// row has none) as an int32 [n, words] tensor.
func maskTensor(rows []row, n, words int) (*ir.Tensor, error) {
	raw := make([]byte, 4*n*words)
	for i := range n {
		dst := raw[4*i*words : 4*(i+1)*words]
		if i < len(rows) && rows[i].mask != nil {
			m := rows[i].mask
			for j := range words {
				var w uint32
				if j < len(m) {
					w = m[j]
				}
				binary.LittleEndian.PutUint32(dst[4*j:], w)
			}
			continue
		}
		for j := range dst {
			dst[j] = 0xFF
		}
	}
	return ir.TensorFromBytes(ir.Int32, []int{n, words}, raw)
}

// maskShape is the mask input's shape for b rows.
func (e *Engine) maskShape(b int) ir.Shape { return ir.MakeShape(ir.Int32, b, e.maskWords()) }

// allowedNode expands the mask input words [B, W] int32 into [B, V] bool:
// column v is bit v%32 of word v/32.
func allowedNode(words *Node, v int) *Node {
	g := words.Graph()
	b, w := words.Shape().Dimensions[0], words.Shape().Dimensions[1]
	rep := Reshape(BroadcastToDims(Reshape(words, b, w, 1), b, w, 32), b, w*32)
	if w*32 != v {
		rep = Slice(rep, AxisRange(), AxisRange(0, v))
	}
	sel := make([]int32, v)
	for i := range sel {
		sel[i] = int32(uint32(1) << (i % 32))
	}
	bit := BroadcastToDims(Reshape(Const(g, sel), 1, v), b, v)
	return NotEqual(BitwiseAnd(rep, bit), ZerosLike(rep))
}

// byteDetokenizer is the text of a constrained sequence: the tokens'
// bytes concatenated exactly (the grammar's output), with an incomplete
// UTF-8 character held back until the token that completes it.
type byteDetokenizer struct {
	bytes   func(id int) []byte
	pending []byte
}

// NewByteDetokenizer returns a Detokenizer whose text is the
// concatenation of bytes(id) of each id, released on UTF-8 character
// boundaries (constrained decoding's exact output; Request.NewDetokenizer).
func NewByteDetokenizer(bytes func(id int) []byte) Detokenizer {
	return &byteDetokenizer{bytes: bytes}
}

func (d *byteDetokenizer) Add(id int) string {
	d.pending = append(d.pending, d.bytes(id)...)
	cut := len(d.pending)
	// Hold back a trailing incomplete character (at most 3 bytes).
	for k := 1; k <= min(3, len(d.pending)); k++ {
		c := d.pending[len(d.pending)-k]
		if c < 0x80 {
			break
		}
		if utf8.RuneStart(c) {
			if need := utf8Len(c); need > k {
				cut = len(d.pending) - k
			}
			break
		}
	}
	out := string(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return out
}

func (d *byteDetokenizer) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// utf8Len is the length of the UTF-8 sequence lead byte c starts.
func utf8Len(c byte) int {
	switch n := bits.LeadingZeros8(^c); n {
	case 2, 3, 4:
		return n
	}
	return 1
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
