package onnxpb

import (
	"testing"
)

// BenchmarkDecodeLargeGraph decodes a synthetic 20000-node graph with
// attributes and a 4 MiB raw initializer.
func BenchmarkDecodeLargeGraph(b *testing.B) {
	var graph []byte
	for i := 0; i < 20000; i++ {
		graph = append(graph, fMsg(1, fStr(1, "x"), fStr(1, "w"), fStr(2, "y"), fStr(4, "Conv"),
			fMsg(5, fStr(1, "kernel_shape"), fInt(20, int64(AttrInts)), packedVarints(8, 3, 3)),
			fMsg(5, fStr(1, "alpha"), fInt(20, int64(AttrFloat)), fFloat(2, 0.5)))...)
	}
	graph = append(graph, fMsg(5, fStr(8, "w"), packedVarints(1, 1<<20), fInt(2, int64(Float)),
		fBytes(9, make([]byte, 4<<20)))...)
	model := cat(fInt(1, 8), fMsg(8, fInt(2, 17)), fMsg(7, graph))
	b.SetBytes(int64(len(model)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(model); err != nil {
			b.Fatal(err)
		}
	}
}
