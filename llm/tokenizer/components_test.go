package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestComponentsMatchHF runs single pre-tokenizers and normalizers on 400
// random strings over an alphabet of class-sensitive characters and compares
// with what tokenizers 0.22.1's pre_tokenize_str / normalize_str gave
// (testdata/tokenizers/components.json, written by
// scripts/gen-tokenizer-fixtures.py). This is where the hand-written scanners
// for the GPT-2, Llama 3 and Qwen2 split regexes are checked against
// Oniguruma.
func TestComponentsMatchHF(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "tokenizers", "components.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Strings   []string   `json:"strings"`
		TokenSeqs [][]string `json:"token_seqs"`
		Cases     []struct {
			Name string          `json:"name"`
			Kind string          `json:"kind"`
			Spec json.RawMessage `json:"spec"`
			Out  json.RawMessage `json:"out"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	for _, c := range fx.Cases {
		t.Run(c.Name, func(t *testing.T) {
			switch c.Kind {
			case "pre_tokenizer":
				p, err := parsePreTokenizer(c.Spec, 0)
				if err != nil {
					t.Fatal(err)
				}
				var want [][]string
				if err := json.Unmarshal(c.Out, &want); err != nil {
					t.Fatal(err)
				}
				pres := []preTokenizer{p}
				// The published patterns also run through the generic
				// look-ahead matcher, which must agree with Oniguruma too.
				if sp, ok := p.(splitPre); ok {
					if _, known := sp.m.(scanner); known {
						var re struct {
							Pattern struct{ Regex string } `json:"pattern"`
						}
						if err := json.Unmarshal(c.Spec, &re); err != nil {
							t.Fatal(err)
						}
						m, ok, err := newAltMatcher(re.Pattern.Regex)
						if !ok || err != nil {
							t.Fatalf("generic matcher for %q: %v %v", re.Pattern.Regex, ok, err)
						}
						pres = append(pres, splitPre{m: m, beh: sp.beh, invert: sp.invert})
					}
				}
				for _, p := range pres {
					for i, s := range fx.Strings {
						var got []string
						for _, q := range p.preTokenize([]piece{{s: s, first: true}}) {
							got = append(got, q.s)
						}
						if !slices.Equal(got, want[i]) && !(len(got) == 0 && len(want[i]) == 0) {
							t.Errorf("%T %q:\n got %q\nwant %q", p, s, got, want[i])
						}
					}
				}
			case "decoder":
				fused := false
				specs, err := parseDecoder(c.Spec, &fused, 0)
				if err != nil {
					t.Fatal(err)
				}
				var want []*string
				if err := json.Unmarshal(c.Out, &want); err != nil {
					t.Fatal(err)
				}
				for i, toks := range fx.TokenSeqs {
					if want[i] == nil {
						continue // tokenizers panics here (Strip's cuts cross)
					}
					out := &sink{}
					var head stage = out
					for k := len(specs) - 1; k >= 0; k-- {
						head = specs[k].newStage(head)
					}
					var got string
					for _, tk := range toks {
						head.push(tk, false)
						got += out.b.String()
						out.b.Reset()
						if !strings.HasPrefix(*want[i], got) {
							t.Fatalf("%q: released %q, not a prefix of %q", toks, got, *want[i])
						}
					}
					head.end()
					got += out.b.String()
					if got != *want[i] {
						t.Errorf("%q: got %q, want %q", toks, got, *want[i])
					}
				}
			case "normalizer":
				n, err := parseNormalizer(c.Spec, 0)
				if err != nil {
					t.Fatal(err)
				}
				var want []string
				if err := json.Unmarshal(c.Out, &want); err != nil {
					t.Fatal(err)
				}
				for i, s := range fx.Strings {
					if got := n.normalize(s); got != want[i] {
						t.Errorf("%q: got %q, want %q", s, got, want[i])
					}
				}
			}
		})
	}
}

// TestScannersAgreeWithGenericMatcher runs the hand-written scanners and the
// generic look-ahead matcher (RE2 alternatives around \s+(?!\S)) on random
// strings: two independent implementations of the same patterns, both
// checked against Oniguruma above on fewer strings.
func TestScannersAgreeWithGenericMatcher(t *testing.T) {
	alpha := []rune("aZzſK1٣² \t\n\r\u00a0\u3000\u2028\u0085'sStTlLdDmMrReEvV.,-/😀中\u0301\u200dǅ")
	rng := rand.New(rand.NewSource(3))
	for _, pat := range []string{gpt2Pattern, llama3Pattern, qwen2Pattern} {
		sc, _ := knownScanner(pat)
		gen, ok, err := newAltMatcher(pat)
		if !ok || err != nil {
			t.Fatalf("%q: %v %v", pat, ok, err)
		}
		for it := 0; it < 20000; it++ {
			rs := make([]rune, rng.Intn(16))
			for i := range rs {
				rs[i] = alpha[rng.Intn(len(alpha))]
			}
			s := string(rs)
			if a, b := sc.findAll(s), gen.findAll(s); !slices.Equal(a, b) {
				t.Fatalf("%q on %q: scanner %v, generic %v", pat, s, a, b)
			}
		}
	}
}
