package serve

import "github.com/prometheus/client_golang/prometheus"

// Accessors the external tests (package serve_test) use to look inside a
// Server; they are compiled into test binaries only, so they are no part of
// the package's API. Users read the same figures from /metrics.

// Registry is the Prometheus registry of the server's metrics, for tests
// that gather them without scraping /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// CompileMisses is how many specialisations model name's replicas have
// compiled since loading (tensorbridge.Model.CompileStats' misses, summed):
// after ready it stays put unless --allow-compile lets a request compile.
func (s *Server) CompileMisses(name string) (int64, bool) {
	m, ok := s.models[name]
	if !ok {
		return 0, false
	}
	var n int64
	for _, r := range m.replicas {
		if !r.shares { // a replica sharing compiled shapes counts them once, with the first
			n += int64(r.m.CompileStats().Misses)
		}
	}
	return n, true
}
