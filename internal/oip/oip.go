// Package oip holds the wire formats of the Open Inference Protocol v2 that
// the server (package serve) and the Go client (package client) share.
//
// They are the datatype names and sizes, the JSON request and response
// bodies of the REST API, the flat JSON encoding of tensor elements, and the
// binary tensor extension's framing.
//
// Sources: the KServe v2 protocol (docs/predict-api/v2/required_api.md in
// https://github.com/kserve/kserve) and Triton's binary data extension
// (docs/protocol/extension_binary_data.md in
// https://github.com/triton-inference-server/server). Element bytes are
// always little-endian, row-major, without padding.
package oip

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/x448/float16"
)

// Header names of the binary tensor extension.
const (
	// HeaderInferenceLength gives the byte length of the JSON part of a
	// body whose binary tensors follow it.
	HeaderInferenceLength = "Inference-Header-Content-Length"
)

// Parameter names the protocol and its extensions define.
const (
	ParamBinarySize   = "binary_data_size"   // on a tensor: its byte count in the binary part
	ParamBinary       = "binary_data"        // on a requested output: return it binary
	ParamBinaryOutput = "binary_data_output" // on the request: return every output binary
	ParamTimeout      = "timeout"            // on the request: its timeout in microseconds
	// ParamClassification on a requested output asks for Triton's
	// classification extension (top-k labels), which the server refuses.
	ParamClassification = "classification"
)

// sizes maps each datatype name to its element size in bytes. BF16 is
// Triton's addition to the v2 table; BYTES (variable size) is absent.
var sizes = map[string]int{
	"BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8,
	"INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8,
	"FP16": 2, "BF16": 2, "FP32": 4, "FP64": 8,
}

// ElemSize returns the size in bytes of one element of datatype, and false
// for a name that is not a fixed-size datatype of the protocol.
func ElemSize(datatype string) (int, bool) {
	n, ok := sizes[datatype]
	return n, ok
}

// Clip shortens a client's value echoed in an error message to 64 bytes,
// so that an error never grows with what a client sent.
func Clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// MaxElements bounds the element count of any tensor on the wire (2^40).
// Together with the byte counts the decoders check, it keeps every size
// computed from a client's shape far from overflow.
const MaxElements = 1 << 40

// Elements returns the element count of shape, or an error for a negative
// dimension, a dimension or a product over MaxElements. A zero dimension
// makes the count 0 but does not exempt the other dimensions from the
// checks: [0, 2^62] is refused.
func Elements(shape []int64) (int, error) {
	n := int64(1)
	zero := false
	for _, d := range shape {
		switch {
		case d < 0:
			return 0, fmt.Errorf("negative dimension %d in shape %v", d, shape)
		case d > MaxElements:
			return 0, fmt.Errorf("dimension %d in shape %v is over the limit of %d elements", d, shape, int64(MaxElements))
		case d == 0:
			zero = true
			continue
		}
		if n > MaxElements/d {
			return 0, fmt.Errorf("shape %v has more than %d elements", shape, int64(MaxElements))
		}
		n *= d
	}
	if zero {
		return 0, nil
	}
	return int(n), nil
}

// MaxDepth bounds the nesting of arrays and objects in a JSON body: a
// tensor of rank 8 nested in a request needs about 12 levels.
const MaxDepth = 64

// JSONLimits bound the structure of a JSON body before it is decoded, so
// that what the decoder allocates stays a small multiple of the body: an
// object decodes to a struct or map entry of about 100 bytes, so a body
// of "{}," repeated would otherwise allocate 30 to 60 times its size.
type JSONLimits struct {
	Depth   int // nesting of arrays and objects
	Objects int // objects in all; 0: no limit
	Keys    int // object keys in all; 0: no limit
}

// CheckJSON refuses JSON over the limits, scanning the bytes once without
// allocating (strings are skipped, so brackets inside them do not count).
// It does not validate the JSON.
func CheckJSON(b []byte, lim JSONLimits) error {
	depth, objects, keys := 0, 0, 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ':':
			keys++
			if lim.Keys > 0 && keys > lim.Keys {
				return fmt.Errorf("JSON with more than %d object keys", lim.Keys)
			}
		case '{':
			objects++
			if lim.Objects > 0 && objects > lim.Objects {
				return fmt.Errorf("JSON with more than %d objects: more inputs, outputs or parameters than the model takes", lim.Objects)
			}
			fallthrough
		case '[':
			depth++
			if depth > lim.Depth {
				return fmt.Errorf("JSON nested deeper than %d levels (at byte %d)", lim.Depth, i)
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}

// CheckDepth is CheckJSON with a depth limit only.
func CheckDepth(b []byte, max int) error { return CheckJSON(b, JSONLimits{Depth: max}) }

// InferRequest is the JSON part of a REST infer request.
type InferRequest struct {
	ID         string          `json:"id,omitempty"`
	Parameters Parameters      `json:"parameters,omitempty"`
	Inputs     []InputTensor   `json:"inputs"`
	Outputs    []RequestOutput `json:"outputs,omitempty"`
}

// InputTensor is one input of a REST infer request. Data is absent when
// the elements travel in the binary part (Parameters' binary_data_size).
type InputTensor struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters Parameters      `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// RequestOutput names an output the caller wants.
type RequestOutput struct {
	Name       string     `json:"name"`
	Parameters Parameters `json:"parameters,omitempty"`
}

// InferResponse is the JSON part of a REST infer response.
type InferResponse struct {
	ModelName    string         `json:"model_name"`
	ModelVersion string         `json:"model_version,omitempty"`
	ID           string         `json:"id,omitempty"`
	Parameters   Parameters     `json:"parameters,omitempty"`
	Outputs      []OutputTensor `json:"outputs"`
}

// OutputTensor is one output of a REST infer response.
type OutputTensor struct {
	Name       string          `json:"name"`
	Datatype   string          `json:"datatype"`
	Shape      []int64         `json:"shape"`
	Parameters Parameters      `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// TensorMetadata describes a model input or output; -1 marks a dimension
// that varies.
type TensorMetadata struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ModelMetadata is the body of GET v2/models/{name}.
type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions,omitempty"`
	Platform string           `json:"platform"`
	Inputs   []TensorMetadata `json:"inputs"`
	Outputs  []TensorMetadata `json:"outputs"`
}

// ServerMetadata is the body of GET v2.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// ErrorBody is the body of every failed REST request.
type ErrorBody struct {
	Error string `json:"error"`
}

// Parameters is a parameter map: string keys, values that are strings,
// numbers or booleans.
type Parameters map[string]any

// UnmarshalJSON reads a parameter object, refusing values that are arrays
// or objects: the protocol allows none, and refusing them keeps what a
// hostile body can make the decoder allocate near its own size.
func (p *Parameters) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*p = nil
		return nil
	}
	out := make(Parameters, len(raw))
	for k, v := range raw {
		var x any
		if len(v) > 0 && (v[0] == '[' || v[0] == '{') {
			return fmt.Errorf("parameter %q: want a string, number or boolean, got an array or object", k)
		}
		if err := json.Unmarshal(v, &x); err != nil {
			return fmt.Errorf("parameter %q: %w", k, err)
		}
		out[k] = x
	}
	*p = out
	return nil
}

// Int returns parameter name as an integer, with whether it is present. A
// present value that is not an integer is an error.
func (p Parameters) Int(name string) (int64, bool, error) {
	v, ok := p[name]
	if !ok {
		return 0, false, nil
	}
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, true, fmt.Errorf("parameter %q: want an integer, got %v", name, x)
		}
		return int64(x), true, nil
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			return 0, true, fmt.Errorf("parameter %q: want an integer, got %s", name, x)
		}
		return n, true, nil
	case int64:
		return x, true, nil
	case int:
		return int64(x), true, nil
	}
	return 0, true, fmt.Errorf("parameter %q: want an integer, got %T", name, v)
}

// Bool returns parameter name as a boolean, with whether it is present.
func (p Parameters) Bool(name string) (bool, bool, error) {
	v, ok := p[name]
	if !ok {
		return false, false, nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return false, true, fmt.Errorf("parameter %q: want true or false, got %v", name, v)
	}
	return b, true, nil
}

// CountError says a tensor's data holds another number of elements than
// its shape: Got elements in Where (Bytes long, when Bytes > 0) against
// the shape's Want.
type CountError struct {
	Want, Got int
	Where     string // "JSON data", "typed contents"
	Bytes     int
}

func (e *CountError) Error() string {
	in := e.Where
	if e.Bytes > 0 {
		in = fmt.Sprintf("%d bytes of %s", e.Bytes, e.Where)
	}
	return fmt.Sprintf("%d elements in %s, but the shape holds %d", e.Got, in, e.Want)
}

// DecodeJSONData reads the "data" of a JSON tensor (a flat or nested array
// of numbers, or of booleans for BOOL) into little-endian element bytes. It
// checks that there are exactly n elements (a *CountError otherwise) and
// that each fits datatype.
func DecodeJSONData(data []byte, datatype string, n int) ([]byte, error) {
	size, ok := ElemSize(datatype)
	if !ok {
		return nil, fmt.Errorf("datatype %q cannot be sent as JSON data", Clip(datatype))
	}
	// Each element takes at least one byte and all but the last a
	// separator: a shape claiming more than the data can hold is refused
	// before anything is allocated for it (its elements only counted), and
	// the output never outgrows size bytes per two bytes of data.
	if n < 0 || n > (len(data)+1)/2 {
		return nil, &CountError{Want: n, Got: countJSONElements(data), Where: "JSON data", Bytes: len(data)}
	}
	out := make([]byte, 0, n*size)
	count := 0
	depth := 0
	seenArray := false
	for i := 0; i < len(data); {
		tok, j, d := nextJSONToken(data, i)
		i = j
		if d != 0 {
			if depth += d; depth > MaxDepth {
				return nil, fmt.Errorf("data nested deeper than %d levels", MaxDepth)
			}
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced ']' at byte %d", i-1)
			}
			seenArray = true
			continue
		}
		if len(tok) == 0 {
			continue
		}
		if count == n {
			return nil, &CountError{Want: n, Got: n + countJSONElements(data[i:]) + 1, Where: "JSON data", Bytes: len(data)}
		}
		var err error
		out, err = appendElement(out, datatype, string(tok))
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", count, err)
		}
		count++
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced '['")
	}
	if !seenArray && count != 1 {
		return nil, fmt.Errorf("data is not an array")
	}
	if count != n {
		return nil, &CountError{Want: n, Got: count, Where: "JSON data", Bytes: len(data)}
	}
	return out, nil
}

// nextJSONToken reads from data[i:] one bracket (d +1 for '[', -1 for
// ']'), one separator (tok "", d 0), or one element's text (tok), and
// returns where the next one starts.
func nextJSONToken(data []byte, i int) (tok []byte, next, d int) {
	switch c := data[i]; c {
	case '[':
		return nil, i + 1, 1
	case ']':
		return nil, i + 1, -1
	case ',', ' ', '\n', '\t', '\r':
		return nil, i + 1, 0
	}
	j := i
	for j < len(data) && data[j] != ',' && data[j] != ']' && data[j] != '[' &&
		data[j] != ' ' && data[j] != '\n' && data[j] != '\t' && data[j] != '\r' {
		j++
	}
	return data[i:j], j, 0
}

// countJSONElements counts the element tokens of data without decoding
// them (nor allocating for them), for a CountError.
func countJSONElements(data []byte) int {
	n := 0
	for i := 0; i < len(data); {
		tok, j, _ := nextJSONToken(data, i)
		if len(tok) > 0 {
			n++
		}
		i = j
	}
	return n
}

func appendElement(out []byte, datatype, tok string) ([]byte, error) {
	le := binary.LittleEndian
	switch datatype {
	case "BOOL":
		switch tok {
		case "true":
			return append(out, 1), nil
		case "false":
			return append(out, 0), nil
		}
		return nil, fmt.Errorf("want true or false for BOOL, got %s", tok)
	case "INT8", "INT16", "INT32", "INT64":
		bits := 8 * sizes[datatype]
		v, err := strconv.ParseInt(tok, 10, bits)
		if err != nil {
			return nil, fmt.Errorf("want an integer that fits %s, got %s", datatype, tok)
		}
		switch bits {
		case 8:
			return append(out, byte(int8(v))), nil
		case 16:
			return le.AppendUint16(out, uint16(int16(v))), nil
		case 32:
			return le.AppendUint32(out, uint32(int32(v))), nil
		}
		return le.AppendUint64(out, uint64(v)), nil
	case "UINT8", "UINT16", "UINT32", "UINT64":
		bits := 8 * sizes[datatype]
		v, err := strconv.ParseUint(tok, 10, bits)
		if err != nil {
			return nil, fmt.Errorf("want a non-negative integer that fits %s, got %s", datatype, tok)
		}
		switch bits {
		case 8:
			return append(out, byte(v)), nil
		case 16:
			return le.AppendUint16(out, uint16(v)), nil
		case 32:
			return le.AppendUint32(out, uint32(v)), nil
		}
		return le.AppendUint64(out, v), nil
	case "FP16", "BF16", "FP32", "FP64":
		bits := 32
		if datatype == "FP64" {
			bits = 64
		}
		v, err := strconv.ParseFloat(tok, bits)
		if err != nil {
			return nil, fmt.Errorf("want a number, got %s", tok)
		}
		switch datatype {
		case "FP16":
			return le.AppendUint16(out, float16.Fromfloat32(float32(v)).Bits()), nil
		case "BF16":
			return le.AppendUint16(out, BFloat16Bits(float32(v))), nil
		case "FP32":
			return le.AppendUint32(out, math.Float32bits(float32(v))), nil
		}
		return le.AppendUint64(out, math.Float64bits(v)), nil
	}
	return nil, fmt.Errorf("datatype %q cannot be sent as JSON data", Clip(datatype))
}

// BFloat16Bits rounds f to bfloat16, to nearest with ties to even (NaN
// stays NaN).
func BFloat16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// AppendJSONData appends element bytes of datatype as a flat JSON array.
// JSON has no NaN or infinity: such elements are written as null.
func AppendJSONData(dst []byte, datatype string, data []byte) ([]byte, error) {
	size, ok := ElemSize(datatype)
	if !ok {
		return nil, fmt.Errorf("datatype %q cannot be written as JSON data", Clip(datatype))
	}
	if len(data)%size != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of %s elements", len(data), datatype)
	}
	le := binary.LittleEndian
	dst = append(dst, '[')
	for off := 0; off < len(data); off += size {
		if off > 0 {
			dst = append(dst, ',')
		}
		e := data[off : off+size]
		switch datatype {
		case "BOOL":
			dst = strconv.AppendBool(dst, e[0] != 0)
		case "INT8":
			dst = strconv.AppendInt(dst, int64(int8(e[0])), 10)
		case "INT16":
			dst = strconv.AppendInt(dst, int64(int16(le.Uint16(e))), 10)
		case "INT32":
			dst = strconv.AppendInt(dst, int64(int32(le.Uint32(e))), 10)
		case "INT64":
			dst = strconv.AppendInt(dst, int64(le.Uint64(e)), 10)
		case "UINT8":
			dst = strconv.AppendUint(dst, uint64(e[0]), 10)
		case "UINT16":
			dst = strconv.AppendUint(dst, uint64(le.Uint16(e)), 10)
		case "UINT32":
			dst = strconv.AppendUint(dst, uint64(le.Uint32(e)), 10)
		case "UINT64":
			dst = strconv.AppendUint(dst, le.Uint64(e), 10)
		case "FP16":
			dst = appendFloat(dst, float64(float16.Frombits(le.Uint16(e)).Float32()), 32)
		case "BF16":
			dst = appendFloat(dst, float64(math.Float32frombits(uint32(le.Uint16(e))<<16)), 32)
		case "FP32":
			dst = appendFloat(dst, float64(math.Float32frombits(le.Uint32(e))), 32)
		case "FP64":
			dst = appendFloat(dst, math.Float64frombits(le.Uint64(e)), 64)
		}
	}
	return append(dst, ']'), nil
}

func appendFloat(dst []byte, v float64, bits int) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, bits)
}
