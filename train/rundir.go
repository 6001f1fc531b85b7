package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
)

// A checkpoint directory belongs to one run: the run whose model and
// configuration (Config.Fields: loss, optimizer and hyper-parameters,
// schedule, freeze pattern, batch, gradient accumulation, shuffle seed,
// clipping, mesh and strategy, precision, data digest) its manifest
// records. OpenRunDir claims a directory for a run, or refuses it; the
// RunDir it returns holds an exclusive lock on the directory until Close,
// resumes from the run's own newest readable checkpoint, writes checkpoints
// and prunes only the run's own.

// RunManifestName is the file in a checkpoint directory that records the
// run owning it (a RunManifest, JSON, written atomically).
const RunManifestName = "tensorbridge-run.json"

// runLockName is the lock file a RunDir holds (flock) while the run is
// open; it holds the owner's process id.
const runLockName = ".tensorbridge-run.lock"

// manifestFormat is the RunManifest format this code writes and reads.
const manifestFormat = 1

// RunManifest records which run owns a checkpoint directory.
type RunManifest struct {
	Format int `json:"format"`
	// Digest is RunDigest(ModelDigest, ConfigDigest): what two runs must
	// share to be the same run.
	Digest       string            `json:"digest"`
	Model        string            `json:"model"` // the model's path when the run began (informational)
	ModelDigest  string            `json:"model_digest"`
	ConfigDigest string            `json:"config_digest"`
	Config       map[string]string `json:"config"` // Config.Fields, to name what differs
	Created      time.Time         `json:"created"`
}

// RunDigest identifies a run: the SHA-256 (hex) of its model digest and
// its configuration digest (Config.Digest).
func RunDigest(modelDigest, configDigest string) string {
	h := sha256.Sum256([]byte("model=" + modelDigest + "\nconfig=" + configDigest + "\n"))
	return hex.EncodeToString(h[:])
}

// describe names a run in one line.
func (m *RunManifest) describe() string {
	model := m.Model
	if model == "" {
		model = "(path not recorded)"
	}
	return fmt.Sprintf("model %s (digest %s), configuration %s", model, short(m.ModelDigest), short(m.ConfigDigest))
}

// RunDirReason says why OpenRunDir or RunDir.Resume refused a directory.
type RunDirReason string

const (
	// RunDirOtherRun: the directory's manifest or checkpoints belong to a
	// run of another model or configuration.
	RunDirOtherRun RunDirReason = "another run"
	// RunDirNotResumed: the directory holds this run's checkpoints and the
	// run does not resume, so starting at step 1 would overwrite them.
	RunDirNotResumed RunDirReason = "this run's checkpoints, not resumed"
	// RunDirInUse: another process (or RunDir) holds the directory's lock.
	RunDirInUse RunDirReason = "in use"
	// RunDirUnreadable: the manifest, or a checkpoint of a directory that
	// has none, does not read, so the owner cannot be told; or, resuming,
	// no checkpoint of the run reads.
	RunDirUnreadable RunDirReason = "unreadable"
)

// RunDirError is a checkpoint directory refused to a run. It wraps
// errs.ErrInvalidInput; Reason classifies it.
type RunDirError struct {
	Dir    string
	Reason RunDirReason
	// Theirs is the run the directory holds (RunDirOtherRun), Ours the
	// run refused; Differs lists what differs, "name: theirs != ours".
	Theirs, Ours *RunManifest
	Differs      []string
	// Detail says more: the step reached, the file that does not read, the
	// lock holder.
	Detail string
}

func (e *RunDirError) Error() string {
	aside := "give --force-new-run to start a new run there (the files found are moved into a superseded-* subdirectory, never deleted)"
	switch e.Reason {
	case RunDirOtherRun:
		return fmt.Sprintf("train: checkpoint directory %s belongs to another run: %s; this run: %s; differs (directory's != this run's): %s; use another --checkpoint-dir, or %s",
			e.Dir, e.Theirs.describe(), e.Ours.describe(), strings.Join(e.Differs, "; "), aside)
	case RunDirNotResumed:
		return fmt.Sprintf("train: checkpoint directory %s holds this run's checkpoints (%s): give --resume to continue from them (starting again at step 1 would overwrite them), or %s",
			e.Dir, e.Detail, aside)
	case RunDirInUse:
		return fmt.Sprintf("train: checkpoint directory %s is in use by another run (%s): two runs cannot share a directory", e.Dir, e.Detail)
	}
	return fmt.Sprintf("train: checkpoint directory %s: %s", e.Dir, e.Detail)
}

// Is makes errors.Is(err, errs.ErrInvalidInput) hold.
func (e *RunDirError) Is(target error) bool { return target == errs.ErrInvalidInput }

// ErrAborted is the error of a checkpoint write that RunDir.Abort stopped.
var ErrAborted = errors.New("train: checkpoint write aborted")

// RunDirOptions say how OpenRunDir treats what a directory already holds.
type RunDirOptions struct {
	// Resume: the run continues from the directory's checkpoints. Without
	// it, a directory holding this run's checkpoints is refused
	// (RunDirNotResumed).
	Resume bool
	// ForceNew starts the run in a directory that would be refused
	// (another run's, this run's without Resume, an unreadable manifest):
	// the manifest, checkpoints and temporary files found there are moved,
	// never deleted, into a new subdirectory superseded-TIME-DIGEST, and
	// the run starts at step 1. It contradicts Resume.
	ForceNew bool
	// Model is the model's path, for the manifest and messages.
	Model string
}

// RunDir is a checkpoint directory claimed by a run. Its methods are safe
// for concurrent use; Abort may be called while Write runs.
type RunDir struct {
	dir         string
	ours        RunManifest
	modelDigest string
	cfg         Config
	unlock      func()
	closeOnce   sync.Once
	tmp         tempFile
	// Moved is the subdirectory the files of the run found there were
	// moved into (ForceNew), "" when nothing was moved.
	Moved string
	// Removed lists the temporary files of interrupted writes of this run
	// that OpenRunDir deleted.
	Removed []string
}

// OpenRunDir claims dir (created if missing) for the run of the model with
// modelDigest trained with cfg: it takes the directory's lock (held until
// Close), and accepts a directory that is empty (no manifest, no
// checkpoints: other files are ignored), or that is this run's with
// opts.Resume; it refuses anything else with a *RunDirError unless
// opts.ForceNew. A directory whose checkpoints all belong to this run but
// which has no manifest (written before manifests existed) is adopted. The
// manifest is written before it returns.
func OpenRunDir(ctx context.Context, dir, modelDigest string, cfg Config, opts RunDirOptions) (*RunDir, error) {
	if opts.Resume && opts.ForceNew {
		return nil, invalid("resuming and forcing a new run contradict each other: --resume continues the directory's run, --force-new-run starts another")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("train: checkpoint directory: %w", err)
	}
	r := &RunDir{dir: dir, modelDigest: modelDigest, cfg: cfg, ours: RunManifest{Format: manifestFormat,
		Digest: RunDigest(modelDigest, cfg.Digest()), Model: opts.Model, ModelDigest: modelDigest,
		ConfigDigest: cfg.Digest(), Config: cfg.Fields(), Created: time.Now().UTC()}}
	unlock, holder, err := lockRunDir(filepath.Join(dir, runLockName))
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint directory %s: lock: %w", dir, err)
	}
	if unlock == nil {
		return nil, &RunDirError{Dir: dir, Reason: RunDirInUse, Ours: &r.ours, Detail: holder}
	}
	r.unlock = unlock
	if err := r.claim(ctx, opts); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// dirContents is what a checkpoint directory holds of runs' files.
type dirContents struct {
	manifest    *RunManifest
	manifestErr error
	ckpts       []string // checkpoint files, oldest first
	temps       []string // temporary files of interrupted writes
	asides      []string // checkpoints Resume set aside as unreadable
}

// survey lists what r's directory holds.
func (r *RunDir) survey() (*dirContents, error) {
	var c dirContents
	var err error
	if c.ckpts, err = listCheckpoints(r.dir); err != nil {
		return nil, fmt.Errorf("train: checkpoint directory: %w", err)
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint directory: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		switch {
		case (strings.HasPrefix(n, ".ckpt-") || strings.HasPrefix(n, ".tensorbridge-run-")) && strings.HasSuffix(n, ".tmp"):
			c.temps = append(c.temps, filepath.Join(r.dir, n))
		case strings.HasPrefix(n, "ckpt-") && strings.HasSuffix(n, ".tbck.unreadable"):
			c.asides = append(c.asides, filepath.Join(r.dir, n))
		}
	}
	c.manifest, c.manifestErr = readManifest(filepath.Join(r.dir, RunManifestName))
	return &c, nil
}

// claim decides whether the run may use the directory, moves the files
// found aside with ForceNew, and writes the manifest.
func (r *RunDir) claim(ctx context.Context, opts RunDirOptions) error {
	c, err := r.survey()
	if err != nil {
		return err
	}
	refusal := r.judge(c, opts.Resume)
	if refusal != nil && !opts.ForceNew {
		return refusal
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if refusal != nil {
		if err := r.moveAside(c); err != nil {
			return err
		}
		c.manifest = nil
	} else {
		for _, t := range c.temps {
			if err := os.Remove(t); err == nil {
				r.Removed = append(r.Removed, t)
			}
		}
	}
	if c.manifest != nil {
		r.ours.Created = c.manifest.Created
		return nil
	}
	return writeManifest(r.dir, &r.ours)
}

// judge returns the *RunDirError refusing the directory to this run, nil
// when the run may use it.
func (r *RunDir) judge(c *dirContents, resume bool) error {
	refuse := func(reason RunDirReason, theirs *RunManifest, detail string) error {
		e := &RunDirError{Dir: r.dir, Reason: reason, Ours: &r.ours, Theirs: theirs, Detail: detail}
		if theirs != nil {
			e.Differs = diffRuns(theirs, &r.ours)
		}
		return e
	}
	switch {
	case c.manifestErr != nil:
		return refuse(RunDirUnreadable, nil, fmt.Sprintf("its manifest %s does not read (%v), so which run owns the directory cannot be told", RunManifestName, c.manifestErr))
	case c.manifest != nil && c.manifest.Digest != r.ours.Digest:
		return refuse(RunDirOtherRun, c.manifest, "")
	case c.manifest == nil:
		for _, path := range c.ckpts {
			h, err := readCheckpointHeader(path)
			if err != nil {
				return refuse(RunDirUnreadable, nil, fmt.Sprintf("it has no %s and checkpoint %s does not read (%v), so which run owns the directory cannot be told", RunManifestName, filepath.Base(path), err))
			}
			if theirs := headerManifest(h); theirs.Digest != r.ours.Digest {
				return refuse(RunDirOtherRun, theirs, "")
			}
		}
	}
	if len(c.ckpts) > 0 && !resume {
		last := filepath.Base(c.ckpts[len(c.ckpts)-1])
		return refuse(RunDirNotResumed, nil, fmt.Sprintf("%d checkpoint(s), the newest %s", len(c.ckpts), last))
	}
	return nil
}

// headerManifest is the run a checkpoint header records.
func headerManifest(h *ckptHeader) *RunManifest {
	return &RunManifest{Format: manifestFormat, Digest: RunDigest(h.ModelDigest, h.ConfigDigest),
		ModelDigest: h.ModelDigest, ConfigDigest: h.ConfigDigest, Config: h.Config}
}

// diffRuns lists what differs between two runs: the model digest, then
// the configuration's fields (Diff).
func diffRuns(theirs, ours *RunManifest) []string {
	var out []string
	if theirs.ModelDigest != ours.ModelDigest {
		out = append(out, fmt.Sprintf("model digest: %q != %q", short(theirs.ModelDigest), short(ours.ModelDigest)))
	}
	out = append(out, Diff(theirs.Config, ours.Config)...)
	if len(out) == 0 {
		out = append(out, fmt.Sprintf("configuration digest: %q != %q", short(theirs.ConfigDigest), short(ours.ConfigDigest)))
	}
	return out
}

// moveAside moves the runs' files found in the directory into a new
// subdirectory superseded-TIME-DIGEST, the manifest last (a crash midway
// leaves the rest still owned by the manifest, for a second ForceNew).
func (r *RunDir) moveAside(c *dirContents) error {
	tag := "unknown"
	if c.manifest != nil {
		tag = c.manifest.Digest
	} else if len(c.ckpts) > 0 {
		if h, err := readCheckpointHeader(c.ckpts[0]); err == nil {
			tag = RunDigest(h.ModelDigest, h.ConfigDigest)
		}
	}
	tag = strings.TrimSuffix(short(tag), "…")
	base := "superseded-" + time.Now().UTC().Format("20060102T150405Z") + "-" + tag
	aside := filepath.Join(r.dir, base)
	for i := 2; ; i++ {
		err := os.Mkdir(aside, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("train: checkpoint directory: moving the old run aside: %w", err)
		}
		aside = filepath.Join(r.dir, base+"-"+strconv.Itoa(i))
	}
	files := append(append(append([]string(nil), c.ckpts...), c.asides...), c.temps...)
	if c.manifest != nil || c.manifestErr != nil {
		files = append(files, filepath.Join(r.dir, RunManifestName))
	}
	for _, f := range files {
		if err := os.Rename(f, filepath.Join(aside, filepath.Base(f))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("train: checkpoint directory: moving the old run aside: %w", err)
		}
	}
	if err := syncDir(aside); err != nil {
		return fmt.Errorf("train: checkpoint directory: %w", err)
	}
	if err := syncDir(r.dir); err != nil {
		return fmt.Errorf("train: checkpoint directory: %w", err)
	}
	r.Moved = aside
	return nil
}

// readManifest reads a RunManifest; (nil, nil) when there is none.
func readManifest(path string) (*RunManifest, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m RunManifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a run manifest: %v", err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("format %d, this tensorbridge reads format %d", m.Format, manifestFormat)
	}
	if m.Digest != RunDigest(m.ModelDigest, m.ConfigDigest) {
		return nil, fmt.Errorf("its digest %s does not match its model and configuration digests (edited or corrupt)", short(m.Digest))
	}
	return &m, nil
}

// writeManifest writes m to dir atomically (temporary file, fsync,
// rename, fsync of dir).
func writeManifest(dir string, m *RunManifest) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tensorbridge-run-*.tmp")
	if err != nil {
		return fmt.Errorf("train: run manifest: %w", err)
	}
	_, err = tmp.Write(append(raw, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, RunManifestName))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("train: run manifest: %w", err)
	}
	return syncDir(dir)
}

// Dir is the directory's path.
func (r *RunDir) Dir() string { return r.dir }

// Manifest is the run's manifest, as the directory records it.
func (r *RunDir) Manifest() RunManifest { return r.ours }

// Resume returns the run's newest checkpoint that reads and its path, nil
// when the directory holds none. A newer checkpoint that does not read
// (truncated, corrupt, unreadable) is renamed NAME.unreadable, kept, and
// warn says so and which checkpoint the run resumes from instead; one of
// another run is skipped, with a warning. When checkpoints exist but none
// of the run's reads, the error is a *RunDirError (RunDirUnreadable) and
// nothing is renamed.
func (r *RunDir) Resume(ctx context.Context, warn func(string)) (*Checkpoint, string, error) {
	files, err := listCheckpoints(r.dir)
	if err != nil {
		return nil, "", fmt.Errorf("train: checkpoint directory: %w", err)
	}
	var bad []string
	var why []string
	for i := len(files) - 1; i >= 0; i-- {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		c, err := ReadCheckpoint(files[i])
		if err != nil {
			bad, why = append(bad, files[i]), append(why, err.Error())
			continue
		}
		if err := c.Check(r.modelDigest, r.cfg); err != nil {
			warn(fmt.Sprintf("skipping %s: %v", files[i], err))
			continue
		}
		for j, b := range bad {
			msg := fmt.Sprintf("%s; resuming from the previous valid checkpoint %s (step %d)", why[j], files[i], c.Step)
			if err := os.Rename(b, b+".unreadable"); err == nil {
				msg += fmt.Sprintf("; the unreadable file is kept as %s", filepath.Base(b)+".unreadable")
			}
			warn(msg)
		}
		return c, files[i], nil
	}
	if len(bad) > 0 {
		return nil, "", &RunDirError{Dir: r.dir, Reason: RunDirUnreadable, Ours: &r.ours,
			Detail: "no checkpoint of this run reads: " + strings.Join(why, "; ")}
	}
	return nil, "", nil
}

// Write writes c (a checkpoint of this run) as WriteCheckpoint does and
// prunes all but the run's newest keep checkpoints (0 keeps all). After
// Abort it writes nothing and returns ErrAborted.
func (r *RunDir) Write(ctx context.Context, c *Checkpoint, keep int) (string, error) {
	if c != nil && (c.ModelDigest != r.modelDigest || c.ConfigDigest != r.ours.ConfigDigest) {
		return "", invalid("checkpoint of another run (model %s, configuration %s) written to the directory of run %s",
			short(c.ModelDigest), short(c.ConfigDigest), r.ours.describe())
	}
	return writeCheckpoint(ctx, r.dir, c, keep, &r.tmp)
}

// Abort removes the temporary file of a checkpoint being written, if any,
// and makes every later Write fail with ErrAborted: what a process does
// before it exits at once (a second SIGINT or SIGTERM), so that no
// checkpoint-sized temporary file is left behind. It may be called from
// any goroutine, while Write runs.
func (r *RunDir) Abort() { r.tmp.abort() }

// Close releases the directory's lock. It is idempotent.
func (r *RunDir) Close() error {
	r.closeOnce.Do(func() {
		if r.unlock != nil {
			r.unlock()
		}
	})
	return nil
}

// tempFile tracks the temporary file of a checkpoint being written, so
// that abort, from another goroutine, can remove it and stop any other
// from being created or renamed into place.
type tempFile struct {
	mu      sync.Mutex
	path    string
	aborted bool
}

// create makes a temporary file in dir, unless aborted.
func (t *tempFile) create(dir, pattern string) (*os.File, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.aborted {
		return nil, ErrAborted
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	t.path = f.Name()
	return f, nil
}

// publish renames the temporary file tmp to final, unless aborted (abort
// has then removed tmp).
func (t *tempFile) publish(tmp, final string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.aborted {
		return ErrAborted
	}
	t.path = ""
	return os.Rename(tmp, final)
}

// discard removes the temporary file of a failed write.
func (t *tempFile) discard(tmp string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	os.Remove(tmp)
	if t.path == tmp {
		t.path = ""
	}
}

// isAborted reports whether abort was called.
func (t *tempFile) isAborted() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.aborted
}

// abort removes the temporary file being written and refuses any other.
func (t *tempFile) abort() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.aborted = true
	if t.path != "" {
		os.Remove(t.path)
		t.path = ""
	}
}
