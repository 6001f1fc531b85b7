package grammar_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/llm/grammar"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// walkSchemas are the schemas of the random-walk tests.
var walkSchemas = []struct{ name, schema string }{
	{"nested", `{"type":"object","properties":{
		"name":{"type":"string","minLength":1,"maxLength":12},
		"age":{"type":"integer","minimum":0,"maximum":150},
		"tags":{"type":"array","items":{"type":"string","maxLength":5},"minItems":1,"maxItems":3},
		"address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","minLength":5,"maxLength":5}},
			"required":["city"],"additionalProperties":false},
		"matrix":{"type":"array","items":{"type":"array","items":{"type":"boolean"},"maxItems":2},"maxItems":2}},
		"required":["name","age"],"additionalProperties":false}`},
	{"enums", `{"type":"object","properties":{
		"color":{"enum":["red","green","blue",1,1.5,null,{"a":[1,2]},"é\"\\"]},
		"ok":{"const":true},
		"size":{"type":"string","enum":["S","M",3,"XXL"],"maxLength":2}},
		"required":["color","ok","size"],"additionalProperties":false}`},
	{"numbers", `{"type":"array","minItems":1,"maxItems":4,"items":{"type":"object","properties":{
		"i":{"type":"integer","exclusiveMinimum":-5,"exclusiveMaximum":5},
		"x":{"type":"number","minimum":-1.5,"maximum":2.25},
		"p":{"type":"number","exclusiveMinimum":0,"maximum":0.001},
		"big":{"type":"integer","minimum":1000000},
		"neg":{"type":"number","maximum":-10.5,"exclusiveMinimum":-12},
		"any":{"type":["number","null"]}},
		"required":["i","x","p","big","neg"],"additionalProperties":false}}`},
	{"anyOf", `{"anyOf":[
		{"type":"object","properties":{"kind":{"const":"a"},"n":{"type":"integer"}},"required":["kind","n"],"additionalProperties":false},
		{"type":"object","properties":{"kind":{"const":"b"},"s":{"type":"string","maxLength":4}},"required":["kind"],"additionalProperties":false},
		{"type":["string","null"],"maxLength":3},
		{"anyOf":[{"type":"integer","minimum":0,"maximum":5},{"type":"integer","minimum":10,"maximum":20}]}]}`},
	{"strings", `{"type":"array","items":{"type":"string","minLength":2,"maxLength":4},"minItems":2,"maxItems":3}`},
	{"extra", `{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"gone":false},
		"required":["zz"],"additionalProperties":{"type":"integer","minimum":0,"maximum":9}}`},
	{"json_object", `{"type":"json_object"}`},
	{"refs", `{"$defs":{
		"Node":{"type":"object","properties":{"name":{"type":"string","maxLength":8},
			"children":{"type":"array","items":{"$ref":"#/$defs/Node"},"maxItems":2}},
			"required":["name","children"],"additionalProperties":false},
		"Point":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"],"additionalProperties":false}},
		"type":"object","properties":{"tree":{"$ref":"#/$defs/Node"},"at":{"anyOf":[{"$ref":"#/$defs/Point"},{"type":"null"}]}},
		"required":["tree","at"],"additionalProperties":false}`},
	{"pruned", `{"type":"object","properties":{"a":{"$ref":"#/$defs/Inf"},"b":{"type":"integer"},"c":{"type":"array","items":{"$ref":"#/$defs/Inf"}}},
		"additionalProperties":false,
		"$defs":{"Inf":{"type":"object","properties":{"x":{"$ref":"#/$defs/Inf"}},"required":["x"]}}}`},
	{"free", `{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}`},
}

// vocabs loads the vocabularies of the walks: the Qwen2 fixture, the
// checked-in SentencePiece (byte fallback) tokenizer, and the 32k one when
// made.
func vocabs(t testing.TB) map[string]*grammar.Vocab {
	out := map[string]*grammar.Vocab{}
	home, _ := os.UserHomeDir()
	fixtures := os.Getenv("TENSORBRIDGE_LLM_FIXTURES")
	if fixtures == "" {
		fixtures = filepath.Join(home, ".cache", "tensorbridge", "llm-fixtures")
	}
	for name, path := range map[string]string{
		"qwen2":  filepath.Join(fixtures, "qwen2", "tokenizer.json"),
		"llama2": filepath.Join("..", "tokenizer", "testdata", "tokenizers", "llama2", "tokenizer.json"),
		"bpe32k": bench32kPath(),
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Logf("vocabulary %s not there (%v): scripts/setup-llm-fixtures.sh makes qwen2, llm/grammar/testdata/make-bpe32k.sh the 32k one", name, err)
			continue
		}
		tok, err := tokenizer.FromJSON(b, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		eos := tok.EOS()
		if len(eos) == 0 {
			id, ok := tok.TokenID("</s>")
			if !ok {
				id, ok = tok.TokenID("<|endoftext|>")
			}
			if !ok {
				t.Fatalf("%s: no EOS token", name)
			}
			eos = []int{id}
		}
		v, err := grammar.FromTokenizer(tok, eos)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = v
	}
	if _, ok := out["qwen2"]; !ok {
		testreq.Skipf(t, "LLM fixtures not installed (scripts/setup-llm-fixtures.sh)")
	}
	return out
}

func bench32kPath() string {
	if p := os.Getenv("TENSORBRIDGE_GRAMMAR_VOCAB"); p != "" {
		return p
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "tensorbridge", "grammar-bench", "bpe32k", "tokenizer.json")
}

func allowed(mask []uint32, dst []int) []int {
	dst = dst[:0]
	for w, x := range mask {
		for x != 0 {
			b := bits.TrailingZeros32(x)
			dst = append(dst, w*32+b)
			x &= x - 1
		}
	}
	return dst
}

// pickUniform returns an id drawn uniformly from the set bits of mask, -1
// when there are none.
func pickUniform(mask []uint32, rng *rand.Rand) int {
	n := 0
	for _, x := range mask {
		n += bits.OnesCount32(x)
	}
	if n == 0 {
		return -1
	}
	k := rng.IntN(n)
	for w, x := range mask {
		c := bits.OnesCount32(x)
		if k >= c {
			k -= c
			continue
		}
		for ; k > 0; k-- {
			x &= x - 1
		}
		return w*32 + bits.TrailingZeros32(x)
	}
	return -1
}

// uniformSteps is how long a walk picks uniformly; after it, it prefers
// the one-byte tokens '"', '}' and ']' when allowed, so that walks whose
// uniform continuation would grow without bound (json_object over a 32k
// vocabulary: keys of hundreds of tokens, values nesting) still end.
const uniformSteps = 2000

func pickClosing(mask []uint32, v *grammar.Vocab, rng *rand.Rand, fallback int) int {
	var ids []int
	for id := range v.Size() {
		if t := v.Token(id); len(t) == 1 && (t[0] == '"' || t[0] == '}' || t[0] == ']') && mask[id>>5]&(1<<(id&31)) != 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return fallback
	}
	return ids[rng.IntN(len(ids))]
}

// walk generates one output picking uniformly among the allowed tokens
// (see uniformSteps) until the matcher can stop, then ends it with EOS. It checks that every
// allowed token advances and that a sampled disallowed one does not.
func walk(t *testing.T, m *grammar.Matcher, v *grammar.Vocab, rng *rand.Rand) []byte {
	t.Helper()
	m.Reset()
	mask := make([]uint32, v.Words())
	var out []byte
	eos := v.EOS()[0]
	for step := 0; ; step++ {
		if step > 20000 {
			t.Fatalf("walk did not end after %d tokens: %q", step, out)
		}
		if m.CanStop() {
			m.Mask(mask)
			if mask[eos>>5]&(1<<(eos&31)) == 0 {
				t.Fatalf("EOS not in the mask though CanStop, after %q", out)
			}
			if err := m.Advance(eos); err != nil {
				t.Fatalf("EOS: %v", err)
			}
			if !m.Done() {
				t.Fatal("Done false after EOS")
			}
			return out
		}
		m.Mask(mask)
		if mask[eos>>5]&(1<<(eos&31)) != 0 {
			t.Fatalf("EOS allowed before CanStop, after %q", out)
		}
		id := pickUniform(mask, rng)
		if step >= uniformSteps {
			id = pickClosing(mask, v, rng, id)
		}
		if id < 0 {
			t.Fatalf("empty mask (dead end) after %q", out)
		}
		if bad := rng.IntN(v.Size()); mask[bad>>5]&(1<<(bad&31)) == 0 {
			if err := m.Advance(bad); !errors.Is(err, errs.ErrInvalidInput) {
				t.Fatalf("disallowed token %d (%q) after %q: Advance gave %v", bad, v.Token(bad), out, err)
			}
		}
		if err := m.Advance(id); err != nil {
			t.Fatalf("allowed token %d (%q) after %q: %v", id, v.Token(id), out, err)
		}
		out = append(out, v.Token(id)...)
	}
}

func TestRandomWalksValidate(t *testing.T) {
	vs := vocabs(t)
	walks := 300
	if testing.Short() {
		walks = 30
	}
	for vname, v := range vs {
		for _, sc := range walkSchemas {
			t.Run(vname+"/"+sc.name, func(t *testing.T) {
				g, err := grammar.Compile([]byte(sc.schema))
				if err != nil {
					t.Fatal(err)
				}
				var schema any
				dec := json.NewDecoder(strings.NewReader(sc.schema))
				dec.UseNumber()
				if err := dec.Decode(&schema); err != nil {
					t.Fatal(err)
				}
				noExtra := schema.(map[string]any)["additionalProperties"] == false
				refRoot = schema
				rng := rand.New(rand.NewPCG(26, uint64(len(sc.name))))
				m := grammar.NewMatcher(g, v)
				for i := range walks {
					out := walk(t, m, v, rng)
					var inst any
					dec := json.NewDecoder(bytes.NewReader(out))
					dec.UseNumber()
					if err := dec.Decode(&inst); err != nil || dec.More() {
						t.Fatalf("walk %d: %q does not parse: %v", i, out, err)
					}
					if err := validate(inst, schema, ""); err != nil {
						t.Fatalf("walk %d: %q does not validate: %v", i, out, err)
					}
					if noExtra && duplicateKeys(out) {
						t.Fatalf("walk %d: %q repeats a key", i, out)
					}
					if i < 3 {
						t.Logf("walk %d: %s", i, out)
					}
				}
			})
		}
	}
}
