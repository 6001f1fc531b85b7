package serve

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/oip"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Tensor is one request input or response output on its way through the
// server: a datatype, a shape and the elements as little-endian row-major
// bytes, the form both the REST binary extension and gRPC's raw contents
// carry, so requests are merged and outputs split by slicing bytes.
type Tensor struct {
	Name  string
	DType ir.DType
	Shape []int
	Data  []byte
}

// datatypes maps the protocol's datatype names to the runtime's dtypes.
var datatypes = map[string]ir.DType{
	"BOOL": ir.Bool, "UINT8": ir.Uint8, "UINT16": ir.Uint16, "UINT32": ir.Uint32, "UINT64": ir.Uint64,
	"INT8": ir.Int8, "INT16": ir.Int16, "INT32": ir.Int32, "INT64": ir.Int64,
	"FP16": ir.Float16, "BF16": ir.BFloat16, "FP32": ir.Float32, "FP64": ir.Float64,
}

// Datatype returns the protocol's name for dt ("FP32"), or "" where the
// protocol has none.
func Datatype(dt ir.DType) string {
	for name, d := range datatypes {
		if d == dt {
			return name
		}
	}
	return ""
}

// parseDatatype maps a protocol datatype name onto a dtype, naming the
// input in the error.
func parseDatatype(input, name string) (ir.DType, error) {
	if dt, ok := datatypes[name]; ok {
		return dt, nil
	}
	if name == "BYTES" {
		return ir.InvalidDType, &errs.InputError{Name: input, Problem: "dtype",
			Expected: "a numeric or BOOL datatype (no model input here takes strings)", Got: "BYTES"}
	}
	return ir.InvalidDType, &errs.InputError{Name: input, Problem: "dtype",
		Expected: "one of BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64", Got: fmt.Sprintf("%q", oip.Clip(name))}
}

// shapeInts converts a wire shape, checking each dimension.
func shapeInts(input string, shape []int64) ([]int, int, error) {
	n, err := oip.Elements(shape)
	if err != nil {
		return nil, 0, &errs.InputError{Name: input, Problem: "shape", Expected: "non-negative dimensions", Got: err.Error()}
	}
	out := make([]int, len(shape))
	for i, d := range shape {
		out[i] = int(d)
	}
	return out, n, nil
}

func shapeInt64s(shape []int) []int64 {
	out := make([]int64, len(shape))
	for i, d := range shape {
		out[i] = int64(d)
	}
	return out
}

// toIR builds the runtime's host tensor.
func (t *Tensor) toIR() (*ir.Tensor, error) {
	x, err := ir.TensorFromBytes(t.DType, t.Shape, t.Data)
	if err != nil {
		return nil, &errs.InputError{Name: t.Name, Problem: "value", Expected: "elements matching the shape", Got: err.Error()}
	}
	return x, nil
}
