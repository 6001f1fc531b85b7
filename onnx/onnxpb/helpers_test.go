package onnxpb

import (
	"errors"
	"fmt"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// The tests build their inputs with protowire's Append functions, an encoder
// independent of the decoder under test.

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func fVarint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func fInt(num protowire.Number, v int64) []byte { return fVarint(num, uint64(v)) }

func fFixed32(num protowire.Number, v uint32) []byte {
	return protowire.AppendFixed32(protowire.AppendTag(nil, num, protowire.Fixed32Type), v)
}

func fFloat(num protowire.Number, v float32) []byte { return fFixed32(num, math.Float32bits(v)) }

func fFixed64(num protowire.Number, v uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), v)
}

func fBytes(num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
}

func fStr(num protowire.Number, s string) []byte { return fBytes(num, []byte(s)) }

func fMsg(num protowire.Number, parts ...[]byte) []byte { return fBytes(num, cat(parts...)) }

func fGroup(num protowire.Number, body []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.StartGroupType)
	b = append(b, body...)
	return protowire.AppendTag(b, num, protowire.EndGroupType)
}

func packedVarints(num protowire.Number, vs ...int64) []byte {
	var body []byte
	for _, v := range vs {
		body = protowire.AppendVarint(body, uint64(v))
	}
	return fBytes(num, body)
}

func packedFloats(num protowire.Number, vs ...float32) []byte {
	var body []byte
	for _, v := range vs {
		body = protowire.AppendFixed32(body, math.Float32bits(v))
	}
	return fBytes(num, body)
}

func packedDoubles(num protowire.Number, vs ...float64) []byte {
	var body []byte
	for _, v := range vs {
		body = protowire.AppendFixed64(body, math.Float64bits(v))
	}
	return fBytes(num, body)
}

// minimalModel is a small valid ModelProto: ir_version 8, opset 13, one
// Relu node with an INTS attribute, a float initializer, typed input/output.
func minimalModel() []byte {
	return cat(
		fInt(1, 8),
		fStr(2, "hand"),
		fMsg(7,
			fMsg(1, fStr(1, "x"), fStr(2, "y"), fStr(4, "Relu"),
				fMsg(5, fStr(1, "axes"), fInt(20, int64(AttrInts)), packedVarints(8, 0, 1))),
			fStr(2, "g"),
			fMsg(5, packedVarints(1, 2), fInt(2, int64(Float)), fStr(8, "w"),
				fBytes(9, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0})),
			fMsg(11, fStr(1, "x"), fMsg(2, fMsg(1, fInt(1, 1), fMsg(2, fMsg(1, fInt(1, 2)))))),
			fMsg(12, fStr(1, "y"), fMsg(2, fMsg(1, fInt(1, 1), fMsg(2, fMsg(1, fStr(2, "N")))))),
		),
		fMsg(8, fStr(1, ""), fInt(2, 13)),
	)
}

// testdataDir returns the directory holding data/node of the Debian
// libonnx-testdata package: $TENSORBRIDGE_ONNX_TESTDATA, else the location
// scripts/fetch-onnx-testdata.sh unpacks to.
func testdataDir() (string, error) {
	root := os.Getenv("TENSORBRIDGE_ONNX_TESTDATA")
	if root == "" {
		cache := os.Getenv("TENSORBRIDGE_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("no home directory (%v); set TENSORBRIDGE_ONNX_TESTDATA", err)
			}
			cache = filepath.Join(home, ".cache", "tensorbridge")
		}
		root = filepath.Join(cache, "onnx-testdata", "root", "usr", "share", "libonnx-testdata")
	}
	if st, err := os.Stat(filepath.Join(root, "data", "node")); err != nil || !st.IsDir() {
		return "", fmt.Errorf("ONNX test data not found under %s: run scripts/fetch-onnx-testdata.sh, "+
			"or set TENSORBRIDGE_ONNX_TESTDATA to the directory containing data/node", root)
	}
	return root, nil
}

// testdataRoot is testdataDir for tests that need the data: it skips
// them, with the reason, when the data is absent.
func testdataRoot(t testing.TB) string {
	t.Helper()
	root, err := testdataDir()
	if err != nil {
		testreq.Skipf(t, "%v", err)
	}
	return root
}

func wantErr(t *testing.T, err error, sentinel error, substrs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one wrapping %v containing %q", sentinel, substrs)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Errorf("error %q does not wrap %v", err, sentinel)
	}
	for _, s := range substrs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}
