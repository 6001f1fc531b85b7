package peft

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/tensorbridge/tensorbridge/errs"
)

// Module is a linear module of the base model: its name as transformers
// names it (model.layers.0.self_attn.q_proj) and its weight's input and
// output sizes (the weight is [Out, In]).
type Module struct {
	Name    string
	In, Out int
}

// compile makes the regex a whole-name match, as PEFT's
// check_target_module_exists uses re.fullmatch for a string
// target_modules (https://github.com/huggingface/peft/blob/v0.15.2/src/peft/tuners/tuners_utils.py).
// Go's RE2 syntax lacks some of Python's (look-around, back-references):
// such a regex is refused as unsupported, naming it.
func (t Targets) compile(file string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(`^(?:` + t.Regex + `)$`)
	if err != nil {
		return nil, unsupported(file, "target_modules", fmt.Sprintf("regex %q: Go's regexp cannot compile it (%v)", t.Regex, err))
	}
	return re, nil
}

// matches reports whether the module name is targeted by one list entry:
// the name equals it or ends with "." + it.
func matches(name, entry string) bool {
	return name == entry || strings.HasSuffix(name, "."+entry)
}

// Match returns the modules cfg targets, in the order given. A list entry
// that matches no module, or a regex that matches none, is an
// errs.ErrInvalidInput error naming it and listing the module names that
// exist (their last components, and one full name); so is r ≤ 0.
func Match(cfg *Config, modules []Module) ([]Module, error) {
	if cfg.R <= 0 {
		return nil, badField(ConfigFile, "r", "an integer > 0", fmt.Sprint(cfg.R))
	}
	var re *regexp.Regexp
	if cfg.TargetModules.IsRe {
		var err error
		if re, err = cfg.TargetModules.compile(ConfigFile); err != nil {
			return nil, err
		}
	}
	used := make([]bool, len(cfg.TargetModules.List))
	var out []Module
	for _, m := range modules {
		hit := false
		if re != nil {
			hit = re.MatchString(m.Name)
		}
		for i, e := range cfg.TargetModules.List {
			if matches(m.Name, e) {
				hit, used[i] = true, true
			}
		}
		if hit {
			out = append(out, m)
		}
	}
	if re != nil && len(out) == 0 {
		return nil, noModule(fmt.Sprintf("regex %q", cfg.TargetModules.Regex), modules)
	}
	for i, u := range used {
		if !u {
			return nil, noModule(fmt.Sprintf("%q", cfg.TargetModules.List[i]), modules)
		}
	}
	return out, nil
}

// noModule is the error for a target that names no module of the base.
func noModule(target string, modules []Module) error {
	seen := map[string]bool{}
	var short []string
	for _, m := range modules {
		s := m.Name[strings.LastIndexByte(m.Name, '.')+1:]
		if !seen[s] {
			seen[s] = true
			short = append(short, s)
		}
	}
	sort.Strings(short)
	example := "none"
	if len(modules) > 0 {
		example = "e.g. " + modules[0].Name
	}
	return &errs.InputError{Name: "lora target_modules", Problem: "value",
		Expected: fmt.Sprintf("names of the base model's linear modules (%s; %s)", strings.Join(short, ", "), example),
		Got:      target + ", which matches no module"}
}
