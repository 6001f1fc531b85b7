package llm

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/llm/grammar"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// constrainBenchSchema is a mid-size schema (llm/grammar's benchmark
// schema): nested object, array, bounded strings and numbers, an enum,
// optional members.
const constrainBenchSchema = `{"type":"object","properties":{
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

// timedConstraint is a Constraint that adds the time of its Mask calls.
type timedConstraint struct {
	Constraint
	spent *time.Duration
	masks *int
}

func (c timedConstraint) Mask(dst []uint32) {
	start := time.Now()
	c.Constraint.Mask(dst)
	*c.spent += time.Since(start)
	*c.masks++
}

// BenchmarkConstrainedDecode: decode tokens/s of 4 concurrent streams
// at temperature 1 constrained to constrainBenchSchema (one compiled
// grammar, a matcher per sequence, the mask applied on the device)
// against the same streams unconstrained, on the tiny llama fixture and
// on the checkpoint in $TENSORBRIDGE_LLM_BENCH_DIR when it has a
// tokenizer.json; and the host's Mask time per constrained token. The two
// kinds of run alternate, so that a change of load hits both. The issue's
// target: constrained/plain ≥ 0.8.
func BenchmarkConstrainedDecode(b *testing.B) {
	dirs := map[string]string{"tiny-llama": filepath.Join(fixtureDir(b), "llama")}
	if d := os.Getenv("TENSORBRIDGE_LLM_BENCH_DIR"); d != "" {
		dirs["bench"] = d
	}
	for _, name := range []string{"tiny-llama", "bench"} {
		if dir, ok := dirs[name]; ok {
			b.Run(name, func(b *testing.B) { benchConstrained(b, dir) })
		}
	}
}

func benchConstrained(b *testing.B, dir string) {
	be := testBackend(b)
	ctx := context.Background()
	tok, err := tokenizer.Load(dir)
	if err != nil {
		b.Skipf("no tokenizer in %s: %v", dir, err)
	}
	m, err := Load(ctx, be, dir, LoadOptions{MaxContext: 128})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	v, err := grammar.FromTokenizer(tok, m.Config.EOS)
	if err != nil {
		b.Fatal(err)
	}
	gr, err := grammar.Compile([]byte(constrainBenchSchema))
	if err != nil {
		b.Fatal(err)
	}
	const streams, n = 4, 64
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: streams, PrefillBuckets: []int{16}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	prompt := make([]int, 8)
	for i := range prompt {
		prompt[i] = 3 + i
	}
	var maskTime time.Duration
	var masks int
	run := func(constrained bool, seed uint32) (toks int, d time.Duration) {
		start := time.Now()
		var chans []<-chan Token
		for i := range streams {
			r := Request{Prompt: prompt, MaxTokens: n, IgnoreEOS: !constrained, Sampling: SamplingParams{Temperature: 1, Seed: seed + uint32(i)}}
			if constrained {
				r.NewConstraint = func() Constraint {
					return timedConstraint{Constraint: grammar.NewMatcher(gr, v), spent: &maskTime, masks: &masks}
				}
			}
			ch, err := e.Generate(ctx, r)
			if err != nil {
				b.Fatal(err)
			}
			chans = append(chans, ch)
		}
		for _, ch := range chans {
			for tk := range ch {
				if tk.Err != nil {
					b.Fatal(tk.Err)
				}
				if tk.ID >= 0 {
					toks++
				}
			}
		}
		return toks, time.Since(start)
	}
	run(true, 0) // compiles the masked programs
	run(false, 0)
	maskTime, masks = 0, 0
	b.ResetTimer()
	var plainT, conT time.Duration
	var plainN, conN int
	for i := range b.N {
		k, d := run(false, uint32(i))
		plainN, plainT = plainN+k, plainT+d
		k, d = run(true, uint32(i))
		conN, conT = conN+k, conT+d
	}
	plain, con := float64(plainN)/plainT.Seconds(), float64(conN)/conT.Seconds()
	b.ReportMetric(plain, "tokens/s")
	b.ReportMetric(con, "constrained-tokens/s")
	b.ReportMetric(con/plain, "constrained/plain")
	b.ReportMetric(float64(maskTime.Microseconds())/float64(max(masks, 1)), "mask-µs/token")
}
