package llm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/shard"
)

// logprobReference is logprobs.json (scripts/gen-llm-fixtures.py,
// logprob_refs): transformers' float32 log-softmax over the prompt and its
// greedy tokens in one forward pass; entry i is the position predicting
// ids[i+1].
type logprobReference struct {
	References []logprobRef `json:"references"`
}

type logprobRef struct {
	IDs           []int       `json:"ids"`
	PromptLen     int         `json:"prompt_len"`
	TokenLogprobs []float64   `json:"token_logprobs"`
	TopIDs        [][]int     `json:"top_ids"`
	TopLogprobs   [][]float64 `json:"top_logprobs"`
}

// logprobTolerance is the bound on |ours - transformers'|.
const logprobTolerance = 1e-4

func readLogprobReference(t *testing.T, dir string) *logprobReference {
	raw, err := os.ReadFile(filepath.Join(dir, "logprobs.json"))
	if err != nil {
		testreq.Skipf(t, "logprobs.json not in the LLM fixtures (rerun scripts/setup-llm-fixtures.sh): %v", err)
	}
	var r logprobReference
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// checkTop compares alternatives with the reference's at one position:
// each value within logprobTolerance, and each id equal unless the
// reference's values there tie within the tolerance (order among near
// ties is arithmetic noise).
func checkTop(t *testing.T, where string, got []TopLogprob, ids []int, vals []float64, k int) {
	t.Helper()
	if len(got) != k {
		t.Fatalf("%s: %d alternatives, want %d", where, len(got), k)
	}
	for j, g := range got {
		if d := math.Abs(float64(g.Logprob) - vals[j]); d > logprobTolerance {
			t.Errorf("%s: alternative %d logprob %g, transformers %g (|diff| %.3g)", where, j, g.Logprob, vals[j], d)
		}
		tie := (j > 0 && vals[j-1]-vals[j] < logprobTolerance) || (j+1 < len(vals) && vals[j]-vals[j+1] < logprobTolerance)
		if g.ID != ids[j] && !tie {
			t.Errorf("%s: alternative %d is token %d, transformers %d", where, j, g.ID, ids[j])
		}
	}
}

// TestLogprobsAgainstTransformers: for each architecture and reference
// prompt, greedy generation with top logprobs gives each token's
// log-probability and its top 20 (or 5) alternatives, and the prompt's
// (PromptLogprobs), equal to transformers' log-softmax within 1e-4. The
// requests run at once in the batch, with a plain request beside them
// (no alternatives), and one with a logit_bias of -100 on an alternative
// that greedy does not take: its reported logprobs are the raw model's,
// before the bias (vLLM's default), and it runs the penalty variant.
//
// Injected faults: the top alternatives taken from the biased logits
// (topLogprobs over penalize's output) fail the biased request's first
// position by 100; the prompt's next token not shifted (rowLogprob of
// flat instead of next) fails every prompt entry.
func TestLogprobsAgainstTransformers(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	for _, name := range fixtureModels {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			ref := readLogprobReference(t, dir)
			m, err := Load(ctx, b, dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 8, MinPrefill: 16, MinDecodeContext: 32})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			type run struct {
				ref  int
				k    int
				bias bool
				ch   <-chan Token
			}
			var runs []run
			for i, r := range ref.References {
				n := len(r.IDs) - r.PromptLen
				for _, x := range []run{{ref: i, k: 20}, {ref: i, k: 5, bias: i == 0}, {ref: i, k: 0}} {
					req := Request{Prompt: r.IDs[:r.PromptLen], MaxTokens: n, IgnoreEOS: true, TopLogprobs: x.k, PromptLogprobs: x.k > 0}
					if x.bias {
						req.Sampling.LogitBias = map[int]float32{unchosen(r): -100}
					}
					if x.ch, err = e.Generate(ctx, req); err != nil {
						t.Fatal(err)
					}
					runs = append(runs, x)
				}
			}
			for _, x := range runs {
				checkLogprobRun(t, &ref.References[x.ref], x.ref, x.k, x.ch)
			}
		})
	}
}

// unchosen is the best alternative at the first generated position that
// greedy never takes: biasing it down leaves the greedy tokens as they are.
func unchosen(r logprobRef) int {
	gen := r.IDs[r.PromptLen:]
	for _, id := range r.TopIDs[r.PromptLen-1][1:] {
		if !slices.Contains(gen, id) {
			return id
		}
	}
	return r.TopIDs[r.PromptLen-1][MaxLogprobs-1]
}

// checkLogprobRun reads one stream and compares its tokens, their
// logprobs and alternatives and the prompt's with the reference.
func checkLogprobRun(t *testing.T, r *logprobRef, ri, k int, ch <-chan Token) {
	t.Helper()
	pos := r.PromptLen - 1 // the position predicting the next token
	first := true
	for tk := range ch {
		if tk.Err != nil {
			t.Fatalf("prompt %d: %v", ri, tk.Err)
		}
		if tk.ID < 0 {
			continue
		}
		if first && k > 0 {
			if len(tk.Prompt) != r.PromptLen-1 {
				t.Fatalf("prompt %d: %d prompt logprobs, want %d", ri, len(tk.Prompt), r.PromptLen-1)
			}
			for i, p := range tk.Prompt {
				if p.ID != r.IDs[i+1] || math.Abs(float64(p.Logprob)-r.TokenLogprobs[i]) > logprobTolerance {
					t.Errorf("prompt %d position %d: token %d logprob %g, transformers token %d %g", ri, i, p.ID, p.Logprob, r.IDs[i+1], r.TokenLogprobs[i])
				}
				checkTop(t, fmt.Sprintf("prompt %d (k %d) prompt position %d", ri, k, i), p.Top, r.TopIDs[i], r.TopLogprobs[i], k)
			}
		}
		if !first && tk.Prompt != nil {
			t.Errorf("prompt %d: prompt logprobs on a later token", ri)
		}
		first = false
		if pos+1 >= len(r.IDs) {
			t.Fatalf("prompt %d (k %d): more tokens than the reference", ri, k)
		}
		if tk.ID != r.IDs[pos+1] {
			t.Fatalf("prompt %d (k %d) position %d: token %d, transformers' greedy %d", ri, k, pos, tk.ID, r.IDs[pos+1])
		}
		if d := math.Abs(float64(tk.Logprob) - r.TokenLogprobs[pos]); d > logprobTolerance {
			t.Errorf("prompt %d (k %d) position %d: logprob %g, transformers %g", ri, k, pos, tk.Logprob, r.TokenLogprobs[pos])
		}
		if k == 0 && tk.Top != nil {
			t.Errorf("prompt %d: alternatives without TopLogprobs", ri)
		}
		if k > 0 {
			checkTop(t, fmt.Sprintf("prompt %d (k %d) position %d", ri, k, pos), tk.Top, r.TopIDs[pos], r.TopLogprobs[pos], k)
		}
		pos++
	}
	if pos != len(r.IDs)-1 {
		t.Errorf("prompt %d (k %d): %d tokens, want %d", ri, k, pos-r.PromptLen+1, len(r.IDs)-r.PromptLen)
	}
}

// TestLogprobRequestErrors: top logprobs outside [0, MaxLogprobs] are a
// *RequestError matching errs.ErrInvalidInput. Injected fault: the upper
// check removed lets 21 through.
func TestLogprobRequestErrors(t *testing.T) {
	for _, k := range []int{-1, MaxLogprobs + 1, 1 << 30} {
		err := checkLogprobs(Request{TopLogprobs: k})
		var re *RequestError
		if !errors.As(err, &re) || !errors.Is(err, errs.ErrInvalidInput) {
			t.Errorf("TopLogprobs %d: got %v, want a *RequestError", k, err)
		}
	}
	for _, k := range []int{0, 1, MaxLogprobs} {
		if err := checkLogprobs(Request{TopLogprobs: k}); err != nil {
			t.Errorf("TopLogprobs %d: %v", k, err)
		}
	}
}

// TestTopLogprobs: the device top-k of random rows, with repeated values,
// equals a sort on the host (values exactly, being gathered from the
// input; ids exactly where the value is not repeated, else an id holding
// that value), for a vocabulary taking the rounds directly and two
// taking the grouped first stage (one not a multiple of the group size).
// Injected fault: the grouped stage's id mapping without the group's
// offset (ids = local) fails at the first grouped size.
func TestTopLogprobs(t *testing.T) {
	b := testBackend(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, v := range []int{384, topTwoStageMin, 3*topTwoStageMin + 77} {
		const n, k = 3, MaxLogprobs
		exe, err := b.Compile(ctx, fmt.Sprintf("llm-top-test-%d", v), func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
			vals, ids := topLogprobs(in[0], k)
			return []*ir.Node{vals, ids}, nil
		}, ir.MakeShape(ir.Float32, n, v))
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, n*v)
		for i := range x {
			x[i] = float32(rng.IntN(4*v)) / 16 // repeats: 4v values for v entries
		}
		in, err := float32Tensor([]int{n, v}, x)
		if err != nil {
			t.Fatal(err)
		}
		outs, err := exe.Run(ctx, in)
		_ = in.FinalizeAll()
		exe.Close()
		if err != nil {
			t.Fatal(err)
		}
		gotV, err1 := float32s(outs[0])
		gotI, err2 := int32s(outs[1])
		freeAll(outs)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		for r := range n {
			row := x[r*v : (r+1)*v]
			want := slices.Clone(row)
			slices.SortFunc(want, func(a, b float32) int { return cmp.Compare(b, a) })
			seen := map[int]bool{}
			for j := range k {
				gv, gi := gotV[r*k+j], gotI[r*k+j]
				if gv != want[j] || gi < 0 || gi >= v || row[gi] != gv {
					t.Fatalf("V %d row %d alternative %d: value %g id %d; want value %g", v, r, j, gv, gi, want[j])
				}
				if seen[gi] {
					t.Fatalf("V %d row %d: id %d twice", v, r, gi)
				}
				seen[gi] = true
			}
		}
	}
}

// TestMeshLogprobs: over a model=4 mesh (llama-tp4), the logprob programs
// (their extra outputs replicated) give transformers' logprobs, top 20
// alternatives and prompt logprobs within 1e-4, as on one device.
// Injected fault: compileMeshProgram without the extra outputs' plans
// fails to compile the logprob variant.
func TestMeshLogprobs(t *testing.T) {
	dir := filepath.Join(fixtureDir(t), "llama-tp4")
	ref := readLogprobReference(t, dir)
	b := meshBackend(t, 4)
	ctx := context.Background()
	m, err := Load(ctx, b, dir, LoadOptions{Mesh: shard.Mesh{Data: 1, Model: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 2, MinPrefill: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i, r := range ref.References[:2] {
		ch, err := e.Generate(ctx, Request{Prompt: r.IDs[:r.PromptLen], MaxTokens: len(r.IDs) - r.PromptLen, IgnoreEOS: true,
			TopLogprobs: MaxLogprobs, PromptLogprobs: true})
		if err != nil {
			t.Fatal(err)
		}
		checkLogprobRun(t, &ref.References[i], i, MaxLogprobs, ch)
	}
}
