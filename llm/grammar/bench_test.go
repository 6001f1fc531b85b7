package grammar_test

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/llm/grammar"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// benchSchema is a mid-size schema: nested object, array, bounded strings
// and numbers, an enum and an optional member.
const benchSchema = `{"type":"object","properties":{
	"id":{"type":"integer","minimum":0},
	"name":{"type":"string","minLength":1,"maxLength":40},
	"email":{"type":"string","maxLength":60},
	"role":{"enum":["admin","editor","viewer"]},
	"score":{"type":"number","minimum":0,"maximum":100},
	"tags":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":5},
	"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string","minLength":5,"maxLength":10}},
		"required":["street","city"],"additionalProperties":false},
	"active":{"type":"boolean"}},
	"required":["id","name","role","address","active"],"additionalProperties":false}`

// stringSchema is the worst case: every position of a long bounded string
// is a new state.
const stringSchema = `{"type":"object","properties":{"text":{"type":"string","minLength":300,"maxLength":2000}},"required":["text"]}`

func benchVocab(b *testing.B) *grammar.Vocab {
	raw, err := os.ReadFile(bench32kPath())
	if err != nil {
		b.Skipf("32k vocabulary not made (llm/grammar/testdata/make-bpe32k.sh): %v", err)
	}
	tok, err := tokenizer.FromJSON(raw, nil)
	if err != nil {
		b.Fatal(err)
	}
	id, _ := tok.TokenID("<|endoftext|>")
	v, err := grammar.FromTokenizer(tok, []int{id})
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkMask reports the time of Mask per generated token on the 32k
// vocabulary over seeded uniform random walks of benchSchema: "fresh"
// compiles the schema anew for every output (a server without a grammar
// cache: every state's mask is computed once per request), "cached" reuses
// one Grammar, so repeated states hit its mask cache, "string" is fresh on
// stringSchema (every token inside a 300-2000 character string),
// "json_object" is fresh on {"type":"json_object"}.
func BenchmarkMask(b *testing.B) {
	v := benchVocab(b)
	for _, mode := range []string{"fresh", "cached", "string", "json_object"} {
		b.Run(mode, func(b *testing.B) {
			schema := benchSchema
			switch mode {
			case "string":
				schema = stringSchema
			case "json_object":
				schema = `{"type":"json_object"}`
			}
			g, _ := grammar.Compile([]byte(schema))
			rng := rand.New(rand.NewPCG(1, 2))
			mask := make([]uint32, v.Words())
			var ids []int
			var spent time.Duration
			tokens := 0
			for b.Loop() {
				if mode != "cached" {
					g, _ = grammar.Compile([]byte(schema))
				}
				m := grammar.NewMatcher(g, v)
				for n := 0; n < 400 && !m.CanStop(); n++ {
					t0 := time.Now()
					m.Mask(mask)
					spent += time.Since(t0)
					tokens++
					ids = allowed(mask, ids)
					if err := m.Advance(ids[rng.IntN(len(ids))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(tokens), "ns/token")
			b.ReportMetric(float64(tokens)/float64(b.N), "tokens/op")
		})
	}
}
