package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/config"
	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/serve"
)

func init() {
	register(command{name: "serve", summary: "serve models over the Open Inference Protocol v2 (HTTP and gRPC) with dynamic batching", run: runServe})
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stderr, "MODEL.onnx... | CHECKPOINT_DIR... | --models DIR [--http ADDR] [--grpc ADDR] [--backend B] [batching flags] [limit, TLS and auth flags] [settings flags]")
	modelsDir := fs.String("models", "", "serve every .onnx file in this directory (model name: the file name without .onnx)")
	httpAddr := fs.String("http", "127.0.0.1:8000", `REST listen address ("" or "off": none)`)
	grpcAddr := fs.String("grpc", "127.0.0.1:8001", `gRPC listen address ("" or "off": none)`)
	backend := fs.String("backend", "", "backend name or auto (default: $TENSORBRIDGE_BACKEND, else auto)")
	replicas := fs.Int("replicas", 0, "devices each model is loaded on, from device 0 (default: every device of the backend)")
	maxBatch := fs.Int("max-batch", 0, "most rows merged into one run; 1 turns batching off (default: the largest --buckets size of the batch dimension, else 8 on cpu and xla-cpu, 32 on accelerators)")
	delay := fs.Duration("max-queue-delay", 2*time.Millisecond, "how long the oldest queued request waits for others to merge with")
	queueSize := fs.Int("max-queue-size", 1024, "requests waiting per model; one more is answered 503 \"queue full\" at once")
	timeout := fs.Duration("request-timeout", 30*time.Second, "default per-request deadline, queueing included (a request's \"timeout\" parameter may shorten it); expiry answers 503")
	concurrency := fs.Int("concurrency", 1, "runs each replica executes at once")
	constWeights := fs.Bool("constant-weights", false, "compile the weights into each batch size's program as constants (default: one copy per replica as device buffers, passed to every program: less memory, faster compiles)")
	warmAll := fs.Bool("warm-all", false, "compile every batch bucket (checkpoint directories: every prefill and decode program) before ready (default: ready once the smallest is compiled; the others compile in the background while it serves, a batch whose bucket is not compiled yet running in the next larger compiled one)")
	allowCompile := fs.Bool("allow-compile", false, "let requests whose shapes warm-up did not compile run anyway, compiling on the request path (default: refuse them with 400 naming the warmed shapes, and refuse to load a model whose shapes warm-up cannot know)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM or SIGINT, how long to wait for accepted requests before exiting")
	logJSON := fs.Bool("log-json", false, "write logs as JSON lines (default: text) to stderr")
	maxReq := fs.Int("max-request-bytes", 512<<20, "largest request: REST body (413 beyond it) and gRPC message (ResourceExhausted)")
	maxInflight := fs.Int64("max-inflight-bytes", 2<<30, "bytes all requests may hold at once (bodies and decoded tensors); a request that does not fit is answered 503 with Retry-After")
	readHeaderTimeout := fs.Duration("read-header-timeout", 10*time.Second, "TLS handshake and request headers (REST), connection setup (gRPC)")
	readTimeout := fs.Duration("read-timeout", 30*time.Second, "whole REST request, body included, and a gRPC request message: a client trickling its body or message is cut off")
	writeTimeout := fs.Duration("write-timeout", 0, "REST request from its headers to the end of its response (default: read timeout + request timeout + 10s)")
	idleTimeout := fs.Duration("idle-timeout", 30*time.Second, "a keep-alive REST connection with no request, or a gRPC connection with no RPC, is closed after this")
	maxConns := fs.Int("max-connections", 10000, "open connections over the HTTP and gRPC ports together; more wait to be accepted (-1: no cap)")
	grpcStreams := fs.Int("grpc-max-streams", 1024, "concurrent RPCs per gRPC connection")
	grpcPing := fs.Duration("grpc-min-ping-interval", 10*time.Second, "shortest keepalive ping interval a gRPC client may use (more often: GOAWAY too_many_pings)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate chain: serve HTTPS and gRPC over TLS (with --tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "PEM CA certificates: require client certificates that chain to them (mutual TLS)")
	tokenFile := fs.String("auth-token-file", "", `require "Authorization: Bearer <token>" on inference, metadata and metrics; the token is this file's content, trimmed, read again when the file changes (health and readiness stay open)`)
	maxContext := fs.Int("max-context", 0, "checkpoint directories: cap the context length in tokens, prompt included (default: the config's max_position_embeddings)")
	kvBytes := fs.Int64("kv-cache-bytes", 0, "checkpoint directories: the paged KV cache's block pool in bytes (default: 512 MiB on CPU backends, else what the memory budget leaves after the weights, at most --max-sequences whole contexts)")
	quantize := fs.String("quantize", "none", "checkpoint directories: none, or int8: the layers' linear projections as int8 with a float32 scale per output channel")
	maxSeqs := fs.Int("max-sequences", 0, "checkpoint directories: sequences generated at once (the batch limit; each also needs the KV-cache blocks of its prompt and max_tokens) (default 16)")
	prefillChunk := fs.Int("prefill-chunk", llm.AutoPrefillChunk, "checkpoint directories: prefill prompts in chunks of N tokens between running decode steps, so a long prompt does not stall them (-1: 64, or 32 or 16 for a shorter context; 0: each prompt whole)")
	prefixCache := fs.Bool("prefix-cache", true, "checkpoint directories, with chunked prefill: reuse the KV cache of earlier prompts' leading chunks for later prompts with the same tokens (answers bitwise unchanged); on unless --prefill-chunk 0")
	maxN := fs.Int("max-n", 0, "checkpoint directories: the most choices (OpenAI's n) one request may ask for, at most 16 and the --max-sequences (default 16)")
	pooling := fs.String("pooling", "", "checkpoint directories: /v1/embeddings pooling, last, mean or cls (default: the checkpoint's sentence-transformers config, else last)")
	var adapters adapterFlags
	fs.Var(&adapters, "adapter", "checkpoint directory: serve the LoRA adapter in PATH (PEFT's files) as model NAME=PATH beside the base model (repeatable; the OpenAI \"model\" field picks it)")
	stream := fs.Duration("stream-drain-timeout", 10*time.Second, "on SIGTERM or SIGINT, how long running generations may go on before they are cancelled")
	metricsPublic := fs.Bool("metrics-public", false, "with --auth-token-file, leave /metrics open")
	profile := fs.String("cpuprofile", "", "write a Go CPU profile of the server's whole run, until it stops, to FILE (go tool pprof)")
	var sf settingsFlags
	addSettingsFlags(fs, &sf)
	var mf meshFlags
	addMeshFlags(fs, &mf)
	if err := parse(fs, reorder(fs, args)); err != nil {
		return err
	}
	if *prefillChunk < llm.AutoPrefillChunk {
		return usageErr("--prefill-chunk %d: want a chunk size, 0 (each prompt whole) or -1 (the default size)", *prefillChunk)
	}
	prefixSet := false
	fs.Visit(func(f *flag.Flag) { prefixSet = prefixSet || f.Name == "prefix-cache" })
	if *prefillChunk == 0 && !prefixSet {
		*prefixCache = false // the default follows chunking; asked for explicitly, the engine refuses it
	}
	quant, err := llm.ParseQuantization(*quantize)
	if err != nil {
		return usageErr("--quantize: %v", err)
	}
	pool, err := llm.ParsePooling(*pooling)
	if err != nil {
		return usageErr("--pooling: %v", err)
	}
	settings, err := sf.settings()
	if err != nil {
		return err
	}
	paths := fs.Args()
	if *modelsDir != "" {
		found, err := filepath.Glob(filepath.Join(*modelsDir, "*.onnx"))
		if err != nil {
			return usageErr("--models %s: %v", *modelsDir, err)
		}
		if len(found) == 0 {
			return usageErr("--models %s: no .onnx files there", *modelsDir)
		}
		sort.Strings(found)
		paths = append(paths, found...)
	}
	if len(paths) == 0 {
		return usageErr("name at least one MODEL.onnx or --models DIR")
	}
	off := func(a string) bool { return a == "" || a == "off" }
	if off(*httpAddr) && off(*grpcAddr) {
		return usageErr("both --http and --grpc are off: nothing to serve on")
	}
	var tlsCfg *tls.Config
	if *tlsCert != "" || *tlsKey != "" || *tlsClientCA != "" {
		if *tlsClientCA != "" && *tlsCert == "" {
			return usageErr("--tls-client-ca needs --tls-cert and --tls-key: mutual TLS runs over TLS")
		}
		if (*tlsCert == "") != (*tlsKey == "") {
			return usageErr("--tls-cert and --tls-key go together")
		}
		if tlsCfg, err = serve.TLSConfig(*tlsCert, *tlsKey, *tlsClientCA); err != nil {
			return cliError(err)
		}
	}
	if *metricsPublic && *tokenFile == "" {
		return usageErr("--metrics-public only matters with --auth-token-file")
	}
	var h slog.Handler = slog.NewTextHandler(stderr, nil)
	if *logJSON {
		h = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(h)

	// SIGTERM (what an orchestrator sends) and SIGINT start the drain.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()

	b, err := tensorbridge.Open(ctx, *backend, tensorbridge.WithSettings(settings), sf.clusterOption())
	if err != nil {
		return err
	}
	defer b.Close()
	printCPUHint(stderr, b.Selection()) // cpuhint.go
	if sf.printConfig {
		fmt.Fprintf(stderr, "backend %s\n%s", b.Name(), b.Settings())
	}
	log.Info("backend", "name", b.Name(), "devices", len(b.Devices()), "selection", b.Selection().Reason)
	cfg := serve.ModelConfig{MaxBatch: *maxBatch, MaxQueueDelay: *delay, MaxQueueSize: *queueSize,
		Timeout: *timeout, Concurrency: *concurrency, AllowCompile: *allowCompile, ConstantWeights: *constWeights}
	// In a multi-process job (a multi-host slice) every worker serves its
	// own devices behind one Service; a mesh wider than this process's
	// devices would need every worker to take part in each run, which
	// serve does not do.
	proc := b.Process()
	if proc.Count > 1 {
		log.Info("multi-process job: this worker serves its own devices; put the workers behind one Service",
			"process_index", proc.Index, "process_count", proc.Count, "addressable_devices", proc.AddressableDevices)
	}
	var srcs []serve.ModelSource
	var gens []serve.GeneratorSource
	if ckpts := countCheckpointDirs(paths); len(adapters) > 0 && ckpts != 1 {
		return usageErr("--adapter needs exactly one checkpoint directory to serve beside, got %d", ckpts)
	}
	for _, p := range paths {
		if serve.IsCheckpointDir(p) { // a Hugging Face checkpoint: generation (serve/openai.go)
			mesh, err := generationMesh(mf, len(b.Devices())) // generate.go: tensor-parallel only
			if err != nil {
				return err
			}
			gens = append(gens, serve.GeneratorSource{Dir: p,
				Load: llm.LoadOptions{Precision: config.Precision(sf.precision), MaxContext: *maxContext, Mesh: mesh, Quantize: quant, Adapters: adapters},
				Engine: llm.EngineOptions{KVCacheBytes: *kvBytes, MaxSequences: *maxSeqs, MaxQueue: *queueSize,
					PrefillChunk: *prefillChunk, PrefixCache: *prefixCache}, Pooling: pool, MaxChoices: *maxN})
			continue
		}
		mesh, err := mf.resolve(ctx, b, p)
		if err != nil {
			return err
		}
		if mesh != nil && proc.Count > 1 && mesh.Devices() > proc.AddressableDevices {
			return fmt.Errorf("--mesh %s needs %d devices; this is process %d of %d with %d addressable: serve runs a mesh within one host only (every worker serves its own devices behind a Service)",
				mesh, mesh.Devices(), proc.Index, proc.Count, proc.AddressableDevices)
		}
		srcs = append(srcs, serve.ModelSource{Name: strings.TrimSuffix(filepath.Base(p), filepath.Ext(p)), Path: p, Config: cfg, Mesh: mesh})
	}
	s, err := serve.New(ctx, serve.Options{Backend: b, Models: srcs, Generators: gens, StreamDrainTimeout: *stream, Replicas: *replicas, DrainTimeout: *drain,
		BackgroundWarmup: !*warmAll, Logger: log, Version: tensorbridge.Version,
		MaxMessageBytes: *maxReq, MaxInflightBytes: *maxInflight,
		Limits: serve.Limits{ReadHeaderTimeout: *readHeaderTimeout, ReadTimeout: *readTimeout, WriteTimeout: *writeTimeout,
			IdleTimeout: *idleTimeout, MaxConnections: *maxConns, GRPCMaxStreams: *grpcStreams, GRPCMinPingInterval: *grpcPing},
		TLS: tlsCfg, AuthTokenFile: *tokenFile, MetricsPublic: *metricsPublic})
	if err != nil {
		return cliError(err)
	}
	defer s.Close()
	var httpLn, grpcLn net.Listener
	if !off(*httpAddr) {
		if httpLn, err = net.Listen("tcp", *httpAddr); err != nil {
			return fmt.Errorf("--http %s: %w", *httpAddr, err)
		}
	}
	if !off(*grpcAddr) {
		if grpcLn, err = net.Listen("tcp", *grpcAddr); err != nil {
			if httpLn != nil {
				_ = httpLn.Close()
			}
			return fmt.Errorf("--grpc %s: %w", *grpcAddr, err)
		}
	}
	if *profile != "" {
		stop, err := startCPUProfile(*profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := s.Run(ctx, httpLn, grpcLn); err != nil {
		return cliError(err)
	}
	log.Info("stopped")
	return nil
}

// cliError drops the "tensorbridge serve" an *errs.Error of package serve
// (Op "serve", "serve tls", "serve auth") opens its message with: main
// already puts "tensorbridge serve: " before every error of the command.
// The error keeps its chain for errors.Is and errors.As.
func cliError(err error) error {
	e, ok := err.(*errs.Error)
	if !ok || e.Backend != "" || e.Err == nil {
		return err
	}
	rest, ok := strings.CutPrefix(e.Op, "serve")
	if !ok || rest != "" && rest[0] != ' ' {
		return err
	}
	msg := e.Err.Error()
	if rest = strings.TrimSpace(rest); rest != "" {
		msg = rest + ": " + msg
	}
	return &commandError{msg: msg, err: err}
}

// commandError is err with another message.
type commandError struct {
	msg string
	err error
}

func (e *commandError) Error() string { return e.msg }
func (e *commandError) Unwrap() error { return e.err }
