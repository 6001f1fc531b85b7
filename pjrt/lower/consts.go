package lower

import (
	"fmt"
	"math"
	"reflect"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	xbf16 "github.com/gomlx/go-xla/pkg/types/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/x448/float16"
)

// toXFlat converts a flat slice of GoMLX element values to the slice type
// go-xla renders: GoMLX's bfloat16 becomes go-xla's (same bits), Go int and
// uint become int64 and uint64. Anything else must already be a slice of a
// supported element type.
func toXFlat(flat any) (any, error) {
	switch f := flat.(type) {
	case nil:
		return nil, fmt.Errorf("constant value is nil")
	case []bfloat16.BFloat16:
		out := make([]xbf16.BFloat16, len(f))
		for i, v := range f {
			out[i] = xbf16.FromBits(v.Bits())
		}
		return out, nil
	case []int:
		out := make([]int64, len(f))
		for i, v := range f {
			out[i] = int64(v)
		}
		return out, nil
	case []uint:
		out := make([]uint64, len(f))
		for i, v := range f {
			out[i] = uint64(v)
		}
		return out, nil
	case []bool, []int8, []int16, []int32, []int64, []uint8, []uint16, []uint32, []uint64,
		[]float16.Float16, []float32, []float64, []complex64, []complex128:
		return flat, nil
	}
	t := reflect.TypeOf(flat)
	if t.Kind() != reflect.Slice {
		return nil, fmt.Errorf("constant value must be a flat slice, got %T", flat)
	}
	return nil, fmt.Errorf("constant of element type %s is not supported (want a slice of bool, integers, floats, float16, bfloat16 or complex)", t.Elem())
}

// scalarKind names the special scalars reductions start from.
type scalarKind int

const (
	zeroScalar    scalarKind = iota
	oneScalar                // 1, or true
	lowestScalar             // -inf for floats, the minimum for integers, false
	highestScalar            // +inf for floats, the maximum for integers, true
	allOnesScalar            // every bit set (the identity of bitwise and)
)

// scalarFlat returns a one-element slice holding the given special value
// of dt, or an error if dt has none.
func scalarFlat(dt dtypes.DType, kind scalarKind) (any, error) {
	var f float64
	switch kind {
	case zeroScalar:
		f = 0
	case oneScalar:
		f = 1
	case lowestScalar:
		f = math.Inf(-1)
	case highestScalar:
		f = math.Inf(1)
	}
	switch dt {
	case dtypes.Bool:
		switch kind {
		case zeroScalar, lowestScalar:
			return []bool{false}, nil
		default:
			return []bool{true}, nil
		}
	case dtypes.Float32:
		if kind == allOnesScalar {
			break
		}
		return []float32{float32(f)}, nil
	case dtypes.Float64:
		if kind == allOnesScalar {
			break
		}
		return []float64{f}, nil
	case dtypes.Float16:
		if kind == allOnesScalar {
			break
		}
		return []float16.Float16{float16.Fromfloat32(float32(f))}, nil
	case dtypes.BFloat16:
		if kind == allOnesScalar {
			break
		}
		return []xbf16.BFloat16{xbf16.FromFloat32(float32(f))}, nil
	case dtypes.Complex64:
		if kind == zeroScalar || kind == oneScalar {
			return []complex64{complex(float32(f), 0)}, nil
		}
	case dtypes.Complex128:
		if kind == zeroScalar || kind == oneScalar {
			return []complex128{complex(f, 0)}, nil
		}
	case dtypes.Int8:
		return []int8{int8(intScalar(kind, math.MinInt8, math.MaxInt8))}, nil
	case dtypes.Int16:
		return []int16{int16(intScalar(kind, math.MinInt16, math.MaxInt16))}, nil
	case dtypes.Int32:
		return []int32{int32(intScalar(kind, math.MinInt32, math.MaxInt32))}, nil
	case dtypes.Int64:
		return []int64{intScalar(kind, math.MinInt64, math.MaxInt64)}, nil
	case dtypes.Uint8:
		return []uint8{uint8(uintScalar(kind, math.MaxUint8))}, nil
	case dtypes.Uint16:
		return []uint16{uint16(uintScalar(kind, math.MaxUint16))}, nil
	case dtypes.Uint32:
		return []uint32{uint32(uintScalar(kind, math.MaxUint32))}, nil
	case dtypes.Uint64:
		return []uint64{uintScalar(kind, math.MaxUint64)}, nil
	}
	return nil, fmt.Errorf("dtype %s has no %s value", dt, kind)
}

func (k scalarKind) String() string {
	return [...]string{"zero", "one", "lowest", "highest", "all-ones"}[k]
}

func intScalar(kind scalarKind, lo, hi int64) int64 {
	switch kind {
	case oneScalar:
		return 1
	case lowestScalar:
		return lo
	case highestScalar:
		return hi
	case allOnesScalar:
		return -1
	}
	return 0
}

func uintScalar(kind scalarKind, hi uint64) uint64 {
	switch kind {
	case oneScalar:
		return 1
	case highestScalar, allOnesScalar:
		return hi
	}
	return 0
}

// scalar adds a scalar constant of dt to the main function.
func (b *Builder) scalar(dt dtypes.DType, kind scalarKind) (*stablehlo.Value, error) {
	flat, err := scalarFlat(dt, kind)
	if err != nil {
		return nil, err
	}
	return b.fn.ConstantFromFlatAndDimensions(flat)
}

// filled returns a value of shape s filled with the given special scalar.
func (b *Builder) filled(s shapes.Shape, kind scalarKind) (*stablehlo.Value, error) {
	c, err := b.scalar(s.DType, kind)
	if err != nil {
		return nil, err
	}
	if s.IsScalar() {
		return c, nil
	}
	return stablehlo.BroadcastInDim(c, toXShape(s), nil)
}
