// Package tokenizer is a pure-Go implementation of the Hugging Face
// tokenizers that LLM checkpoints ship as tokenizer.json: byte-level BPE
// (GPT-2, Llama 3, Qwen2) and SentencePiece-style BPE with byte fallback
// (Llama 2, Mistral), with their normalizers, pre-tokenizers, added and
// special tokens, post-processors and decoders, plus chat templates from
// tokenizer_config.json.
//
// Encode gives the ids of Hugging Face tokenizers' encode; Decode gives the
// text of transformers' tokenizer.decode (including clean_up_tokenization
// when the config enables it and U+FFFD for bytes that never complete a
// character). StreamDecoder releases text incrementally with the same result.
// Any component of tokenizer.json that is not implemented makes loading fail
// with an *UnsupportedError naming it, rather than tokenising differently.
//
// A Tokenizer is safe for concurrent use; a StreamDecoder is not.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tensorbridge/tensorbridge/errs"
)

const (
	maxDepth = 16      // nesting of Sequence components
	maxID    = 1 << 24 // ids beyond this are treated as malformed
	// maxFileBytes bounds the files Load reads; real tokenizer.json files are
	// under 20 MB.
	maxFileBytes = 256 << 20
)

// Tokenizer encodes text to ids and decodes ids to text.
type Tokenizer struct {
	model      *bpe
	normalizer normalizer
	pre        preTokenizer
	post       *postProcessor
	decoders   []decSpec
	cleanup    bool

	added     []*addedToken
	addedByID map[int]*addedToken
	addedByS  map[string]int
	rawTrie   *trie // added tokens matched on the raw text
	normTrie  *trie // added tokens matched on normalized text
	idToTok   []string
	vocabSize int

	bos    int // -1: none
	eos    []int
	tokens specialNames
	chat   *chatTemplate
}

// Message is one turn of a conversation for ApplyChatTemplate.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type tokenizerJSON struct {
	Version       string          `json:"version"`
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

// Load reads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json
// (special tokens, chat template, add_bos_token/add_eos_token,
// clean_up_tokenization_spaces) and DIR/chat_template.jinja (where newer
// transformers saves the template).
func Load(dir string) (*Tokenizer, error) {
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	tj, err := readFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cj, err := readFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	tmpl, err := readFile(filepath.Join(dir, "chat_template.jinja"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return fromJSON(tj, cj, tmpl)
}

// checkDir checks that dir is an existing directory, so that a mistyped
// checkpoint path is reported as the directory rather than as a missing
// tokenizer.json. The error is an *fs.PathError (errors.Is
// fs.ErrNotExist when there is nothing there).
func checkDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return &fs.PathError{Op: "checkpoint directory", Path: dir, Err: err}
	}
	if !st.IsDir() {
		return &fs.PathError{Op: "checkpoint directory", Path: dir, Err: errors.New("not a directory")}
	}
	return nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxFileBytes {
		return nil, fmt.Errorf("tokenizer: %s is %d bytes, more than the %d this package reads: %w", path, st.Size(), maxFileBytes, errs.ErrInvalidInput)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("tokenizer: reading %s: %w", path, err)
	}
	return b, nil
}

// FromJSON builds a tokenizer from the contents of tokenizer.json and,
// optionally (nil), tokenizer_config.json.
func FromJSON(tokenizerJSONBytes, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	return fromJSON(tokenizerJSONBytes, tokenizerConfigJSON, nil)
}

func fromJSON(tb, cb, templateFile []byte) (*Tokenizer, error) {
	var tj tokenizerJSON
	if err := json.Unmarshal(tb, &tj); err != nil {
		return nil, &FormatError{File: "tokenizer.json", Detail: "not a JSON object", Err: err}
	}
	t := &Tokenizer{bos: -1}
	var err error
	if t.model, err = parseModel(tj.Model); err != nil {
		return nil, err
	}
	if t.normalizer, err = parseNormalizer(tj.Normalizer, 0); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(tj.PreTokenizer, 0); err != nil {
		return nil, err
	}
	if t.post, err = parsePostProcessor(tj.PostProcessor, 0); err != nil {
		return nil, err
	}
	fused := false
	if t.decoders, err = parseDecoder(tj.Decoder, &fused, 0); err != nil {
		return nil, err
	}
	if isNull(tj.Decoder) {
		t.decoders = []decSpec{joinSpec{}}
	}
	cfg, err := parseConfig(cb)
	if err != nil {
		return nil, err
	}
	if err := t.setAdded(tj.AddedTokens, cfg.AddedTokensDecoder, cfg.Specials); err != nil {
		return nil, err
	}
	if err := t.applyConfig(cfg, templateFile); err != nil {
		return nil, err
	}
	return t, nil
}

// setAdded registers the added tokens (tokenizer.json's list, then any
// further ones tokenizer_config.json's added_tokens_decoder declares, then
// declared special tokens still missing, as PreTrainedTokenizerFast's
// constructor adds them) and builds the matching tries and the id table.
func (t *Tokenizer) setAdded(list []addedToken, fromConfig map[string]addedToken, specials []string) error {
	t.addedByID = make(map[int]*addedToken)
	t.addedByS = make(map[string]int)
	for i, a := range list {
		if err := t.addToken(a, fmt.Sprintf("added_tokens[%d]", i)); err != nil {
			return err
		}
	}
	keys := make([]string, 0, len(fromConfig))
	for k := range fromConfig {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		a := fromConfig[k]
		id, err := strconv.Atoi(k)
		if err != nil {
			return &FormatError{File: "tokenizer_config.json", Field: "added_tokens_decoder", Detail: fmt.Sprintf("key %q is not an id", k)}
		}
		a.ID = id
		if _, ok := t.addedByS[a.Content]; ok {
			continue
		}
		if err := t.addToken(a, "tokenizer_config.json added_tokens_decoder"); err != nil {
			return err
		}
	}
	for _, sp := range specials {
		if _, ok := t.addedByS[sp]; ok {
			continue
		}
		id, ok := t.model.vocab[sp]
		if !ok {
			id = t.nextID() // as AddedVocabulary::add_tokens numbers a new token
		}
		if err := t.addToken(addedToken{ID: id, Content: sp, Special: true}, "tokenizer_config.json special token"); err != nil {
			return err
		}
	}
	t.buildTries()
	return t.buildIDTable()
}

// nextID is the id tokenizers gives a token new to the vocabulary: one past
// the largest id in use, and at least the model's vocabulary size.
func (t *Tokenizer) nextID() int {
	n := len(t.model.vocab)
	for _, id := range t.model.vocab {
		n = max(n, id+1)
	}
	for id := range t.addedByID {
		n = max(n, id+1)
	}
	return n
}

func (t *Tokenizer) addToken(a addedToken, where string) error {
	if a.ID < 0 || a.ID > maxID {
		return badJSON(where, "id %d out of range", a.ID)
	}
	if a.Content == "" {
		return badJSON(where, "empty content for id %d", a.ID)
	}
	if _, dup := t.addedByID[a.ID]; dup {
		return nil
	}
	tok := a
	t.added = append(t.added, &tok)
	t.addedByID[a.ID] = &tok
	t.addedByS[a.Content] = a.ID
	return nil
}

// buildTries puts special tokens first, then the others, as
// refresh_added_tokens orders them; normalized ones match the normalized
// text, so their patterns are normalized too.
func (t *Tokenizer) buildTries() {
	t.rawTrie, t.normTrie = newTrie(), newTrie()
	for _, special := range []bool{true, false} {
		for _, a := range t.added {
			if a.Special != special {
				continue
			}
			if !a.Normalized {
				t.rawTrie.add(a.Content, a)
				continue
			}
			pat := a.Content
			if t.normalizer != nil {
				pat = t.normalizer.normalize(pat)
			}
			t.normTrie.add(pat, a)
		}
	}
}

// buildIDTable makes the id-to-token table. Ids index it, so a file naming a
// few tokens with huge ids would make a huge allocation from a few bytes:
// real vocabularies are dense, and sparse ones are refused.
func (t *Tokenizer) buildIDTable() error {
	n := 0
	for _, id := range t.model.vocab {
		n = max(n, id+1)
	}
	for id := range t.addedByID {
		n = max(n, id+1)
	}
	if count := len(t.model.vocab) + len(t.addedByID); n > 2*count+1024 {
		return badJSON("model.vocab", "ids run to %d for %d tokens; vocabularies this sparse are not supported", n-1, count)
	}
	t.vocabSize = n
	t.idToTok = make([]string, n)
	for s, id := range t.model.vocab {
		if t.idToTok[id] != "" {
			return badJSON("model.vocab", "id %d is used by %q and %q", id, t.idToTok[id], s)
		}
		t.idToTok[id] = s
	}
	for id, a := range t.addedByID {
		t.idToTok[id] = a.Content
	}
	return nil
}

// VocabSize is one more than the largest id of the model vocabulary and the
// added tokens, i.e. the number of rows an embedding table needs.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// BOS returns the beginning-of-sequence token id declared by
// tokenizer_config.json's bos_token, if any.
func (t *Tokenizer) BOS() (int, bool) { return t.bos, t.bos >= 0 }

// EOS returns the end-of-sequence ids declared by tokenizer_config.json's
// eos_token (generation_config.json may list more; the caller merges them).
func (t *Tokenizer) EOS() []int { return append([]int(nil), t.eos...) }

// IsSpecial reports whether id is a special added token (one that
// Decode(..., true) skips).
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.addedByID[id]
	return ok && a.Special
}

// TokenID returns the id of a token string (added tokens first, then the
// model vocabulary), as tokenizers' token_to_id does.
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.addedByS[s]; ok {
		return id, true
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// Encode returns the ids of text, as Hugging Face tokenizers' encode(text,
// add_special_tokens=addSpecial): added tokens are split out first (longest
// match), the rest is normalized, pre-tokenized and run through the BPE
// model, and with addSpecial the post-processor adds its special tokens.
// Text that is not valid UTF-8 is an error.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("tokenizer: encode: text is not valid UTF-8: %w", errs.ErrInvalidInput)
	}
	ids := make([]int, 0, len(text)/3+4)
	for _, seg := range t.rawTrie.findMatches(text, true, nil) {
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		s := seg.s
		if t.normalizer != nil {
			s = t.normalizer.normalize(s)
		}
		for _, sub := range t.normTrie.findMatches(s, seg.first, nil) {
			if sub.id >= 0 {
				ids = append(ids, sub.id)
				continue
			}
			ids = t.encodePiece(ids, piece{s: sub.s, first: sub.first})
		}
	}
	if addSpecial {
		ids = t.post.apply(ids)
	}
	return ids, nil
}

func (t *Tokenizer) encodePiece(ids []int, p piece) []int {
	if p.s == "" {
		return ids
	}
	ps := []piece{p}
	if t.pre != nil {
		ps = t.pre.preTokenize(ps)
	}
	for _, q := range ps {
		ids = t.model.tokenize(ids, q.s)
	}
	return ids
}

// tokenString returns the string of id and whether it is decoded at all.
func (t *Tokenizer) tokenString(id int, skipSpecial bool) (string, bool) {
	if id < 0 || id >= len(t.idToTok) {
		return "", false // tokenizers drops ids it does not know
	}
	if a, ok := t.addedByID[id]; ok {
		if skipSpecial && a.Special {
			return "", false
		}
		return a.Content, true
	}
	s := t.idToTok[id]
	if s == "" {
		return "", false
	}
	if skipSpecial {
		// tokenizers skips by content: a vocabulary token equal to a special
		// added token's content is skipped too.
		if aid, ok := t.addedByS[s]; ok && t.addedByID[aid].Special {
			return "", false
		}
	}
	return s, true
}

// Decode returns the text of ids as transformers' tokenizer.decode(ids,
// skip_special_tokens=skipSpecial) gives it. Unknown ids are dropped, as
// tokenizers drops them.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	d := t.NewDecoder(skipSpecial)
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	return b.String()
}

// StreamDecoder turns ids into text one at a time. Add returns only text that
// is final: an unfinished UTF-8 sequence (or anything a later token could
// still change) is held back. Flush ends the sequence, returning what is
// pending (U+FFFD for bytes that never completed a character), and readies
// the decoder for a new sequence. The concatenation of everything Add and
// Flush return equals Decode of all the ids.
type StreamDecoder struct {
	t    *Tokenizer
	skip bool
	head stage
	out  *sink
}

// NewDecoder returns a StreamDecoder for this tokenizer.
func (t *Tokenizer) NewDecoder(skipSpecial bool) *StreamDecoder {
	d := &StreamDecoder{t: t, skip: skipSpecial}
	d.reset()
	return d
}

func (d *StreamDecoder) reset() {
	d.out = &sink{}
	var next stage = d.out
	if d.t.cleanup {
		next = &cleanupStage{next: next}
	}
	for i := len(d.t.decoders) - 1; i >= 0; i-- {
		next = d.t.decoders[i].newStage(next)
	}
	d.head = next
}

func (d *StreamDecoder) take() string {
	s := d.out.b.String()
	d.out.b.Reset()
	return s
}

// Add decodes one more id and returns the text that became final.
func (d *StreamDecoder) Add(id int) string {
	if s, ok := d.t.tokenString(id, d.skip); ok {
		d.head.push(s, false)
	}
	return d.take()
}

// Flush ends the sequence and returns the pending text.
func (d *StreamDecoder) Flush() string {
	d.head.end()
	s := d.take()
	d.reset()
	return s
}
