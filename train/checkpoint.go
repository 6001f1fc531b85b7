package train

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Checkpoint is the state a training run resumes from: the number of
// steps done, the data position after them, what the run was (digests of
// the model and of the configuration, and the configuration's fields so a
// mismatch can be named), and the tensors (weights, optimizer state, ...)
// by name.
type Checkpoint struct {
	Step         int
	Position     Position
	ModelDigest  string
	ConfigDigest string
	Config       map[string]string
	Tensors      map[string]*ir.Tensor
}

// Checkpoint file layout (.tbck), all integers little-endian:
//
//	magic      8 bytes  "TBCKPT\x00\x01" (format version 1)
//	headerLen  8 bytes  length of the JSON header
//	header     JSON     ckptHeader: step, position, digests, config, and
//	                    per tensor name, dtype, dims, byte offset and length
//	data       the tensors' bytes (row-major, little-endian), in header
//	           order, back to back (offsets start at 0 after the header)
//	checksum   32 bytes SHA-256 of everything before it
const ckptMagic = "TBCKPT\x00\x01"

// maxCkptHeader bounds the JSON header (names, config) a reader accepts
// before looking at the file size.
const maxCkptHeader = 64 << 20

// ckptHeader is the JSON header of a checkpoint file.
type ckptHeader struct {
	Step         int               `json:"step"`
	Position     Position          `json:"position"`
	ModelDigest  string            `json:"model_digest"`
	ConfigDigest string            `json:"config_digest"`
	Config       map[string]string `json:"config"`
	Tensors      []ckptTensor      `json:"tensors"`
}

type ckptTensor struct {
	Name   string `json:"name"`
	DType  string `json:"dtype"`
	Dims   []int  `json:"dims"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// ckptName matches the files WriteCheckpoint creates; temporary files
// (".ckpt-*.tmp") never match.
var ckptName = regexp.MustCompile(`^ckpt-([0-9]{9,})\.tbck$`)

// CheckpointName is the file name of the checkpoint of step: it sorts by
// step (9 digits, more past 999,999,999).
func CheckpointName(step int) string { return fmt.Sprintf("ckpt-%09d.tbck", step) }

// WriteCheckpoint writes c to DIR/ckpt-STEP.tbck atomically (a temporary
// file in dir, fsync, rename, fsync of dir): a crash at any point leaves
// either the complete new checkpoint or none, and never damages older ones.
// It then deletes all but the newest keep checkpoints of c's run (the same
// model and configuration digests; keep 0 keeps all): another run's
// checkpoints, and files whose header does not read, are never touched. A
// file of another run (or an unreadable one) already at the new name is
// not replaced: that is an error. When ctx ends during the write, the
// temporary file is removed and ctx's error returned. It returns the new
// file's path. RunDir.Write does the same inside a run's directory.
func WriteCheckpoint(ctx context.Context, dir string, c *Checkpoint, keep int) (string, error) {
	return writeCheckpoint(ctx, dir, c, keep, &tempFile{})
}

// writeCheckpoint is WriteCheckpoint with the temporary file tracked by tf
// (RunDir.Abort removes it).
func writeCheckpoint(ctx context.Context, dir string, c *Checkpoint, keep int, tf *tempFile) (string, error) {
	if c == nil || c.Step < 0 {
		return "", invalid("checkpoint: nil or negative step")
	}
	if keep < 0 {
		return "", invalid("checkpoint: keep %d: want >= 0 (0 keeps all)", keep)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("train: checkpoint directory: %w", err)
	}
	final := filepath.Join(dir, CheckpointName(c.Step))
	if err := checkReplaceable(final, c); err != nil {
		return "", err
	}
	tmp, err := tf.create(dir, ".ckpt-*.tmp")
	if err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			tf.discard(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(ctxWriter{ctx, tmp, tf}, 1<<20)
	if err := encodeCheckpoint(bw, c); err != nil {
		return "", fmt.Errorf("train: checkpoint %s: %w", final, err)
	}
	if err := bw.Flush(); err != nil {
		return "", fmt.Errorf("train: checkpoint %s: %w", final, err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("train: checkpoint %s: fsync: %w", final, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("train: checkpoint %s: %w", final, err)
	}
	if err := tf.publish(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("train: checkpoint: %w", err)
	}
	ok = true
	if err := syncDir(dir); err != nil {
		return final, fmt.Errorf("train: checkpoint %s: fsync of the directory: %w", final, err)
	}
	if err := pruneCheckpoints(dir, keep, c.ModelDigest, c.ConfigDigest); err != nil {
		return final, err
	}
	return final, nil
}

// checkReplaceable refuses to write c over an existing file at path that
// is not a checkpoint of c's run (its header names other digests, or does
// not read).
func checkReplaceable(path string, c *Checkpoint) error {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	h, err := readCheckpointHeader(path)
	if err != nil {
		return invalid("checkpoint %s exists and its header does not read (%v): not replaced; move it away or start a new run", path, err)
	}
	if h.ModelDigest != c.ModelDigest || h.ConfigDigest != c.ConfigDigest {
		return invalid("checkpoint %s belongs to another run (model %s, configuration %s; this run: model %s, configuration %s): not replaced",
			path, short(h.ModelDigest), short(h.ConfigDigest), short(c.ModelDigest), short(c.ConfigDigest))
	}
	return nil
}

// ctxWriter writes to w in pieces of at most 1 MiB and stops with ctx's
// error once ctx ends, or with ErrAborted once tf is aborted.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
	tf  *tempFile
}

func (c ctxWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if err := c.ctx.Err(); err != nil {
			return n, err
		}
		if c.tf.isAborted() {
			return n, ErrAborted
		}
		k, err := c.w.Write(p[:min(len(p), 1<<20)])
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// encodeCheckpoint writes the whole checkpoint file to w.
func encodeCheckpoint(w io.Writer, c *Checkpoint) error {
	h := ckptHeader{Step: c.Step, Position: c.Position, ModelDigest: c.ModelDigest,
		ConfigDigest: c.ConfigDigest, Config: c.Config}
	names := make([]string, 0, len(c.Tensors))
	for name := range c.Tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	var off int64
	for _, name := range names {
		t := c.Tensors[name]
		if t == nil {
			return fmt.Errorf("tensor %q is nil", name)
		}
		dt := t.DType()
		if _, ok := dtypeByName[dt.String()]; !ok {
			return fmt.Errorf("tensor %q: dtype %s cannot be checkpointed", name, dt)
		}
		length := int64(t.Shape().Size()) * int64(dt.Size())
		h.Tensors = append(h.Tensors, ckptTensor{Name: name, DType: dt.String(), Dims: t.Shape().Dimensions, Offset: off, Length: length})
		off += length
	}
	hj, err := json.Marshal(h)
	if err != nil {
		return err
	}
	sum := sha256.New()
	mw := io.MultiWriter(w, sum)
	var pre [16]byte
	copy(pre[:8], ckptMagic)
	binary.LittleEndian.PutUint64(pre[8:], uint64(len(hj)))
	if _, err := mw.Write(pre[:]); err != nil {
		return err
	}
	if _, err := mw.Write(hj); err != nil {
		return err
	}
	for _, name := range names {
		if err := writeTensorBytes(mw, c.Tensors[name]); err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
	}
	_, err = w.Write(sum.Sum(nil))
	return err
}

// writeTensorBytes writes t's bytes (row-major, little-endian) to w
// without copying them first.
func writeTensorBytes(w io.Writer, t *ir.Tensor) (err error) {
	if t.Shape().Size() == 0 {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading tensor bytes: %v", r)
		}
	}()
	var werr error
	if err := t.ConstBytes(func(data []byte) { _, werr = w.Write(data) }); err != nil {
		return err
	}
	return werr
}

// dtypeByName maps the dtype names a checkpoint records (ir.DType.String)
// back to dtypes.
var dtypeByName = func() map[string]ir.DType {
	m := map[string]ir.DType{}
	for _, dt := range []ir.DType{ir.Bool, ir.Int8, ir.Int16, ir.Int32, ir.Int64, ir.Uint8, ir.Uint16, ir.Uint32,
		ir.Uint64, ir.Float16, ir.BFloat16, ir.Float32, ir.Float64, ir.Complex64, ir.Complex128} {
		m[dt.String()] = dt
	}
	return m
}()

// listCheckpoints returns the checkpoint files of dir by step, oldest
// first.
func listCheckpoints(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type ck struct {
		step uint64
		name string
	}
	var cks []ck
	for _, e := range entries {
		m := ckptName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		step, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			continue // more digits than any step: not ours
		}
		cks = append(cks, ck{step, e.Name()})
	}
	sort.Slice(cks, func(i, j int) bool { return cks[i].step < cks[j].step })
	out := make([]string, len(cks))
	for i, c := range cks {
		out[i] = filepath.Join(dir, c.name)
	}
	return out, nil
}

// pruneCheckpoints deletes all but the newest keep checkpoints (0 keeps
// all) of the run with these digests; files of other runs, and files whose
// header does not read, are left alone.
func pruneCheckpoints(dir string, keep int, modelDigest, configDigest string) error {
	if keep == 0 {
		return nil
	}
	files, err := listCheckpoints(dir)
	if err != nil {
		return fmt.Errorf("train: pruning checkpoints: %w", err)
	}
	var own []string
	for _, f := range files {
		if h, err := readCheckpointHeader(f); err == nil && h.ModelDigest == modelDigest && h.ConfigDigest == configDigest {
			own = append(own, f)
		}
	}
	for len(own) > keep {
		if err := os.Remove(own[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("train: pruning checkpoints: %w", err)
		}
		own = own[1:]
	}
	return nil
}

// LatestCheckpoint returns the path of the newest checkpoint file in dir
// (the highest step, whichever run wrote it; temporary files of an
// interrupted write are ignored). ok is false when dir holds none or does
// not exist. RunDir.Resume picks the newest readable checkpoint of one run.
func LatestCheckpoint(dir string) (path string, ok bool, err error) {
	files, err := listCheckpoints(dir)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("train: checkpoint directory: %w", err)
	}
	if len(files) == 0 {
		return "", false, nil
	}
	return files[len(files)-1], true, nil
}

// ReadCheckpoint reads and verifies a checkpoint file. A truncated or
// corrupted file (bad magic, header, sizes, or checksum) gives an error
// wrapping errs.ErrInvalidInput; every allocation is bounded by the file's
// size, which the header's sizes are checked against before anything is
// allocated for them.
func ReadCheckpoint(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint: %w", err)
	}
	c, err := decodeCheckpoint(bufio.NewReaderSize(f, 1<<20), st.Size())
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w", path, asInput(err))
	}
	return c, nil
}

// decodeCheckpoint reads a checkpoint file of size bytes from r.
func decodeCheckpoint(r io.Reader, size int64) (*Checkpoint, error) {
	sum := sha256.New()
	tr := io.TeeReader(r, sum)
	h, hlen, err := decodeHeader(tr, size)
	if err != nil {
		return nil, err
	}
	if err := checkLayout(h, size-ckptFixed-hlen); err != nil {
		return nil, err
	}
	c := &Checkpoint{Step: h.Step, Position: h.Position, ModelDigest: h.ModelDigest, ConfigDigest: h.ConfigDigest,
		Config: h.Config, Tensors: map[string]*ir.Tensor{}}
	for _, t := range h.Tensors {
		tensor, err := readCkptTensor(tr, t)
		if err != nil {
			return nil, err
		}
		c.Tensors[t.Name] = tensor
	}
	return c, verifySum(r, sum)
}

// ckptFixed is the bytes of a checkpoint file besides its header and
// data: magic, header length, checksum.
const ckptFixed = 16 + sha256.Size

// decodeHeader reads the magic, the header length and the JSON header of a
// checkpoint file of size bytes, and returns the header and its length.
func decodeHeader(r io.Reader, size int64) (*ckptHeader, int64, error) {
	if size < ckptFixed {
		return nil, 0, fmt.Errorf("file of %d bytes is shorter than the %d bytes of an empty checkpoint (truncated?)", size, ckptFixed)
	}
	var pre [16]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, 0, err
	}
	if string(pre[:8]) != ckptMagic {
		return nil, 0, fmt.Errorf("not a tensorbridge checkpoint (magic %q, want %q)", pre[:8], ckptMagic)
	}
	hlen := binary.LittleEndian.Uint64(pre[8:])
	if hlen > maxCkptHeader || int64(hlen) > size-ckptFixed {
		return nil, 0, fmt.Errorf("header length %d does not fit the %d-byte file (truncated or corrupt)", hlen, size)
	}
	hj := make([]byte, hlen)
	if _, err := io.ReadFull(r, hj); err != nil {
		return nil, 0, fmt.Errorf("header: %w", unexpectedEOF(err))
	}
	var h ckptHeader
	dec := json.NewDecoder(bytes.NewReader(hj))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, 0, fmt.Errorf("header: %w (corrupt)", err)
	}
	return &h, int64(hlen), nil
}

// readCheckpointHeader reads only the header of the checkpoint file at
// path (which run wrote it, its step): the data and checksum are not
// checked.
func readCheckpointHeader(path string) (*ckptHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	h, _, err := decodeHeader(bufio.NewReader(f), st.Size())
	return h, err
}

// short is the first 12 characters of a digest, for messages.
func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12] + "…"
	}
	if digest == "" {
		return `""`
	}
	return digest
}

// checkLayout checks the header's tensors against the data bytes the file
// holds: known dtypes, sizes that match the dims, back-to-back offsets
// whose total is exactly dataBytes, unique names.
func checkLayout(h *ckptHeader, dataBytes int64) error {
	if h.Step < 0 {
		return fmt.Errorf("negative step %d", h.Step)
	}
	var off int64
	seen := map[string]bool{}
	for _, t := range h.Tensors {
		dt, ok := dtypeByName[t.DType]
		if !ok {
			return fmt.Errorf("tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		if seen[t.Name] {
			return fmt.Errorf("tensor %q is listed twice", t.Name)
		}
		seen[t.Name] = true
		n := int64(dt.Size())
		for _, d := range t.Dims {
			if d < 0 || (d > 0 && n > dataBytes/int64(d)) {
				return fmt.Errorf("tensor %q: dims %v of %s do not fit the %d data bytes of the file", t.Name, t.Dims, t.DType, dataBytes)
			}
			n *= int64(d)
		}
		if t.Length != n || t.Offset != off || n > dataBytes-off {
			return fmt.Errorf("tensor %q: offset %d length %d (dims %v of %s need %d at offset %d) in %d data bytes: corrupt or truncated",
				t.Name, t.Offset, t.Length, t.Dims, t.DType, n, off, dataBytes)
		}
		off += n
	}
	if off != dataBytes {
		return fmt.Errorf("the tensors hold %d bytes but the file has %d data bytes: truncated or trailing bytes", off, dataBytes)
	}
	return nil
}

// readCkptTensor reads one tensor's bytes (already checked against the
// file size).
func readCkptTensor(r io.Reader, t ckptTensor) (*ir.Tensor, error) {
	if t.Length == 0 {
		return ir.TensorFromBytes(dtypeByName[t.DType], t.Dims, nil)
	}
	tensor, err := ir.NewHostTensor(dtypeByName[t.DType], t.Dims...)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	var rerr error
	if err := tensor.MutableBytes(func(raw []byte) { _, rerr = io.ReadFull(r, raw) }); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if rerr != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, unexpectedEOF(rerr))
	}
	return tensor, nil
}

// verifySum reads the trailing checksum and compares it with sum.
func verifySum(r io.Reader, sum hash.Hash) error {
	var want [sha256.Size]byte
	if _, err := io.ReadFull(r, want[:]); err != nil {
		return fmt.Errorf("checksum: %w", unexpectedEOF(err))
	}
	if got := sum.Sum(nil); !bytes.Equal(got, want[:]) {
		return fmt.Errorf("checksum mismatch: the file is corrupt (SHA-256 %x, recorded %x)", got, want)
	}
	return nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// MismatchError says why a checkpoint does not belong to this run: another
// model, or a configuration whose listed fields differ. It wraps
// errs.ErrInvalidInput.
type MismatchError struct {
	Model  bool     // the model digest differs
	Fields []string // "name: checkpoint != run" per differing setting (Diff)
	// ModelDigests: the checkpoint's and the run's, when Model.
	ModelDigests [2]string
}

func (e *MismatchError) Error() string {
	var parts []string
	if e.Model {
		parts = append(parts, fmt.Sprintf("it was written for another model (digest %s, this model %s)", e.ModelDigests[0], e.ModelDigests[1]))
	}
	if len(e.Fields) > 0 {
		parts = append(parts, "the training configuration differs (checkpoint != this run): "+strings.Join(e.Fields, "; "))
	}
	return "train: checkpoint does not match this run: " + strings.Join(parts, ", and ")
}

// Unwrap makes errors.Is(err, errs.ErrInvalidInput) hold.
func (e *MismatchError) Unwrap() error { return errs.ErrInvalidInput }

// Check returns a *MismatchError when the checkpoint was written for
// another model or another configuration (compared field by field with
// Diff, so the error names each setting that differs), nil otherwise.
func (c *Checkpoint) Check(modelDigest string, cfg Config) error {
	e := &MismatchError{Model: c.ModelDigest != modelDigest, ModelDigests: [2]string{c.ModelDigest, modelDigest}}
	e.Fields = Diff(c.Config, cfg.Fields())
	if len(e.Fields) == 0 && c.ConfigDigest != cfg.Digest() {
		e.Fields = []string{fmt.Sprintf("config digest: %q != %q", c.ConfigDigest, cfg.Digest())}
	}
	if e.Model || len(e.Fields) > 0 {
		return e
	}
	return nil
}
