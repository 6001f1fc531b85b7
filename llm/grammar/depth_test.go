package grammar

import (
	"errors"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// TestSchemaDepthLimit: a schema of MaxSchemaDepth nested subschemas (the
// root included) compiles; one more is refused.
func TestSchemaDepthLimit(t *testing.T) {
	nested := func(levels int) []byte {
		s := `{"type":"integer"}`
		for range levels - 1 {
			s = `{"type":"array","items":` + s + `,"maxItems":1}`
		}
		return []byte(s)
	}
	if _, err := Compile(nested(MaxSchemaDepth)); err != nil {
		t.Errorf("%d levels: %v", MaxSchemaDepth, err)
	}
	_, err := Compile(nested(MaxSchemaDepth + 1))
	if !errors.Is(err, errs.ErrInvalidInput) || !strings.Contains(err.Error(), "deeper") {
		t.Errorf("%d levels: %v, want ErrInvalidInput about the depth", MaxSchemaDepth+1, err)
	}
}
