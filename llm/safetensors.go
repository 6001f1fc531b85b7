package llm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Safetensors reading.
//
// The format (https://huggingface.co/docs/safetensors/index#format): an
// 8-byte little-endian header length N, N bytes of JSON mapping each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the byte after the header) plus an optional "__metadata__" map of
// strings, then the data. Every figure in the header is checked against the
// file's real size before anything is allocated from it.

// maxHeaderBytes bounds the JSON header beside the file size: the format's
// own reference implementation refuses headers over 100 MB.
const maxHeaderBytes = 100 << 20

// stDType is a safetensors element type this package reads.
type stDType string

const (
	stF32  stDType = "F32"
	stF16  stDType = "F16"
	stBF16 stDType = "BF16"
)

// size returns the bytes per element, or 0 for a dtype not read here.
func (d stDType) size() int {
	switch d {
	case stF32:
		return 4
	case stF16, stBF16:
		return 2
	}
	return 0
}

// stTensor is one tensor's entry in a safetensors file.
type stTensor struct {
	Name  string
	DType stDType
	Shape []int
	// Begin and End are absolute offsets into the file.
	Begin, End int64
	file       *stFile
}

// stFile is one open, memory-mapped safetensors file.
type stFile struct {
	path    string
	data    []byte // the whole file, mapped read-only
	unmap   func() error
	tensors map[string]*stTensor
}

// parseHeader decodes and checks a safetensors header of a file of
// fileSize bytes, whose first bytes are head (at least the 8-byte length
// and the JSON). It returns the tensors with absolute offsets.
func parseHeader(path string, head []byte, fileSize int64) (map[string]*stTensor, int64, error) {
	if fileSize < 8 || len(head) < 8 {
		return nil, 0, fmt.Errorf("%s: %d bytes, shorter than the 8-byte safetensors header length", path, fileSize)
	}
	n := binary.LittleEndian.Uint64(head[:8])
	if n > maxHeaderBytes || n > uint64(fileSize-8) {
		return nil, 0, fmt.Errorf("%s: safetensors header length %d exceeds the file (%d bytes) or the %d-byte limit (truncated or not safetensors)", path, n, fileSize, maxHeaderBytes)
	}
	if uint64(len(head)) < 8+n {
		return nil, 0, fmt.Errorf("%s: header of %d bytes, only %d read", path, n, len(head)-8)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(head[8:8+n], &raw); err != nil {
		return nil, 0, fmt.Errorf("%s: safetensors header JSON: %v", path, err)
	}
	dataStart := int64(8 + n)
	dataLen := fileSize - dataStart
	out := make(map[string]*stTensor, len(raw))
	type span struct{ b, e int64 }
	var spans []span
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			DType       string  `json:"dtype"`
			Shape       []int64 `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, 0, fmt.Errorf("%s: tensor %q: %v", path, name, err)
		}
		dt := stDType(e.DType)
		if dt.size() == 0 {
			return nil, 0, fmt.Errorf("%s: tensor %q: dtype %q not supported (F32, F16, BF16 are)", path, name, e.DType)
		}
		if len(e.DataOffsets) != 2 {
			return nil, 0, fmt.Errorf("%s: tensor %q: data_offsets has %d entries, want 2", path, name, len(e.DataOffsets))
		}
		b, en := e.DataOffsets[0], e.DataOffsets[1]
		if b < 0 || en < b || en > dataLen {
			return nil, 0, fmt.Errorf("%s: tensor %q: data_offsets [%d, %d] outside the %d data bytes (truncated file?)", path, name, b, en, dataLen)
		}
		elems := int64(1)
		shape := make([]int, len(e.Shape))
		for i, d := range e.Shape {
			if d < 0 || (d > 0 && elems > math.MaxInt32*int64(1<<16)/d) {
				return nil, 0, fmt.Errorf("%s: tensor %q: bad shape %v", path, name, e.Shape)
			}
			elems *= d
			shape[i] = int(d)
		}
		if want := elems * int64(dt.size()); want != en-b {
			return nil, 0, fmt.Errorf("%s: tensor %q: %s%v needs %d bytes, data_offsets give %d", path, name, dt, e.Shape, want, en-b)
		}
		out[name] = &stTensor{Name: name, DType: dt, Shape: shape, Begin: dataStart + b, End: dataStart + en}
		spans = append(spans, span{b, en})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].b < spans[j].b })
	for i := 1; i < len(spans); i++ {
		if spans[i].b < spans[i-1].e {
			return nil, 0, fmt.Errorf("%s: tensors overlap at data offset %d", path, spans[i].b)
		}
	}
	return out, dataStart, nil
}

// openSafetensors maps path and reads its header.
func openSafetensors(path string) (*stFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data, unmap, err := mapFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: mapping: %w", path, err)
	}
	ts, _, err := parseHeader(path, data, st.Size())
	if err != nil {
		_ = unmap()
		return nil, err
	}
	sf := &stFile{path: path, data: data, unmap: unmap, tensors: ts}
	for _, t := range ts {
		t.file = sf
	}
	return sf, nil
}

// bytes returns a view of t's data in the mapping.
func (t *stTensor) bytes() []byte { return t.file.data[t.Begin:t.End] }

// checkpointTensors is every tensor of a checkpoint directory, from one
// model.safetensors or the shards model.safetensors.index.json names.
type checkpointTensors struct {
	files   []*stFile
	tensors map[string]*stTensor
}

// openCheckpointTensors opens dir's safetensors.
func openCheckpointTensors(dir string) (*checkpointTensors, error) {
	ct := &checkpointTensors{tensors: map[string]*stTensor{}}
	var names []string
	index := filepath.Join(dir, "model.safetensors.index.json")
	if raw, err := os.ReadFile(index); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, fmt.Errorf("%s: %v", index, err)
		}
		seen := map[string]bool{}
		for _, f := range idx.WeightMap {
			if strings.Contains(f, "/") || strings.Contains(f, `\`) || f == ".." || f == "" {
				return nil, fmt.Errorf("%s: shard name %q is not a file in the directory", index, f)
			}
			if !seen[f] {
				seen[f] = true
				names = append(names, f)
			}
		}
		sort.Strings(names)
		if err := ct.open(dir, names); err != nil {
			return nil, err
		}
		// Every tensor the index names must be in its shard.
		for name, f := range idx.WeightMap {
			t, ok := ct.tensors[name]
			if !ok || filepath.Base(t.file.path) != f {
				ct.close()
				return nil, fmt.Errorf("%s: tensor %q is not in shard %s", index, name, f)
			}
		}
		return ct, nil
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	single := "model.safetensors"
	if _, err := os.Stat(filepath.Join(dir, single)); err != nil {
		return nil, fmt.Errorf("%s: no model.safetensors nor model.safetensors.index.json (only safetensors checkpoints are read)", dir)
	}
	if err := ct.open(dir, []string{single}); err != nil {
		return nil, err
	}
	return ct, nil
}

func (ct *checkpointTensors) open(dir string, names []string) error {
	for _, n := range names {
		f, err := openSafetensors(filepath.Join(dir, n))
		if err != nil {
			ct.close()
			return err
		}
		ct.files = append(ct.files, f)
		for name, t := range f.tensors {
			if prev, dup := ct.tensors[name]; dup {
				ct.close()
				return fmt.Errorf("tensor %q is in both %s and %s", name, prev.file.path, f.path)
			}
			ct.tensors[name] = t
		}
	}
	return nil
}

// close unmaps every file.
func (ct *checkpointTensors) close() {
	for _, f := range ct.files {
		if f.unmap != nil {
			_ = f.unmap()
			f.unmap = nil
		}
	}
	ct.files = nil
}
