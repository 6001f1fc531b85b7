package cache

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// File names inside a cache directory.
const (
	entrySuffix = ".tbc"       // <64 hex digits>.tbc: one entry
	tempPrefix  = ".tmp-"      // an entry being written; renamed into place when complete
	lockName    = ".lock"      // flock(2) target serializing eviction, clearing and stats flushes
	statsName   = "stats.json" // cumulative DiskStats counters of every process that flushed
	// staleTemp is the age after which a temporary file is taken to belong
	// to a writer that died, and removed.
	staleTemp = time.Hour
)

// DiskOptions configure a Disk.
type DiskOptions struct {
	// MaxBytes caps the total size of entry files in the directory; 0
	// means no cap. After each Put that leaves the directory over the cap,
	// the least recently used entries (oldest modification time; a hit
	// sets it to now) are removed until it is under.
	MaxBytes int64

	// Report receives problems Disk handles by itself and does not return:
	// an access time it could not update, an entry eviction could not
	// remove, a stale temporary file, an unreadable stats file. Nil means
	// they are only counted (DiskStats.Problems). Corrupt entries are
	// returned by Get as *CorruptError, not reported here.
	Report func(error)
}

// DiskStats counts what a Disk did. Disk.Stats gives this process's counts;
// ReadStats gives the sums every process flushed into the directory.
type DiskStats struct {
	Hits         int64 `json:"hits"`          // Get calls that returned an entry
	Misses       int64 `json:"misses"`        // Get calls that found no entry (corrupt ones included)
	Corrupt      int64 `json:"corrupt"`       // entries that failed validation and were removed
	Puts         int64 `json:"puts"`          // entries written
	Evictions    int64 `json:"evictions"`     // entries removed to respect MaxBytes
	EvictedBytes int64 `json:"evicted_bytes"` // their total size
	Problems     int64 `json:"problems"`      // problems passed to Report

	// CompileTimeSaved sums, over hits, the compile time recorded in the
	// entry: the time a hit spared its caller, load time not deducted.
	CompileTimeSaved time.Duration `json:"compile_time_saved_ns"`
	// CompileTimeStored sums, over puts, the compile time of the entry.
	CompileTimeStored time.Duration `json:"compile_time_stored_ns"`

	// Since is when counting started (in the stats file: the first flush).
	Since time.Time `json:"since"`
}

func (s *DiskStats) add(d DiskStats) {
	s.Hits += d.Hits
	s.Misses += d.Misses
	s.Corrupt += d.Corrupt
	s.Puts += d.Puts
	s.Evictions += d.Evictions
	s.EvictedBytes += d.EvictedBytes
	s.Problems += d.Problems
	s.CompileTimeSaved += d.CompileTimeSaved
	s.CompileTimeStored += d.CompileTimeStored
}

func (s DiskStats) sub(d DiskStats) DiskStats {
	s.Hits -= d.Hits
	s.Misses -= d.Misses
	s.Corrupt -= d.Corrupt
	s.Puts -= d.Puts
	s.Evictions -= d.Evictions
	s.EvictedBytes -= d.EvictedBytes
	s.Problems -= d.Problems
	s.CompileTimeSaved -= d.CompileTimeSaved
	s.CompileTimeStored -= d.CompileTimeStored
	return s
}

// EntryInfo describes one entry file.
type EntryInfo struct {
	Digest      string        `json:"digest"`
	Path        string        `json:"path"`
	Size        int64         `json:"size"`       // file size in bytes
	Key         KeyInfo       `json:"key"`        // from the header
	CompileTime time.Duration `json:"compile_ns"` // recorded compile time: what a hit saves
	Created     time.Time     `json:"created"`    // when it was written
	LastUsed    time.Time     `json:"last_used"`  // last write or hit (the file's modification time)
	Writer      string        `json:"writer,omitempty"`
	Problem     string        `json:"problem,omitempty"` // set by List when the header is corrupt
}

// Disk is a directory of serialized executables, one file per key, named
// by the key's digest. Writes are atomic (a temporary file in the same
// directory, synced, then renamed over the entry and the directory synced),
// so readers, including other processes sharing the directory, see either
// no entry or a complete one. Each entry carries checksums of its header
// and payload; an entry that fails them is removed and never returned.
//
// The directory is trusted input: a loaded entry is code the device will
// run. Do not share it with users you would not let run code as you.
//
// Several processes may use one directory. Eviction, Clear and stats
// flushes take an flock(2) on the directory's lock file; on platforms
// without flock they are serialized only within the process (see
// lock_other.go). Disk is safe for concurrent use.
type Disk struct {
	dir  string
	opts DiskOptions
	now  func() time.Time // for tests

	mu      sync.Mutex
	stats   DiskStats
	flushed DiskStats // the part of stats already added to the stats file
}

// OpenDisk returns a Disk on dir. The directory is created (mode 0700) on
// the first Put; it is an error for dir to exist and not be a directory.
func OpenDisk(dir string, opts DiskOptions) (*Disk, error) {
	if dir == "" {
		return nil, errors.New("compile cache: empty directory name")
	}
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("compile cache: negative MaxBytes %d; use 0 for no cap", opts.MaxBytes)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("compile cache: directory %s: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("compile cache: %s exists and is not a directory", abs)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("compile cache: %w", err)
	}
	d := &Disk{dir: abs, opts: opts, now: time.Now}
	d.stats.Since = d.now()
	return d, nil
}

// Dir returns the directory's absolute path.
func (d *Disk) Dir() string { return d.dir }

func (d *Disk) path(digest string) string { return filepath.Join(d.dir, digest+entrySuffix) }

func (d *Disk) count(f func(s *DiskStats)) {
	d.mu.Lock()
	f(&d.stats)
	d.mu.Unlock()
}

func (d *Disk) problem(err error) {
	d.count(func(s *DiskStats) { s.Problems++ })
	if d.opts.Report != nil {
		d.opts.Report(err)
	}
}

// Stats returns this process's counters for this Disk.
func (d *Disk) Stats() DiskStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Get returns the payload stored for key and the entry's description.
// ok is false on a miss. A corrupt entry is removed and reported as an
// error matching ErrCorrupt (a *CorruptError) with ok false: the caller
// treats it as a miss. Other errors are I/O failures reading the entry.
func (d *Disk) Get(ctx context.Context, key Key) (payload []byte, info EntryInfo, ok bool, err error) {
	return d.get(ctx, key.Digest())
}

func (d *Disk) get(ctx context.Context, digest string) ([]byte, EntryInfo, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, EntryInfo{}, false, err
	}
	p := d.path(digest)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		d.count(func(s *DiskStats) { s.Misses++ })
		return nil, EntryInfo{}, false, nil
	}
	if err != nil {
		return nil, EntryInfo{}, false, fmt.Errorf("compile cache: reading entry: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, EntryInfo{}, false, fmt.Errorf("compile cache: reading entry: %w", err)
	}
	buf := make([]byte, fi.Size())
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, EntryInfo{}, false, fmt.Errorf("compile cache: reading entry %s: %w", p, err)
	}
	h, payload, why := parseEntry(buf[:n])
	if why == "" && n != int(fi.Size()) {
		why = fmt.Sprintf("read %d bytes of a %d-byte file", n, fi.Size())
	}
	if why == "" && h.Digest != digest {
		why = fmt.Sprintf("header is for key %s, file is named for %s", h.Digest, digest)
	}
	if why != "" {
		d.count(func(s *DiskStats) { s.Corrupt++; s.Misses++ })
		d.removeIfSame(p, fi)
		return nil, EntryInfo{}, false, &CorruptError{Path: p, Reason: why}
	}
	now := d.now()
	if err := os.Chtimes(p, now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.problem(fmt.Errorf("compile cache: marking %s used: %w", p, err))
	}
	d.count(func(s *DiskStats) { s.Hits++; s.CompileTimeSaved += h.CompileTime })
	return payload, EntryInfo{
		Digest: digest, Path: p, Size: fi.Size(), Key: h.Key, CompileTime: h.CompileTime,
		Created: h.Created, LastUsed: now, Writer: h.Writer,
	}, true, nil
}

// removeIfSame removes path if it is still the file fi describes, so a good
// entry another process renamed into place meanwhile is left alone. (A
// rename between the check and the removal can still lose that good entry:
// that costs a recompile, never a corrupt load.)
func (d *Disk) removeIfSame(path string, fi os.FileInfo) {
	cur, err := os.Stat(path)
	if err != nil || !os.SameFile(cur, fi) {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.problem(fmt.Errorf("compile cache: removing corrupt entry: %w", err))
	}
}

// Remove deletes key's entry if present; a missing entry is not an error.
func (d *Disk) Remove(key Key) error { return d.remove(key.Digest()) }

func (d *Disk) remove(digest string) error {
	if err := os.Remove(d.path(digest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("compile cache: %w", err)
	}
	return nil
}

// Put stores payload for key, replacing any entry, with the compile time it
// took (recorded so that a later hit knows what it saved). Then, if the
// directory is over MaxBytes, it evicts; ctx bounds the wait for the
// directory lock. A payload larger than MaxBytes is not stored: that is an
// error, so the caller can report it.
func (d *Disk) Put(ctx context.Context, key Key, payload []byte, compileTime time.Duration) error {
	prog := programSum(key.Program)
	return d.put(ctx, hex.EncodeToString(key.digest(prog)), key.info(prog), payload, compileTime)
}

func (d *Disk) put(ctx context.Context, digest string, ki KeyInfo, payload []byte, compileTime time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h := &entryHeader{Digest: digest, Key: ki, CompileTime: compileTime, Created: d.now().UTC(), Writer: writer()}
	head, err := encodePrefix(h, payload)
	if err != nil {
		return fmt.Errorf("compile cache: %w", err)
	}
	if total := int64(len(head) + len(payload)); d.opts.MaxBytes > 0 && total > d.opts.MaxBytes {
		return fmt.Errorf("compile cache: entry for %s is %d bytes, more than the directory cap of %d; not stored", ki.Name, total, d.opts.MaxBytes)
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return fmt.Errorf("compile cache: %w", err)
	}
	if err := writeAtomic(d.dir, d.path(digest), tempPrefix+digest[:16]+"-*", head, payload); err != nil {
		return fmt.Errorf("compile cache: writing entry: %w", err)
	}
	now := d.now()
	if err := os.Chtimes(d.path(digest), now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.problem(fmt.Errorf("compile cache: stamping %s: %w", d.path(digest), err))
	}
	d.count(func(s *DiskStats) { s.Puts++; s.CompileTimeStored += compileTime })
	if d.opts.MaxBytes > 0 {
		if err := d.evict(ctx, digest); err != nil {
			return fmt.Errorf("compile cache: entry stored; eviction: %w", err)
		}
	}
	return nil
}

// writer names the writing process for an entry header.
func writer() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}

// writeAtomic writes parts to a temporary file in dir, syncs it, renames it
// to final and syncs dir, so final is either absent, the old file, or the
// complete new one, even across a crash.
func writeAtomic(dir, final, pattern string, parts ...[]byte) (err error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	for _, p := range parts {
		if _, err = f.Write(p); err != nil {
			return err
		}
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, final); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable. File systems that cannot sync a
// directory (EINVAL) are accepted as they are.
func syncDir(dir string) error {
	df, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer df.Close()
	if err := df.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return nil
}

// scanned is one entry file found by scan.
type scanned struct {
	digest string
	path   string
	size   int64
	mtime  time.Time
}

// scan lists entry files and removes stale temporary files.
func (d *Disk) scan() ([]scanned, error) {
	des, err := os.ReadDir(d.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []scanned
	now := d.now()
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, tempPrefix) {
			if fi, err := de.Info(); err == nil && now.Sub(fi.ModTime()) > staleTemp {
				if err := os.Remove(filepath.Join(d.dir, name)); err == nil {
					d.problem(fmt.Errorf("compile cache: removed %s, a temporary file left by a writer that stopped", name))
				}
			}
			continue
		}
		digest, ok := entryDigest(name)
		if !ok || !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, scanned{digest, filepath.Join(d.dir, name), fi.Size(), fi.ModTime()})
	}
	return out, nil
}

// entryDigest returns the digest an entry file name stands for.
func entryDigest(name string) (string, bool) {
	digest, ok := strings.CutSuffix(name, entrySuffix)
	if !ok || len(digest) != 64 {
		return "", false
	}
	for _, c := range digest {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return digest, true
}

// evict removes least recently used entries, never keep, until the total
// is at most MaxBytes.
func (d *Disk) evict(ctx context.Context, keep string) error {
	unlock, err := lockDir(ctx, filepath.Join(d.dir, lockName))
	if err != nil {
		return err
	}
	defer unlock()
	es, err := d.scan()
	if err != nil {
		return err
	}
	var total int64
	for _, e := range es {
		total += e.size
	}
	if total <= d.opts.MaxBytes {
		return nil
	}
	sort.Slice(es, func(i, j int) bool {
		if !es[i].mtime.Equal(es[j].mtime) {
			return es[i].mtime.Before(es[j].mtime)
		}
		return es[i].digest < es[j].digest
	})
	for _, e := range es {
		if total <= d.opts.MaxBytes {
			break
		}
		if e.digest == keep {
			continue
		}
		err := os.Remove(e.path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.problem(fmt.Errorf("compile cache: evicting %s: %w", e.path, err))
			continue
		}
		total -= e.size
		if err == nil {
			d.count(func(s *DiskStats) { s.Evictions++; s.EvictedBytes += e.size })
		}
	}
	return nil
}

// List describes every entry, most recently used first. It reads only
// headers; an entry whose header fails validation is listed with Problem
// set (Get would remove it). A missing directory has no entries.
func (d *Disk) List() ([]EntryInfo, error) {
	es, err := d.scan()
	if err != nil {
		return nil, fmt.Errorf("compile cache: listing %s: %w", d.dir, err)
	}
	out := make([]EntryInfo, 0, len(es))
	for _, e := range es {
		info := EntryInfo{Digest: e.digest, Path: e.path, Size: e.size, LastUsed: e.mtime}
		h, why, err := readHeader(e.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			why = err.Error()
		} else if why == "" && h.Digest != e.digest {
			why = fmt.Sprintf("header is for key %s", h.Digest)
		}
		if why != "" {
			info.Problem = why
		} else {
			info.Key, info.CompileTime, info.Created, info.Writer = h.Key, h.CompileTime, h.Created, h.Writer
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastUsed.Equal(out[j].LastUsed) {
			return out[i].LastUsed.After(out[j].LastUsed)
		}
		return out[i].Digest < out[j].Digest
	})
	return out, nil
}

// readHeader reads and validates an entry's prefix and header only.
func readHeader(path string) (entryHeader, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return entryHeader{}, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return entryHeader{}, "", err
	}
	var pb [prefixLen]byte
	n, err := io.ReadFull(f, pb[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return entryHeader{}, "", err
	}
	p, why := parsePrefix(pb[:n], fi.Size())
	if why != "" {
		return entryHeader{}, why, nil
	}
	hb := make([]byte, p.headerLen)
	if _, err := io.ReadFull(f, hb); err != nil {
		return entryHeader{}, fmt.Sprintf("reading header: %v", err), nil
	}
	h, why := parseHeader(p, pb[:], hb)
	return h, why, nil
}

// Clear removes every entry and returns how many and their total size.
// Temporary files of writers still running are left alone.
func (d *Disk) Clear(ctx context.Context) (n int, bytes int64, err error) {
	if _, err := os.Stat(d.dir); errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	unlock, err := lockDir(ctx, filepath.Join(d.dir, lockName))
	if err != nil {
		return 0, 0, fmt.Errorf("compile cache: %w", err)
	}
	defer unlock()
	es, err := d.scan()
	if err != nil {
		return 0, 0, fmt.Errorf("compile cache: clearing %s: %w", d.dir, err)
	}
	var errsSeen []error
	for _, e := range es {
		if err := os.Remove(e.path); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errsSeen = append(errsSeen, err)
			}
			continue
		}
		n++
		bytes += e.size
	}
	if len(errsSeen) > 0 {
		return n, bytes, fmt.Errorf("compile cache: clearing %s: %d entries not removed: %w", d.dir, len(errsSeen), errors.Join(errsSeen...))
	}
	return n, bytes, nil
}

// Usage is the directory's present content.
type Usage struct {
	Entries           int           `json:"entries"`
	Bytes             int64         `json:"bytes"`
	Corrupt           int           `json:"corrupt"`          // entries whose header fails validation
	CompileTimeStored time.Duration `json:"compile_time_ns"`  // sum of the entries' compile times: what one hit on each would save
	Oldest            time.Time     `json:"oldest,omitempty"` // least recent use
	Newest            time.Time     `json:"newest,omitempty"` // most recent use
}

// Usage summarizes List.
func (d *Disk) Usage() (Usage, error) {
	es, err := d.List()
	if err != nil {
		return Usage{}, err
	}
	var u Usage
	for i, e := range es {
		u.Entries++
		u.Bytes += e.Size
		if e.Problem != "" {
			u.Corrupt++
		}
		u.CompileTimeStored += e.CompileTime
		if i == 0 {
			u.Newest = e.LastUsed
		}
		u.Oldest = e.LastUsed
	}
	return u, nil
}

// FlushStats adds this process's counts since the last flush to the
// directory's stats file (under the directory lock, written atomically),
// so `tensorbridge cache stats` can show totals across processes. An
// unreadable stats file is reported and started afresh.
func (d *Disk) FlushStats(ctx context.Context) error {
	d.mu.Lock()
	delta := d.stats.sub(d.flushed)
	cur := d.stats
	d.mu.Unlock()
	if delta == (DiskStats{Since: delta.Since}) {
		return nil
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return fmt.Errorf("compile cache: %w", err)
	}
	unlock, err := lockDir(ctx, filepath.Join(d.dir, lockName))
	if err != nil {
		return fmt.Errorf("compile cache: %w", err)
	}
	defer unlock()
	total, err := ReadStats(d.dir)
	if err != nil {
		d.problem(fmt.Errorf("compile cache: %w; starting the stats afresh", err))
		total = DiskStats{}
	}
	if total.Since.IsZero() {
		total.Since = cur.Since.UTC()
	}
	total.add(delta)
	b, err := json.MarshalIndent(total, "", "  ")
	if err != nil {
		return fmt.Errorf("compile cache: %w", err)
	}
	if err := writeAtomic(d.dir, filepath.Join(d.dir, statsName), tempPrefix+"stats-*", append(b, '\n')); err != nil {
		return fmt.Errorf("compile cache: writing stats: %w", err)
	}
	d.mu.Lock()
	d.flushed = cur
	d.mu.Unlock()
	return nil
}

// ReadStats returns the counters flushed into dir's stats file by every
// process; zero when there is none.
func ReadStats(dir string) (DiskStats, error) {
	p := filepath.Join(dir, statsName)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return DiskStats{}, nil
	}
	if err != nil {
		return DiskStats{}, err
	}
	var s DiskStats
	if err := json.Unmarshal(b, &s); err != nil {
		return DiskStats{}, fmt.Errorf("stats file %s is unreadable: %w", p, err)
	}
	return s, nil
}
