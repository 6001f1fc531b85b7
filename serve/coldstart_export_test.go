package serve

import "context"

// SetBeforeCompile makes model name's warm-up call f before compiling each
// batch bucket (coldstart.go), so that tests decide when a bucket compiles.
// Call it before Warmup.
func SetBeforeCompile(s *Server, name string, f func(ctx context.Context, batch int) error) {
	s.models[name].cold.beforeCompile = f
}
