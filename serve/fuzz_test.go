package serve

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/internal/oip"
	"github.com/tensorbridge/tensorbridge/ir"
	pb "github.com/tensorbridge/tensorbridge/serve/inferencepb"
)

// fuzzSpecs is the model the decoders are fuzzed against: x FP32[batch,4],
// ids INT64[batch,seq], mask BOOL[batch,seq], s FP16[] and a rank-unknown
// y UINT8, with batch buckets 1..8 and seq buckets up to 16 (the runtime's
// bucket rule refuses larger sizes).
func fuzzSpecs() *inputSpecs {
	x := spec("x", "batch", 4)
	ids := spec("ids", "batch", "seq")
	ids.DType = ir.Int64
	mask := spec("mask", "batch", "seq")
	mask.DType = ir.Bool
	s := spec("s")
	s.DType = ir.Float16
	y := tensorbridge.ValueSpec{Name: "y", DType: ir.Uint8}
	bk := config.Buckets{Sizes: map[string][]int{"batch": {1, 2, 4, 8}, "seq": {4, 16}}}
	return &inputSpecs{model: "m", specs: []tensorbridge.ValueSpec{x, ids, mask, s, y}, nOutputs: 2, bucket: bk.Bucket}
}

// allocBound is the most a decoder may allocate for an input of n bytes:
// k bytes per input byte (JSON numbers of 2 bytes become 8-byte elements,
// and the JSON decoder's own structures) plus a fixed 64 KiB. The model's
// own bound (its largest input) is far below that here; the point is that
// nothing scales with a declared shape.
func allocBound(n int) uint64 { return uint64(64*n) + 64<<10 }

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// checkDecoded: every decoded input holds exactly its shape's bytes, and
// the shape is one the specs accept.
func checkDecoded(t *testing.T, specs *inputSpecs, req *InferRequest) {
	t.Helper()
	for _, in := range req.Inputs {
		shape := make([]int64, len(in.Shape))
		for i, d := range in.Shape {
			shape[i] = int64(d)
		}
		_, _, n, err := specs.check(in.Name, Datatype(in.DType), shape)
		if err != nil {
			t.Fatalf("decoded input %s%v that the specs refuse: %v", in.Name, in.Shape, err)
		}
		if len(in.Data) != n*in.DType.Size() {
			t.Fatalf("input %s: %d bytes for shape %v of %s", in.Name, len(in.Data), in.Shape, in.DType)
		}
	}
}

var jsonSeeds = []string{
	`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}`,
	`{"inputs":[{"name":"x","datatype":"FP32","shape":[2,4],"data":[[1,2,3,4],[5,6,7,8]]}],"outputs":[{"name":"o","parameters":{"binary_data":true}}]}`,
	`{"inputs":[{"name":"ids","datatype":"INT64","shape":[1,4],"data":[1,2,3,4]},{"name":"mask","datatype":"BOOL","shape":[1,4],"data":[true,false,true,true]}]}`,
	`{"inputs":[{"name":"s","datatype":"FP16","shape":[],"data":1e9}]}`,
	`{"inputs":[{"name":"y","datatype":"UINT8","shape":[3,0,2],"data":[]}]}`,
	`{"inputs":[{"name":"x","shape":[137438953472],"datatype":"FP64","data":[1]}]}`,
	`{"inputs":[{"name":"y","shape":[0,4611686018427387904],"datatype":"UINT8","data":[]}]}`,
	`{"inputs":[{"name":"y","shape":[-1],"datatype":"UINT8","data":[1]}]}`,
	`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[[[[[[[[1,2,3,4]]]]]]]]}],"parameters":{"timeout":100}}`,
	`{"id":"a","inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[1,2,3,4],"parameters":{"p":[1,2]}}]}`,
}

// FuzzDecodeJSON: any JSON body is a request the model's specs accept
// with exactly its shape's bytes, or an error; never a panic, and never
// more allocated than allocBound of its length.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	specs := fuzzSpecs()
	f.Fuzz(func(t *testing.T, body []byte) {
		var req *InferRequest
		var err error
		got := allocated(func() { req, _, _, err = decodeHTTPInfer(body, "", specs) })
		if got > allocBound(len(body)) {
			t.Fatalf("%d-byte body: %d bytes allocated, over the bound %d (error %v)", len(body), got, allocBound(len(body)), err)
		}
		if err == nil {
			checkDecoded(t, specs, req)
		}
	})
}

// FuzzDecodeJSONData: the element decoder alone, with any declared count
// and datatype.
func FuzzDecodeJSONData(f *testing.F) {
	f.Add([]byte("[1,2,3]"), "FP32", int64(3))
	f.Add([]byte("[[true],[false]]"), "BOOL", int64(2))
	f.Add([]byte("[1]"), "FP64", int64(137438953472))
	f.Add([]byte("[1]"), "FP64", int64(1<<24))
	f.Add([]byte("7"), "INT8", int64(1))
	f.Fuzz(func(t *testing.T, data []byte, datatype string, n int64) {
		if n < 0 || n > oip.MaxElements {
			return // Elements refuses these before the decoder is called
		}
		var out []byte
		var err error
		got := allocated(func() { out, err = oip.DecodeJSONData(data, datatype, int(n)) })
		if got > allocBound(len(data)+len(datatype)) {
			t.Fatalf("%d bytes of data declared as %d %s: %d bytes allocated", len(data), n, datatype, got)
		}
		if err == nil {
			size, _ := oip.ElemSize(datatype)
			if int64(len(out)) != n*int64(size) {
				t.Fatalf("%d bytes for %d %s elements", len(out), n, datatype)
			}
		}
	})
}

// FuzzDecodeBinary: a JSON header followed by binary tensors (the binary
// extension), with the header length as declared or fuzzed.
func FuzzDecodeBinary(f *testing.F) {
	f.Add([]byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":16}}]}`), []byte("0123456789abcdef"), "")
	f.Add([]byte(`{"inputs":[{"name":"ids","datatype":"INT64","shape":[1,4],"parameters":{"binary_data_size":32}},{"name":"mask","datatype":"BOOL","shape":[1,4],"parameters":{"binary_data_size":4}}]}`), make([]byte, 36), "")
	f.Add([]byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":16}}]}`), []byte("0123"), "9999")
	f.Add([]byte(`{"inputs":[{"name":"x","datatype":"FP64","shape":[137438953472],"parameters":{"binary_data_size":8}}]}`), make([]byte, 8), "")
	f.Add([]byte(`{"inputs":[{"name":"y","datatype":"UINT8","shape":[4],"parameters":{"binary_data_size":-4}}]}`), make([]byte, 4), "-1")
	specs := fuzzSpecs()
	f.Fuzz(func(t *testing.T, head, bin []byte, headerLen string) {
		if headerLen == "" {
			headerLen = strconv.Itoa(len(head))
		}
		body := append(append([]byte{}, head...), bin...)
		var req *InferRequest
		var err error
		got := allocated(func() { req, _, _, err = decodeHTTPInfer(body, headerLen, specs) })
		if got > allocBound(len(body)+len(headerLen)) {
			t.Fatalf("%d-byte body, %d-byte header: %d bytes allocated, over the bound %d", len(body), len(headerLen), got, allocBound(len(body)+len(headerLen)))
		}
		if err == nil {
			checkDecoded(t, specs, req)
		}
	})
}

func grpcSeed(f *testing.F, r *pb.ModelInferRequest) {
	b, err := proto.Marshal(r)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

// FuzzDecodeGRPC: any protobuf message is decoded as the server's gRPC
// stack does (proto.Unmarshal, bounded by the message size limit), then
// by decodeGRPCInfer, which must allocate at most allocBound of the
// message's length and give each input exactly its shape's bytes.
func FuzzDecodeGRPC(f *testing.F) {
	in := func(name, dt string, shape ...int64) *pb.ModelInferRequest_InferInputTensor {
		return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape}
	}
	grpcSeed(f, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{in("x", "FP32", 1, 4)},
		RawInputContents: [][]byte{make([]byte, 16)}})
	typed := in("ids", "INT64", 1, 4)
	typed.Contents = &pb.InferTensorContents{Int64Contents: []int64{1, 2, 3, 4}}
	mask := in("mask", "BOOL", 1, 4)
	mask.Contents = &pb.InferTensorContents{BoolContents: []bool{true, false, true, true}}
	grpcSeed(f, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{typed, mask}})
	huge := in("x", "FP64", 137438953472)
	huge.Contents = &pb.InferTensorContents{Fp64Contents: []float64{1}}
	grpcSeed(f, &pb.ModelInferRequest{ModelName: "nosuchmodel", Inputs: []*pb.ModelInferRequest_InferInputTensor{huge}})
	grpcSeed(f, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{in("y", "UINT8", 0, 1<<62)},
		RawInputContents: [][]byte{{}}})
	grpcSeed(f, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{in("y", "UINT8", math.MaxInt64, 2)},
		RawInputContents: [][]byte{{1, 2}}})
	specs := fuzzSpecs()
	f.Fuzz(func(t *testing.T, msg []byte) {
		var r pb.ModelInferRequest
		if err := proto.Unmarshal(msg, &r); err != nil {
			return
		}
		var req *InferRequest
		var err error
		got := allocated(func() { req, _, err = decodeGRPCInfer(&r, specs) })
		if got > allocBound(len(msg)) {
			t.Fatalf("%d-byte message: %d bytes allocated, over the bound %d", len(msg), got, allocBound(len(msg)))
		}
		if err == nil {
			checkDecoded(t, specs, req)
		}
	})
}

// The hostile shapes of issue 18 are refused by the checks before any
// element is decoded, on every path, with a message naming the problem.
func TestDeclaredShapeChecks(t *testing.T) {
	specs := fuzzSpecs()
	cases := []struct {
		name, dt string
		shape    []int64
		says     string
	}{
		{"x", "FP64", []int64{137438953472}, "dtype"},
		{"y", "UINT8", []int64{137438953472 << 4}, "over the limit"},
		{"y", "UINT8", []int64{0, 1 << 62}, "over the limit"},
		{"y", "UINT8", []int64{1 << 30, 1 << 30}, "more than"},
		{"y", "UINT8", []int64{-1}, "negative dimension"},
		{"x", "FP32", []int64{0, 1 << 62}, "over the limit"},
		{"x", "FP32", []int64{0, 5}, "dimension 1 is 4"},
		{"x", "FP32", []int64{9, 4}, "at most 8"},
		{"ids", "INT64", []int64{1, 17}, "at most 16"},
		{"x", "FP32", []int64{4}, "shape"},
		{"z", "FP32", []int64{1}, "unknown input"},
		{"x", "BYTES", []int64{1, 4}, "BYTES"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.name, c.shape), func(t *testing.T) {
			_, _, _, err := specs.check(c.name, c.dt, c.shape)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %v; want an error saying %q", err, c.says)
			}
			if code, _ := status(err); code != 400 {
				t.Fatalf("status %d, want 400", code)
			}
		})
	}
	// A zero batch is an empty tensor that the other checks still apply to.
	if _, _, n, err := specs.check("x", "FP32", []int64{0, 4}); err != nil || n != 0 {
		t.Fatalf("empty batch: %d elements, %v", n, err)
	}
}

// Bodies made of many tiny objects or keys, which encoding/json would
// turn into 30 to 60 times their size, are refused by the structure
// limits before they are decoded. (Proved once by lifting the limits: the
// first body then allocated 149 times its size, 44.7 MB for 300 KB, and
// the test failed.)
func TestJSONStructureBounded(t *testing.T) {
	specs := fuzzSpecs()
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%q:1", strconv.Itoa(i))
	}
	for name, body := range map[string]string{
		"objects": `{"inputs":[` + strings.Repeat(`{},`, 100000) + `{}]}`,
		"keys":    `{"parameters":{` + strings.Join(keys, ",") + `},"inputs":[]}`,
	} {
		var err error
		got := allocated(func() { _, _, _, err = decodeHTTPInfer([]byte(body), "", specs) })
		if err == nil || got > allocBound(len(body))/8 {
			t.Fatalf("%s: %d bytes allocated for a %d-byte body (error %v)", name, got, len(body), err)
		}
	}
}

// readBody reserves what it reads in the in-flight budget: a body that
// does not fit beside another request's is refused 503 (OverBudgetError),
// one over the limit 413, and a lone request larger than the room left
// by nothing is admitted (the budget is at least the largest request).
func TestReadBodyBudget(t *testing.T) {
	b := &byteBudget{max: 256 << 10}
	other := &reservation{b: b}
	if err := other.grow(200 << 10); err != nil {
		t.Fatal(err)
	}
	mine := &reservation{b: b}
	_, err := readBody(bytes.NewReader(make([]byte, 100<<10)), 1<<20, mine)
	var ob *OverBudgetError
	if !errors.As(err, &ob) {
		t.Fatalf("a body beside a full budget: %v, want OverBudgetError", err)
	}
	if code, _ := status(err); code != 503 {
		t.Fatalf("status %d, want 503", code)
	}
	mine.done()
	other.done()
	if b.inUse() != 0 {
		t.Fatalf("%d bytes still reserved after both requests ended", b.inUse())
	}
	_, err = readBody(bytes.NewReader(make([]byte, 2<<20)), 1<<20, mine)
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("a body over the limit: %v, want TooLargeError", err)
	}
	if code, _ := status(err); code != 413 {
		t.Fatalf("status %d, want 413", code)
	}
	mine.done()
	body, err := readBody(bytes.NewReader(make([]byte, 300<<10)), 1<<20, mine)
	if err != nil || len(body) != 300<<10 {
		t.Fatalf("a lone body larger than the budget: %d bytes, %v", len(body), err)
	}
	if mine.held > 2*int64(len(body))+readChunk {
		t.Fatalf("%d bytes reserved for a %d-byte body", mine.held, len(body))
	}
	mine.done()
}

// Refusals for load say when to retry; a 413 closes the connection (the
// rest of the body is not read).
func TestRetryAfter(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		header string
	}{
		{&OverloadError{Model: "m", Wait: 2500 * time.Millisecond, Deadline: time.Second}, 503, "3"},
		{&OverBudgetError{Need: 1, InUse: 2, Max: 2}, 503, "1"},
		{&QueueFullError{Model: "m", Size: 4}, 503, "1"},
		{&TooLargeError{Limit: 1, Got: 2}, 413, ""},
		{&UnauthenticatedError{Reason: "missing"}, 401, ""},
	} {
		rec := httptest.NewRecorder()
		writeErr(rec, c.err)
		if rec.Code != c.status || rec.Header().Get("Retry-After") != c.header {
			t.Fatalf("%T: %d Retry-After %q; want %d %q", c.err, rec.Code, rec.Header().Get("Retry-After"), c.status, c.header)
		}
	}
}
