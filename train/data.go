package train

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/ir"
)

// Position is where a pass over a Dataset stands: the epoch and the index,
// within that epoch's order, of the next sample. It is part of a
// checkpoint, so a resumed run draws exactly the samples the uninterrupted
// run would have.
type Position struct {
	Epoch   int   `json:"epoch"`
	Index   int   `json:"index"`
	Shuffle bool  `json:"shuffle"`
	Seed    int64 `json:"seed"`
}

// Dataset is a training data set: one .npy file per name, memory-mapped,
// whose first axis is the sample. All files hold the same number of
// samples. A Dataset is safe for concurrent use; Close releases the
// mappings (tensors returned by Next are copies and stay valid).
type Dataset struct {
	dir   string
	files map[string]*dataFile
	names []string // sorted
	n     int

	// mu guards closed and the mappings: readers hold it shared while
	// they copy out of a mapping, Close exclusively.
	mu     sync.RWMutex
	closed bool

	permMu sync.Mutex
	perm   []int // Permutation(n, permOf[0], permOf[1]), cached
	permOf [2]int64

	digestOnce sync.Once
	digest     string
	digestErr  error
}

// dataFile is one memory-mapped .npy file.
type dataFile struct {
	name, path string
	size       int64
	layout     *npyLayout
	data       []byte // the whole file, mapped
	release    func() error
}

// OpenData memory-maps DIR/NAME.npy for each name. All files must hold the
// same number of samples (their first axis); files must be C-ordered
// fixed-width numeric arrays. Errors wrap errs.ErrInvalidInput and name the
// file.
func OpenData(dir string, names []string) (*Dataset, error) {
	if err := checkDataDir(dir, names); err != nil {
		return nil, err
	}
	d := &Dataset{dir: dir, files: map[string]*dataFile{}, permOf: [2]int64{-1, 0}}
	for _, name := range names {
		if _, dup := d.files[name]; dup {
			d.Close()
			return nil, invalid("data name %q is listed twice", name)
		}
		f, err := openDataFile(dir, name)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.files[name] = f
		d.names = append(d.names, name)
	}
	sort.Strings(d.names)
	if err := d.checkCounts(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// checkDataDir refuses a missing or empty data directory and an empty or
// unsafe name list before any file is opened.
func checkDataDir(dir string, names []string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("train: data directory: %w", asInput(err))
	}
	npys := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".npy") {
			npys++
		}
	}
	if npys == 0 {
		return invalid("data directory %s holds no .npy files (want one NAME.npy per model input and labels/targets name)", dir)
	}
	if len(names) == 0 {
		return invalid("data directory %s: no data names to read", dir)
	}
	for _, name := range names {
		if name == "" || !filepath.IsLocal(name+".npy") || strings.ContainsAny(name, `/\`) {
			return invalid("data name %q is not a plain file name", name)
		}
	}
	return nil
}

// openDataFile opens, checks and maps DIR/NAME.npy.
func openDataFile(dir, name string) (*dataFile, error) {
	path := filepath.Join(dir, name+".npy")
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, invalid("data %q: %s does not exist (the data directory needs one NAME.npy per input and labels/targets name)", name, path)
		}
		return nil, fmt.Errorf("train: data %q: %w", name, asInput(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("train: data %q: %w", name, asInput(err))
	}
	if !st.Mode().IsRegular() {
		return nil, invalid("data %q: %s is not a regular file", name, path)
	}
	layout, err := readNpyLayout(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("train: data %q: %s: %w", name, path, err)
	}
	data, release, err := mapFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("train: data %q: %s: %w", name, path, asInput(err))
	}
	return &dataFile{name: name, path: path, size: st.Size(), layout: layout, data: data, release: release}, nil
}

// checkCounts requires every file to hold the same, non-zero number of
// samples, naming every file and its count otherwise.
func (d *Dataset) checkCounts() error {
	counts := map[int]bool{}
	var list []string
	for _, name := range d.names {
		f := d.files[name]
		counts[f.layout.Samples] = true
		list = append(list, fmt.Sprintf("%s.npy: %d", name, f.layout.Samples))
	}
	if len(counts) > 1 {
		return invalid("data files in %s hold different sample counts (first axis): %s", d.dir, strings.Join(list, ", "))
	}
	d.n = d.files[d.names[0]].layout.Samples
	if d.n == 0 {
		return invalid("data files in %s hold no samples (first axis 0): %s", d.dir, strings.Join(list, ", "))
	}
	return nil
}

// Len returns the number of samples.
func (d *Dataset) Len() int { return d.n }

// Names returns the data names, sorted.
func (d *Dataset) Names() []string { return append([]string(nil), d.names...) }

// Spec returns the element type and the per-sample dimensions of name; ok
// is false for a name the data set does not hold.
func (d *Dataset) Spec(name string) (ir.DType, []int, bool) {
	f, ok := d.files[name]
	if !ok {
		return ir.InvalidDType, nil, false
	}
	return f.layout.DType, append([]int{}, f.layout.Dims...), true
}

// Start returns the position of a new pass: epoch 0, index 0.
func (d *Dataset) Start(shuffle bool, seed int64) Position {
	return Position{Shuffle: shuffle, Seed: seed}
}

// Next returns the b samples from p, one tensor per name of dimensions
// [b, per-sample dims...], and the position after them. Without shuffle
// the samples are p.Index, p.Index+1, ... modulo Len, in order, so step i
// (from 1) of a pass takes samples (i-1)*b ... (i-1)*b+b-1 modulo Len,
// wrapping across the end into the next epoch. With shuffle, epoch e draws
// its samples in the order of Permutation(Len, p.Seed, e), so the same
// Position always continues the same way.
func (d *Dataset) Next(p Position, b int) (map[string]*ir.Tensor, Position, error) {
	if b <= 0 {
		return nil, p, invalid("batch %d: want > 0", b)
	}
	if per := d.sampleBytes(); per > 0 && int64(b) > maxBatchBytes/per {
		return nil, p, invalid("batch %d of %d-byte samples is over %d bytes", b, per, int64(maxBatchBytes))
	}
	if p.Epoch < 0 || p.Index < 0 || p.Index >= d.n {
		return nil, p, invalid("data position epoch %d index %d is outside a data set of %d samples", p.Epoch, p.Index, d.n)
	}
	idx, next := d.indices(p, b)
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, p, fmt.Errorf("train: dataset %s: %w", d.dir, errs.ErrClosed)
	}
	out := make(map[string]*ir.Tensor, len(d.names))
	for _, name := range d.names {
		t, err := d.files[name].gather(idx)
		if err != nil {
			return nil, p, err
		}
		out[name] = t
	}
	return out, next, nil
}

// maxBatchBytes bounds the host memory one Next call allocates.
const maxBatchBytes = 1 << 40

// sampleBytes is the bytes of one sample over all files.
func (d *Dataset) sampleBytes() int64 {
	var n int64
	for _, f := range d.files {
		n += f.layout.SampleBytes
	}
	return n
}

// indices returns the sample indices of b samples from p and the position
// after them.
func (d *Dataset) indices(p Position, b int) ([]int, Position) {
	idx := make([]int, b)
	for i := range idx {
		if p.Shuffle {
			idx[i] = d.permutation(p.Seed, p.Epoch)[p.Index]
		} else {
			idx[i] = p.Index
		}
		p.Index++
		if p.Index == d.n {
			p.Epoch, p.Index = p.Epoch+1, 0
		}
	}
	return idx, p
}

// permutation returns (and caches) Permutation(Len, seed, epoch).
func (d *Dataset) permutation(seed int64, epoch int) []int {
	d.permMu.Lock()
	defer d.permMu.Unlock()
	if d.perm == nil || d.permOf != [2]int64{seed, int64(epoch)} {
		d.perm = Permutation(d.n, seed, epoch)
		d.permOf = [2]int64{seed, int64(epoch)}
	}
	return d.perm
}

// Permutation returns the order in which a shuffled pass draws the n
// samples in epoch epoch. It is a Fisher–Yates shuffle of 0..n-1 (from the
// last element down: swap element i with element j uniform in [0, i]),
// drawing 64-bit numbers from SplitMix64
// (https://prng.di.unimi.it/splitmix64.c) whose state starts at
// seed XOR (epoch+1)*0xD1B54A32D192ED03 (state, not output: SplitMix64
// scrambles it), and j from Lemire's multiply-shift method with rejection
// (https://arxiv.org/abs/1805.10941), so it is unbiased and the same on
// every platform and Go version.
func Permutation(n int, seed int64, epoch int) []int {
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	r := splitMix64{state: uint64(seed) ^ uint64(epoch+1)*0xD1B54A32D192ED03}
	for i := n - 1; i > 0; i-- {
		j := int(r.below(uint64(i) + 1))
		perm[i], perm[j] = perm[j], perm[i]
	}
	return perm
}

// splitMix64 is Steele, Lea and Flood's SplitMix64 generator.
type splitMix64 struct{ state uint64 }

func (s *splitMix64) next() uint64 {
	s.state += 0x9E3779B97F4A7C15
	z := s.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// below returns a uniform value in [0, n), n > 0 (Lemire 2019, algorithm 5).
func (s *splitMix64) below(n uint64) uint64 {
	hi, lo := bits.Mul64(s.next(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(s.next(), n)
		}
	}
	return hi
}

// gather copies the samples idx into a new [len(idx), dims...] tensor, in
// little-endian order, straight from the mapping into the tensor's memory
// (runs of consecutive samples in one copy).
func (f *dataFile) gather(idx []int) (*ir.Tensor, error) {
	l := f.layout
	dims := append([]int{len(idx)}, l.Dims...)
	if l.SampleBytes == 0 {
		return ir.TensorFromBytes(l.DType, dims, nil)
	}
	t, err := ir.NewHostTensor(l.DType, dims...)
	if err != nil {
		return nil, fmt.Errorf("train: data %q: %w", f.name, err)
	}
	var bad error
	err = t.MutableBytes(func(raw []byte) {
		sb := l.SampleBytes
		for i := 0; i < len(idx); {
			j := i + 1
			for j < len(idx) && idx[j] == idx[j-1]+1 {
				j++
			}
			off := l.DataOffset + int64(idx[i])*sb
			copy(raw[int64(i)*sb:int64(j)*sb], f.data[off:off+int64(j-i)*sb])
			i = j
		}
		if l.BigEndian {
			swapBytes(raw, l.DType)
		}
		if l.DType == ir.Bool {
			bad = checkBools(f, raw)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("train: data %q: %w", f.name, err)
	}
	return t, bad
}

// checkBools refuses bool bytes other than 0 and 1 (NumPy writes no
// others).
func checkBools(f *dataFile, raw []byte) error {
	for i, v := range raw {
		if v > 1 {
			return invalid("data %q: %s: bool element %d of the batch has byte value %d, want 0 or 1", f.name, f.path, i, v)
		}
	}
	return nil
}

// swapBytes reverses the bytes of each element (complex numbers: of each
// of their two parts).
func swapBytes(raw []byte, dt ir.DType) {
	w := dt.Size()
	if dt == ir.Complex64 || dt == ir.Complex128 {
		w /= 2
	}
	for i := 0; i+w <= len(raw); i += w {
		e := raw[i : i+w]
		for a, b := 0, w-1; a < b; a, b = a+1, b-1 {
			e[a], e[b] = e[b], e[a]
		}
	}
}

// FullDigestLimit is the data-set size up to which Digest hashes every
// byte. Above it Digest hashes the headers and sampled blocks (see Digest).
const FullDigestLimit = 1 << 30

// digest sampling: the first and last sampleEdge bytes and sampleBlocks
// evenly spaced blocks of sampleBlock bytes of each file.
const (
	sampleEdge   = 1 << 20
	sampleBlocks = 256
	sampleBlock  = 64 << 10
)

// Digest identifies the data for train.Config.Data: for each file, sorted
// by name, its name, size, dtype and shape, and a SHA-256 of its content.
//
// Content: when the files together hold at most FullDigestLimit bytes,
// every byte is hashed ("sha256:" prefix). Larger data sets (the ones that
// do not fit in RAM) would cost a full read of the data at every start and
// resume, so only the header, the first and last MiB and 256 evenly spaced
// 64 KiB blocks of each file are hashed ("sha256-sampled:" prefix): any
// change of size, dtype or shape and most rewrites are caught, but an edit
// confined to unsampled bytes is not. A resumed run checks the digest
// against its checkpoint, so that trade-off decides only how thoroughly a
// changed data set is noticed, never the training result. The digest is
// computed once, on the first call; it is "" when that call comes after
// Close.
func (d *Dataset) Digest() string {
	d.digestOnce.Do(func() { d.digest, d.digestErr = d.computeDigest() })
	return d.digest
}

func (d *Dataset) computeDigest() (string, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return "", errs.ErrClosed
	}
	var total int64
	for _, f := range d.files {
		total += f.size
	}
	full := total <= FullDigestLimit
	h := sha256.New()
	for _, name := range d.names {
		f := d.files[name]
		fmt.Fprintf(h, "%s.npy size=%d descr=%s shape=%v\n", name, f.size, f.layout.Descr, f.layout.Shape)
		if full {
			h.Write(f.data)
		} else {
			hashSampled(h, f.data)
		}
	}
	prefix := "sha256:"
	if !full {
		prefix = "sha256-sampled:"
	}
	return prefix + hex.EncodeToString(h.Sum(nil)), nil
}

// hashSampled hashes the edges and evenly spaced blocks of data, each
// preceded by its offset.
func hashSampled(h hash.Hash, data []byte) {
	n := int64(len(data))
	put := func(off, length int64) {
		off = max(0, min(off, n))
		end := min(n, off+length)
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(off))
		h.Write(b[:])
		h.Write(data[off:end])
	}
	put(0, sampleEdge)
	for i := int64(1); i <= sampleBlocks; i++ {
		put(n*i/(sampleBlocks+1), sampleBlock)
	}
	put(n-sampleEdge, sampleEdge)
}

// Close unmaps the files. Tensors returned by Next stay valid.
func (d *Dataset) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errList []error
	for _, f := range d.files {
		if f.release != nil {
			errList = append(errList, f.release())
			f.release, f.data = nil, nil
		}
	}
	return joinOneLine(errList...)
}

var _ io.Closer = (*Dataset)(nil)
