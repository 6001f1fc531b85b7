package llm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/safetensors"
)

// Safetensors reading: package safetensors checks each file's header
// (bounds, overlaps and holes, dtypes, the header size limit) with the
// rules every reader in the module shares; this file maps the files and
// holds the loader's dtype policy.

// weightDTypes are the safetensors dtypes the weight loader converts to
// the compute dtype (convert). A checkpoint may hold tensors of other
// dtypes (integer buffers such as position ids); only a tensor the decoder
// reads in another dtype is refused, by checkTensors, with a
// *WeightDTypeError.
var weightDTypes = []safetensors.DType{safetensors.F32, safetensors.F16, safetensors.BF16}

// stTensor is one tensor's entry in a safetensors file.
type stTensor struct {
	Name  string
	DType safetensors.DType
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

// parseHeader decodes and checks the safetensors header of a file of
// fileSize bytes whose first bytes are head (package safetensors' rules).
// It returns the tensors with absolute offsets, and where the data starts.
func parseHeader(path string, head []byte, fileSize int64) (map[string]*stTensor, int64, error) {
	h, err := safetensors.Parse(path, head, fileSize)
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]*stTensor, len(h.Tensors))
	for name, t := range h.Tensors {
		shape := make([]int, len(t.Shape))
		for i, d := range t.Shape {
			if shape[i] = int(d); int64(shape[i]) != d { // only on 32-bit platforms
				return nil, 0, fmt.Errorf("%s: tensor %q: dimension %d does not fit an int", path, name, d)
			}
		}
		out[name] = &stTensor{Name: name, DType: t.DType, Shape: shape, Begin: t.Begin, End: t.End}
	}
	return out, h.DataStart, nil
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

// release says t's bytes were copied out: its file pages leave the
// resident set (dropPages); bytes still reads them.
func (t *stTensor) release() { dropPages(t.bytes()) }

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
