package tokenizer

import (
	"math/rand"
	"strings"
	"testing"
)

// TestCleanupStreaming feeds random text in random chunks through the
// streaming clean-up and compares with clean_up_tokenization on the whole
// text (cleanup, whose output the llama3 decode fixtures check against
// transformers). The alphabet is what the patterns are made of.
func TestCleanupStreaming(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	alpha := []string{" ", " ", "'", "n", "t", "v", "e", "r", "m", "s", ".", ",", "!", "?", "x", "é"}
	for it := 0; it < 20000; it++ {
		var parts []string
		for n := rng.Intn(8); n > 0; n-- {
			var b strings.Builder
			for k := rng.Intn(4); k > 0; k-- {
				b.WriteString(alpha[rng.Intn(len(alpha))])
			}
			parts = append(parts, b.String())
		}
		out := &sink{}
		st := &cleanupStage{next: out}
		for _, p := range parts {
			st.push(p, true)
		}
		st.end()
		if want := cleanup(strings.Join(parts, "")); out.b.String() != want {
			t.Fatalf("%q: stream %q, want %q", parts, out.b.String(), want)
		}
	}
}

// TestLossyUTF8 checks lossyPrefix against the maximal-subpart cases of the
// Unicode Standard (chapter 3, "U+FFFD Substitution of Maximal Subparts",
// table 3-8), which Rust's String::from_utf8_lossy follows.
func TestLossyUTF8(t *testing.T) {
	cases := []struct {
		in   string
		want string
		rest string
	}{
		{"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd", ""},
		{"\xC0\xAF\xE0\x80\xBF\xF0\x81\x82\x41", "\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFDA", ""},
		{"\xED\xA0\x80\xED\xBF\xBF\xED\xAF\x41", "\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFDA", ""},
		{"\xF4\x91\x92\x93\xFF\x41\x80\xBF\x42", "\uFFFD\uFFFD\uFFFD\uFFFD\uFFFDA\uFFFD\uFFFDB", ""},
		{"\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41", "\uFFFD\uFFFD\uFFFD\uFFFDA", ""},
		{"ok\xE2\x82", "ok", "\xE2\x82"},
		{"\xF0\x9F\x98", "", "\xF0\x9F\x98"},
		{"\xF0\x9F\x98\x80", "😀", ""},
	}
	for _, c := range cases {
		got, rest := lossyPrefix([]byte(c.in))
		if got != c.want || string(rest) != c.rest {
			t.Errorf("lossyPrefix(%q) = %q, %q; want %q, %q", c.in, got, rest, c.want, c.rest)
		}
	}
}
