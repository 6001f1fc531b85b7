// Package sft reads supervised fine-tuning data, a JSONL file in one of
// TRL's three dataset shapes, into token ids with per-token target flags,
// and lays rows out as the padded batches a causal-LM trainer steps on.
//
// The rules (issue 27; TRL's shapes are described at
// https://huggingface.co/docs/trl/dataset_formats):
//
//   - {"text": T}: ids are tok.Encode(T) with the tokenizer's own special
//     tokens (a Llama-style post-processor adds BOS; no EOS is appended);
//     every token is a target.
//   - {"prompt": P, "completion": C}: ids are tok.Encode(P+C) (plain
//     concatenation); the targets are the tokens from index
//     len(tok.Encode(P)) on. The boundary is by count, as TRL's SFT trainer
//     places it, even where P's last token merges with C's first.
//   - {"messages": [...]}: ids are the chat template's rendering, encoded
//     without added special tokens (the template writes its own). The
//     targets of assistant message i are the tokens between the rendering
//     of messages[:i] with the generation prompt and the rendering of
//     messages[:i+1]: its content and what the template writes after it.
//     Both renderings must encode to token prefixes of the whole
//     conversation; a template for which they do not (its generation
//     prompt is not how it starts an assistant turn, or it rewrites earlier
//     turns) makes the row an error with a *PrefixError naming the message,
//     rather than a guessed boundary.
//
// Ids and targets are then cut to the first seqLen tokens. A row with no
// target after its first token (nothing predicts token 0, so it would add
// nothing to the loss) is an error.
//
// Every problem is a *LineError naming the file and line, matching
// errs.ErrInvalidInput; Read reports the first and stops. Lines end at
// '\n' (a '\r' before it is dropped); a blank line is an error, not a
// skipped row, because the Hugging Face datasets JSON loader would reject
// it too and a silently dropped row would shift every later step's batch.
package sft

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm/tokenizer"
)

// MaxLineBytes bounds one line of the file, so that a file without
// newlines is an error rather than an unbounded allocation.
const MaxLineBytes = 16 << 20

// Example is one tokenized row: Targets[i] says whether IDs[i] is a token
// the model is trained to predict. Both are cut to the reader's seqLen.
type Example struct {
	IDs     []int
	Targets []bool
}

// LineError is a problem with one line of a data file (Line is 1-based;
// 0 means the file as a whole). It matches errs.ErrInvalidInput.
type LineError struct {
	File    string
	Line    int
	Problem string
	Err     error // the underlying cause, if any (a *PrefixError, a tokenizer error)
}

func (e *LineError) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	s := "sft: " + where + ": " + e.Problem
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *LineError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, errs.ErrInvalidInput) true.
func (e *LineError) Is(target error) bool { return target == errs.ErrInvalidInput }

// PrefixError says that, for assistant message Message of a conversation,
// the chat template's rendering of the turns before it with the
// generation prompt (Boundary "start") or of the turns up to it
// (Boundary "end") does not encode to a prefix of the whole
// conversation's tokens, so its target span is not defined.
type PrefixError struct {
	Message  int
	Boundary string
}

func (e *PrefixError) Error() string {
	what := "messages[:i] rendered with add_generation_prompt=True"
	if e.Boundary == "end" {
		what = "messages[:i+1] rendered"
	}
	return fmt.Sprintf("messages[%d]: the chat template's %s (i=%d) is not a token prefix of the whole conversation, so the message's targets are undefined (the template's generation prompt must be how it starts an assistant turn; pick another template)",
		e.Message, what, e.Message)
}

// Read tokenizes every row of the JSONL file at path with tok and cuts
// each to seqLen tokens. The file is read line by line; the first bad
// line stops it with a *LineError.
func Read(ctx context.Context, path string, tok *tokenizer.Tokenizer, seqLen int) ([]Example, error) {
	if seqLen < 2 {
		return nil, fmt.Errorf("sft: seq-len %d: expected at least 2 (position t predicts token t+1): %w", seqLen, errs.ErrInvalidInput)
	}
	if tok == nil {
		return nil, fmt.Errorf("sft: no tokenizer: %w", errs.ErrInvalidInput)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return read(ctx, f, path, tok, seqLen)
}

// read is Read on an open file; path only names it in errors.
func read(ctx context.Context, r io.Reader, path string, tok *tokenizer.Tokenizer, seqLen int) ([]Example, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	var out []Example
	line := 0
	for sc.Scan() {
		line++
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ex, err := encodeLine(tok, sc.Bytes(), seqLen)
		if err != nil {
			err.File, err.Line = path, line
			return nil, err
		}
		out = append(out, ex)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &LineError{File: path, Line: line + 1, Problem: fmt.Sprintf("line longer than %d bytes", MaxLineBytes)}
		}
		return nil, fmt.Errorf("sft: reading %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, &LineError{File: path, Problem: "the file has no rows"}
	}
	return out, nil
}

// encodeLine parses and tokenizes one line; the caller fills in the
// error's file and line.
func encodeLine(tok *tokenizer.Tokenizer, b []byte, seqLen int) (Example, *LineError) {
	if len(bytes.TrimSpace(b)) == 0 {
		return Example{}, &LineError{Problem: "blank line (every line must be one JSON object)"}
	}
	if !utf8.Valid(b) {
		return Example{}, &LineError{Problem: "not valid UTF-8"}
	}
	obj, lerr := parseObject(b)
	if lerr != nil {
		return Example{}, lerr
	}
	ex, lerr := encodeRow(tok, obj)
	if lerr != nil {
		return Example{}, lerr
	}
	if len(ex.IDs) > seqLen {
		ex.IDs, ex.Targets = ex.IDs[:seqLen:seqLen], ex.Targets[:seqLen:seqLen]
	}
	for _, t := range ex.Targets[min(1, len(ex.Targets)):] {
		if t {
			return ex, nil
		}
	}
	return Example{}, &LineError{Problem: fmt.Sprintf("no target token after the first within seq-len %d (the row adds nothing to the loss)", seqLen)}
}
