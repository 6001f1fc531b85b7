//go:build linux

package tensorbridge_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/npy"
	"github.com/tensorbridge/tensorbridge/onnx"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// BenchmarkIndexCheckCost times a steady Run of the models whose indices
// are checked at run time (onnx/indexcheck.go), to compare against a build
// without the checks:
//
//	go test -run '^$' -bench BenchmarkIndexCheckCost -count 6 . > on.txt
//	go test -tags tensorbridge_noindexcheck -run '^$' -bench BenchmarkIndexCheckCost -count 6 . > off.txt
//
// (and again with TENSORBRIDGE_TEST_BACKEND=xla-cpu), interleaving the two
// builds and comparing the least cpu-ns/op of each. bert_tiny and the
// real MiniLM check their token ids on the host; "bert_tiny_computed_ids"
// is bert_tiny with its token ids passed through an Add of zeros, so that
// the Gather's indices are computed in the graph and checked by the index
// check output (the pattern of RoBERTa's position ids, computed from the
// input ids inside the model).
func BenchmarkIndexCheckCost(b *testing.B) {
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
	type variant struct {
		name string
		m    *onnx.Model
		in   []string // input files, in input order
	}
	bertIn := []string{filepath.Join(md, "bert_tiny.input_0.npy"), filepath.Join(md, "bert_tiny.input_1.npy")}
	variants := []variant{{"bert_tiny", bert, bertIn}, {"bert_tiny_computed_ids", computedIDs(b, bert), bertIn}}
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
			if v.name == "bert_tiny_computed_ids" && !indexChecksOff {
				// The check really is in the graph: an out-of-range id fails
				// with the computed-index error.
				bad := tensors.MustCopyFlatData[int64](in["input_ids"])
				bad[0] = 1000
				ids, _ := ir.TensorFromFlat(bad, in["input_ids"].Shape().Dimensions...)
				_, err := m.Run(ctx, map[string]*ir.Tensor{"input_ids": ids, "attention_mask": in["attention_mask"]})
				if err == nil || !strings.Contains(err.Error(), "computed index 1000") {
					b.Fatalf("token id 1000 through the computed path: %v, want the computed-index error", err)
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

// computedIDs returns bert_tiny with input_ids + 0 (an INT64 initializer)
// feeding the token embedding's Gather in place of input_ids.
func computedIDs(b *testing.B, m *onnx.Model) *onnx.Model {
	pb := *m.Proto()
	g := *pb.Graph
	g.Node = append([]onnxpb.Node{{Name: "ids_plus_zero", OpType: "Add", Input: []string{"input_ids", "zero_id"}, Output: []string{"ids_computed"}}}, g.Node...)
	g.Initializer = append(append([]onnxpb.Tensor(nil), g.Initializer...), onnxpb.Tensor{Name: "zero_id", DataType: onnxpb.Int64, Dims: []int64{1}, Int64Data: []int64{0}})
	rewired := 0
	for k := range g.Node[1:] {
		n := &g.Node[k+1]
		if n.Name == "/tok/Gather" {
			n.Input = append([]string(nil), n.Input...)
			n.Input[1] = "ids_computed"
			rewired++
		}
	}
	if rewired != 1 {
		b.Fatalf("bert_tiny: found %d token Gather nodes, want 1", rewired)
	}
	pb.Graph = &g
	out, err := onnx.FromProto(&pb)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// processCPU is the user plus system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
