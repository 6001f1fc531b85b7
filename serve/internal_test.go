package serve

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/internal/oip"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx"
)

func spec(name string, dims ...any) tensorbridge.ValueSpec {
	s := tensorbridge.ValueSpec{Name: name, DType: ir.Float32, RankKnown: true}
	for _, d := range dims {
		switch v := d.(type) {
		case string:
			s.Dims = append(s.Dims, onnx.Dim{Param: v, Value: -1})
		case int:
			s.Dims = append(s.Dims, onnx.Dim{Value: v})
		}
	}
	return s
}

// Requests merge only along a dimension that leads every input and output
// and that the runtime pads; the batch sizes are the buckets the runtime
// pads merged batches to.
func TestPlanBatching(t *testing.T) {
	padded := []tensorbridge.DimPlan{{Name: "batch", Padded: true}}
	cases := []struct {
		name      string
		in, out   []tensorbridge.ValueSpec
		plan      []tensorbridge.DimPlan
		cfg       ModelConfig
		buckets   string
		wantDim   string
		wantMax   int
		wantSizes string
		backend   string // "" for an accelerator ("tpu")
	}{
		{"batch padded", []tensorbridge.ValueSpec{spec("x", "batch", 4)}, []tensorbridge.ValueSpec{spec("y", "batch")},
			padded, ModelConfig{}, "", "batch", 32, "[1 2 4 8 16 32]", ""},
		{"batch padded on cpu", []tensorbridge.ValueSpec{spec("x", "batch", 4)}, []tensorbridge.ValueSpec{spec("y", "batch")},
			padded, ModelConfig{}, "", "batch", 8, "[1 2 4 8]", "xla-cpu"},
		{"configured buckets", []tensorbridge.ValueSpec{spec("x", "batch", 4)}, []tensorbridge.ValueSpec{spec("y", "batch")},
			padded, ModelConfig{}, "batch=1,8,24", "batch", 24, "[1 8 24]", ""},
		{"configured buckets on cpu", []tensorbridge.ValueSpec{spec("x", "batch", 4)}, []tensorbridge.ValueSpec{spec("y", "batch")},
			padded, ModelConfig{}, "batch=1,8,24", "batch", 24, "[1 8 24]", "cpu"},
		{"max batch below buckets", []tensorbridge.ValueSpec{spec("x", "batch", 4)}, []tensorbridge.ValueSpec{spec("y", "batch")},
			padded, ModelConfig{MaxBatch: 5}, "batch=1,8,24", "batch", 5, "[1 8]", ""},
		{"batch not padded", []tensorbridge.ValueSpec{spec("x", "batch", 4)}, []tensorbridge.ValueSpec{spec("y", "batch")},
			[]tensorbridge.DimPlan{{Name: "batch", Reason: "a reduction crosses it"}}, ModelConfig{}, "", "", 1, "[]", ""},
		{"batching off", []tensorbridge.ValueSpec{spec("x", "batch", 4)}, []tensorbridge.ValueSpec{spec("y", "batch")},
			padded, ModelConfig{MaxBatch: 1}, "", "", 1, "[]", ""},
		{"static leading dim", []tensorbridge.ValueSpec{spec("x", 1, 4)}, []tensorbridge.ValueSpec{spec("y", 1)},
			nil, ModelConfig{}, "", "", 1, "[]", ""},
		{"output without batch", []tensorbridge.ValueSpec{spec("x", "batch", 4)}, []tensorbridge.ValueSpec{spec("y", 4)},
			padded, ModelConfig{}, "", "", 1, "[]", ""},
		{"batch beyond axis 0", []tensorbridge.ValueSpec{spec("x", "batch", "batch")}, []tensorbridge.ValueSpec{spec("y", "batch")},
			padded, ModelConfig{}, "", "", 1, "[]", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			backend := c.backend
			if backend == "" {
				backend = "tpu"
			}
			m := &model{inputs: c.in, outputs: c.out, cfg: c.cfg, defaultMax: defaultMaxBatch(backend)}
			if c.buckets != "" {
				b, err := config.ParseBuckets(c.buckets)
				if err != nil {
					t.Fatal(err)
				}
				m.buckets = b
			}
			m.planBatching(c.plan)
			if m.batchDim != c.wantDim || m.maxBatch != c.wantMax || fmt.Sprint(m.sizes) != c.wantSizes {
				t.Fatalf("dim %q max %d sizes %v (why not: %s); want %q %d %s", m.batchDim, m.maxBatch, m.sizes, m.whyNoMerge, c.wantDim, c.wantMax, c.wantSizes)
			}
			if c.wantDim == "" && m.whyNoMerge == "" {
				t.Fatal("no reason given for not merging")
			}
		})
	}
}

// The queue merges requests of one key in arrival order up to the row
// limit, leaves others for later, never merges alone requests, and drops
// departed callers.
func TestQueueNext(t *testing.T) {
	var depth int
	q := newQueue(10, func(n int) { depth = n })
	ctx := context.Background()
	gone, cancel := context.WithCancel(ctx)
	cancel()
	mk := func(c context.Context, key string, rows int, alone bool) *pending {
		return &pending{ctx: c, key: key, rows: rows, alone: alone, enq: time.Now(), done: make(chan result, 1)}
	}
	a1, b1, gone1, a2, a3, alone := mk(ctx, "a", 3, false), mk(ctx, "b", 1, false), mk(gone, "a", 1, false),
		mk(ctx, "a", 4, false), mk(ctx, "a", 2, false), mk(ctx, "a", 1, true)
	for _, p := range []*pending{a1, b1, gone1, a2, a3, alone} {
		if !q.push(p) {
			t.Fatal("push refused")
		}
	}
	stop := make(chan struct{})
	want := [][]*pending{{a1, a2}, {b1}, {a3}, {alone}}
	for i, w := range want {
		got := q.next(stop, true, 8, 0, nil)
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Fatalf("batch %d: %v, want %v", i, got, w)
		}
	}
	if depth != 0 {
		t.Fatalf("depth %d after draining", depth)
	}
	// With compiled sizes, a batch is cut to the largest size that fits:
	// seven one-row requests run as 4, then 2, then 1.
	for range 7 {
		q.push(mk(ctx, "a", 1, false))
	}
	for _, want := range []int{4, 2, 1} {
		if got := len(q.next(stop, true, 8, 0, []int{1, 2, 4, 8})); got != want {
			t.Fatalf("batch of %d, want %d", got, want)
		}
	}
	small := newQueue(1, func(int) {})
	if !small.push(mk(ctx, "a", 1, false)) || small.push(mk(ctx, "a", 1, false)) {
		t.Fatal("a queue of size 1 must take one request and refuse the second")
	}
	// The delay: a lone request waits for company until its deadline.
	q.push(mk(ctx, "a", 1, false))
	start := time.Now()
	q.next(stop, true, 8, 30*time.Millisecond, nil)
	if d := time.Since(start); d < 25*time.Millisecond {
		t.Fatalf("a lone request ran after %s, before the 30ms queue delay", d)
	}
}

// JSON data round-trips through the encoder and decoder for every
// datatype, and values out of a type's range are refused.
func TestJSONData(t *testing.T) {
	cases := []struct {
		dt, in, out string
		n           int
	}{
		{"FP32", "[[1.5, -2], [0.1, 3e3]]", "[1.5,-2,0.1,3000]", 4},
		{"FP64", "[0.1]", "[0.1]", 1},
		{"FP16", "[1, 0.5, 65504]", "[1,0.5,65504]", 3},
		{"BF16", "[1, -0.5]", "[1,-0.5]", 2},
		{"INT8", "[-128, 127]", "[-128,127]", 2},
		{"UINT16", "[65535]", "[65535]", 1},
		{"INT64", "[-9007199254740993]", "[-9007199254740993]", 1},
		{"BOOL", "[true, false]", "[true,false]", 2},
	}
	for _, c := range cases {
		raw, err := oip.DecodeJSONData([]byte(c.in), c.dt, c.n)
		if err != nil {
			t.Fatalf("%s %s: %v", c.dt, c.in, err)
		}
		out, err := oip.AppendJSONData(nil, c.dt, raw)
		if err != nil || string(out) != c.out {
			t.Fatalf("%s %s: round trip %s, %v; want %s", c.dt, c.in, out, err, c.out)
		}
	}
	for _, bad := range []struct{ dt, in string }{{"INT8", "[128]"}, {"UINT8", "[-1]"}, {"INT32", "[1.5]"}, {"BOOL", "[1]"}, {"FP32", "[1"}, {"FP32", "[1]]"}} {
		if _, err := oip.DecodeJSONData([]byte(bad.in), bad.dt, 1); err == nil {
			t.Fatalf("%s %s: no error", bad.dt, bad.in)
		}
	}
}
