// Package errs defines tensorbridge's error kinds, sentinels and typed errors.
//
// It is the one place every layer (backends, the ONNX importer, the portable
// API, the CLI) takes its errors from, so a caller can classify any error the
// project returns with errors.Is against a sentinel, or reach the details
// with errors.As against a typed error. Package tensorbridge re-exports all
// of it; most code should use the names there.
//
// # Kinds
//
// Kind uses the canonical status names that the PJRT C API's error codes
// also use, so a backend maps its runtime's code to a Kind in one function,
// never by matching message strings.
//
// # Sentinels and typed errors
//
// Each typed error matches exactly one sentinel through its Is method:
//
//	UnavailableError    ErrUnavailable     backend or device missing, busy, or not built in
//	UnsupportedError    ErrUnsupported     an op or dtype the backend cannot run
//	OutOfMemoryError    ErrOutOfMemory     needed against available bytes
//	CompileError        ErrCompileFailed   the backend refused to compile
//	CompileTimeoutError ErrCompileTimeout  compilation ran past its deadline
//	InputError          ErrInvalidInput    a named input with the wrong dtype, shape or value
//
// Errors of other kinds are *Error values; KindOf classifies any error.
package errs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind classifies an error by what the caller can do about it.
type Kind int

// Kinds, with the canonical status-code names.
const (
	Unknown            Kind = iota
	InvalidArgument         // the caller's input is wrong
	NotFound                // a named thing does not exist
	FailedPrecondition      // the system is not in a state to do this (closed, not compiled)
	ResourceExhausted       // out of memory or another quota
	DeadlineExceeded        // a deadline passed before the work finished
	Canceled                // the caller canceled
	Unimplemented           // the backend cannot do this at all
	Unavailable             // the backend or device cannot be reached now
	Internal                // a bug in tensorbridge or the runtime
)

var kindNames = [...]string{
	Unknown:            "Unknown",
	InvalidArgument:    "InvalidArgument",
	NotFound:           "NotFound",
	FailedPrecondition: "FailedPrecondition",
	ResourceExhausted:  "ResourceExhausted",
	DeadlineExceeded:   "DeadlineExceeded",
	Canceled:           "Canceled",
	Unimplemented:      "Unimplemented",
	Unavailable:        "Unavailable",
	Internal:           "Internal",
}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// sentinel is a comparable error value naming a class of failures.
type sentinel struct {
	kind Kind
	msg  string
}

func (s *sentinel) Error() string { return s.msg }

// Sentinels. Compare with errors.Is; each typed error below matches one.
var (
	ErrUnavailable    error = &sentinel{Unavailable, "backend or device unavailable"}
	ErrUnsupported    error = &sentinel{Unimplemented, "unsupported op or dtype"}
	ErrOutOfMemory    error = &sentinel{ResourceExhausted, "out of memory"}
	ErrCompileFailed  error = &sentinel{Internal, "compilation failed"}
	ErrCompileTimeout error = &sentinel{DeadlineExceeded, "compilation timed out"}
	ErrInvalidInput   error = &sentinel{InvalidArgument, "invalid input"}
	ErrClosed         error = &sentinel{FailedPrecondition, "already closed"}
)

// Error is a classified error for failures that have no dedicated type.
type Error struct {
	Kind    Kind
	Backend string // backend name, if any
	Op      string // what was being done: "compile", "execute", "open" ...
	Err     error  // the underlying error, with the runtime's own message
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("tensorbridge")
	if e.Backend != "" {
		b.WriteString(" [" + e.Backend + "]")
	}
	if e.Op != "" {
		b.WriteString(" " + e.Op)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString(e.Kind.String())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel of the same kind, where one exists. The compile
// sentinels are matched only by CompileError and CompileTimeoutError, since
// an Internal or DeadlineExceeded error need not come from a compiler.
func (e *Error) Is(target error) bool {
	if target == ErrCompileFailed || target == ErrCompileTimeout {
		return false
	}
	s, ok := target.(*sentinel)
	return ok && s.kind == e.Kind
}

// UnavailableError says a backend or device cannot be used, and why.
type UnavailableError struct {
	Name      string   // the backend or device asked for
	Reason    string   // why it cannot be used, naming what is missing
	Available []string // what could be used instead, if known
	Err       error    // underlying cause, if any
}

func (e *UnavailableError) Error() string {
	s := fmt.Sprintf("%s is unavailable: %s", e.Name, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if len(e.Available) > 0 {
		s += fmt.Sprintf(" (available: %s)", strings.Join(e.Available, ", "))
	} else if e.Available != nil {
		s += " (no backend is available)"
	}
	return s
}
func (e *UnavailableError) Unwrap() error        { return e.Err }
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// UnsupportedError names an op or dtype a backend cannot run.
type UnsupportedError struct {
	Backend string
	What    string // "op" or "dtype" or "feature"
	Name    string // the op or dtype
	Detail  string // where it was met (node, input) or what to do instead
	Err     error
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("unsupported %s %s", e.What, e.Name)
	if e.Backend != "" {
		s += " on backend " + e.Backend
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}
func (e *UnsupportedError) Unwrap() error        { return e.Err }
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// OutOfMemoryError gives the bytes needed against the bytes available.
type OutOfMemoryError struct {
	Device    string // device ID or description
	Needed    uint64 // bytes the operation needs
	Available uint64 // bytes the budget or device has free
	Detail    string // what was being placed
	Err       error  // the runtime's own message, if it raised this
}

func (e *OutOfMemoryError) Error() string {
	s := "out of memory"
	if e.Device != "" {
		s += " on " + e.Device
	}
	if e.Needed > 0 || e.Available > 0 {
		s += fmt.Sprintf(": need %s, available %s", Bytes(e.Needed), Bytes(e.Available))
	}
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}
func (e *OutOfMemoryError) Unwrap() error        { return e.Err }
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// CompileError says a backend refused to compile a program.
type CompileError struct {
	Backend string
	Program string // program name
	Err     error  // the compiler's own message
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("compiling %q on %s failed: %v", e.Program, e.Backend, e.Err)
}
func (e *CompileError) Unwrap() error        { return e.Err }
func (e *CompileError) Is(target error) bool { return target == ErrCompileFailed }

// CompileTimeoutError says compilation did not finish within its deadline.
// It also matches context.DeadlineExceeded.
type CompileTimeoutError struct {
	Backend string
	Program string
	Timeout time.Duration
}

func (e *CompileTimeoutError) Error() string {
	return fmt.Sprintf("compiling %q on %s did not finish within %s", e.Program, e.Backend, e.Timeout)
}
func (e *CompileTimeoutError) Is(target error) bool {
	return target == ErrCompileTimeout || target == context.DeadlineExceeded
}

// InputError names an input and gives what was expected against what was got.
type InputError struct {
	Name     string // input name (or "#i" for a positional input)
	Problem  string // "dtype", "shape", "name", "count", "value"
	Expected string
	Got      string
}

func (e *InputError) Error() string {
	if e.Problem == "name" && e.Expected == "" {
		return fmt.Sprintf("invalid input %q: %s", e.Name, e.Got)
	}
	return fmt.Sprintf("invalid input %q: %s: expected %s, got %s", e.Name, e.Problem, e.Expected, e.Got)
}
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// KindOf classifies any error: the Kind of the first typed error, *Error or
// sentinel found in its chain, Canceled and DeadlineExceeded for context
// errors, else Unknown.
func KindOf(err error) Kind {
	if err == nil {
		return Unknown
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	for _, s := range []error{ErrUnavailable, ErrUnsupported, ErrOutOfMemory, ErrCompileTimeout, ErrInvalidInput, ErrClosed} {
		if errors.Is(err, s) {
			return s.(*sentinel).kind
		}
	}
	if errors.Is(err, ErrCompileFailed) {
		return Internal
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	}
	return Unknown
}

// Bytes formats a byte count in binary units for messages ("1.5 GiB").
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
