package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

const refModels = "../../testdata/models/"

func TestBenchArgumentErrors(t *testing.T) {
	mlp := refModels + "mlp.onnx"
	cases := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"no model", []string{"bench"}, 2, "exactly one MODEL"},
		{"two models", []string{"bench", mlp, mlp}, 2, "exactly one MODEL"},
		{"iters and duration", []string{"bench", mlp, "--iters", "3", "--duration", "1s"}, 2, "not both"},
		{"zero batch", []string{"bench", mlp, "--batch", "0"}, 2, "positive"},
		{"bad batch", []string{"bench", mlp, "--batch", "1,x"}, 2, `"x" is not an integer`},
		{"trailing comma", []string{"bench", mlp, "--batch", "1,"}, 2, "not an integer"},
		{"negative iters", []string{"bench", mlp, "--iters", "-1"}, 2, "negative"},
		{"negative seq", []string{"bench", mlp, "--seq", "-4"}, 2, "--seq"},
		{"unknown precision", []string{"bench", mlp, "--precision", "fp8"}, 2, `--precision "fp8"`},
		{"too many threads", []string{"bench", mlp, "--threads", "100000"}, 2, "--threads 100000"},
		{"empty int range", []string{"bench", mlp, "--int-range", "5:5"}, 2, "LO must be below HI"},
		{"int range syntax", []string{"bench", mlp, "--int-range", "7"}, 2, "want LO:HI"},
		{"dim syntax", []string{"bench", mlp, "--dim", "batch"}, 2, "NAME=N"},
		{"dim value", []string{"bench", mlp, "--dim", "batch=0"}, 2, "positive integer"},
		{"restart and first-only", []string{"bench", mlp, "--restart", "--first-only"}, 2, "cannot be combined"},
		{"unknown flag", []string{"bench", mlp, "--bogus"}, 2, "bogus"},
		{"missing model file", []string{"bench", "no/such/model.onnx", "--backend", "cpu"}, 1, "no/such/model.onnx"},
		{"unknown backend", []string{"bench", mlp, "--backend", "nosuch"}, 1, "nosuch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := run(t, c.args...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, c.code, c.want)
			}
		})
	}
}

// A symbolic dimension that is neither the batch nor a sequence needs
// --dim; the error names the dimension and the flag.
func TestResolveDimsNeedsDim(t *testing.T) {
	spec := tensorbridge.ValueSpec{Name: "x", DType: ir.Float32, RankKnown: true,
		Dims: []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "height"}}}
	if _, _, err := resolveDims(spec, dimSizes{batch: 2}); err == nil || !strings.Contains(err.Error(), "--dim height=N") {
		t.Errorf("got %v, want an error asking for --dim height=N", err)
	}
	got, _, err := resolveDims(spec, dimSizes{batch: 2, named: map[string]int{"height": 7}})
	if err != nil || len(got) != 2 || got[0] != 2 || got[1] != 7 {
		t.Errorf("with --dim height=7: %v, %v; want [2 7]", got, err)
	}
	seq := tensorbridge.ValueSpec{Name: "ids", DType: ir.Int64, RankKnown: true,
		Dims: []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "sequence"}}}
	if _, _, err := resolveDims(seq, dimSizes{batch: 1}); err == nil || !strings.Contains(err.Error(), "--seq") {
		t.Errorf("sequence without --seq: %v", err)
	}
}

// Nearest-rank percentiles of 1..100 ms are the ranks themselves.
func TestPercentiles(t *testing.T) {
	var s []float64
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, float64(i))
	}
	p := percentiles(s)
	if p.P50 != 50 || p.P90 != 90 || p.P99 != 99 || p.Min != 1 || p.Max != 100 || p.Mean != 50.5 {
		t.Errorf("got %+v", p)
	}
	// Five samples: the 99th percentile is the largest, the median the third.
	p = percentiles([]float64{5, 1, 4, 2, 3})
	if p.P50 != 3 || p.P90 != 5 || p.P99 != 5 {
		t.Errorf("five samples: %+v", p)
	}
}

// bert_tiny was exported with a 1000-token vocabulary
// (scripts/export-models.py Encoder(vocab=1000)): generated ids must be in
// [0, 1000) and the mask all ones.
func TestGenerateInputsBert(t *testing.T) {
	pb, err := onnxpb.ReadModel(refModels + "bert_tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	b := cpuEngineBackend(t)
	m, err := b.LoadModel(context.Background(), refModels+"bert_tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	def := intRange{lo: 0, hi: 100, from: "default"}
	ranges := inferIntRanges(pb, def)
	if r := ranges["input_ids"]; r.lo != 0 || r.hi != 1000 {
		t.Fatalf("input_ids range %+v, want [0, 1000)", r)
	}
	gen, usesSeq, err := generateInputs(m.Inputs(), dimSizes{batch: 3, seq: 9}, 7, ranges, def)
	if err != nil || !usesSeq {
		t.Fatalf("%v (uses seq %v)", err, usesSeq)
	}
	again, _, _ := generateInputs(m.Inputs(), dimSizes{batch: 3, seq: 9}, 7, ranges, def)
	for k, g := range gen {
		if len(g.Shape) != 2 || g.Shape[0] != 3 || g.Shape[1] != 9 {
			t.Errorf("%s shape %v, want [3 9]", g.Name, g.Shape)
		}
		var vals, vals2 []int64
		g.tensor.ConstFlatData(func(f any) { vals = append(vals, f.([]int64)...) })
		again[k].tensor.ConstFlatData(func(f any) { vals2 = append(vals2, f.([]int64)...) })
		distinct := map[int64]bool{}
		for i, v := range vals {
			distinct[v] = true
			if vals2[i] != v {
				t.Fatalf("%s: not reproducible with the same seed", g.Name)
			}
			switch g.Name {
			case "attention_mask":
				if v != 1 {
					t.Fatalf("mask value %d, want 1", v)
				}
			case "input_ids":
				if v < 0 || v >= 1000 {
					t.Fatalf("id %d outside [0, 1000)", v)
				}
			}
		}
		if g.Name == "input_ids" && len(distinct) < 10 {
			t.Errorf("ids barely vary: %v", distinct)
		}
	}
}

// A real run on the cpu backend: the report's figures are consistent with
// each other and the FLOP count is the MLP's exact arithmetic.
func TestBenchMLPOnCPU(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := run(t, "bench", refModels+"mlp.onnx", "--backend", "cpu", "--batch", "1,4",
		"--iters", "3", "--warmup", "1", "--save-io", dir, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	if rep.Backend != "cpu" || len(rep.Batches) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, br := range rep.Batches {
		if br.Iters != 3 || br.Warmup != 1 {
			t.Errorf("batch %d: %d timed, %d warm-up runs; want 3 and 1", br.Batch, br.Iters, br.Warmup)
		}
		if want := float64(br.Batch) * 2 * (64*128 + 128*64 + 64*10); br.FLOPs != want {
			t.Errorf("batch %d: %v FLOPs, want %v", br.Batch, br.FLOPs, want)
		}
		if got, want := br.Throughput, float64(br.Batch*br.Iters)/br.TimedS; math.Abs(got-want) > 1e-9*want {
			t.Errorf("batch %d: throughput %v, want batch x runs / time = %v", br.Batch, got, want)
		}
		l := br.Latency
		if !(l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max) {
			t.Errorf("batch %d: percentiles out of order: %+v", br.Batch, l)
		}
		if len(br.Inputs) != 1 || br.Inputs[0].Shape[0] != br.Batch || br.Inputs[0].Shape[1] != 64 {
			t.Errorf("batch %d: inputs %+v", br.Batch, br.Inputs)
		}
	}
	// --save-io wrote inputs and outputs with the shapes used.
	for _, f := range []struct {
		name  string
		shape []int
	}{{"mlp.b4.in.x.npy", []int{4, 64}}, {"mlp.b4.out.log_probs.npy", []int{4, 10}}, {"mlp.b1.in.x.npy", []int{1, 64}}} {
		a, err := npy.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			t.Errorf("%s: %v", f.name, err)
			continue
		}
		if len(a.Shape) != 2 || a.Shape[0] != f.shape[0] || a.Shape[1] != f.shape[1] {
			t.Errorf("%s: shape %v, want %v", f.name, a.Shape, f.shape)
		}
	}
	// log_softmax outputs: each row's probabilities sum to 1.
	a, err := npy.ReadFile(filepath.Join(dir, "mlp.b4.out.log_probs.npy"))
	if err == nil {
		v := a.Data.([]float32)
		for r := 0; r < 4; r++ {
			s := 0.0
			for c := 0; c < 10; c++ {
				s += math.Exp(float64(v[r*10+c]))
			}
			if math.Abs(s-1) > 1e-5 {
				t.Errorf("row %d: probabilities sum to %v", r, s)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "mlp.b8.in.x.npy")); err == nil {
		t.Errorf("wrote a batch size that was not asked for")
	}
}

// --restart's children run the user's benchmark up to its first inference,
// as JSON, without writing files.
func TestRestartChildArgs(t *testing.T) {
	var errb strings.Builder
	c, err := parseBench([]string{"m.onnx", "--restart", "--backend", "xla-cpu", "--batch", "8,2", "--save-io", "d",
		"--cpuprofile=p.prof", "--threads", "1", "--json", "--precision", "bfloat16", "--mixed=false"}, &errb)
	if err != nil {
		t.Fatal(err, errb.String())
	}
	got := strings.Join(restartChildArgs(c), " ")
	want := "bench --backend xla-cpu --batch 8,2 --threads 1 --precision bfloat16 --mixed=false m.onnx --first-only --json --batch 2"
	if got != want {
		t.Errorf("child args\n got %s\nwant %s", got, want)
	}
}

// bfloat16 on the reference MLP: the report carries the accuracy cost
// against float32, which is not zero (bfloat16 keeps 8 significant bits,
// a relative rounding error up to 2^-9 per value) and well under 1%.
func TestBenchPrecisionCost(t *testing.T) {
	code, stdout, stderr := run(t, "bench", refModels+"mlp.onnx", "--backend", "cpu", "--batch", "3",
		"--iters", "1", "--warmup", "0", "--precision", "bfloat16", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rep.Precision, "bfloat16") || len(rep.Batches) != 1 || len(rep.Batches[0].Accuracy) != 1 {
		t.Fatalf("report %+v", rep)
	}
	a := rep.Batches[0].Accuracy[0]
	if a.Output != "log_probs" || !(a.RelativeL2 > 0 && a.RelativeL2 < 0.01) || a.MaxAbsDiff <= 0 {
		t.Errorf("accuracy %+v: want log_probs with 0 < relative L2 < 1%%", a)
	}
}

// Without --batch the children let the model decide the batch, as the
// parent would.
func TestRestartChildArgsDefaultBatch(t *testing.T) {
	var errb strings.Builder
	c, err := parseBench([]string{"m.onnx", "--restart", "--backend", "cpu"}, &errb)
	if err != nil {
		t.Fatal(err, errb.String())
	}
	if got, want := strings.Join(restartChildArgs(c), " "), "bench --backend cpu m.onnx --first-only --json"; got != want {
		t.Errorf("child args\n got %s\nwant %s", got, want)
	}
}

// A model whose batch dimension is fixed at 1 runs batch 1 only: an explicit
// --batch 8 is refused with the input, the fixed size and the size asked;
// the default --batch 1,8 runs 1 and says why 8 was not run. The samples/s
// figure is then runs/s x 1, not x 8. A model with no batch dimension at
// all (a scalar input) runs once and is labelled so; --batch 8 on it is
// refused too. A symbolic batch dimension set with --dim counts as fixed.
func TestBenchBatchTheModelTakes(t *testing.T) {
	fixed := writeModel(t, "fixed.onnx", []onnxpb.Node{node("Relu", []string{"x"}, []string{"y"})}, nil,
		[]onnxpb.ValueInfo{typedInfo("x", onnxpb.Float, 1, 4)}, []onnxpb.ValueInfo{typedInfo("y", onnxpb.Float, 1, 4)})
	scalar := writeModel(t, "scalar.onnx", []onnxpb.Node{node("Relu", []string{"x"}, []string{"y"})}, nil,
		[]onnxpb.ValueInfo{typedInfo("x", onnxpb.Float)}, []onnxpb.ValueInfo{typedInfo("y", onnxpb.Float)})
	common := []string{"--backend", "cpu", "--iters", "2", "--warmup", "0", "--json"}

	refused := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"fixed, --batch 8", []string{fixed, "--batch", "8"}, []string{"input x's dimension 0 is fixed at 1, --batch 8 asked"}},
		{"fixed, --batch 1,8", []string{fixed, "--batch", "1,8"}, []string{"fixed at 1, --batch 1,8 asked"}},
		{"no batch axis, --batch 8", []string{scalar, "--batch", "8"}, []string{"no batch dimension", "--batch 8 cannot be applied"}},
		{"--dim fixes the batch", []string{refModels + "mlp.onnx", "--dim", "batch=4", "--batch", "8"},
			[]string{"--dim batch=4 sets input x's dimension 0 to 4, --batch 8 asked"}},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := run(t, append(append([]string{"bench"}, c.args...), common...)...)
			if code == 0 {
				t.Fatalf("exit 0, want a refusal; stdout %s", stdout)
			}
			for _, w := range c.wants {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}

	ran := []struct {
		name  string
		args  []string
		batch int
		axis  string
		note  string
	}{
		{"fixed, default --batch", []string{fixed}, 1, batchFixed, "ran batch 1 only"},
		{"fixed, --batch 1", []string{fixed, "--batch", "1"}, 1, batchFixed, ""},
		{"no batch axis", []string{scalar}, 1, batchNone, "samples/s counts runs"},
		{"--dim fixes the batch", []string{refModels + "mlp.onnx", "--dim", "batch=4"}, 4, batchFixed, "--dim batch=4 sets input x's dimension 0 to 4"},
		{"symbolic", []string{refModels + "mlp.onnx", "--batch", "3"}, 3, batchSymbolic, ""},
	}
	for _, c := range ran {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := run(t, append(append([]string{"bench"}, c.args...), common...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var rep benchReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatal(err)
			}
			if len(rep.Batches) != 1 {
				t.Fatalf("ran %d batch sizes, want 1: %+v", len(rep.Batches), rep.Batches)
			}
			b := rep.Batches[0]
			if b.Batch != c.batch || b.BatchAxis != c.axis {
				t.Errorf("batch %d (%s), want %d (%s)", b.Batch, b.BatchAxis, c.batch, c.axis)
			}
			// The generated inputs have the batch reported.
			if len(b.Inputs[0].Shape) > 0 && b.Inputs[0].Shape[0] != c.batch {
				t.Errorf("input shape %v, reported batch %d", b.Inputs[0].Shape, b.Batch)
			}
			// samples/s = batch x runs / timed seconds, from the report's own counts.
			if want := float64(c.batch*b.Iters) / b.TimedS; math.Abs(b.Throughput-want) > 1e-9*want {
				t.Errorf("throughput %g, want %d x %d / %g = %g", b.Throughput, c.batch, b.Iters, b.TimedS, want)
			}
			notes := strings.Join(rep.Notes, "\n")
			if c.note != "" && !strings.Contains(notes, c.note) {
				t.Errorf("notes %q lack %q", notes, c.note)
			}
		})
	}
}

// TestBenchFirstOnlyStampsTheResult checks that a --first-only child says
// when its first inference returned, on the wall clock --restart's parent
// reads: after the child started, before it exited.
func TestBenchFirstOnlyStampsTheResult(t *testing.T) {
	before := time.Now().UnixNano()
	code, stdout, stderr := run(t, "bench", refModels+"mlp.onnx", "--backend", "cpu", "--batch", "2", "--first-only", "--json")
	after := time.Now().UnixNano()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	if n := rep.FirstResultUnixNano; n < before || n > after {
		t.Errorf("first result stamped at %d, outside the run [%d, %d]", n, before, after)
	}
	if len(rep.Batches) != 1 || rep.Batches[0].FirstRunS <= 0 {
		t.Errorf("report %+v", rep.Batches)
	}
}
