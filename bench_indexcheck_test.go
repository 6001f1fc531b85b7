//go:build linux

package tensorbridge_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
	"github.com/tensorbridge/tensorbridge/onnx"
)

// BenchmarkIndexCheckCost times a steady Run of the reference models
// (testdata/models) and of synthetic variants of bert_tiny, to compare
// against a build without the index checks (onnx/indexcheck.go):
//
//	go test -run '^$' -bench BenchmarkIndexCheckCost -count 6 . > on.txt
//	go test -tags tensorbridge_noindexcheck -run '^$' -bench BenchmarkIndexCheckCost -count 6 . > off.txt
//
// (and again with TENSORBRIDGE_TEST_BACKEND=xla-cpu), interleaving the two
// builds and comparing the least cpu-ns/op of each. mlp, tiny_resnet and
// mobilenet_v2_w025 have no index ops (nothing differs); bert_tiny and
// bert_tiny_op13 check their token ids on the host. The synthetic
// variants feed the token Gather with input_ids + 0 ("shifted": followed
// to the input, checked on the host with the shift) and input_ids * 1
// ("computed": not followed, so the in-graph check output guards it, the
// pattern of indices computed inside a model). The real MiniLM is added
// when fetched.
func BenchmarkIndexCheckCost(b *testing.B) {
	ctx := context.Background()
	be, err := tensorbridge.Open(ctx, testBackend())
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	md := filepath.Join("testdata", "models")
	type variant struct {
		name string
		m    *onnx.Model
		in   []string // input files, in input order
	}
	var variants []variant
	for _, rm := range referenceModels {
		m, err := onnx.Load(filepath.Join(md, rm.name+".onnx"))
		if err != nil {
			b.Fatal(err)
		}
		var files []string
		for k := range rm.inputs {
			files = append(files, filepath.Join(md, fmt.Sprintf("%s.input_%d.npy", rm.name, k)))
		}
		variants = append(variants, variant{rm.name, m, files})
		if rm.name == "bert_tiny" {
			variants = append(variants, variant{"bert_tiny_shifted_ids", rewireIDs(b, m, "Add", 0), files},
				variant{"bert_tiny_computed_ids", rewireIDs(b, m, "Mul", 1), files})
		}
	}
	dir := filepath.Join(realModelsDir(), "minilm_l6_int8w") // when fetched (scripts/fetch-real-models.sh)
	if mm, err := onnx.Load(filepath.Join(dir, "model.onnx")); err == nil {
		var files []string
		for k := range mm.Inputs() {
			files = append(files, filepath.Join(dir, fmt.Sprintf("input_%d.npy", k)))
		}
		variants = append(variants, variant{"minilm_l6_int8w", mm, files})
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			m, err := be.LoadONNX(ctx, v.m, v.name)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			in := map[string]*ir.Tensor{}
			for k, spec := range m.Inputs() {
				a, err := npy.ReadFile(v.in[k])
				if err != nil {
					b.Fatal(err)
				}
				if in[spec.Name], err = a.ToIR(); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := m.Run(ctx, in); err != nil {
				b.Fatal(err)
			}
			if want := map[string]string{"bert_tiny_computed_ids": "computed index 1000", "bert_tiny_shifted_ids": "1000 at flat position 0"}[v.name]; want != "" && !indexChecksOff {
				// The check is where the doc says: an out-of-range id fails
				// with the in-graph (computed) or host (shifted) error.
				bad := tensors.MustCopyFlatData[int64](in["input_ids"])
				bad[0] = 1000
				ids, _ := ir.TensorFromFlat(bad, in["input_ids"].Shape().Dimensions...)
				_, err := m.Run(ctx, map[string]*ir.Tensor{"input_ids": ids, "attention_mask": in["attention_mask"]})
				if err == nil || !strings.Contains(err.Error(), want) {
					b.Fatalf("token id 1000 through %s: %v, want an error containing %q", v.name, err, want)
				}
			}
			b.ResetTimer()
			cpu0 := processCPU()
			for range b.N {
				if _, err := m.Run(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time of the whole process per run: on a loaded machine it
			// is a steadier figure than the wall time.
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the user plus system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIndexCheckPaired measures the in-graph check's cost on a loaded
// machine, where separate runs of two builds differ by more than the check
// costs: bert_tiny with its token ids shifted (input+0, checked on the
// host) and computed (input*1, checked by the check output) run
// alternately in one process, so that both see the same load, and the
// medians of their wall times are compared. computed-shifted is the
// check's cost (an Add and a Mul of one constant cost alike); in a
// tensorbridge_noindexcheck build it shows the difference without any
// check:
//
//	go test -run '^$' -bench BenchmarkIndexCheckPaired -benchtime 4000x .
//	go test -tags tensorbridge_noindexcheck -run '^$' -bench BenchmarkIndexCheckPaired -benchtime 4000x .
func BenchmarkIndexCheckPaired(b *testing.B) {
	ctx := context.Background()
	be, err := tensorbridge.Open(ctx, testBackend())
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	md := filepath.Join("testdata", "models")
	bert, err := onnx.Load(filepath.Join(md, "bert_tiny.onnx"))
	if err != nil {
		b.Fatal(err)
	}
	var models [2]*tensorbridge.Model
	for k, v := range []*onnx.Model{rewireIDs(b, bert, "Add", 0), rewireIDs(b, bert, "Mul", 1)} {
		if models[k], err = be.LoadONNX(ctx, v, fmt.Sprint("paired", k)); err != nil {
			b.Fatal(err)
		}
		defer models[k].Close()
	}
	in := map[string]*ir.Tensor{}
	for k, spec := range models[0].Inputs() {
		a, err := npy.ReadFile(filepath.Join(md, fmt.Sprintf("bert_tiny.input_%d.npy", k)))
		if err != nil {
			b.Fatal(err)
		}
		if in[spec.Name], err = a.ToIR(); err != nil {
			b.Fatal(err)
		}
	}
	for _, m := range models {
		if _, err := m.Run(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	times := [2][]time.Duration{}
	b.ResetTimer()
	for i := range b.N {
		for j := range 2 {
			k := (i + j) % 2 // alternate which runs first
			t0 := time.Now()
			if _, err := models[k].Run(ctx, in); err != nil {
				b.Fatal(err)
			}
			times[k] = append(times[k], time.Since(t0))
		}
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds())
	}
	shifted, computed := med(times[0]), med(times[1])
	b.ReportMetric(shifted, "shifted-med-ns")
	b.ReportMetric(computed, "computed-med-ns")
	b.ReportMetric(computed-shifted, "check-ns")
	b.ReportMetric(100*(computed-shifted)/shifted, "check-%")
}
