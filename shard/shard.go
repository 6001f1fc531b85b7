// Package shard decides how a model is split over a device mesh.
//
// It lays out the mesh (named axes "data" and "model", devices ordered by
// their coordinates so the model axis runs over nearest neighbours) and
// decides, per tensor, which dimension goes over which axis.
//
// Strategies: data parallel (the batch axis of inputs and outputs split
// over "data", weights replicated), tensor parallel in the Megatron pattern
// (attention and MLP input projections split by columns, i.e. by heads and
// by the MLP's inner dimension; output projections split by rows;
// embeddings split by vocabulary, or by hidden with EmbedHidden; the
// output head split by vocabulary), and both at once. Weights are
// recognised by name (Hugging Face conventions for Llama, BERT and GPT-2);
// Rules override or extend that by name pattern. XLA's SPMD partitioner
// inserts the collectives.
package shard

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Axis names of the mesh.
const (
	Data  = "data"
	Model = "model"
)

// Mesh is a device mesh with a data axis and a model axis.
type Mesh struct {
	Data, Model int
}

// Devices is the number of devices the mesh spans.
func (m Mesh) Devices() int { return max(1, m.Data) * max(1, m.Model) }

func (m Mesh) String() string { return fmt.Sprintf("data=%d,model=%d", m.Data, m.Model) }

// ParseMesh reads "data=2,model=4" (either axis may be left out: size 1).
func ParseMesh(s string) (Mesh, error) {
	m := Mesh{Data: 1, Model: 1}
	if strings.TrimSpace(s) == "" {
		return m, fmt.Errorf("shard: empty mesh; expected e.g. data=2,model=4")
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n <= 0 {
			return m, fmt.Errorf("shard: mesh axis %q: expected NAME=SIZE with a positive size", part)
		}
		switch k {
		case Data:
			m.Data = n
		case Model:
			m.Model = n
		default:
			return m, fmt.Errorf("shard: mesh axis %q: the axes are %q and %q", k, Data, Model)
		}
	}
	return m, nil
}

// Rule maps weights whose name matches Pattern to a split: Dim is the
// dimension split over the model axis, or -1 for replicated.
type Rule struct {
	Pattern *regexp.Regexp
	Dim     int
}

// ParseRule reads "PATTERN=DIM" (DIM an integer, negative from the end,
// or "r" for replicated).
func ParseRule(s string) (Rule, error) {
	i := strings.LastIndex(s, "=")
	if i <= 0 {
		return Rule{}, fmt.Errorf("shard: rule %q: expected PATTERN=DIM", s)
	}
	re, err := regexp.Compile(s[:i])
	if err != nil {
		return Rule{}, fmt.Errorf("shard: rule %q: %w", s, err)
	}
	if s[i+1:] == "r" {
		return Rule{Pattern: re, Dim: replicated}, nil
	}
	d, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return Rule{}, fmt.Errorf("shard: rule %q: dimension %q is not an integer or r", s, s[i+1:])
	}
	return Rule{Pattern: re, Dim: d}, nil
}

const replicated = -1 << 30

// Megatron's column- and row-parallel weights, by Hugging Face names.
// Matrices are [in, out] (ONNX MatMul operands): column-parallel splits
// the last dimension, row-parallel the first.
var (
	columnRE = regexp.MustCompile(`(q_proj|k_proj|v_proj|gate_proj|up_proj|query|key|value|intermediate\.dense|fc1|c_fc|c_attn)\.(weight|bias)$`)
	rowRE    = regexp.MustCompile(`(o_proj|down_proj|out_proj|attention\.output\.dense|output\.dense|fc2|c_proj)\.weight$`)
	embedRE  = regexp.MustCompile(`(embed_tokens|word_embeddings|wte)\.weight$`)
	headRE   = regexp.MustCompile(`lm_head\.weight$`)
)

// Plan is the split of one tensor: per dimension the mesh axis it is split
// over, "" for none.
type Plan []string

func (p Plan) String() string {
	parts := make([]string, len(p))
	for i, a := range p {
		if a == "" {
			a = "-"
		}
		parts[i] = a
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Split says whether any dimension is split.
func (p Plan) Split() bool {
	for _, a := range p {
		if a != "" {
			return true
		}
	}
	return false
}

// Options tune the tensor-parallel rules.
type Options struct {
	EmbedHidden bool   // split embeddings by hidden instead of vocabulary
	Rules       []Rule // checked first, in order
	// NamedOnly replicates matrices that neither Rules nor the names
	// recognise, instead of splitting them by their last dimension.
	NamedOnly bool
}

// Weight returns how weight name of dims is split over a mesh with model
// axis size modelN. A dimension that the axis does not divide is not
// split, and the reason is returned.
func Weight(name string, dims []int, modelN int, o Options) (Plan, string) {
	p := make(Plan, len(dims))
	if modelN <= 1 || len(dims) == 0 {
		return p, ""
	}
	dim := replicated
	matched := false
	for _, r := range o.Rules {
		if r.Pattern.MatchString(name) {
			dim, matched = r.Dim, true
			break
		}
	}
	if !matched {
		switch {
		case columnRE.MatchString(name):
			dim = len(dims) - 1
		case rowRE.MatchString(name) && len(dims) == 2:
			dim = 0
		case embedRE.MatchString(name) && len(dims) == 2:
			dim = 0
			if o.EmbedHidden {
				dim = 1
			}
		case headRE.MatchString(name) && len(dims) == 2:
			dim = 1
		case len(dims) >= 2 && !o.NamedOnly:
			// A matrix the names do not place (exporters often call
			// them "onnx::MatMul_242"): split its last dimension, or
			// else its first, whichever the axis divides. The answer is
			// the same either way (XLA adds the collectives); only the
			// communication differs from Megatron's pairing.
			dim = len(dims) - 1
			if dims[dim]%modelN != 0 && dims[0]%modelN == 0 {
				dim = 0
			}
		}
	}
	if dim == replicated {
		return p, ""
	}
	if dim < 0 {
		dim += len(dims)
	}
	if dim < 0 || dim >= len(dims) {
		return p, fmt.Sprintf("%s: dimension out of range for %v; replicated", name, dims)
	}
	if dims[dim]%modelN != 0 {
		return p, fmt.Sprintf("%s: dimension %d (%d) is not a multiple of %d; replicated", name, dim, dims[dim], modelN)
	}
	p[dim] = Model
	return p, ""
}

// Batch returns the split of an input or output whose batch dimension is
// dim 0: over the data axis when dataN divides it.
func Batch(dims []int, dataN int) Plan {
	p := make(Plan, len(dims))
	if dataN > 1 && len(dims) > 0 && dims[0]%dataN == 0 {
		p[0] = Data
	}
	return p
}

// Coords orders devices by their coordinates so that consecutive devices
// are neighbours: last coordinate slowest... first fastest (x, then y,
// then z), then the core on the chip. It returns the device ids in order.
func Coords(ids []int, coords [][]int, cores []int) []int {
	idx := make([]int, len(ids))
	for i := range idx {
		idx[i] = i
	}
	less := func(a, b int) bool {
		ca, cb := coords[a], coords[b]
		for k := max(len(ca), len(cb)) - 1; k >= 0; k-- {
			x, y := at(ca, k), at(cb, k)
			if x != y {
				return x < y
			}
		}
		if cores != nil && cores[a] != cores[b] {
			return cores[a] < cores[b]
		}
		return ids[a] < ids[b]
	}
	sort.SliceStable(idx, func(i, j int) bool { return less(idx[i], idx[j]) })
	out := make([]int, len(ids))
	for i, k := range idx {
		out[i] = ids[k]
	}
	return out
}

func at(c []int, k int) int {
	if k < len(c) {
		return c[k]
	}
	return 0
}
