package peft

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/precision"
	"github.com/tensorbridge/tensorbridge/safetensors"
)

// Layer is one adapted module: A [R, In] and B [Out, R], row-major.
type Layer struct {
	Module
	A, B []float32
}

// Adapter is a LoRA adapter: its config and one Layer per targeted
// module, in the base model's module order.
type Adapter struct {
	Config Config
	Layers []Layer
}

// TensorName is the name PEFT saves a module's lora_A ("A") or lora_B
// ("B") weight under in adapter_model.safetensors.
func TensorName(module, which string) string {
	return "base_model.model." + module + ".lora_" + which + ".weight"
}

// Init makes a new adapter for the modules cfg targets, as PEFT
// initialises one (init_lora_weights=True): A Kaiming-uniform with
// a = sqrt(5), which for A's fan-in `in` is the bound 1/sqrt(in)
// (LoraLayer.reset_lora_parameters,
// https://github.com/huggingface/peft/blob/v0.15.2/src/peft/tuners/lora/layer.py,
// and torch.nn.init.kaiming_uniform_,
// https://pytorch.org/docs/stable/nn.init.html: bound = gain·sqrt(3/fan_in),
// gain = sqrt(2/(1+a²)) = sqrt(1/3)), and B zero, so the adapted model
// starts equal to the base. The draws come from Go's PCG seeded with seed
// (A's values, module by module, row-major): the same seed gives the same
// adapter, but not torch's numbers for torch.manual_seed(seed).
func Init(cfg *Config, modules []Module, seed uint64) (*Adapter, error) {
	if err := cfg.Validate(ConfigFile); err != nil {
		return nil, err
	}
	targets, err := Match(cfg, modules)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x7065667420696e69)) // "peft ini"
	a := &Adapter{Config: *cfg}
	for _, m := range targets {
		l := Layer{Module: m, A: make([]float32, cfg.R*m.In), B: make([]float32, m.Out*cfg.R)}
		bound := 1 / math.Sqrt(float64(m.In))
		for i := range l.A {
			l.A[i] = float32((2*rng.Float64() - 1) * bound)
		}
		a.Layers = append(a.Layers, l)
	}
	return a, nil
}

// Read reads the adapter in dir for a base model with the given linear
// modules. The config is checked (ParseConfig), its targets matched
// (Match), and adapter_model.safetensors must hold exactly lora_A
// [r, in] and lora_B [out, r] of every targeted module, in F32, F16 or
// BF16: a tensor for a module the base lacks, a missing one, or one of
// another shape is an errs.ErrInvalidInput error naming the module and
// the shapes (an adapter of another base model).
func Read(dir string, modules []Module) (*Adapter, error) {
	cfgPath := filepath.Join(dir, ConfigFile)
	data, err := readBounded(cfgPath, maxConfigBytes)
	if err != nil {
		return nil, err
	}
	wPath := filepath.Join(dir, WeightsFile)
	f, err := os.Open(wPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return decode(cfgPath, data, wPath, f, st.Size(), modules)
}

// decode is Read on the config's bytes and the weights file's contents
// (size bytes readable from w).
func decode(cfgPath string, cfgData []byte, wPath string, w io.ReaderAt, size int64, modules []Module) (*Adapter, error) {
	cfg, err := ParseConfig(cfgPath, cfgData)
	if err != nil {
		return nil, err
	}
	targets, err := Match(cfg, modules)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	layers, err := readWeights(wPath, w, size, cfg.R, targets)
	if err != nil {
		return nil, err
	}
	return &Adapter{Config: *cfg, Layers: layers}, nil
}

// readBounded reads a whole file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, badField(path, "", fmt.Sprintf("at most %d bytes", limit), "more")
	}
	return data, nil
}

// readHeader reads and checks the safetensors header of the size bytes
// in w, reading no more than the header.
func readHeader(path string, w io.ReaderAt, size int64) (*safetensors.Header, error) {
	head := make([]byte, 8)
	if _, err := w.ReadAt(head, 0); err != nil {
		return safetensors.Parse(path, nil, size) // the short-file error
	}
	if n := binary.LittleEndian.Uint64(head); n <= safetensors.MaxHeaderBytes && n <= uint64(max(size-8, 0)) {
		head = make([]byte, 8+n)
		if _, err := w.ReadAt(head, 0); err != nil {
			return nil, fmt.Errorf("%s: reading the safetensors header: %w", path, err)
		}
	}
	return safetensors.Parse(path, head, size) // refuses a bad length itself
}

// readWeights reads and checks every targeted module's A and B.
func readWeights(path string, f io.ReaderAt, size int64, r int, targets []Module) ([]Layer, error) {
	h, err := readHeader(path, f, size)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	layers := make([]Layer, len(targets))
	for i, m := range targets {
		layers[i].Module = m
		for _, w := range []struct {
			which    string
			rows, cs int
			dst      *[]float32
		}{{"A", r, m.In, &layers[i].A}, {"B", m.Out, r, &layers[i].B}} {
			name := TensorName(m.Name, w.which)
			want[name] = true
			if *w.dst, err = readTensor(f, path, h, name, m, w.rows, w.cs); err != nil {
				return nil, err
			}
		}
	}
	names := make([]string, 0, len(h.Tensors))
	for name := range h.Tensors {
		names = append(names, name)
	}
	sort.Strings(names) // name the same stray tensor every time
	for _, name := range names {
		if !want[name] {
			return nil, &errs.InputError{Name: path, Problem: "name",
				Expected: fmt.Sprintf("only lora_A and lora_B of the %d modules adapter_config.json targets in this base model", len(targets)),
				Got:      fmt.Sprintf("tensor %q (an adapter of another base model, or a feature not implemented)", name)}
		}
	}
	return layers, nil
}

// readTensor reads one [rows, cols] tensor as float32.
func readTensor(f io.ReaderAt, path string, h *safetensors.Header, name string, m Module, rows, cols int) ([]float32, error) {
	t, ok := h.Tensors[name]
	if !ok {
		return nil, &errs.InputError{Name: path, Problem: "name",
			Expected: fmt.Sprintf("tensor %q for module %s of the base model", name, m.Name),
			Got:      "no such tensor (an adapter of another base model?)"}
	}
	if len(t.Shape) != 2 || t.Shape[0] != int64(rows) || t.Shape[1] != int64(cols) {
		return nil, &errs.InputError{Name: path, Problem: "shape",
			Expected: fmt.Sprintf("%s [%d, %d] for module %s (in %d, out %d)", name, rows, cols, m.Name, m.In, m.Out),
			Got:      fmt.Sprintf("%v (an adapter of another base model?)", t.Shape)}
	}
	if t.DType != safetensors.F32 && t.DType != safetensors.F16 && t.DType != safetensors.BF16 {
		return nil, &errs.UnsupportedError{What: "dtype", Name: string(t.DType), Detail: fmt.Sprintf("%s: tensor %q: F32, F16 or BF16 only", path, name)}
	}
	raw := make([]byte, t.Bytes())
	if _, err := f.ReadAt(raw, t.Begin); err != nil {
		return nil, fmt.Errorf("%s: reading tensor %q: %w", path, name, err)
	}
	out := make([]float32, t.Elements)
	for i := range out {
		switch t.DType {
		case safetensors.F32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		case safetensors.F16:
			out[i] = precision.FromFloat16(binary.LittleEndian.Uint16(raw[2*i:]))
		default:
			out[i] = precision.FromBFloat16(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	}
	return out, nil
}

// Write writes the adapter into dir (created if missing) as PEFT 0.15.2's
// save_pretrained does, so that peft.PeftModel.from_pretrained loads it:
// adapter_model.safetensors (float32, module by module A then B,
// metadata {"format": "pt"}) and adapter_config.json. Each file is
// written whole or not at all (temporary file and rename).
func (a *Adapter) Write(ctx context.Context, dir string) error {
	if err := a.check(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ts := make([]safetensors.NamedTensor, 0, 2*len(a.Layers))
	for _, l := range a.Layers {
		ts = append(ts,
			safetensors.Float32Tensor(TensorName(l.Name, "A"), []int64{int64(a.Config.R), int64(l.In)}, l.A),
			safetensors.Float32Tensor(TensorName(l.Name, "B"), []int64{int64(l.Out), int64(a.Config.R)}, l.B))
	}
	if err := safetensors.WriteContext(ctx, filepath.Join(dir, WeightsFile), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	data, err := a.Config.MarshalJSON()
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, ConfigFile), data)
}

// check refuses an adapter whose config is invalid or whose matrices do
// not have the sizes its modules and rank say.
func (a *Adapter) check() error {
	if err := a.Config.Validate(ConfigFile); err != nil {
		return err
	}
	if len(a.Layers) == 0 {
		return badField("adapter", "layers", "at least one adapted module", "none")
	}
	for _, l := range a.Layers {
		if l.In <= 0 || l.Out <= 0 || len(l.A) != a.Config.R*l.In || len(l.B) != l.Out*a.Config.R {
			return &errs.InputError{Name: "adapter module " + l.Name, Problem: "shape",
				Expected: fmt.Sprintf("A [%d, %d] and B [%d, %d]", a.Config.R, l.In, l.Out, a.Config.R),
				Got:      fmt.Sprintf("%d and %d values", len(l.A), len(l.B))}
		}
	}
	return nil
}

// MarshalJSON is adapter_config.json as PEFT 0.15.2 writes it for a LoRA
// adapter: every key of its LoraConfig (auto_mapping only when read), the features this package does
// not implement at their "off" values, sorted and indented by two spaces
// (json.dumps(indent=2, sort_keys=True)).
func (c Config) MarshalJSON() ([]byte, error) {
	var task, base any
	if c.TaskType != "" {
		task = c.TaskType
	}
	if c.BaseModel != "" {
		base = c.BaseModel
	}
	var targets any = c.TargetModules.List
	if c.TargetModules.IsRe {
		targets = c.TargetModules.Regex
	}
	m := map[string]any{
		"alpha_pattern": map[string]any{}, "base_model_name_or_path": base,
		"bias": "none", "corda_config": nil, "eva_config": nil, "exclude_modules": nil, "fan_in_fan_out": false,
		"inference_mode": true, "init_lora_weights": true, "layer_replication": nil, "layers_pattern": nil,
		"layers_to_transform": nil, "loftq_config": map[string]any{}, "lora_alpha": c.Alpha, "lora_bias": false,
		"lora_dropout": c.Dropout, "megatron_config": nil, "megatron_core": "megatron.core", "modules_to_save": nil,
		"peft_type": "LORA", "r": c.R, "rank_pattern": map[string]any{}, "revision": nil,
		"target_modules": targets, "task_type": task, "trainable_token_indices": nil, "use_dora": false,
		"use_rslora": c.UseRSLoRA,
	}
	if c.AutoMapping != nil { // PEFT writes it only for a model without task_type
		m["auto_mapping"] = c.AutoMapping
	}
	return json.MarshalIndent(m, "", "  ")
}

// writeFileAtomic writes data to path through a synced temporary file in
// the same directory and a rename.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
