package grammar

import (
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// TestStringFastPathEqualsTrieWalk checks the string fast path against the
// plain trie walk (which steps the automaton byte by byte for every token
// prefix) on random walks: both masks must be equal at every step.
func TestStringFastPathEqualsTrieWalk(t *testing.T) {
	home, _ := os.UserHomeDir()
	paths := []string{
		filepath.Join(home, ".cache", "tensorbridge", "llm-fixtures", "qwen2", "tokenizer.json"),
		filepath.Join("..", "tokenizer", "testdata", "tokenizers", "llama2", "tokenizer.json"),
		filepath.Join(home, ".cache", "tensorbridge", "grammar-bench", "bpe32k", "tokenizer.json"),
	}
	schemas := []string{
		`{"type":"object","properties":{"a":{"type":"string","minLength":3,"maxLength":40},"b":{"type":"array","items":{"type":"string","maxLength":2}}},"required":["a"]}`,
		`{"anyOf":[{"type":"string","minLength":2},{"type":"object","properties":{"s":{"type":"string"}},"additionalProperties":false}]}`,
		`{"type":"json_object"}`,
	}
	n := 0
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Logf("skipping %s: %v", p, err)
			continue
		}
		tok, err := tokenizer.FromJSON(raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		toks := make([][]byte, tok.VocabSize())
		for id := range toks {
			if !tok.IsSpecial(id) {
				toks[id], _ = tok.TokenBytes(id)
			}
		}
		eos := len(toks)
		v, err := NewVocab(append(toks, nil), []int{eos})
		if err != nil {
			t.Fatal(err)
		}
		for si, s := range schemas {
			g1, err1 := Compile([]byte(s))
			g2, err2 := Compile([]byte(s))
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			fast, slow := NewMatcher(g1, v), NewMatcher(g2, v)
			slow.slow = true
			rng := rand.New(rand.NewPCG(uint64(si), 7))
			a, b := make([]uint32, v.Words()), make([]uint32, v.Words())
			for w := 0; w < 12; w++ {
				fast.Reset()
				slow.Reset()
				for step := 0; step < 300 && !fast.CanStop(); step++ {
					fast.Mask(a)
					slow.Mask(b)
					n++
					if !slices.Equal(a, b) {
						t.Fatalf("%s schema %d: masks differ after %d steps", p, si, step)
					}
					id := pick(a, rng)
					if err := fast.Advance(id); err != nil {
						t.Fatal(err)
					}
					if err := slow.Advance(id); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Skip("no vocabulary (scripts/setup-llm-fixtures.sh)")
	}
	t.Logf("%d masks compared", n)
}

func pick(mask []uint32, rng *rand.Rand) int {
	var ids []int
	for w, x := range mask {
		for x != 0 {
			ids = append(ids, w*32+bits.TrailingZeros32(x))
			x &= x - 1
		}
	}
	return ids[rng.IntN(len(ids))]
}

// TestMaskDoesNotAllocate: once a state's mask is cached (or on the string
// fast path), Mask allocates nothing.
func TestMaskDoesNotAllocate(t *testing.T) {
	toks := make([][]byte, 300)
	for i := range 256 {
		toks[i] = []byte{byte(i)}
	}
	toks[256], toks[257], toks[258] = []byte(`{"a":`), []byte(`"}`), []byte(`", `)
	v, err := NewVocab(toks, []int{299})
	if err != nil {
		t.Fatal(err)
	}
	g, err := Compile([]byte(`{"type":"object","properties":{"a":{"type":"string","maxLength":50},"b":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(g, v)
	dst := make([]uint32, v.Words())
	for _, ids := range [][]int{{}, {256}, {256, '"', 'x'}} {
		m.Reset()
		for _, id := range ids {
			if err := m.Advance(id); err != nil {
				t.Fatal(err)
			}
		}
		m.Mask(dst)
		if n := testing.AllocsPerRun(20, func() { m.Mask(dst) }); n != 0 {
			t.Errorf("after %v: %v allocations per Mask", ids, n)
		}
	}
}

// TestMatchersShareGrammar runs matchers of one Grammar and Vocab in
// parallel (run with -race): they share the mask cache.
func TestMatchersShareGrammar(t *testing.T) {
	toks := make([][]byte, 260)
	for i := range 256 {
		toks[i] = []byte{byte(i)}
	}
	toks[256], toks[257] = []byte(`":`), []byte(`"}`)
	v, err := NewVocab(toks, []int{259})
	if err != nil {
		t.Fatal(err)
	}
	g, err := Compile([]byte(`{"type":"json_object"}`))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 4)
	for w := range 4 {
		go func() {
			m := NewMatcher(g, v)
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			mask := make([]uint32, v.Words())
			for step := 0; step < 500 && !m.CanStop(); step++ {
				m.Mask(mask)
				if err := m.Advance(pick(mask, rng)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
