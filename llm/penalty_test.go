package llm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck
	"github.com/tensorbridge/tensorbridge/ir"
)

// deviceSample runs the device sampler (penalties included) once over
// rows, every row's logits being logits, with histories padded to w; it
// returns the drawn ids.
func deviceSample(t *testing.T, logits []float64, rs []row, w int) []int {
	t.Helper()
	b := testBackend(t)
	ctx := context.Background()
	v, rows, k := len(logits), len(rs), MaxLogitBias+MaxStopIDs
	exe, err := b.Compile(ctx, fmt.Sprintf("llm-sample-test-%d-%d-%d", rows, v, w), func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		lg := BroadcastToDims(Reshape(in[0], 1, v), rows, v)
		pen := penaltyInputs{biasIDs: in[1], biasVals: in[2], hist: in[3], plen: in[4], hlen: in[5], on: true}
		tok, _ := sample(lg, sampleNodes(in[6:], pen))
		return []*ir.Node{tok}, nil
	}, append(append([]ir.Shape{ir.MakeShape(ir.Float32, v)}, biasShapes(rows, k)...),
		append([]ir.Shape{ir.MakeShape(ir.Int32, rows, w), ir.MakeShape(ir.Int32, rows), ir.MakeShape(ir.Int32, rows)}, sampleShapes(rows)...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	lg := make([]float32, v)
	for i, x := range logits {
		lg[i] = float32(x)
	}
	in := penaltyTestInputs(t, []int{v}, lg, rs, w, k)
	defer freeAll(in)
	outs, err := exe.Run(ctx, in...)
	if err != nil {
		t.Fatal(err)
	}
	defer freeAll(outs)
	ids, err := int32s(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// penaltyTestInputs builds the test programs' inputs: the logits (of
// dims), the rows' bias pairs (k per row) and histories (padded to w), and
// their sampling inputs with penalties.
func penaltyTestInputs(t *testing.T, dims []int, logits []float32, rs []row, w, k int) []*ir.Tensor {
	t.Helper()
	rows := len(rs)
	pb := buildPenalties(rs, rows, w, k)
	var in []*ir.Tensor
	for _, mk := range []func() (*ir.Tensor, error){
		func() (*ir.Tensor, error) { return float32Tensor(dims, logits) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{rows, k}, pb.biasIDs) },
		func() (*ir.Tensor, error) { return float32Tensor([]int{rows, k}, pb.biasVals) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{rows, w}, pb.hist) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{rows}, pb.plen) },
		func() (*ir.Tensor, error) { return int32Tensor([]int{rows}, pb.hlen) },
	} {
		x, err := mk()
		if err != nil {
			freeAll(in)
			t.Fatal(err)
		}
		in = append(in, x)
	}
	st, err := sampleTensors(rs, rows, true)
	if err != nil {
		freeAll(in)
		t.Fatal(err)
	}
	return append(in, st...)
}

// penalizeOnDevice runs penalize over rows (one logits vector each) and
// returns the penalized logits, row by row.
func penalizeOnDevice(t *testing.T, logits [][]float32, rs []row, w int) [][]float32 {
	t.Helper()
	b := testBackend(t)
	ctx := context.Background()
	rows, v, k := len(rs), len(logits[0]), MaxLogitBias+MaxStopIDs
	exe, err := b.Compile(ctx, fmt.Sprintf("llm-penalize-test-%d-%d-%d", rows, v, w), func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		pen := penaltyInputs{biasIDs: in[1], biasVals: in[2], hist: in[3], plen: in[4], hlen: in[5], on: true}
		sp := sampleNodes(in[6:], pen)
		return []*ir.Node{penalize(in[0], sp.pen)}, nil
	}, append(append([]ir.Shape{ir.MakeShape(ir.Float32, rows, v)}, biasShapes(rows, k)...),
		append([]ir.Shape{ir.MakeShape(ir.Int32, rows, w), ir.MakeShape(ir.Int32, rows), ir.MakeShape(ir.Int32, rows)}, sampleShapes(rows)...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	in := penaltyTestInputs(t, []int{rows, v}, slices.Concat(logits...), rs, w, k)
	defer freeAll(in)
	outs, err := exe.Run(ctx, in...)
	if err != nil {
		t.Fatal(err)
	}
	defer freeAll(outs)
	flat, err := float32s(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, rows)
	for r := range out {
		out[r] = flat[r*v : (r+1)*v]
	}
	return out
}

// refPenalize is the penalties written from their definitions, in
// float64: logit_bias added; min_tokens' -inf on the stop ids;
// transformers' RepetitionPenaltyLogitsProcessor over prompt and
// generated ids (score < 0: times r, else divided by r); OpenAI's
// mu[j] - c[j]*frequency - (c[j] > 0)*presence over the generated ids
// (platform.openai.com/docs/advanced-usage, "Frequency and presence
// penalties").
func refPenalize(logits []float32, r row) []float32 {
	out := make([]float32, len(logits))
	count := map[int]float64{}
	seen := map[int]bool{}
	for i, id := range r.hist {
		seen[id] = true
		if i >= r.plen {
			count[id]++
		}
	}
	for j, l := range logits {
		x := float64(l) + float64(r.s.LogitBias[j])
		if r.index < r.s.MinTokens && slices.Contains(r.stops, j) {
			x = math.Inf(-1)
		}
		if rp := float64(r.s.repetition()); seen[j] {
			if x < 0 {
				x *= rp
			} else {
				x /= rp
			}
		}
		x -= count[j]*float64(r.s.FrequencyPenalty) + b2f(count[j] > 0)*float64(r.s.PresencePenalty)
		out[j] = float32(x)
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestPenalize: the device's penalties equal their definitions
// (refPenalize) on small logits vectors whose arithmetic is exact in
// float32 (halves and quarters), one setting per row of one run, so that
// rows do not leak into each other.
//
// Injected faults: counting the prompt in the frequency and presence
// counts (gen := valid) fails "frequency counts generated only",
// "presence" and three more; dividing negative logits by the repetition
// penalty fails "repetition, both signs" and "repetition under 1".
func TestPenalize(t *testing.T) {
	lg := []float32{2, -1.5, 0.5, 4, -3, 1, 0, 2.5}
	// prompt [3 1 1], then generated [3 5 5 5 2]
	hist := []int{3, 1, 1, 3, 5, 5, 5, 2}
	cases := []struct {
		name string
		r    row
	}{
		{"off", row{}},
		{"frequency counts generated only", row{s: SamplingParams{FrequencyPenalty: 0.5}}},
		{"presence", row{s: SamplingParams{PresencePenalty: 1.5}}},
		{"negative penalties", row{s: SamplingParams{PresencePenalty: -2, FrequencyPenalty: -0.25}}},
		{"repetition, both signs", row{s: SamplingParams{RepetitionPenalty: 2}}},
		{"repetition under 1", row{s: SamplingParams{RepetitionPenalty: 0.5}}},
		{"all three and a bias", row{s: SamplingParams{RepetitionPenalty: 2, FrequencyPenalty: 0.5, PresencePenalty: 1,
			LogitBias: map[int]float32{1: 4, 6: -100, 7: 0.5}}}},
		{"min_tokens masks stop ids", row{s: SamplingParams{MinTokens: 6}, index: 5, stops: []int{0, 7}}},
		{"min_tokens reached", row{s: SamplingParams{MinTokens: 5}, index: 5, stops: []int{0, 7}}},
	}
	rs := make([]row, len(cases))
	logits := make([][]float32, len(cases))
	for i, c := range cases {
		c.r.hist, c.r.plen = hist, 3
		c.r.biasIDs = sortedBiasIDs(c.r.s.LogitBias)
		rs[i], logits[i], cases[i].r = c.r, lg, c.r
	}
	got := penalizeOnDevice(t, logits, rs, 12) // history padded beyond its length
	for i, c := range cases {
		if want := refPenalize(lg, c.r); !slices.Equal(got[i], want) {
			t.Errorf("%s: got %v, want %v", c.name, got[i], want)
		}
	}
}

// TestPenaltiesGreedy: greedy takes the argmax of the penalized logits
// (the raw argmax is token 3); with min_tokens masking every token but
// one, that one is drawn whatever the temperature and filters, the
// bisection of top-k included.
func TestPenaltiesGreedy(t *testing.T) {
	lg := []float64{2, -1.5, 0.5, 4, -3, 1, 0, 2.5}
	hist := []int{3, 1, 1, 3, 5, 5, 5, 2}
	all := []int{0, 1, 2, 3, 4, 5, 7}
	rs := []row{
		{s: SamplingParams{}},                                                           // 3
		{s: SamplingParams{FrequencyPenalty: 2}},                                        // 3 was generated once: 4-2 = 2, under 7's 2.5
		{s: SamplingParams{RepetitionPenalty: 2}},                                       // 3: 2, so 7 (2.5)
		{s: SamplingParams{LogitBias: map[int]float32{4: 8}}},                           // 4: 5
		{s: SamplingParams{Temperature: 1, TopK: 3, MinTokens: 1, Seed: 5}, stops: all}, // only 6 left
	}
	for i := range rs {
		rs[i].hist, rs[i].plen = hist, 3
		rs[i].biasIDs = sortedBiasIDs(rs[i].s.LogitBias)
	}
	want := []int{3, 7, 7, 4, 6}
	if got := deviceSample(t, lg, rs, 8); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestPenaltyRequestErrors: Generate refuses penalty settings out of
// range with a *RequestError naming the setting. Injected fault: without
// the vocabulary check on logit_bias ids, an id past the vocabulary was
// accepted (and scattered out of range on the device).
func TestPenaltyRequestErrors(t *testing.T) {
	dir := filepath.Join(fixtureDir(t), "llama")
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, dir, LoadOptions{MaxContext: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 1, MinPrefill: 16, MinDecodeContext: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	v := m.Config.Vocab
	many := map[int]float32{}
	for i := range MaxLogitBias + 1 {
		many[i] = 1
	}
	for _, c := range []struct {
		s       SamplingParams
		stops   []int
		max     int
		mention string
	}{
		{SamplingParams{PresencePenalty: 2.5}, nil, 0, "presence_penalty"},
		{SamplingParams{FrequencyPenalty: -2.5}, nil, 0, "frequency_penalty"},
		{SamplingParams{RepetitionPenalty: -1}, nil, 0, "repetition_penalty"},
		{SamplingParams{LogitBias: map[int]float32{v: 1}}, nil, 0, "outside the vocabulary"},
		{SamplingParams{LogitBias: map[int]float32{3: -101}}, nil, 0, "outside [-100, 100]"},
		{SamplingParams{LogitBias: many}, nil, 0, "logit_bias has 301"},
		{SamplingParams{}, make([]int, MaxStopIDs+1), 0, "stop token ids"},
		{SamplingParams{MinTokens: 5}, nil, 4, "min_tokens 5 exceeds max_tokens 4"},
		{SamplingParams{MinTokens: -1}, nil, 0, "min_tokens -1"},
	} {
		_, err := e.Generate(ctx, Request{Prompt: []int{0, 5}, MaxTokens: c.max, Sampling: c.s, StopIDs: c.stops})
		var re *RequestError
		if !errors.As(err, &re) || !errors.Is(err, errs.ErrInvalidInput) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%+v: got %v, want a *RequestError mentioning %q", c.s, err, c.mention)
		}
	}
}

// TestNeedsPenalties: a step runs the decode program with penalties only
// when a row has one (the plain program skips the vocabulary-wide passes).
func TestNeedsPenalties(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    row
		want bool
	}{
		{"none", row{}, false},
		{"repetition 1", row{s: SamplingParams{RepetitionPenalty: 1}}, false},
		{"repetition", row{s: SamplingParams{RepetitionPenalty: 1.05}}, true},
		{"frequency", row{s: SamplingParams{FrequencyPenalty: 0.5}}, true},
		{"presence", row{s: SamplingParams{PresencePenalty: -0.5}}, true},
		{"logit bias", row{biasIDs: []int{3}}, true},
		{"min_tokens pending", row{s: SamplingParams{MinTokens: 2}, index: 1, stops: []int{2}}, true},
		{"min_tokens reached", row{s: SamplingParams{MinTokens: 2}, index: 2, stops: []int{2}}, false},
	} {
		if got := tc.r.needsPenalties(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
