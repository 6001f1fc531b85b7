package errs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Each typed error matches its own sentinel, and only that one (besides
// context.DeadlineExceeded for the compile timeout), through any wrapping;
// errors.As reaches the details; KindOf classifies.
func TestTypedErrorsMatchTheirSentinel(t *testing.T) {
	sentinels := []error{ErrUnavailable, ErrUnsupported, ErrOutOfMemory, ErrCompileFailed, ErrCompileTimeout, ErrInvalidInput, ErrClosed}
	tests := []struct {
		err  error
		want error
		kind Kind
		msg  string
	}{
		{&UnavailableError{Name: "tpu", Reason: "no device", Available: []string{"cpu"}}, ErrUnavailable, Unavailable, "tpu is unavailable: no device (available: cpu)"},
		{&UnsupportedError{Backend: "cpu", What: "dtype", Name: "Float16"}, ErrUnsupported, Unimplemented, "unsupported dtype Float16 on backend cpu"},
		{&OutOfMemoryError{Device: "tpu:0", Needed: 3 << 30, Available: 1 << 30}, ErrOutOfMemory, ResourceExhausted, "need 3.0 GiB, available 1.0 GiB"},
		{&CompileError{Backend: "xla-cpu", Program: "p", Err: errors.New("bad op")}, ErrCompileFailed, Internal, `compiling "p" on xla-cpu failed: bad op`},
		{&CompileTimeoutError{Backend: "tpu", Program: "p", Timeout: time.Second}, ErrCompileTimeout, DeadlineExceeded, "did not finish within 1s"},
		{&InputError{Name: "x", Problem: "dtype", Expected: "Float32", Got: "Int32"}, ErrInvalidInput, InvalidArgument, `invalid input "x": dtype: expected Float32, got Int32`},
		{&Error{Kind: FailedPrecondition, Op: "run", Err: ErrClosed}, ErrClosed, FailedPrecondition, "already closed"},
	}
	for _, tc := range tests {
		wrapped := fmt.Errorf("loading model: %w", tc.err)
		for _, s := range sentinels {
			if got, want := errors.Is(wrapped, s), s == tc.want; got != want {
				t.Errorf("errors.Is(%T, %v) = %v, want %v", tc.err, s, got, want)
			}
		}
		if KindOf(wrapped) != tc.kind {
			t.Errorf("KindOf(%T) = %s, want %s", tc.err, KindOf(wrapped), tc.kind)
		}
		if !strings.Contains(tc.err.Error(), tc.msg) {
			t.Errorf("%T message %q lacks %q", tc.err, tc.err, tc.msg)
		}
	}
	var oom *OutOfMemoryError
	if !errors.As(fmt.Errorf("x: %w", &CompileError{Err: &OutOfMemoryError{Needed: 5}}), &oom) || oom.Needed != 5 {
		t.Error("errors.As does not reach an OutOfMemoryError inside a CompileError")
	}
	if !errors.Is(&CompileTimeoutError{}, context.DeadlineExceeded) {
		t.Error("a compile timeout should match context.DeadlineExceeded")
	}
	if KindOf(context.Canceled) != Canceled || KindOf(errors.New("x")) != Unknown || KindOf(nil) != Unknown {
		t.Error("KindOf of context and plain errors")
	}
	// An Internal *Error is not a compile failure, a DeadlineExceeded one
	// not a compile timeout.
	if errors.Is(&Error{Kind: Internal}, ErrCompileFailed) || errors.Is(&Error{Kind: DeadlineExceeded}, ErrCompileTimeout) {
		t.Error("*Error matched a compile sentinel")
	}
}

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {80 << 30, "80.0 GiB"}} {
		if got := Bytes(tc.n); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
