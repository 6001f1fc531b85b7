package tokenizer

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/errs"
)

// UnsupportedError says tokenizer.json (or tokenizer_config.json) uses a
// component or setting this package does not implement. Loading fails with it
// rather than tokenising differently from Hugging Face. It matches
// errs.ErrUnsupported with errors.Is.
type UnsupportedError struct {
	Component string // "model", "normalizer", "pre_tokenizer", "post_processor", "decoder", "chat_template", ...
	Type      string // the component's "type" value, or the setting's name
	Detail    string // what about it is not supported
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("tokenizer: unsupported %s %q", e.Component, e.Type)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes errors.Is(err, errs.ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == errs.ErrUnsupported }

// FormatError says a tokenizer file is malformed: not JSON, a missing or
// ill-typed field, an inconsistent vocabulary. It matches errs.ErrInvalidInput
// with errors.Is.
type FormatError struct {
	File   string // "tokenizer.json" or "tokenizer_config.json"
	Field  string // where in the file, e.g. "model.merges[3]"
	Detail string
	Err    error // underlying cause, if any
}

func (e *FormatError) Error() string {
	s := "tokenizer: " + e.File
	if e.Field != "" {
		s += ": " + e.Field
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *FormatError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, errs.ErrInvalidInput) true.
func (e *FormatError) Is(target error) bool { return target == errs.ErrInvalidInput }

func unsupported(component, typ, detail string) error {
	return &UnsupportedError{Component: component, Type: typ, Detail: detail}
}

func badJSON(field, format string, args ...any) error {
	return &FormatError{File: "tokenizer.json", Field: field, Detail: fmt.Sprintf(format, args...)}
}
