// Package client is a small Go client for the Open Inference Protocol v2,
// the protocol `tensorbridge serve` (package serve) and Triton speak.
//
// HTTP speaks it over HTTP/REST (JSON or the binary tensor extension), GRPC
// over gRPC (inference.GRPCInferenceService). Both have the same methods.
//
// Tensors are raw: a protocol datatype name ("FP32"), a shape, and the
// elements as little-endian row-major bytes. FromFloat32 and
// Tensor.Float32s convert the common case.
//
//	c := client.NewHTTP("127.0.0.1:8000", nil)
//	x := client.FromFloat32("x", []int64{1, 64}, values)
//	res, err := c.Infer(ctx, "mlp", &client.InferRequest{Inputs: []client.Tensor{x}})
//	logProbs, err := res.Outputs[0].Float32s()
//
// Errors from the server are *Error values with the HTTP status or gRPC code
// and the server's message.
package client

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tensorbridge/tensorbridge/internal/oip"
)

// Tensor is one input or output.
type Tensor struct {
	Name     string
	Datatype string // "FP32", "INT64", ...
	Shape    []int64
	Data     []byte // little-endian, row-major
}

// FromFloat32 makes an FP32 tensor.
func FromFloat32(name string, shape []int64, v []float32) Tensor {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return Tensor{Name: name, Datatype: "FP32", Shape: shape, Data: b}
}

// FromInt64 makes an INT64 tensor.
func FromInt64(name string, shape []int64, v []int64) Tensor {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return Tensor{Name: name, Datatype: "INT64", Shape: shape, Data: b}
}

// Float32s returns the elements of an FP32 tensor.
func (t Tensor) Float32s() ([]float32, error) {
	if t.Datatype != "FP32" {
		return nil, fmt.Errorf("tensor %q is %s, not FP32", t.Name, t.Datatype)
	}
	if len(t.Data)%4 != 0 {
		return nil, fmt.Errorf("tensor %q: %d bytes is not a whole number of FP32 elements", t.Name, len(t.Data))
	}
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// InferRequest is one inference request.
type InferRequest struct {
	ID      string
	Inputs  []Tensor
	Outputs []string      // outputs to return; empty: all
	Timeout time.Duration // the "timeout" parameter; 0: the server's default
	// JSON sends inputs and asks for outputs as JSON arrays instead of the
	// binary extension (HTTP only; gRPC is always raw).
	JSON bool
}

// InferResponse holds the outputs, in the order the server returned them.
type InferResponse struct {
	ModelName string
	ID        string
	Outputs   []Tensor
}

// Output returns the output named name.
func (r *InferResponse) Output(name string) (Tensor, bool) {
	for _, t := range r.Outputs {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// ModelMetadata describes a model's inputs and outputs (-1: a dimension
// that varies).
type ModelMetadata = oip.ModelMetadata

// ServerMetadata names the server and its extensions.
type ServerMetadata = oip.ServerMetadata

// Error is a failure the server reported.
type Error struct {
	Status  int        // HTTP status (0 over gRPC)
	Code    codes.Code // gRPC code (codes.Unknown over HTTP)
	Message string
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("server answered %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("server answered %s: %s", e.Code, e.Message)
}
