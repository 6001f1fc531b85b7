package llm

import (
	"encoding/binary"
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/shard"
)

// Weight-only int8 quantization of the decoder's linear projections.
//
// What is quantized: each layer's q, k, v, o, gate, up and down projection
// weights, the matrices that hold almost all of a decoder's parameters
// outside the vocabulary. The token embedding and the LM head stay in the
// compute precision: the embedding is a lookup (no matmul to fold a scale
// into, and with tied embeddings it is also the head), and the head's
// error would go straight into the logits that sampling reads, unmixed by
// any later layer. Norms, biases and the rope tables are tiny and stay as
// they are.
//
// How: at load, each [out, in] matrix is quantized symmetric per output
// channel (row): scale = max|w| / 127 (float32), q = w / scale rounded
// half to even and saturated to [-127, 127] (-128 is never produced, so
// the range is symmetric). A row of zeros has scale 0 and q 0. The
// program takes the int8 matrix and the float32 scales [out] as
// parameters (the scales after the rope tables); the int8 matrix,
// converted to the compute dtype, feeds the matmul and each output
// channel is multiplied by its scale after it (quantMatmul), which is the
// float model with each weight replaced by q × scale up to float32
// rounding. No backend here has an int8 × float matmul kernel, so the
// conversion is a pass over the weights each step: BENCHMARKS.md "LLM
// generation" has what that costs on the CPU backends.

// Quantization selects how Load stores the projection weights.
type Quantization string

const (
	// QuantNone keeps every weight in the compute precision.
	QuantNone Quantization = ""
	// QuantInt8 stores the projections as int8 with a float32 scale per
	// output channel.
	QuantInt8 Quantization = "int8"
)

// ParseQuantization reads a --quantize value: "" or "none", or "int8".
func ParseQuantization(s string) (Quantization, error) {
	switch s {
	case "", "none":
		return QuantNone, nil
	case "int8":
		return QuantInt8, nil
	}
	return QuantNone, fmt.Errorf("quantization %q not supported: want none or int8", s)
}

// projections are the layer weights (weightSpecs' per-layer indices) that
// int8 quantization stores as int8, in the order their scales are passed.
var projections = []int{wQ, wK, wV, wO, wGate, wUp, wDown}

// projectionSlot returns i's position in projections, or -1.
func projectionSlot(i int) int {
	for s, p := range projections {
		if p == i {
			return s
		}
	}
	return -1
}

// quantized says whether c's projections are int8.
func (c *Config) quantized() bool { return c.quant == QuantInt8 }

// numScaleParams is how many scale parameters follow the rope tables.
func numScaleParams(c *Config) int {
	if !c.quantized() {
		return 0
	}
	return c.Layers * len(projections)
}

// quantizedSpec says whether weightSpecs(c)[i] is stored as int8.
func quantizedSpec(c *Config, i int) bool {
	if !c.quantized() || i < 1 || i > c.Layers*c.perLayer() {
		return false
	}
	return projectionSlot((i-1)%c.perLayer()) >= 0
}

// proj is layer l's projection i (weightSpecs' per-layer index) applied to
// x [N, in], plus bias when given: linear, or with int8 weights quantMatmul.
func (w netWeights) proj(l, i int, x, bias *Node) *Node {
	wt := w.layer(l, i)
	s := projectionSlot(i)
	var y *Node
	if len(w.scales) == 0 || s < 0 {
		y = linear(x, wt, bias)
	} else {
		y = quantMatmul(x, wt, w.scales[l*len(projections)+s])
		if bias != nil {
			y = Add(y, bcastLast(bias, y))
		}
	}
	if ab, ok := w.rowLoRA[loraKey(l, i)]; ok && w.rowIdx != nil {
		y = Add(y, ConvertDType(rowLoRA(x, ab[0], ab[1], w.rowIdx), y.DType()))
	}
	if ab, ok := w.lora[loraKey(l, i)]; ok {
		// PEFT's LoRA Linear: result + lora_B(lora_A(dropout(x))) * scaling.
		xd := x
		if w.drop != nil {
			xd = w.drop.apply(x)
		}
		d := ConvertDType(linear(linear(xd, ConvertDType(ab[0], x.DType()), nil), ConvertDType(ab[1], x.DType()), nil), y.DType())
		y = Add(y, MulScalar(d, w.loraScale))
	}
	return y
}

// quantMatmul is x [N, in] times the int8 q [out, in] transposed, each
// output channel o then multiplied by scale[o] (float32): (Σ x·q)·s, which
// equals Σ x·(q·s), the product with the dequantized weight, up to
// rounding. The int8 values are exact in every float dtype (|q| ≤ 127);
// the scaling is done in float32 so that a bfloat16 model does not round
// the scales. Scaling the [N, out] output rather than the [out, in]
// weight is the cheaper of the two on the CPU backends
// (BenchmarkQuantMatVec).
func quantMatmul(x, q, scale *Node) *Node {
	dt := x.DType()
	y := ConvertDType(Einsum("ni,oi->no", x, ConvertDType(q, dt)), ir.Float32)
	y = Mul(y, BroadcastToDims(Reshape(scale, 1, -1), y.Shape().Dimensions...))
	return ConvertDType(y, dt)
}

// QuantizedMeshError says int8 weights were asked with a tensor-parallel
// mesh: the mesh placement (mesh.go) splits float weights only, so the two
// are not combined yet. It matches errs.ErrUnsupported.
type QuantizedMeshError struct {
	Quantize Quantization
	Mesh     shard.Mesh
}

func (e *QuantizedMeshError) Error() string {
	return fmt.Sprintf("llm: quantize %s with mesh %s: int8 weights are placed on one device only; tensor-parallel int8 is not implemented", e.Quantize, e.Mesh)
}

// Is makes a QuantizedMeshError match errs.ErrUnsupported.
func (e *QuantizedMeshError) Is(target error) bool { return target == errs.ErrUnsupported }

// NonFiniteWeightError says a weight to be quantized holds a NaN or an
// infinity, which no int8 scale can represent.
type NonFiniteWeightError struct {
	Tensor     string
	Row, Index int
	Value      float32
}

func (e *NonFiniteWeightError) Error() string {
	return fmt.Sprintf("tensor %q: element [%d, %d] is %v: cannot quantize a non-finite weight to int8", e.Tensor, e.Row, e.Index, e.Value)
}

// quantizeRows quantizes w [rows, cols] (row-major float32) symmetric per
// row: it returns the int8 values (as bytes, row-major) and each row's
// scale. A NaN or infinity is a *NonFiniteWeightError.
func quantizeRows(name string, w []float32, rows, cols int) (q []int8, scales []float32, err error) {
	if len(w) != rows*cols {
		return nil, nil, fmt.Errorf("tensor %q: %d elements, shape [%d, %d] wants %d", name, len(w), rows, cols, rows*cols)
	}
	q = make([]int8, len(w))
	scales = make([]float32, rows)
	for r := range rows {
		row := w[r*cols : (r+1)*cols]
		var amax float32
		for j, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, nil, &NonFiniteWeightError{Tensor: name, Row: r, Index: j, Value: v}
			}
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		scales[r] = rowScale(amax)
		quantizeRow(q[r*cols:(r+1)*cols], row, scales[r])
	}
	return q, scales, nil
}

// rowScale is amax/127 in float32. Where that is subnormal and rounded
// down (a row of weights under about 1.5e-36, found by FuzzQuantizeRows),
// it is raised by one unit so that amax/scale stays within 127 and no
// weight saturates: without that, amax = 190 × 2^-149 got the scale 2^-149
// and its int8 saturated at 127, 63 steps off.
func rowScale(amax float32) float32 {
	s := amax / 127
	if s < minNormalFloat32 && float64(s)*127 < float64(amax) {
		s = math.Nextafter32(s, 1)
	}
	return s
}

// minNormalFloat32 is the smallest normal float32, 2^-126.
const minNormalFloat32 = 0x1p-126

// quantizeRow stores round-half-even(w / scale), saturated to [-127, 127],
// in q; a zero scale (a row of zeros) gives zeros.
func quantizeRow(q []int8, w []float32, scale float32) {
	for j, v := range w {
		if scale == 0 {
			q[j] = 0
			continue
		}
		x := math.RoundToEven(float64(v) / float64(scale))
		q[j] = int8(max(-127, min(127, x)))
	}
}

// quantizeTensor reads t as float32 and quantizes it per row; it returns
// the int8 bytes and the scales as float32 little-endian bytes.
func quantizeTensor(t *stTensor, rows, cols int) (qRaw, scaleRaw []byte, err error) {
	raw := convert(t, ir.Float32)
	w := make([]float32, len(raw)/4)
	for i := range w {
		w[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	q, s, err := quantizeRows(t.Name, w, rows, cols)
	if err != nil {
		return nil, nil, err
	}
	qRaw = make([]byte, len(q))
	for i, v := range q {
		qRaw[i] = byte(v)
	}
	scaleRaw = make([]byte, 4*len(s))
	for i, v := range s {
		binary.LittleEndian.PutUint32(scaleRaw[4*i:], math.Float32bits(v))
	}
	return qRaw, scaleRaw, nil
}

// weightBytes is the device memory c's weights take in dt (the rope
// tables not counted): the int8 projections and their float32 scales
// when c is quantized.
func weightBytes(c *Config, dt ir.DType) uint64 {
	var total uint64
	for i, w := range weightSpecs(c) {
		n := uint64(1)
		for _, d := range w.shape {
			n *= uint64(d)
		}
		if quantizedSpec(c, i) {
			total += n + 4*uint64(w.shape[0])
		} else {
			total += n * uint64(dt.Size())
		}
	}
	return total
}
