package serve

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metric names, in base units with the conventional suffixes
// (prometheus.io/docs/practices/naming).
const (
	MetricRequests     = "tensorbridge_inference_requests_total"
	MetricUnknownModel = "tensorbridge_unknown_model_requests_total"
	MetricRequestDur   = "tensorbridge_request_duration_seconds"
	MetricQueueDur     = "tensorbridge_queue_duration_seconds"
	MetricComputeDur   = "tensorbridge_compute_duration_seconds"
	MetricBatchSize    = "tensorbridge_batch_size"
	MetricPaddedRows   = "tensorbridge_padded_rows_total"
	MetricQueueDepth   = "tensorbridge_queue_depth"
	MetricInflight     = "tensorbridge_inflight_runs"
	MetricCompiled     = "tensorbridge_compiled_specialisations"
	MetricCacheHits    = "tensorbridge_compile_cache_hits_total"
	MetricCacheMisses  = "tensorbridge_compile_cache_misses_total"
	MetricDeviceMemory = "tensorbridge_device_memory_bytes"
	// MetricGRPCRecvTimeouts counts gRPC streams reset because their
	// request message was not received within the read timeout.
	MetricGRPCRecvTimeouts = "tensorbridge_grpc_receive_timeouts_total"
	// MetricGRPCRecvRefused counts gRPC request messages refused from
	// their 5-byte prefix, before any of their bytes were read, by reason:
	// over_budget (the in-flight byte budget had no room for them) or
	// too_large (over MaxMessageBytes).
	MetricGRPCRecvRefused = "tensorbridge_grpc_receive_refused_total"
	// MetricInflightBytes is the bytes requests hold in the in-flight byte
	// budget now (Options.MaxInflightBytes).
	MetricInflightBytes = "tensorbridge_inflight_request_bytes"
)

// metrics are the server's collectors.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	unknownModel prometheus.Counter
	duration     *prometheus.HistogramVec
	queue        *prometheus.HistogramVec
	compute      *prometheus.HistogramVec
	padded       *prometheus.CounterVec
	depth        *prometheus.GaugeVec
	// grpcRecvTimeouts counts gRPC requests cut off while being received.
	grpcRecvTimeouts prometheus.Counter
	// grpcRecvRefused counts gRPC messages refused from their prefix.
	grpcRecvRefused *prometheus.CounterVec
}

// modelMetrics are one model's children of the server's collectors.
type modelMetrics struct {
	requests  *prometheus.CounterVec // by outcome
	duration  prometheus.Observer
	queue     prometheus.Observer
	compute   prometheus.Observer
	batchSize prometheus.Histogram
	padded    prometheus.Counter
	depth     prometheus.Gauge
}

// durationBuckets span 0.5 ms to about 16 s.
var durationBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRequests,
			Help: "Inference requests by model and outcome (success, bad_request, queue_full, overloaded, timeout, canceled, unavailable, error)."},
			[]string{"model", "outcome"}),
		unknownModel: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricUnknownModel,
			Help: "Inference requests naming a model this server does not serve."}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricRequestDur,
			Help: "Time from a request's arrival to its answer, in seconds.", Buckets: durationBuckets}, []string{"model"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricQueueDur,
			Help: "Time a request waited in the queue before its run started, in seconds.", Buckets: durationBuckets}, []string{"model"}),
		compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricComputeDur,
			Help: "Time of one run (one batch) in Model.Run, in seconds.", Buckets: durationBuckets}, []string{"model"}),
		padded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPaddedRows,
			Help: "Rows the runtime added to merged batches to reach a compiled batch size."}, []string{"model"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricQueueDepth,
			Help: "Requests waiting in the model's queue."}, []string{"model"}),
		grpcRecvTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricGRPCRecvTimeouts,
			Help: "gRPC streams reset because their request message was not received within the read timeout (or fell behind the pace that timeout sets)."}),
		grpcRecvRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricGRPCRecvRefused,
			Help: "gRPC request messages refused from their length prefix, before their bytes were read: over_budget or too_large."}, []string{"reason"}),
	}
	for _, r := range []string{"over_budget", "too_large"} {
		m.grpcRecvRefused.WithLabelValues(r) // present at zero from the start
	}
	reg.MustRegister(m.requests, m.unknownModel, m.grpcRecvTimeouts, m.grpcRecvRefused, m.duration, m.queue, m.compute, m.padded, m.depth,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b := s.backend
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricInflightBytes,
			Help: "Bytes requests hold in the in-flight byte budget now (bodies and messages as they are read, decoded tensors)."},
			func() float64 { return float64(s.budget.inUse()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricCacheHits,
			Help: "Compiles this process answered from the on-disk compile cache."},
			func() float64 { return float64(b.CacheStats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricCacheMisses,
			Help: "Compiles this process could not answer from the on-disk compile cache."},
			func() float64 { return float64(b.CacheStats().Misses) }),
		&memoryCollector{s: s, desc: prometheus.NewDesc(MetricDeviceMemory,
			"Device memory as the runtime reports it, by device and kind (in_use, peak, limit); source names where the figure comes from.",
			[]string{"device", "kind", "source"}, nil)},
	)
	return m
}

// forModel makes m's children, its batch-size histogram with the model's
// batch sizes as buckets, and the gauges read from its replicas.
func (mt *metrics) forModel(m *model) *modelMetrics {
	l := prometheus.Labels{"model": m.name}
	sizes := make([]float64, len(m.sizes))
	for i, s := range m.sizes {
		sizes[i] = float64(s)
	}
	if len(sizes) == 0 {
		sizes = []float64{1}
	}
	mm := &modelMetrics{
		requests: mt.requests.MustCurryWith(l),
		duration: mt.duration.With(l), queue: mt.queue.With(l), compute: mt.compute.With(l),
		padded: mt.padded.With(l), depth: mt.depth.With(l),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricBatchSize, ConstLabels: l,
			Help: "Real rows per merged run; the buckets are the model's compiled batch sizes.", Buckets: sizes}),
	}
	for _, o := range []string{"success", "bad_request", "queue_full", "overloaded", "timeout", "canceled", "unavailable", "error"} {
		mm.requests.WithLabelValues(o) // present at zero from the start
	}
	mt.reg.MustRegister(mm.batchSize,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricInflight, ConstLabels: l,
			Help: "Runs in flight over the model's replicas."}, func() float64 {
			var n int64
			for _, r := range m.replicas {
				n += r.inflight.Load()
			}
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricCompiled, ConstLabels: l,
			Help: "Shape specialisations compiled over the model's replicas."}, func() float64 {
			n := 0
			for _, r := range m.replicas {
				if !r.shares { // replicas sharing compiled shapes count them once (loadReplicas)
					n += r.m.Compiled()
				}
			}
			return float64(n)
		}))
	return mm
}

// memoryCollector reads every device's memory figures at scrape time.
type memoryCollector struct {
	s    *Server
	desc *prometheus.Desc
	once sync.Once
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i := range c.s.backend.Devices() {
		ms, err := c.s.backend.MemoryStats(ctx, i)
		if err != nil {
			// A backend without memory statistics (the pure-Go cpu one)
			// reports none, rather than failing every scrape.
			c.once.Do(func() { c.s.log.Info("no device memory metrics", "device", i, "reason", err.Error()) })
			continue
		}
		dev := strconv.Itoa(i)
		for _, kv := range []struct {
			kind string
			v    uint64
		}{{"in_use", ms.BytesInUse}, {"peak", ms.PeakBytesInUse}, {"limit", ms.BytesLimit}} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(kv.v), dev, kv.kind, ms.Source)
		}
	}
}
