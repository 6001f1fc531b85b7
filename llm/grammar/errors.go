package grammar

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/errs"
)

// SchemaError says why a schema does not compile. It matches
// errs.ErrUnsupported (a keyword or form this package does not implement;
// Keyword names it) or errs.ErrInvalidInput (a schema that is malformed,
// unsatisfiable or over a limit) through errors.Is, so a server answers both
// with a 400 naming Keyword and Path.
type SchemaError struct {
	Path    string // JSON pointer of the subschema ("" for the root)
	Keyword string // the keyword at fault, if one is
	Problem string // what is wrong, with expected against got
	Err     error  // errs.ErrUnsupported or errs.ErrInvalidInput
}

func (e *SchemaError) Error() string {
	where := e.Path
	if where == "" {
		where = "/"
	}
	if e.Keyword != "" {
		return fmt.Sprintf("json schema %s: keyword %q: %s", where, e.Keyword, e.Problem)
	}
	return fmt.Sprintf("json schema %s: %s", where, e.Problem)
}

func (e *SchemaError) Unwrap() error { return e.Err }

func unsupportedKw(path, kw, format string, args ...any) error {
	return &SchemaError{Path: path, Keyword: kw, Problem: fmt.Sprintf(format, args...), Err: errs.ErrUnsupported}
}

func invalid(path, kw, format string, args ...any) error {
	return &SchemaError{Path: path, Keyword: kw, Problem: fmt.Sprintf(format, args...), Err: errs.ErrInvalidInput}
}
