package llm

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tensorbridge/tensorbridge/errs"
)

// The pooling of a checkpoint's embeddings, from its sentence-transformers
// configuration (https://sbert.net/docs/package_reference/sentence_transformer/models.html):
// modules.json lists the modules the model applies in order, and the
// Pooling module's config.json says which pooling it does.

// PoolingError says a checkpoint's sentence-transformers configuration
// (modules.json, the Pooling module's config.json) or a pooling setting
// cannot be used: the file, the field, its value and what was expected.
// It matches Err: errs.ErrInvalidInput for a malformed value,
// errs.ErrUnsupported for a valid one this package does not implement.
// File is empty for a setting (ParsePooling).
type PoolingError struct {
	File, Field, Value, Expected string
	Err                          error
}

func (e *PoolingError) Error() string {
	s := fmt.Sprintf("%s = %s: expected %s", e.Field, e.Value, e.Expected)
	if e.File != "" {
		s = e.File + ": " + s
	}
	return s
}

// Unwrap returns the sentinel.
func (e *PoolingError) Unwrap() error { return e.Err }

// maxSTConfigBytes bounds the sentence-transformers files read: a few
// hundred bytes each in released models.
const maxSTConfigBytes = 1 << 20

// ResolvePooling is the pooling of checkpoint dir's embeddings: override
// when set; else what its sentence-transformers configuration says
// (CheckpointPooling); else the last token's.
func ResolvePooling(dir string, override Pooling) (Pooling, error) {
	if override != "" {
		return ParsePooling(string(override))
	}
	return CheckpointPooling(dir)
}

// CheckpointPooling reads dir/modules.json and, when it lists a
// sentence_transformers Pooling module, that module's config.json. No
// modules.json: PoolLast. Modules other than Transformer, Pooling and
// Normalize (a Dense projection, say) would change the embedding, so they
// are refused (errs.ErrUnsupported), as are pooling modes other than
// lasttoken, mean_tokens and cls_token.
func CheckpointPooling(dir string) (Pooling, error) {
	path := filepath.Join(dir, "modules.json")
	raw, err := readSmall(path)
	if os.IsNotExist(err) {
		return PoolLast, nil
	}
	if err != nil {
		return "", err
	}
	sub, found, err := parseModules(path, raw)
	if err != nil {
		return "", err
	}
	if !found {
		return PoolLast, nil
	}
	cfgPath := filepath.Join(dir, sub, "config.json")
	raw, err = readSmall(cfgPath)
	if err != nil {
		return "", err
	}
	return parsePoolingConfig(cfgPath, raw)
}

// readSmall reads a file of at most maxSTConfigBytes.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxSTConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxSTConfigBytes {
		return nil, &PoolingError{File: path, Field: "size", Value: fmt.Sprintf("over %d bytes", maxSTConfigBytes),
			Expected: "a small JSON file", Err: errs.ErrInvalidInput}
	}
	return raw, nil
}

// sentence-transformers' module types (their modules.json "type").
const (
	stTransformer = "sentence_transformers.models.Transformer"
	stPooling     = "sentence_transformers.models.Pooling"
	stNormalize   = "sentence_transformers.models.Normalize"
)

// parseModules reads modules.json (path names it in errors) and returns
// the Pooling module's directory, relative to the checkpoint, and whether
// there is one.
func parseModules(path string, raw []byte) (dir string, found bool, err error) {
	var mods []struct {
		Path string `json:"path"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &mods); err != nil {
		return "", false, &PoolingError{File: path, Field: "(document)", Value: clip(err.Error()), Expected: "a JSON list of {path, type}", Err: errs.ErrInvalidInput}
	}
	for i, m := range mods {
		field := fmt.Sprintf("[%d].type", i)
		switch m.Type {
		case stTransformer, stNormalize:
		case stPooling:
			if found {
				return "", false, &PoolingError{File: path, Field: field, Value: m.Type, Expected: "one Pooling module", Err: errs.ErrUnsupported}
			}
			if !filepath.IsLocal(m.Path) {
				return "", false, &PoolingError{File: path, Field: fmt.Sprintf("[%d].path", i), Value: clip(m.Path),
					Expected: "a directory inside the checkpoint", Err: errs.ErrInvalidInput}
			}
			dir, found = m.Path, true
		default:
			return "", false, &PoolingError{File: path, Field: field, Value: clip(m.Type),
				Expected: "Transformer, Pooling and Normalize modules only (another module changes the embedding)", Err: errs.ErrUnsupported}
		}
	}
	return dir, found, nil
}

// poolingModes are the Pooling config's mode flags and what each means
// here ("" for a mode not implemented).
var poolingModes = []struct {
	key  string
	pool Pooling
}{
	{"pooling_mode_lasttoken", PoolLast},
	{"pooling_mode_mean_tokens", PoolMean},
	{"pooling_mode_cls_token", PoolCLS},
	{"pooling_mode_max_tokens", ""},
	{"pooling_mode_mean_sqrt_len_tokens", ""},
	{"pooling_mode_weightedmean_tokens", ""},
}

// parsePoolingConfig reads a Pooling module's config.json: exactly one
// mode flag set, one of those implemented.
func parsePoolingConfig(path string, raw []byte) (Pooling, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return "", &PoolingError{File: path, Field: "(document)", Value: clip(err.Error()), Expected: "a JSON object", Err: errs.ErrInvalidInput}
	}
	var set []int
	for i, m := range poolingModes {
		v, ok := cfg[m.key]
		if !ok {
			continue
		}
		var on bool
		if err := json.Unmarshal(v, &on); err != nil {
			return "", &PoolingError{File: path, Field: m.key, Value: clip(string(v)), Expected: "true or false", Err: errs.ErrInvalidInput}
		}
		if on {
			set = append(set, i)
		}
	}
	if ip, ok := cfg["include_prompt"]; ok && string(ip) != "true" {
		return "", &PoolingError{File: path, Field: "include_prompt", Value: clip(string(ip)), Expected: "true (pooling over the whole prompt)", Err: errs.ErrUnsupported}
	}
	if len(set) != 1 {
		return "", &PoolingError{File: path, Field: "pooling_mode_*", Value: fmt.Sprintf("%d modes set", len(set)),
			Expected: "exactly one of pooling_mode_lasttoken, pooling_mode_mean_tokens, pooling_mode_cls_token", Err: errs.ErrUnsupported}
	}
	m := poolingModes[set[0]]
	if m.pool == "" {
		return "", &PoolingError{File: path, Field: m.key, Value: "true",
			Expected: "pooling_mode_lasttoken, pooling_mode_mean_tokens or pooling_mode_cls_token", Err: errs.ErrUnsupported}
	}
	return m.pool, nil
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
