package serve

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tensorbridge/tensorbridge/llm"
)

// Errors of the OpenAI-compatible API (every path under /v1): OpenAI's
// error object, {"error": {"message", "type", "param", "code"}}, as its
// API reference and its client libraries read it (code and param a string
// or null). code is always a string here, one of oaiCodes or
// "model_not_found", "unknown_url", "overloaded", "timeout".

// oaiError is OpenAI's error object.
type oaiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// oaiCodes are the error codes by HTTP status, where no finer one applies.
var oaiCodes = map[int]string{
	http.StatusBadRequest:            "invalid_request",
	http.StatusUnauthorized:          "invalid_api_key",
	http.StatusNotFound:              "not_found",
	http.StatusMethodNotAllowed:      "method_not_allowed",
	http.StatusRequestEntityTooLarge: "request_too_large",
	http.StatusUnsupportedMediaType:  "unsupported_media_type",
	499:                              "client_closed_request",
	http.StatusInternalServerError:   "internal_error",
	http.StatusNotImplemented:        "not_implemented",
	http.StatusServiceUnavailable:    "unavailable",
}

// routeError is a request no /v1 endpoint takes: an unknown path (404), or
// a known path with another method (405; Allow lists the one it takes).
type routeError struct {
	Method, Path, Allow string
}

func (e *routeError) Error() string {
	if e.Allow != "" {
		return fmt.Sprintf("%s %s: this endpoint takes %s", e.Method, e.Path, e.Allow)
	}
	return fmt.Sprintf("no such endpoint: %s %s (the OpenAI-compatible API has GET /v1/models, POST /v1/completions, POST /v1/chat/completions and POST /v1/embeddings)", e.Method, e.Path)
}

// oaiMethods are the /v1 endpoints and the method each takes.
var oaiMethods = map[string]string{"/v1/models": http.MethodGet, "/v1/completions": http.MethodPost, "/v1/chat/completions": http.MethodPost,
	"/v1/embeddings": http.MethodPost}

// oaiNoRoute answers a /v1 request no endpoint took.
func oaiNoRoute(w http.ResponseWriter, r *http.Request) {
	e := &routeError{Method: r.Method, Path: r.URL.Path, Allow: oaiMethods[r.URL.Path]}
	if e.Allow != "" {
		w.Header().Set("Allow", e.Allow)
	}
	writeOAIError(w, e)
}

// isOAIPath says whether path belongs to the OpenAI-compatible API.
func isOAIPath(path string) bool { return path == "/v1" || strings.HasPrefix(path, "/v1/") }

// oaiErrorFor is err as OpenAI's error object, with its HTTP status.
func oaiErrorFor(err error) (int, oaiError) {
	code := genStatus(err)
	e := oaiError{Message: err.Error(), Type: "invalid_request_error", Code: oaiCodes[code]}
	if e.Code == "" {
		e.Code = fmt.Sprintf("http_%d", code)
	}
	var pe *ParamError
	if errors.As(err, &pe) && pe.Param != "" {
		e.Param = &pe.Param
	}
	var re *routeError
	var qf *QueueFullError
	var ob *OverBudgetError
	var ol *OverloadError
	var te *TimeoutError
	switch {
	case code == http.StatusNotFound && errors.As(err, &re):
		e.Code = "unknown_url"
	case code == http.StatusNotFound:
		e.Code = "model_not_found"
	case code == http.StatusUnauthorized:
		e.Type = "authentication_error"
	case errors.As(err, &qf), errors.As(err, &ob), errors.As(err, &ol), errors.Is(err, llm.ErrQueueFull):
		e.Code = "overloaded"
	case errors.As(err, &te):
		e.Code = "timeout"
	}
	if code >= 500 {
		e.Type = "server_error"
	}
	return code, e
}

// writeOAIError answers err with OpenAI's error object; a 503 says when
// to retry. It returns the HTTP status.
func writeOAIError(w http.ResponseWriter, err error) int {
	code, e := oaiErrorFor(err)
	switch code {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		w.Header().Set("Retry-After", retryAfter(retryAfterSeconds(err)))
	case http.StatusRequestEntityTooLarge:
		w.Header().Set("Connection", "close") // the rest of the body is not read
	}
	writeJSON(w, code, map[string]oaiError{"error": e})
	return code
}
