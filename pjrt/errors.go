package pjrt

import (
	"context"
	"errors"
	"fmt"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/capi"
)

// kindOf maps a PJRT canonical code to an errs.Kind.
func kindOf(c capi.Code) errs.Kind {
	switch c {
	case capi.CodeInvalidArgument, capi.CodeOutOfRange:
		return errs.InvalidArgument
	case capi.CodeNotFound:
		return errs.NotFound
	case capi.CodeFailedPrecondition, capi.CodeAborted:
		return errs.FailedPrecondition
	case capi.CodeResourceExhausted:
		return errs.ResourceExhausted
	case capi.CodeDeadlineExceeded:
		return errs.DeadlineExceeded
	case capi.CodeCancelled:
		return errs.Canceled
	case capi.CodeUnimplemented:
		return errs.Unimplemented
	case capi.CodeUnavailable:
		return errs.Unavailable
	case capi.CodeInternal, capi.CodeDataLoss:
		return errs.Internal
	}
	return errs.Unknown
}

// wrap classifies an error from the binding for operation op of backend
// name. RESOURCE_EXHAUSTED becomes an *errs.OutOfMemoryError (detail names
// what was being placed), context errors are returned as they are, and any
// other plugin error becomes an *errs.Error of the matching kind. The
// plugin's own message stays in the chain.
func wrap(name, op, device, detail string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var oom *errs.OutOfMemoryError
	if errors.As(err, &oom) {
		return err
	}
	code := capi.CodeOf(err)
	if code == capi.CodeResourceExhausted {
		d := op
		if detail != "" {
			d += ": " + detail
		}
		return &errs.OutOfMemoryError{Device: device, Detail: d, Err: err}
	}
	if errors.Is(err, capi.ErrClosed) {
		return &errs.Error{Kind: errs.FailedPrecondition, Backend: name, Op: op, Err: fmt.Errorf("%w: %w", errs.ErrClosed, err)}
	}
	var te *errs.Error
	if errors.As(err, &te) {
		return err
	}
	kind := kindOf(code)
	if code == capi.CodeUnknown {
		var pe *capi.Error
		if !errors.As(err, &pe) {
			kind = errs.Internal // a failure of this package, not of the plugin
		}
	}
	if detail != "" {
		err = fmt.Errorf("%s: %w", detail, err)
	}
	return &errs.Error{Kind: kind, Backend: name, Op: op, Err: err}
}
