package onnx

// The ai.onnx.ml operators that ship in real pipelines, computed on the
// host: LabelEncoder, Binarizer, ArrayFeatureExtractor; and TfIdfVectorizer
// from the default domain. Semantics from https://onnx.ai/onnx/operators/
// (onnx_aionnxml_LabelEncoder.html, onnx_aionnxml_Binarizer.html,
// onnx_aionnxml_ArrayFeatureExtractor.html, onnx__TfIdfVectorizer.html).

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

const mlDomain = "ai.onnx.ml"

// mlRegistry holds the ai.onnx.ml ops by name, every version sorted by since.
var mlRegistry = map[string][]*opDef{}

// mlVersions lists every version of the ai.onnx.ml ops registered here, from
// the ONNX-ML operator pages: a model meaning a version without a converter
// is refused, never run with another version's meaning.
var mlVersions = map[string][]int{
	"LabelEncoder":          {1, 2, 4},
	"Binarizer":             {1},
	"ArrayFeatureExtractor": {1},
}

func registerML(op string, since int, host converterFunc) *opDef {
	d := &opDef{op: op, since: since, conv: hostOnly, host: host, constAll: true}
	mlRegistry[op] = append(mlRegistry[op], d)
	sort.Slice(mlRegistry[op], func(a, b int) bool { return mlRegistry[op][a].since < mlRegistry[op][b].since })
	return d
}

func init() {
	registerML("LabelEncoder", 1, hostLabelEncoder)
	registerML("LabelEncoder", 2, hostLabelEncoder)
	registerML("LabelEncoder", 4, hostLabelEncoder)
	registerML("Binarizer", 1, hostBinarizer)
	registerML("ArrayFeatureExtractor", 1, hostArrayFeatureExtractor)
	register("TfIdfVectorizer", 9, hostOnly).withHost(hostTfIdf).needsAll()
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("TfIdfVectorizer")
}

// mlOpset is the ai.onnx.ml version the model imports (1 when it imports
// none: ONNX takes an op of an unimported domain at version 1).
func (m *Model) mlOpset() int {
	for _, o := range m.pb.OpsetImport {
		if o.Domain == mlDomain {
			return int(o.Version)
		}
	}
	return 1
}

// resolveML finds the converter of an ai.onnx.ml node (resolveOp's hook).
func (m *Model) resolveML(n *onnxpb.Node, unsupported map[string]int) *opDef {
	want := 0
	for _, v := range mlVersions[n.OpType] {
		if v <= m.mlOpset() {
			want = v
		}
	}
	for _, d := range mlRegistry[n.OpType] {
		if d.since == want {
			return d
		}
	}
	if want > 0 {
		unsupported[fmt.Sprintf("%s:%s version %d", mlDomain, n.OpType, want)]++
	} else {
		unsupported[mlDomain+":"+n.OpType]++
	}
	return nil
}

// labelTable is one LabelEncoder key or value list.
type labelTable struct {
	dt ir.DType
	s  []string
	i  []int64
	f  []float64
}

func (t labelTable) size() int { return max(len(t.s), len(t.i), len(t.f)) }

// labelAttr reads <prefix>_strings/_int64s/_floats/_tensor.
func labelAttr(c *opCtx, prefix string) (labelTable, error) {
	var found []labelTable
	if c.hasAttr(prefix + "_strings") {
		found = append(found, labelTable{dt: String, s: c.attrStrs(prefix+"_strings", nil)})
	}
	if c.hasAttr(prefix + "_int64s") {
		found = append(found, labelTable{dt: ir.Int64, i: c.attrInts(prefix+"_int64s", nil)})
	}
	if c.hasAttr(prefix + "_floats") {
		found = append(found, labelTable{dt: ir.Float32, f: c.attrFloats(prefix+"_floats", nil)})
	}
	if c.hasAttr(prefix + "_tensor") {
		h := c.attrTensor(prefix + "_tensor")
		t := labelTable{dt: h.dt}
		switch {
		case h.dt == String:
			t.s = h.s
		case h.isFloat():
			f, err := h.floats()
			if err != nil {
				return t, err
			}
			t.f = f
		default:
			i, err := h.ints()
			if err != nil {
				return t, err
			}
			t.i = i
		}
		found = append(found, t)
	}
	if len(found) != 1 {
		return labelTable{}, fmt.Errorf("expected exactly one of %s_strings, %s_int64s, %s_floats, %s_tensor; got %d", prefix, prefix, prefix, prefix, len(found))
	}
	return found[0], nil
}

// labelKey is a hashable key: strings as they are, numbers by their value
// (NaN keys match NaN, as the ONNX reference implementation does).
func labelKey(t labelTable, k int) string {
	switch {
	case t.s != nil || t.dt == String:
		return "s" + t.s[k]
	case t.f != nil || isFloatDT(t.dt):
		v := t.f[k]
		if math.IsNaN(v) {
			return "nan"
		}
		if v == 0 {
			v = 0 // -0 and +0 are the same key
		}
		return fmt.Sprintf("f%v", v)
	}
	return fmt.Sprintf("i%d", t.i[k])
}

func hostLabelEncoder(c *opCtx) error {
	x := c.hostIn(0)
	var keys, vals labelTable
	var err error
	if c.def.since == 1 {
		// Version 1: classes_strings maps strings to their index and back;
		// the input type chooses the direction.
		classes := c.attrStrs("classes_strings", nil)
		idx := make([]int64, len(classes))
		for k := range idx {
			idx[k] = int64(k)
		}
		if x.dt == String {
			keys, vals = labelTable{dt: String, s: classes}, labelTable{dt: ir.Int64, i: idx}
		} else {
			keys, vals = labelTable{dt: ir.Int64, i: idx}, labelTable{dt: String, s: classes}
		}
	} else {
		if keys, err = labelAttr(c, "keys"); err != nil {
			return err
		}
		if vals, err = labelAttr(c, "values"); err != nil {
			return err
		}
	}
	if keys.size() != vals.size() {
		return fmt.Errorf("%d keys but %d values", keys.size(), vals.size())
	}
	if (x.dt == String) != (keys.dt == String) || (x.dt != String && isFloatDT(x.dt) != isFloatDT(keys.dt)) {
		return fmt.Errorf("input X is %s but the keys are %s", dtypeName(x.dt), dtypeName(keys.dt))
	}
	table := make(map[string]int, keys.size())
	for k := range keys.size() {
		if _, dup := table[labelKey(keys, k)]; !dup {
			table[labelKey(keys, k)] = k
		}
	}
	// The default: default_tensor (version 4), else default_<type>.
	def := labelTable{dt: vals.dt}
	switch {
	case c.hasAttr("default_tensor"):
		h := c.attrTensor("default_tensor")
		if h.size() != 1 || h.dt != vals.dt {
			return fmt.Errorf("default_tensor: expected one %s, got %s", dtypeName(vals.dt), h)
		}
		switch {
		case h.dt == String:
			def.s = h.s
		case h.isFloat():
			def.f, _ = h.floats()
		default:
			def.i, _ = h.ints()
		}
	case vals.dt == String:
		def.s = []string{c.attrString("default_string", "_Unused")}
	case isFloatDT(vals.dt):
		def.f = []float64{c.attrFloat("default_float", math.Copysign(0, -1))}
	default:
		def.i = []int64{c.attrInt("default_int64", -1)}
	}
	// Look every element up by its key.
	n := x.size()
	probe := labelTable{dt: x.dt}
	switch {
	case x.dt == String:
		probe.s = x.s
	case x.isFloat():
		if probe.f, err = x.floats(); err != nil {
			return err
		}
	default:
		if probe.i, err = x.ints(); err != nil {
			return err
		}
	}
	pick := func(k int) (labelTable, int) {
		if j, ok := table[labelKey(probe, k)]; ok {
			return vals, j
		}
		return def, 0
	}
	switch {
	case vals.dt == String:
		out := make([]string, n)
		for k := range n {
			t, j := pick(k)
			out[k] = t.s[j]
		}
		c.setHost(0, hostStrings(x.dims, out))
	case isFloatDT(vals.dt):
		out := make([]float64, n)
		for k := range n {
			t, j := pick(k)
			out[k] = t.f[j]
		}
		c.setHost(0, newHostFloats(vals.dt, x.dims, out))
	default:
		out := make([]int64, n)
		for k := range n {
			t, j := pick(k)
			out[k] = t.i[j]
		}
		c.setHost(0, newHostInts(vals.dt, x.dims, out))
	}
	return nil
}

func hostBinarizer(c *opCtx) error {
	x := c.hostIn(0)
	if x.dt == String {
		return fmt.Errorf("input X: expected numbers, got STRING")
	}
	thr := c.attrFloat("threshold", 0)
	f, err := x.floats()
	if err != nil {
		return err
	}
	out := make([]float64, len(f))
	for k, v := range f {
		switch {
		case math.IsNaN(v):
			out[k] = v // NaN compares false and stays NaN in the reference
		case v > thr:
			out[k] = 1
		}
	}
	if x.isFloat() {
		c.setHost(0, newHostFloats(x.dt, x.dims, out))
		return nil
	}
	h, err := newHostFloats(ir.Float64, x.dims, out).castTo(x.dt)
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func hostArrayFeatureExtractor(c *opCtx) error {
	x := c.hostIn(0)
	ind, err := c.hostIn(1).ints()
	if err != nil {
		return err
	}
	if x.rank() == 0 {
		return fmt.Errorf("input X: expected rank 1 or more, got a scalar")
	}
	last := x.dims[x.rank()-1]
	for _, j := range ind {
		if j < 0 || j >= int64(last) {
			return fmt.Errorf("input Y: index %d out of range [0, %d)", j, last)
		}
	}
	outer := x.size() / max(last, 1)
	if last == 0 {
		outer = numElems(x.dims[:x.rank()-1])
	}
	dims := append(append([]int{}, x.dims[:x.rank()-1]...), len(ind))
	if x.rank() == 1 {
		dims = []int{1, len(ind)}
	}
	idx := make([]int, 0, outer*len(ind))
	for o := range outer {
		for _, j := range ind {
			idx = append(idx, o*last+int(j))
		}
	}
	h, err := x.gatherFlat(dims, idx)
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

// hostTfIdf counts, per row, the pool's n-grams of lengths min_gram_length
// to max_gram_length whose items are max_skip_count+1 or fewer apart
// (unigrams once), and writes them at ngram_indexes as TF, IDF or TFIDF.
func hostTfIdf(c *opCtx) error {
	x := c.hostIn(0)
	minN, maxN := int(c.attrInt("min_gram_length", 0)), int(c.attrInt("max_gram_length", 0))
	maxSkip := int(c.attrInt("max_skip_count", 0))
	mode := c.attrString("mode", "")
	counts := c.attrInts("ngram_counts", nil)
	indexes := c.attrInts("ngram_indexes", nil)
	weights := c.attrFloats("weights", nil)
	if minN < 1 || maxN < minN || maxSkip < 0 {
		return fmt.Errorf("gram lengths [%d, %d] and max_skip_count %d: expected 1 <= min <= max and skip >= 0", minN, maxN, maxSkip)
	}
	if mode != "TF" && mode != "IDF" && mode != "TFIDF" {
		return fmt.Errorf("mode %q: expected TF, IDF or TFIDF", mode)
	}
	// Pool items as keys.
	var pool []string
	if x.dt == String {
		if c.hasAttr("pool_int64s") || !c.hasAttr("pool_strings") {
			return fmt.Errorf("STRING input needs pool_strings")
		}
		pool = c.attrStrs("pool_strings", nil)
	} else {
		if !c.hasAttr("pool_int64s") {
			return fmt.Errorf("%s input needs pool_int64s", dtypeName(x.dt))
		}
		for _, v := range c.attrInts("pool_int64s", nil) {
			pool = append(pool, fmt.Sprint(v))
		}
	}
	var items []string
	if x.dt == String {
		items = x.s
	} else {
		iv, err := x.ints()
		if err != nil {
			return err
		}
		for _, v := range iv {
			items = append(items, fmt.Sprint(v))
		}
	}
	// n-gram (joined with a separator no item contains after quoting) -> its
	// position among the pool's n-grams.
	gramIndex := map[string]int{}
	gram := 0
	for level := range counts {
		n := level + 1
		start := int(counts[level])
		end := len(pool)
		if level+1 < len(counts) {
			end = int(counts[level+1])
		}
		if start < 0 || end > len(pool) || start > end || (end-start)%n != 0 {
			return fmt.Errorf("ngram_counts %v do not split a pool of %d into %d-grams", counts, len(pool), n)
		}
		for p := start; p < end; p += n {
			gramIndex[joinGram(pool[p:p+n])] = gram
			gram++
		}
	}
	if len(indexes) != gram {
		return fmt.Errorf("%d ngram_indexes for %d n-grams", len(indexes), gram)
	}
	width := 0
	for _, v := range indexes {
		if v < 0 {
			return fmt.Errorf("negative ngram index %d", v)
		}
		width = max(width, int(v)+1)
	}
	if len(weights) > 0 && len(weights) != gram {
		return fmt.Errorf("%d weights for %d n-grams", len(weights), gram)
	}
	var rows, cols int
	switch x.rank() {
	case 1:
		rows, cols = 1, x.dims[0]
	case 2:
		rows, cols = x.dims[0], x.dims[1]
	default:
		return fmt.Errorf("input X: expected rank 1 or 2, got %v", x.dims)
	}
	out := make([]float64, rows*width)
	for r := range rows {
		row := items[r*cols : (r+1)*cols]
		cnt := make([]float64, gram)
		for n := minN; n <= maxN; n++ {
			for skip := 0; skip <= maxSkip; skip++ {
				if n == 1 && skip > 0 {
					break // a unigram has no gaps: count it once
				}
				step := skip + 1
				for i := 0; i+(n-1)*step < len(row); i++ {
					g := make([]string, n)
					for j := range n {
						g[j] = row[i+j*step]
					}
					if k, ok := gramIndex[joinGram(g)]; ok {
						cnt[k]++
					}
				}
			}
		}
		for k, v := range cnt {
			w := 1.0
			if len(weights) > 0 {
				w = weights[k]
			}
			switch mode {
			case "TF":
				out[r*width+int(indexes[k])] = v
			case "IDF":
				if v > 0 {
					out[r*width+int(indexes[k])] = w
				}
			case "TFIDF":
				out[r*width+int(indexes[k])] = v * w
			}
		}
	}
	dims := []int{width}
	if x.rank() == 2 {
		dims = []int{rows, width}
	}
	c.setHost(0, newHostFloats(ir.Float32, dims, out))
	return nil
}

// joinGram makes one map key of an n-gram's items.
func joinGram(items []string) string {
	q := make([]string, len(items))
	for k, s := range items {
		q[k] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, "\x00")
}
