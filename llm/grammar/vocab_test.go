package grammar_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tensorbridge/tensorbridge/llm/grammar"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// TestTokenBytes checks (*tokenizer.Tokenizer).TokenBytes on the checked-in
// tokenizers (whose Encode and Decode the tokenizer package checks against
// Hugging Face tokenizers): the bytes of the ids of each corpus line,
// concatenated, equal Decode of those ids (but for the one leading space
// Decode drops from the first token with Metaspace or Strip, and lines that
// clean_up_tokenization changes), and a token's bytes after an anchor token
// equal what Decode adds for it whenever they are whole UTF-8. Tokenizers
// without a decoder (Decode joins tokens with spaces) are left out.
func TestTokenBytes(t *testing.T) {
	root := filepath.Join("..", "tokenizer", "testdata", "tokenizers")
	corpus, err := os.ReadFile(filepath.Join(root, "corpus.txt"))
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "tokenizer.json"))
	if len(dirs) == 0 {
		t.Fatal("no tokenizers under " + root)
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			tj, _ := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
			if bytes.Contains(tj, []byte(`"decoder": null`)) || bytes.Contains(tj, []byte(`"decoder":null`)) {
				t.Skip("no decoder: Decode joins tokens with spaces")
			}
			cfg, _ := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
			cleanup := bytes.Contains(cfg, []byte(`"clean_up_tokenization_spaces": true`))
			tok, err := tokenizer.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			lines := 0
			for _, line := range strings.Split(string(corpus), "\n") {
				ids, err := tok.Encode(line, false)
				if err != nil || line == "" {
					continue
				}
				var got []byte
				for _, id := range ids {
					b, ok := tok.TokenBytes(id)
					if !ok {
						t.Fatalf("id %d has no bytes", id)
					}
					got = append(got, b...)
				}
				dec := tok.Decode(ids, false)
				switch {
				case string(got) == dec || string(got) == " "+dec:
					lines++
				case !cleanup:
					t.Fatalf("bytes of the ids of %q give %q, Decode %q", line, got, dec)
				}
			}
			anchor, _ := tok.Encode("a", false)
			base := tok.Decode(anchor, false)
			checked := 0
			for id := range tok.VocabSize() {
				b, ok := tok.TokenBytes(id)
				if !ok || tok.IsSpecial(id) || !utf8.Valid(b) {
					continue
				}
				want := strings.TrimPrefix(tok.Decode(append(anchor[:len(anchor):len(anchor)], id), false), base)
				if !bytes.Equal(b, []byte(want)) && !cleanedUp(string(b), want) {
					t.Fatalf("id %d: bytes %q, Decode adds %q", id, b, want)
				}
				checked++
			}
			if lines < 40 {
				t.Fatalf("only %d lines compared", lines)
			}
			t.Logf("%d lines, %d tokens checked", lines, checked)
		})
	}
}

// cleanedUp: transformers' clean_up_tokenization (which TokenBytes does not
// apply) removes the space before some punctuation.
func cleanedUp(raw, decoded string) bool {
	return strings.HasPrefix(raw, " ") && decoded == raw[1:]
}

// TestVocabBytes: special and EOS tokens have no bytes, all single bytes
// are spellable with the byte-level fixture.
func TestVocabBytes(t *testing.T) {
	tok, err := tokenizer.Load(filepath.Join("..", "tokenizer", "testdata", "tokenizers", "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := grammar.FromTokenizer(tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	for id := range v.Size() {
		if tok.IsSpecial(id) && v.Token(id) != nil {
			t.Fatalf("special id %d has bytes %q", id, v.Token(id))
		}
	}
	for _, e := range v.EOS() {
		if v.Token(e) != nil {
			t.Fatalf("EOS %d has bytes", e)
		}
	}
	if !v.CoversBytes() {
		t.Fatal("byte-level vocabulary does not cover all bytes")
	}
	if _, err := grammar.NewVocab([][]byte{[]byte("a")}, []int{5}); err == nil {
		t.Fatal("EOS outside the vocabulary accepted")
	}
}
