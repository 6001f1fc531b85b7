// Package serve is tensorbridge's inference server: ONNX models over the
// Open Inference Protocol v2, LLM checkpoints (package llm) over OpenAI's
// API. The v2 protocol is KServe's v2 API, which Triton's clients speak,
// over HTTP/REST with the binary tensor extension and over gRPC
// (inference.GRPCInferenceService, plus grpc.health.v1).
//
// Every model runs through the same tensorbridge.Model API users call: one
// replica per device (tensorbridge.OnDevice), chosen least-loaded. Requests
// whose shapes agree apart from the batch dimension are merged, in arrival
// order, up to the model's largest batch bucket within its max queue delay,
// run as one batch (the runtime pads it to the compiled bucket) and split
// back. Requests are merged only along a dimension the runtime's bucket plan
// pads, that is, one along which rows are independent; otherwise each runs
// on its own with its exact shape. A full queue answers 503 at once; a
// request past its deadline answers 503; a request whose caller goes away
// leaves the queue. The server is ready once warm-up has compiled the
// configured batch sizes (with Options.BackgroundWarmup, the smallest; the
// others compile while it serves); Run drains on cancellation: it stops accepting,
// finishes what it accepted within the drain timeout, and returns nil.
//
// Protocol sources: docs/predict-api/v2/required_api.md and
// grpc_predict_v2.proto in https://github.com/kserve/kserve; Triton's
// docs/protocol/extension_binary_data.md in
// https://github.com/triton-inference-server/server.
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/serve/inferencepb"
)

// Platform is the model platform the metadata reports ("<project>_<format>").
const Platform = "onnx_onnxv1"

// ModelVersion is the one version of every model ("" also addresses it).
const ModelVersion = "1"

// Options configure a Server.
type Options struct {
	// Backend runs the models; the caller opens and closes it.
	Backend *tensorbridge.Backend
	Models  []ModelSource
	// Generators are checkpoint directories served for text generation
	// (generate.go, openai.go), on device 0.
	Generators []GeneratorSource
	// StreamDrainTimeout bounds how long a drain lets running generations
	// go on before cancelling them (default 10s, at most DrainTimeout).
	StreamDrainTimeout time.Duration
	// Replicas is how many devices each model is loaded on, from device 0
	// (default: all of the backend's devices). The replicas of a model
	// share its compiled shapes (tensorbridge.Model.Replica).
	Replicas int
	// BackgroundWarmup makes Warmup mark a model ready once its smallest
	// batch bucket is compiled and compile the other buckets in the
	// background while it serves (coldstart.go); a batch whose bucket is
	// not compiled yet runs in the next larger compiled one. Off, Warmup
	// compiles every bucket before ready. Models that do not merge
	// requests along a batch dimension always warm up whole. Generators
	// get llm.EngineOptions.BackgroundCompile: ready once the smallest
	// prompt, batch and context buckets' programs are compiled.
	BackgroundWarmup bool
	// DrainTimeout bounds how long Run waits for accepted requests after
	// its context ends (default 30s).
	DrainTimeout time.Duration
	// MaxMessageBytes bounds a request body, REST or gRPC: a larger REST
	// body is answered 413 (a declared Content-Length over it before any
	// of the body is read), a larger gRPC message ResourceExhausted (from
	// its length prefix, before it is read) (default 512 MiB).
	MaxMessageBytes int
	// MaxInflightBytes bounds the bytes all requests hold at once: bodies
	// as they are read, gRPC messages from their length prefix on (before
	// they are read), and the tensors decoded from them. A request that
	// does not fit is answered 503 with Retry-After (gRPC
	// ResourceExhausted) (default 2 GiB, and at least MaxMessageBytes).
	MaxInflightBytes int64
	// Limits holds the connection limits and timeouts (zero values take
	// the documented defaults).
	Limits Limits
	// TLS, when set, serves HTTPS and gRPC over TLS with it (mutual TLS
	// when it requires client certificates); TLSConfig builds one.
	TLS *tls.Config
	// AuthTokenFile, when set, requires "Authorization: Bearer <token>"
	// (gRPC metadata "authorization") on inference, metadata and metrics,
	// the token being the file's content with surrounding whitespace
	// trimmed, read again when the file changes. Health and readiness
	// stay open for probes.
	AuthTokenFile string
	// MetricsPublic leaves /metrics open when AuthTokenFile is set.
	MetricsPublic bool
	// Logger receives the server's structured logs (default slog.Default()).
	Logger *slog.Logger
	// Name and Version are what server metadata reports.
	Name, Version string
}

// Server serves models over the v2 protocol. Create it with New, serve with
// Run (or mount Handler and RegisterGRPC yourself and call Warmup), and
// release it with Close.
type Server struct {
	opts    Options
	backend *tensorbridge.Backend
	models  map[string]*model
	order   []string
	log     *slog.Logger
	reg     *prometheus.Registry
	met     *metrics
	health  *health.Server
	budget  *byteBudget
	auth    *tokenFile // nil: no authentication
	conns   *connLimit
	est     map[*model]*runEstimate
	authLog struct {
		sync.Mutex
		last    time.Time
		refused int
	}
	gens      map[string]*generator
	genOrder  []string
	genCtx    context.Context // cancelled at the stream drain deadline
	genCancel context.CancelFunc
	ready     atomic.Bool
	draining  atomic.Bool
	bg        *background // warm-ups that continue after ready (coldstart.go)
	stop      chan struct{}
	wg        sync.WaitGroup
	closed    sync.Once
	wholeOnce sync.Once // recvWhole's warning
}

// New loads every model on its replicas and starts its batcher. The
// server is live but not ready until Warmup has run.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Backend == nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve", Err: errors.New("no backend")}
	}
	if len(opts.Models) == 0 && len(opts.Generators) == 0 {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve", Err: errors.New("no models to serve")}
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.StreamDrainTimeout <= 0 {
		opts.StreamDrainTimeout = 10 * time.Second
	}
	opts.StreamDrainTimeout = min(opts.StreamDrainTimeout, opts.DrainTimeout)
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 512 << 20
	}
	if opts.MaxInflightBytes <= 0 {
		opts.MaxInflightBytes = max(2<<30, int64(opts.MaxMessageBytes))
	}
	if opts.MaxInflightBytes < int64(opts.MaxMessageBytes) {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve",
			Err: fmt.Errorf("the in-flight byte budget (%d) is below the largest request (%d): such a request could never run", opts.MaxInflightBytes, opts.MaxMessageBytes)}
	}
	if err := opts.Limits.validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Name == "" {
		opts.Name = "tensorbridge"
	}
	ndev := len(opts.Backend.Devices())
	if ndev == 0 {
		return nil, &errs.UnavailableError{Name: opts.Backend.Name(), Reason: "the backend has no devices"}
	}
	reps := opts.Replicas
	if reps <= 0 {
		reps = ndev
	}
	if reps > ndev {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve",
			Err: fmt.Errorf("%d replicas asked, but backend %s has %d device(s)", reps, opts.Backend.Name(), ndev)}
	}
	devices := make([]int, reps)
	for i := range devices {
		devices[i] = i
	}
	s := &Server{opts: opts, backend: opts.Backend, models: map[string]*model{}, log: opts.Logger,
		reg: prometheus.NewRegistry(), health: health.NewServer(), stop: make(chan struct{}),
		budget: &byteBudget{max: opts.MaxInflightBytes}, est: map[*model]*runEstimate{}, gens: map[string]*generator{},
		bg: newBackground()}
	s.genCtx, s.genCancel = context.WithCancel(context.Background())
	if opts.AuthTokenFile != "" {
		tf, err := newTokenFile(opts.AuthTokenFile, opts.Logger)
		if err != nil {
			return nil, err
		}
		s.auth = tf
	}
	s.opts.Limits = s.opts.Limits.withDefaults(opts.Models)
	s.conns = newConnLimit(s.opts.Limits.MaxConnections)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.met = newMetrics(s.reg, s)
	for _, src := range opts.Models {
		if src.Name == "" {
			src.Name = strings.TrimSuffix(filepath.Base(src.Path), filepath.Ext(src.Path))
		}
		if _, dup := s.models[src.Name]; dup {
			s.closeModels()
			return nil, &errs.Error{Kind: errs.InvalidArgument, Op: "serve",
				Err: fmt.Errorf("two models are named %q (%s and %s)", src.Name, s.models[src.Name].path, src.Path)}
		}
		m, err := loadModel(ctx, opts.Backend, src, devices, s.log)
		if err != nil {
			s.closeModels()
			return nil, err
		}
		m.met = s.met.forModel(m)
		m.q = newQueue(m.cfg.MaxQueueSize, func(n int) { m.met.depth.Set(float64(n)) })
		s.est[m] = &runEstimate{}
		s.models[m.name] = m
		s.order = append(s.order, m.name)
		s.health.SetServingStatus(m.name, healthpb.HealthCheckResponse_NOT_SERVING)
		s.log.Info("model loaded", m.describe()...)
	}
	if err := s.loadGenerators(ctx); err != nil {
		s.closeModels()
		return nil, err
	}
	for _, m := range s.models {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); m.dispatch(s.stop) }()
	}
	return s, nil
}

// Warmup compiles every model's configured shapes, once for all of its
// replicas, then marks the server ready; with Options.BackgroundWarmup,
// each model's smallest batch bucket, the rest compiling in the background
// until done or Close.
func (s *Server) Warmup(ctx context.Context) error {
	for _, name := range s.order {
		m := s.models[name]
		if err := s.warmModel(ctx, m); err != nil {
			return err
		}
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	for _, name := range s.genOrder {
		if err := s.gens[name].warmup(ctx, s.log); err != nil {
			return err
		}
	}
	s.ready.Store(true)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.log.Info("ready", "models", s.order, "generators", s.genOrder)
	return nil
}

// warmModel warms m up, in the background after its smallest bucket when
// the options ask for it and m qualifies.
func (s *Server) warmModel(ctx context.Context, m *model) error {
	if s.opts.BackgroundWarmup {
		rest, ok, err := m.warmupInBackground(ctx)
		if err != nil {
			return err
		}
		if ok {
			s.bg.start(rest)
			return nil
		}
	}
	return m.warmup(ctx)
}

// Ready says whether the server takes inference requests: warm and not
// draining.
func (s *Server) Ready() bool { return s.ready.Load() && !s.draining.Load() }

// Models lists the served model names, in the order given.
func (s *Server) Models() []string { return slices.Clone(s.order) }

// NewGRPCServer returns a gRPC server with the inference and health
// services registered, every request message read within the in-flight
// byte budget before it is accepted (grpcrecv.go: the message limit at
// MaxMessageBytes, a static 64 KiB stream window, the token checked before
// the message is read), the stream, keepalive and handshake limits of
// Options.Limits, the read timeout on receiving each RPC's request message
// (see recvGuard), and TLS when Options.TLS is set. opts come after these
// and override them, except that they must not set grpc.InTapHandle
// (grpc-go panics on a second one); unary interceptors among them do not
// run for the services registered here (they are served as streams, see
// budgetedUnary): use stream interceptors.
func (s *Server) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	lim := s.opts.Limits
	base := []grpc.ServerOption{grpc.MaxRecvMsgSize(s.opts.MaxMessageBytes), grpc.MaxSendMsgSize(s.opts.MaxMessageBytes),
		grpc.MaxConcurrentStreams(uint32(lim.GRPCMaxStreams)),
		grpc.InitialWindowSize(recvWindow), grpc.InitialConnWindowSize(16 << 20),
		grpc.ConnectionTimeout(lim.ReadHeaderTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: lim.GRPCMinPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: lim.IdleTimeout}),
		grpc.InTapHandle(s.grpcRecvTap),
		grpc.ChainUnaryInterceptor(grpcRecvUnary, s.grpcAuthUnary), grpc.ChainStreamInterceptor(s.grpcRecvStream, s.grpcAuthStream)}
	if s.opts.TLS != nil {
		base = append(base, grpc.Creds(credentials.NewTLS(s.opts.TLS)))
	}
	gs := grpc.NewServer(append(base, opts...)...)
	gs.RegisterService(s.budgeted(&inferencepb.GRPCInferenceService_ServiceDesc), &grpcService{s: s})
	gs.RegisterService(s.budgeted(&healthpb.Health_ServiceDesc), s.health)
	return gs
}

// RegisterGRPC registers inference.GRPCInferenceService and
// grpc.health.v1 on gs as their generated code does: grpc-go then reads
// each request message whole before the budget sees it (only the decoded
// message is reserved). NewGRPCServer's server reads them within it.
func (s *Server) RegisterGRPC(gs *grpc.Server) {
	inferencepb.RegisterGRPCInferenceServiceServer(gs, &grpcService{s: s})
	healthpb.RegisterHealthServer(gs, s.health)
}

// Run serves REST on httpLn and gRPC on grpcLn (either may be nil), warms
// the models up, and serves until ctx ends. Then it drains: readiness goes
// false, the listeners close, accepted requests finish within
// DrainTimeout, and Run returns nil (or the first serving error). It does
// not Close the server.
func (s *Server) Run(ctx context.Context, httpLn, grpcLn net.Listener) error {
	if httpLn == nil && grpcLn == nil {
		return &errs.Error{Kind: errs.InvalidArgument, Op: "serve", Err: errors.New("no listener")}
	}
	errc := make(chan error, 3)
	var hs *http.Server
	if httpLn != nil {
		hs = s.NewHTTPServer()
		ln := s.conns.wrap(httpLn)
		go func() {
			var err error
			if hs.TLSConfig != nil {
				err = hs.ServeTLS(ln, "", "")
			} else {
				err = hs.Serve(ln)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("http: %w", err)
			}
		}()
		s.log.Info("listening", "protocol", "http", "addr", httpLn.Addr().String(), "tls", s.opts.TLS != nil, "auth", s.auth != nil)
	}
	var gs *grpc.Server
	if grpcLn != nil {
		gs = s.NewGRPCServer()
		grpcLn := s.conns.wrap(grpcLn)
		go func() {
			if err := gs.Serve(grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("grpc: %w", err)
			}
		}()
		s.log.Info("listening", "protocol", "grpc", "addr", grpcLn.Addr().String(), "tls", s.opts.TLS != nil, "auth", s.auth != nil)
	}
	s.warnOpen(httpLn, grpcLn)
	warmCtx, cancelWarm := context.WithCancel(ctx)
	defer cancelWarm()
	go func() {
		if err := s.Warmup(warmCtx); err != nil && warmCtx.Err() == nil {
			errc <- err
		}
	}()
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	cancelWarm()
	s.drain(hs, gs)
	return runErr
}

// warnOpen logs a warning for each listener reachable from other
// machines (not on a loopback address) when nothing authenticates its
// callers: no token and no client certificates.
func (s *Server) warnOpen(lns ...net.Listener) {
	if s.auth != nil || s.opts.TLS != nil && s.opts.TLS.ClientAuth == tls.RequireAndVerifyClientCert {
		return
	}
	for _, ln := range lns {
		if ln == nil {
			continue
		}
		if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
			continue
		}
		s.log.Warn("serving without authentication on a non-loopback address: anyone who reaches it can run inference and read model metadata and metrics; give --auth-token-file (AuthTokenFile) or client certificates (--tls-client-ca)",
			"addr", ln.Addr().String())
	}
}

// drain stops accepting and waits for accepted requests, at most
// DrainTimeout.
func (s *Server) drain(hs *http.Server, gs *grpc.Server) {
	s.draining.Store(true)
	s.health.Shutdown()
	s.startGenDrain()
	s.log.Info("draining: no new requests; waiting for accepted ones", "timeout", s.opts.DrainTimeout.String())
	start := time.Now()
	dctx, cancel := context.WithTimeout(context.Background(), s.opts.DrainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	if hs != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Shutdown(dctx); err != nil {
				s.log.Warn("http drain deadline passed; closing connections", "error", err.Error())
				_ = hs.Close()
			}
		}()
	}
	if gs != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { gs.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-dctx.Done():
				s.log.Warn("grpc drain deadline passed; stopping")
				gs.Stop()
			}
		}()
	}
	wg.Wait()
	s.log.Info("drained", "took", time.Since(start).Round(time.Millisecond).String())
}

// Close stops the batchers, answers anything still queued with
// ErrUnavailable, and releases every replica. Call it after Run returns.
func (s *Server) Close() error {
	s.closed.Do(func() {
		s.draining.Store(true)
		for _, m := range s.models {
			m.ready.Store(false) // later requests answer 503 instead of waiting
		}
		s.bg.stop() // background warm-ups (coldstart.go)
		close(s.stop)
		s.wg.Wait()
		for _, m := range s.models {
			m.q.drain(&errs.UnavailableError{Name: m.name, Reason: "the server is shutting down"})
		}
		s.closeModels()
	})
	return nil
}

func (s *Server) closeModels() {
	for _, m := range s.models {
		m.close()
	}
	for _, g := range s.gens {
		g.close()
	}
	s.genCancel()
}

// lookup finds a model by name and version ("" or "1").
func (s *Server) lookup(name, version string) (*model, error) {
	m, ok := s.models[name]
	if !ok {
		return nil, &errs.Error{Kind: errs.NotFound, Op: "serve",
			Err: fmt.Errorf("unknown model %q; this server serves %s", name, strings.Join(slices.Sorted(maps.Keys(s.models)), ", "))}
	}
	if version != "" && version != ModelVersion {
		return nil, &errs.Error{Kind: errs.NotFound, Op: "serve",
			Err: fmt.Errorf("model %q has no version %q; its only version is %s", name, version, ModelVersion)}
	}
	return m, nil
}
