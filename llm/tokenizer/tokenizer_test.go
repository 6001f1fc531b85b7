package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tensorbridge/tensorbridge/errs"
)

// The fixtures under testdata/tokenizers were written by
// scripts/gen-tokenizer-fixtures.py with Hugging Face tokenizers 0.22.1 and
// transformers 4.57.1: every expected value below comes from those libraries.

var families = []string{"llama3", "qwen2", "gpt2", "llama2", "mistral", "metaspace", "unk", "subword"}

type expected struct {
	Meta struct {
		VocabSize  int   `json:"vocab_size"`
		BOS        *int  `json:"bos"`
		EOS        *int  `json:"eos"`
		SpecialIDs []int `json:"special_ids"`
	} `json:"meta"`
	Encode []struct {
		Text    string `json:"text"`
		With    []int  `json:"with"`
		Without []int  `json:"without"`
	} `json:"encode"`
	Decode []struct {
		IDs  []int  `json:"ids"`
		Skip string `json:"skip"`
		Keep string `json:"keep"`
	} `json:"decode"`
	Chat []struct {
		Messages []Message `json:"messages"`
		Gen      bool      `json:"add_generation_prompt"`
		Text     *string   `json:"text"`
		IDs      []int     `json:"ids"`
		Error    string    `json:"error"`
	} `json:"chat"`
}

func load(t testing.TB, name string) (*Tokenizer, *expected) {
	t.Helper()
	dir := filepath.Join("testdata", "tokenizers", name)
	tok, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e expected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return tok, &e
}

func TestEncodeMatchesHF(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tok, e := load(t, fam)
			for _, c := range e.Encode {
				for _, add := range []bool{true, false} {
					want := c.Without
					if add {
						want = c.With
					}
					got, err := tok.Encode(c.Text, add)
					if err != nil {
						t.Fatalf("Encode(%q, %v): %v", c.Text, add, err)
					}
					if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
						t.Errorf("Encode(%q, %v)\n got %v\nwant %v", c.Text, add, got, want)
					}
				}
			}
		})
	}
}

func TestDecodeMatchesHF(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tok, e := load(t, fam)
			for _, c := range e.Decode {
				if got := tok.Decode(c.IDs, true); got != c.Skip {
					t.Errorf("Decode(%v, skip)\n got %q\nwant %q", c.IDs, got, c.Skip)
				}
				if got := tok.Decode(c.IDs, false); got != c.Keep {
					t.Errorf("Decode(%v, keep)\n got %q\nwant %q", c.IDs, got, c.Keep)
				}
			}
		})
	}
}

// TestStreamDecoder checks, for every recorded id sequence, that text
// released by Add is never taken back (what has been released after k ids is
// a prefix of transformers' decode of all ids), that it is valid UTF-8 after
// every id, and that Add+Flush concatenate to the reference.
func TestStreamDecoder(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tok, e := load(t, fam)
			for _, c := range e.Decode {
				for _, skip := range []bool{true, false} {
					want := c.Keep
					if skip {
						want = c.Skip
					}
					d := tok.NewDecoder(skip)
					var got strings.Builder
					for k, id := range c.IDs {
						s := d.Add(id)
						if !utf8.ValidString(s) {
							t.Fatalf("%v: Add after %d ids returned invalid UTF-8 %q", c.IDs, k+1, s)
						}
						got.WriteString(s)
						if !strings.HasPrefix(want, got.String()) {
							t.Fatalf("%v skip=%v: after %d ids released %q, not a prefix of %q", c.IDs, skip, k+1, got.String(), want)
						}
					}
					got.WriteString(d.Flush())
					if got.String() != want {
						t.Errorf("%v skip=%v: stream %q, want %q", c.IDs, skip, got.String(), want)
					}
					// The decoder is reusable after Flush.
					if len(c.IDs) > 0 {
						again := d.Add(c.IDs[0]) + d.Flush()
						if first := tok.Decode(c.IDs[:1], skip); again != first {
							t.Errorf("after Flush: %q, want %q", again, first)
						}
					}
				}
			}
		})
	}
}

// TestRoundTrip: for tokenizers without lossy normalization, decoding the
// encoding (special tokens kept) gives the text back. Mistral's Metaspace
// decoder drops the first token's leading spaces and GPT-2's fixture
// lowercases, so they do not round-trip, in Hugging Face either.
func TestRoundTrip(t *testing.T) {
	for _, fam := range []string{"qwen2", "llama2", "llama3"} {
		t.Run(fam, func(t *testing.T) {
			tok, e := load(t, fam)
			for _, c := range e.Encode {
				if fam == "qwen2" && (strings.Contains(c.Text, "\u0301") || strings.Contains(c.Text, "\u0308")) {
					continue // NFC composes these
				}
				if fam == "llama2" && strings.Contains(c.Text, "<s>") {
					continue // the legacy Prepend normalizer adds "▁" after a special token
				}
				ids, err := tok.Encode(c.Text, false)
				if err != nil {
					t.Fatal(err)
				}
				want := c.Text
				if fam == "llama3" {
					want = cleanup(want) // clean_up_tokenization_spaces is on
				}
				if got := tok.Decode(ids, false); got != want {
					t.Errorf("Decode(Encode(%q)) = %q", c.Text, got)
				}
			}
		})
	}
}

func TestChatTemplate(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tok, e := load(t, fam)
			for _, c := range e.Chat {
				got, err := tok.ApplyChatTemplate(c.Messages, c.Gen)
				if c.Text == nil {
					if err == nil {
						t.Errorf("%v: want an error like %q, got %q", c.Messages, c.Error, got)
					}
					continue
				}
				if err != nil {
					t.Errorf("%v gen=%v: %v", c.Messages, c.Gen, err)
				} else if got != *c.Text {
					t.Errorf("%v gen=%v\n got %q\nwant %q", c.Messages, c.Gen, got, *c.Text)
				}
				ids, err := tok.EncodeChat(c.Messages, c.Gen)
				if err != nil || !slices.Equal(ids, c.IDs) {
					t.Errorf("EncodeChat(%v, %v) = %v, %v; want %v", c.Messages, c.Gen, ids, err, c.IDs)
				}
			}
		})
	}
}

func TestMeta(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			tok, e := load(t, fam)
			if tok.VocabSize() != e.Meta.VocabSize {
				t.Errorf("VocabSize %d, want %d", tok.VocabSize(), e.Meta.VocabSize)
			}
			if id, ok := tok.BOS(); (e.Meta.BOS != nil) != ok || ok && id != *e.Meta.BOS {
				t.Errorf("BOS %d %v, want %v", id, ok, e.Meta.BOS)
			}
			if e.Meta.EOS != nil && !slices.Equal(tok.EOS(), []int{*e.Meta.EOS}) {
				t.Errorf("EOS %v, want %d", tok.EOS(), *e.Meta.EOS)
			}
			for _, id := range e.Meta.SpecialIDs {
				if !tok.IsSpecial(id) {
					t.Errorf("IsSpecial(%d) false", id)
				}
			}
		})
	}
}

func readFixture(t testing.TB, fam, file string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", "tokenizers", fam, file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// edit returns tokenizer.json of fam with one top-level field replaced.
func edit(t testing.TB, fam, field, value string) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(readFixture(t, fam, "tokenizer.json"), &m); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(m, field)
	} else {
		m[field] = json.RawMessage(value)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBadTokenizerJSON(t *testing.T) {
	cases := []struct {
		name    string
		json    []byte
		config  []byte
		want    error
		mention string
	}{
		{"garbage", []byte("not json {"), nil, errs.ErrInvalidInput, "tokenizer.json"},
		{"empty", []byte(""), nil, errs.ErrInvalidInput, "tokenizer.json"},
		{"array", []byte("[1,2]"), nil, errs.ErrInvalidInput, "tokenizer.json"},
		{"missing model", edit(t, "llama3", "model", ""), nil, errs.ErrInvalidInput, "model"},
		{"WordPiece", edit(t, "llama3", "model", `{"type":"WordPiece","vocab":{}}`), nil, errs.ErrUnsupported, "WordPiece"},
		{"Unigram", edit(t, "llama3", "model", `{"type":"Unigram","vocab":[]}`), nil, errs.ErrUnsupported, "Unigram"},
		{"WordLevel", edit(t, "llama3", "model", `{"type":"WordLevel","vocab":{}}`), nil, errs.ErrUnsupported, "WordLevel"},
		{"unknown normalizer", edit(t, "llama3", "normalizer", `{"type":"BertNormalizer"}`), nil, errs.ErrUnsupported, "BertNormalizer"},
		{"normalizer in sequence", edit(t, "llama3", "normalizer", `{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Precompiled","precompiled_charsmap":""}]}`), nil, errs.ErrUnsupported, "Precompiled"},
		{"unknown pre-tokenizer", edit(t, "llama3", "pre_tokenizer", `{"type":"BertPreTokenizer"}`), nil, errs.ErrUnsupported, "BertPreTokenizer"},
		{"look-ahead regex", edit(t, "llama3", "pre_tokenizer", `{"type":"Split","pattern":{"Regex":"\\w+(?=\\s)|\\s+(?!\\S)"},"behavior":"Isolated","invert":false}`), nil, errs.ErrUnsupported, "look-around"},
		{"possessive regex", edit(t, "llama3", "pre_tokenizer", `{"type":"Split","pattern":{"Regex":"\\p{L}++"},"behavior":"Isolated","invert":false}`), nil, errs.ErrUnsupported, "Regex"},
		{"empty-matching regex", edit(t, "llama3", "pre_tokenizer", `{"type":"Split","pattern":{"Regex":"a*"},"behavior":"Isolated","invert":false}`), nil, errs.ErrUnsupported, "empty string"},
		{"empty-matching look-ahead alternatives", edit(t, "llama3", "pre_tokenizer", `{"type":"Split","pattern":{"Regex":"x?|\\s+(?!\\S)"},"behavior":"Isolated","invert":false}`), nil, errs.ErrUnsupported, "empty string"},
		{"regex Replace after Fuse", edit(t, "llama3", "decoder", `{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Replace","pattern":{"Regex":"a+"},"content":"b"}]}`), nil, errs.ErrUnsupported, "after Fuse"},
		{"ByteLevel after Fuse", edit(t, "llama3", "decoder", `{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"ByteLevel"}]}`), nil, errs.ErrUnsupported, "ByteLevel"},
		{"unknown behavior", edit(t, "llama3", "pre_tokenizer", `{"type":"Split","pattern":{"String":" "},"behavior":"Sideways","invert":false}`), nil, errs.ErrUnsupported, "Sideways"},
		{"unknown decoder", edit(t, "llama3", "decoder", `{"type":"WordPiece","prefix":"##"}`), nil, errs.ErrUnsupported, "WordPiece"},
		{"unknown post-processor", edit(t, "llama3", "post_processor", `{"type":"Frobnicate"}`), nil, errs.ErrUnsupported, "Frobnicate"},
		{"dropout", edit(t, "llama2", "model", `{"type":"BPE","dropout":0.1,"vocab":{"a":0},"merges":[]}`), nil, errs.ErrUnsupported, "dropout"},
		{"merge not in vocab", edit(t, "llama2", "model", `{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}`), nil, errs.ErrInvalidInput, "merged token"},
		{"merge malformed", edit(t, "llama2", "model", `{"type":"BPE","vocab":{"a":0},"merges":[3]}`), nil, errs.ErrInvalidInput, "merges[0]"},
		// The fault for the sparse-id guard: 30 bytes asking for a 16M-entry table.
		{"sparse ids", edit(t, "llama2", "model", `{"type":"BPE","vocab":{"a":16000000},"merges":[]}`), nil, errs.ErrInvalidInput, "sparse"},
		{"negative id", edit(t, "llama2", "model", `{"type":"BPE","vocab":{"a":-4},"merges":[]}`), nil, errs.ErrInvalidInput, "-4"},
		{"unk not in vocab", edit(t, "llama2", "model", `{"type":"BPE","unk_token":"<zz>","vocab":{"a":0},"merges":[]}`), nil, errs.ErrInvalidInput, "unk_token"},
		{"deep nesting", edit(t, "llama3", "normalizer", strings.Repeat(`{"type":"Sequence","normalizers":[`, 40)+`{"type":"NFC"}`+strings.Repeat(`]}`, 40)), nil, errs.ErrInvalidInput, "nested"},
		{"config garbage", readFixture(t, "llama3", "tokenizer.json"), []byte("{{"), errs.ErrInvalidInput, "tokenizer_config.json"},
		{"bos not a token", readFixture(t, "llama3", "tokenizer.json"), []byte(`{"bos_token":5}`), errs.ErrInvalidInput, "bos_token"},
		{"bad template", readFixture(t, "llama3", "tokenizer.json"), []byte(`{"chat_template":"{% for m in messages %}{{ m.content "}`), errs.ErrUnsupported, "chat_template"},
		{"template raises on probe", readFixture(t, "llama3", "tokenizer.json"), []byte(`{"chat_template":"{{ raise_exception('no') }}"}`), errs.ErrUnsupported, "no"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := FromJSON(c.json, c.config)
			if err == nil {
				t.Fatalf("loaded %v, want an error", tok != nil)
			}
			if !errors.Is(err, c.want) {
				t.Errorf("error %q is not %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error %q does not mention %q", err, c.mention)
			}
		})
	}
}

func TestEncodeInvalidUTF8(t *testing.T) {
	tok, _ := load(t, "llama3")
	if _, err := tok.Encode("ok \xff bad", true); !errors.Is(err, errs.ErrInvalidInput) {
		t.Errorf("Encode of invalid UTF-8: %v, want ErrInvalidInput", err)
	}
}

func TestNoChatTemplate(t *testing.T) {
	tok, err := FromJSON(readFixture(t, "llama3", "tokenizer.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.ApplyChatTemplate(probe, true); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("err %v, want ErrNoChatTemplate", err)
	}
}

// FuzzLoad: no input panics FromJSON, and whatever loads encodes and decodes
// without panicking. The seeds are small tokenizers that use every component
// kind (the fixtures' 45 KB files make the fuzzer's minimisation crawl).
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"added_tokens":[{"id":5,"content":"<s>","special":true,"lstrip":true,"rstrip":true,"single_word":true,"normalized":false},{"id":6,"content":"ab","normalized":true}],`+
		`"normalizer":{"type":"Sequence","normalizers":[{"type":"NFKC"},{"type":"Lowercase"},{"type":"Strip"},{"type":"Prepend","prepend":"_"},{"type":"Replace","pattern":{"String":" "},"content":"_"}]},`+
		`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\s+|\\w+"},"behavior":"MergedWithNext","invert":false},{"type":"Digits","individual_digits":true},{"type":"Punctuation"},{"type":"Metaspace","replacement":"_","prepend_scheme":"first","split":true}]},`+
		`"post_processor":{"type":"Sequence","processors":[{"type":"ByteLevel"},{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[5],"tokens":["<s>"]}}}]},`+
		`"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"_"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":1}]},`+
		`"model":{"type":"BPE","unk_token":"<unk>","byte_fallback":true,"fuse_unk":true,"vocab":{"<unk>":0,"a":1,"b":2,"ab":3,"<0x41>":4,"_":7,"_a":8},"merges":["a b",["_","a"]]}}`),
		[]byte(`{"bos_token":"<s>","eos_token":{"content":"<s>"},"clean_up_tokenization_spaces":true,"chat_template":"{% for m in messages %}{{ bos_token + m.content }}{% endfor %}"}`))
	f.Add([]byte(`{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"`+strings.ReplaceAll(llama3Pattern, `\`, `\\`)+`"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":true,"use_regex":false}]},`+
		`"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","ignore_merges":true,"vocab":{"a":0,"b":1,"ab":2,"Ġ":3},"merges":[["a","b"]]}}`), []byte(`null`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"a|\\s"},"behavior":"Contiguous","invert":true}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, tj, cj []byte) {
		if len(tj) > 1<<16 || len(cj) > 1<<14 {
			return
		}
		tok, err := FromJSON(tj, cj)
		if err != nil {
			return
		}
		for _, s := range []string{"", "Hello world", " a  b\n\nc 12345 😀 中文 <s>", "<|begin_of_text|>x ab"} {
			ids, err := tok.Encode(s, true)
			if err != nil {
				t.Fatalf("Encode(%q): %v", s, err)
			}
			_ = tok.Decode(ids, false)
			_ = tok.Decode([]int{-1, 0, 1, 2, 3, 4, 5, 1 << 30}, true)
		}
		_, _ = tok.ApplyChatTemplate([]Message{{Role: "user", Content: "hi"}}, true)
	})
}

// FuzzEncodeDecode: for the Qwen2-style tokenizer (byte-level, NFC, no
// cleanup) decoding an encoding gives the NFC text back, and streaming gives
// what Decode gives.
func FuzzEncodeDecode(f *testing.F) {
	tok, _ := load(f, "qwen2")
	for _, s := range []string{"", "hello  world\n\n", "x'S 'll 123456", "😀\u200d🙂 \t\r\n", "ab\u00a0\u3000c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || len(s) > 4096 {
			return
		}
		ids, err := tok.Encode(s, false)
		if err != nil {
			t.Fatal(err)
		}
		want := tok.normalizer.normalize(s)
		if got := tok.Decode(ids, false); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
		d := tok.NewDecoder(false)
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Add(id))
		}
		b.WriteString(d.Flush())
		if b.String() != want {
			t.Fatalf("stream %q, want %q", b.String(), want)
		}
	})
}

// TestLoadRefusesHugeFile proves the maxFileBytes guard: a sparse
// tokenizer.json one byte over the limit is refused before it is read (the
// fault injected is the oversized file itself).
func TestLoadRefusesHugeFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxFileBytes + 1); err != nil {
		t.Skip("cannot make a sparse file here:", err)
	}
	f.Close()
	if _, err := Load(dir); !errors.Is(err, errs.ErrInvalidInput) {
		t.Errorf("Load of a %d-byte tokenizer.json: %v, want ErrInvalidInput", maxFileBytes+1, err)
	}
	if _, err := Load(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of an empty directory: %v, want ErrNotExist", err)
	}
}
