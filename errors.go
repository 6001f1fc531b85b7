package tensorbridge

import (
	"github.com/tensorbridge/tensorbridge/driver"
	"github.com/tensorbridge/tensorbridge/errs"
)

// Re-exported from package errs, so users need import only this package.
type (
	// Kind classifies an error; see KindOf.
	Kind = errs.Kind
	// Error is a classified error without a dedicated type.
	Error = errs.Error
	// UnavailableError says a backend or device cannot be used, and why.
	UnavailableError = errs.UnavailableError
	// UnsupportedError names an op or dtype a backend cannot run.
	UnsupportedError = errs.UnsupportedError
	// OutOfMemoryError gives bytes needed against bytes available.
	OutOfMemoryError = errs.OutOfMemoryError
	// CompileError carries the compiler's own message.
	CompileError = errs.CompileError
	// CompileTimeoutError says compilation passed its deadline.
	CompileTimeoutError = errs.CompileTimeoutError
	// InputError names an input and gives expected against got.
	InputError = errs.InputError
	// MemoryStats are a device's memory figures from its runtime.
	MemoryStats = driver.MemoryStats
)

// Sentinels, matched with errors.Is.
var (
	ErrUnavailable    = errs.ErrUnavailable
	ErrUnsupported    = errs.ErrUnsupported
	ErrOutOfMemory    = errs.ErrOutOfMemory
	ErrCompileFailed  = errs.ErrCompileFailed
	ErrCompileTimeout = errs.ErrCompileTimeout
	ErrInvalidInput   = errs.ErrInvalidInput
	ErrClosed         = errs.ErrClosed
)

// KindOf classifies any error returned by tensorbridge.
func KindOf(err error) Kind { return errs.KindOf(err) }

// Error kinds, re-exported.
const (
	Unknown            = errs.Unknown
	InvalidArgument    = errs.InvalidArgument
	NotFound           = errs.NotFound
	FailedPrecondition = errs.FailedPrecondition
	ResourceExhausted  = errs.ResourceExhausted
	DeadlineExceeded   = errs.DeadlineExceeded
	Canceled           = errs.Canceled
	Unimplemented      = errs.Unimplemented
	Unavailable        = errs.Unavailable
	Internal           = errs.Internal
)
