package onnxpb

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// exercise reads every non-external tensor payload of a decoded model, so
// the fuzzer also drives Values and ToIR with arbitrary dims and payloads.
func exercise(m *Model) {
	m.walkTensors(func(t *Tensor) {
		if t.IsExternal() {
			return // would touch the file system
		}
		if n, err := t.NumElements(); err == nil && n < 1<<16 {
			_, _ = t.Values()
			_, _ = t.ToIR()
		}
	})
}

func addRealSeeds(f *testing.F, names ...string) {
	dir, err := testdataDir()
	if err != nil {
		return
	}
	for _, n := range names {
		if b, err := os.ReadFile(filepath.Join(dir, "data", "node", n)); err == nil {
			f.Add(b)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(minimalModel())
	f.Add([]byte{})
	f.Add([]byte("\x08\x07"))
	addRealSeeds(f, "test_abs/model.onnx", "test_conv_with_strides_padding/model.onnx", "test_if/model.onnx")
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) && !errors.Is(err, ErrNotONNX) {
				t.Fatalf("error %v is neither a DecodeError nor ErrNotONNX", err)
			}
			return
		}
		exercise(m)
		_ = m.CheckOpsets(MinSupportedOpset, MaxSupportedOpset)
	})
}

func FuzzDecodeTensor(f *testing.F) {
	f.Add(cat(packedVarints(1, 2, 2), fInt(2, int64(Float)), packedFloats(4, 1, 2, 3, 4)))
	f.Add(cat(packedVarints(1, 3), fInt(2, int64(Int4)), fBytes(9, []byte{0x21, 0x03})))
	f.Add(cat(packedVarints(1, 2), fInt(2, int64(Float16)), packedVarints(5, 0x3c00, 0xc000)))
	addRealSeeds(f, "test_abs/test_data_set_0/input_0.pb", "test_not_2d/test_data_set_0/input_0.pb")
	f.Fuzz(func(t *testing.T, b []byte) {
		tn, err := DecodeTensor(b)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a DecodeError", err)
			}
			return
		}
		if tn.IsExternal() {
			return
		}
		if n, err := tn.NumElements(); err == nil && n < 1<<16 {
			v, verr := tn.Values()
			x, xerr := tn.ToIR()
			if (verr == nil) != (xerr == nil) && tn.DataType != String {
				t.Fatalf("Values error %v but ToIR error %v", verr, xerr)
			}
			if verr == nil && xerr == nil && x.Shape().Size() != int(n) {
				t.Fatalf("ToIR size %d, want %d (%T)", x.Shape().Size(), n, v)
			}
		}
	})
}
