package serve

import (
	"fmt"
	"slices"

	"github.com/tensorbridge/tensorbridge/errs"
)

// LoRA adapters served beside a checkpoint (GeneratorSource.Load.Adapters):
// each is a model name of its own in requests (the OpenAI "model" field,
// the v2 path) and in /v1/models, answered by its base model's engine,
// which mixes requests of every adapter and of the base in one batch.

// adapterGen finds the generator serving the adapter named name.
func (s *Server) adapterGen(name string) (*generator, bool) {
	for _, n := range s.genOrder {
		if g := s.gens[n]; slices.Contains(g.model.Adapters(), name) {
			return g, true
		}
	}
	return nil, false
}

// checkAdapterNames refuses an adapter named as a model, or as another
// adapter, already served.
func (s *Server) checkAdapterNames(g *generator) error {
	for _, a := range g.model.Adapters() {
		_, model := s.models[a]
		_, gen := s.gens[a]
		_, other := s.adapterGen(a)
		if model || gen || other || a == g.name {
			return &errs.Error{Kind: errs.InvalidArgument, Op: "serve", Err: fmt.Errorf("adapter %q of %s is named as another model or adapter", a, g.dir)}
		}
	}
	return nil
}
