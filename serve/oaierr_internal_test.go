package serve

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm"
)

// Each class of error maps to its HTTP status and to OpenAI's type and a
// string code (the classes the HTTP tests cannot reach on a server
// without a checkpoint: full queues, budgets, deadlines, the engine's
// own failures, a mid-stream error event).
func TestOAIErrorFor(t *testing.T) {
	for _, c := range []struct {
		err       error
		status    int
		typ, code string
		param     string
	}{
		{paramErr("n", "only n=1 is supported"), 400, "invalid_request_error", "invalid_request", "n"},
		{&llm.RequestError{Problem: "prompt is empty"}, 400, "invalid_request_error", "invalid_request", ""},
		{&UnauthenticatedError{Reason: "missing"}, 401, "authentication_error", "invalid_api_key", ""},
		{&errs.Error{Kind: errs.NotFound, Op: "serve", Err: errors.New("no model")}, 404, "invalid_request_error", "model_not_found", ""},
		{&routeError{Method: "GET", Path: "/v1/x"}, 404, "invalid_request_error", "unknown_url", ""},
		{&routeError{Method: "GET", Path: "/v1/completions", Allow: "POST"}, 405, "invalid_request_error", "method_not_allowed", ""},
		{&TooLargeError{Limit: 1, Got: 2}, 413, "invalid_request_error", "request_too_large", ""},
		{&UnsupportedMediaError{Encoding: "br"}, 415, "invalid_request_error", "unsupported_media_type", ""},
		{context.Canceled, 499, "invalid_request_error", "client_closed_request", ""},
		{fmt.Errorf("generate: %w", llm.ErrQueueFull), 503, "server_error", "overloaded", ""},
		{&QueueFullError{Model: "m", Size: 1}, 503, "server_error", "overloaded", ""},
		{&OverBudgetError{Need: 2, InUse: 1, Max: 2}, 503, "server_error", "overloaded", ""},
		{&TimeoutError{Model: "m"}, 503, "server_error", "timeout", ""},
		{&errs.UnavailableError{Name: "server", Reason: "warming up"}, 503, "server_error", "unavailable", ""},
		{&errs.Error{Kind: errs.Internal, Op: "generate", Err: errors.New("device lost")}, 500, "server_error", "internal_error", ""},
		{&errs.Error{Kind: errs.Unimplemented, Err: errors.New("no")}, 501, "server_error", "not_implemented", ""},
	} {
		status, e := oaiErrorFor(c.err)
		if status != c.status || e.Type != c.typ || e.Code != c.code || e.Message != c.err.Error() {
			t.Errorf("%T %v: %d %+v, want %d, type %s, code %s", c.err, c.err, status, e, c.status, c.typ, c.code)
		}
		if (c.param == "") != (e.Param == nil) || c.param != "" && *e.Param != c.param {
			t.Errorf("%v: param %v, want %q", c.err, e.Param, c.param)
		}
	}
}
