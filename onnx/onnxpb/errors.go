package onnxpb

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error this package returns wraps one of them, so
// callers can classify failures with errors.Is.
var (
	// ErrMalformed: the bytes are not valid protobuf for the expected message
	// (truncated field, wrong wire type, bad tag, length past the end).
	ErrMalformed = errors.New("malformed protobuf")
	// ErrNotONNX: the input does not look like an ONNX model at all (an image,
	// text, an empty file...).
	ErrNotONNX = errors.New("not an ONNX model")
	// ErrTooDeep: messages are nested deeper than MaxDepth.
	ErrTooDeep = errors.New("nesting too deep")
	// ErrTooLarge: a size (file, element count, byte count) is beyond what
	// the decoder accepts.
	ErrTooLarge = errors.New("size too large")
	// ErrInvalidTensor: a tensor's payload does not match its type and dims.
	ErrInvalidTensor = errors.New("invalid tensor")
	// ErrExternalData: a tensor's external data cannot be located or read.
	ErrExternalData = errors.New("external data")
	// ErrUnsupported: valid ONNX that this package does not convert
	// (string tensors to ir, segmented tensors, unknown data types).
	ErrUnsupported = errors.New("unsupported")
)

// DecodeError reports where in a message tree decoding failed. Path is the
// dotted field path from the top-level message, e.g.
// "ModelProto.graph.node[3].attribute[1]"; Offset is the byte offset in the
// input at which the offending field starts (-1 when unknown).
type DecodeError struct {
	Path   string
	Offset int
	Msg    string
	Err    error // one of the sentinel errors
}

func (e *DecodeError) Error() string {
	var sb strings.Builder
	sb.WriteString("onnxpb: ")
	if e.Path != "" {
		sb.WriteString(e.Path)
		sb.WriteString(": ")
	}
	sb.WriteString(e.Msg)
	if e.Offset >= 0 {
		fmt.Fprintf(&sb, " (at byte %d)", e.Offset)
	}
	return sb.String()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// prefix prepends a path element to a *DecodeError travelling up the
// message tree; other errors pass through unchanged.
func prefix(err error, elem string) error {
	var de *DecodeError
	if errors.As(err, &de) && elem != "" {
		if de.Path == "" {
			de.Path = elem
		} else if strings.HasPrefix(de.Path, "[") {
			de.Path = elem + de.Path
		} else {
			de.Path = elem + "." + de.Path
		}
	}
	return err
}

// indexed names element i of a repeated field.
func indexed(name string, i int) string { return fmt.Sprintf("%s[%d]", name, i) }
