package client

import (
	"runtime"
	"strings"
	"testing"
)

// FuzzDecodeHTTPInfer: any response body is decoded or refused, never a
// panic, never more allocated than 64 bytes per byte of body and header
// plus 64 KiB (a
// server, or something posing as one, cannot make the client allocate
// from a declared shape), and every output holds exactly its shape's bytes.
func FuzzDecodeHTTPInfer(f *testing.F) {
	f.Add([]byte(`{"model_name":"m","outputs":[{"name":"y","datatype":"FP32","shape":[2],"data":[1,2]}]}`), "")
	f.Add([]byte(`{"model_name":"m","outputs":[{"name":"y","datatype":"INT64","shape":[1],"parameters":{"binary_data_size":8}}]}01234567`), "105")
	f.Add([]byte(`{"outputs":[{"name":"y","datatype":"FP64","shape":[137438953472],"data":[1]}]}`), "")
	f.Add([]byte(`{"outputs":[`+strings.Repeat(`{},`, 100000)+`{}]}`), "")
	f.Add([]byte(`{"outputs":[{"name":"y","datatype":"FP64","shape":[0,4611686018427387904],"parameters":{"binary_data_size":0}}]}`), "")
	f.Fuzz(func(t *testing.T, body []byte, headerLen string) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := DecodeHTTPInfer(body, headerLen)
		runtime.ReadMemStats(&after)
		if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(64*(len(body)+len(headerLen)))+64<<10; got > bound {
			t.Fatalf("%d-byte body, %d-byte header: %d bytes allocated, over %d", len(body), len(headerLen), got, bound)
		}
		if err != nil {
			return
		}
		for _, o := range res.Outputs {
			if err := checkRaw(o.Name, o.Datatype, o.Shape, len(o.Data)); err != nil {
				t.Fatal(err)
			}
		}
	})
}
