package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tensorbridge/tensorbridge/errs"
	"github.com/tensorbridge/tensorbridge/internal/oip"
)

// Extensions are the protocol extensions the server reports.
var Extensions = []string{"binary_tensor_data"}

// Handler returns the REST API (every path under /v2) and /metrics, behind
// the token check when Options.AuthTokenFile is set.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"live": true})
	})
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, r *http.Request) {
		ready := s.Ready()
		writeJSON(w, readyStatus(ready), readyBody{Ready: ready, Models: s.warmProgress(), Generators: s.genProgress()})
	})
	mux.HandleFunc("GET /v2", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, oip.ServerMetadata{Name: s.opts.Name, Version: s.opts.Version, Extensions: Extensions})
	})
	for _, prefix := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		mux.HandleFunc("GET "+prefix, s.httpModelMetadata)
		mux.HandleFunc("GET "+prefix+"/ready", s.httpModelReady)
		mux.HandleFunc("POST "+prefix+"/infer", s.httpInfer)
		mux.HandleFunc(prefix+"/infer", postOnly) // any other method: 405
	}
	s.registerGenerate(mux) // openai.go
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s (the API is under /v2)", r.Method, r.URL.Path))
	})
	return s.authHTTP(mux)
}

// postOnly answers a request to an inference path with a method other
// than POST: 405 with Allow: POST (RFC 9110, section 15.5.6), not the 404
// of an unknown path.
func postOnly(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", http.MethodPost)
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: inference takes POST", r.Method, r.URL.Path))
}

// readyBody is /v2/health/ready's answer: the protocol's "ready", and
// each model's warm-up progress (coldstart.go), so that a client waiting
// for readiness sees the batch buckets still compiling.
type readyBody struct {
	Ready  bool                    `json:"ready"`
	Models map[string]warmProgress `json:"models,omitempty"`
	// Generators: each checkpoint's programs, compiled and pending
	// (generate.go).
	Generators map[string]genProgress `json:"generators,omitempty"`
}

// warmProgress is every model's warm-up progress.
func (s *Server) warmProgress() map[string]warmProgress {
	out := make(map[string]warmProgress, len(s.models))
	for name, m := range s.models {
		out[name] = m.progress()
	}
	return out
}

func readyStatus(ready bool) int {
	if ready {
		return http.StatusOK
	}
	return http.StatusServiceUnavailable
}

func (s *Server) httpModelMetadata(w http.ResponseWriter, r *http.Request) {
	if g, err := s.lookupGen(r.PathValue("model"), r.PathValue("version")); err == nil {
		writeJSON(w, http.StatusOK, g.metadata()) // openai.go
		return
	}
	m, err := s.lookup(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, m.metadata())
}

func (s *Server) httpModelReady(w http.ResponseWriter, r *http.Request) {
	if _, err := s.lookupGen(r.PathValue("model"), r.PathValue("version")); err == nil {
		writeJSON(w, readyStatus(s.Ready()), map[string]bool{"ready": s.Ready()})
		return
	}
	m, err := s.lookup(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeErr(w, err)
		return
	}
	ready := m.ready.Load() && !s.draining.Load()
	writeJSON(w, readyStatus(ready), map[string]bool{"ready": ready})
}

// metadata describes the model for the protocol.
func (m *model) metadata() oip.ModelMetadata {
	md := oip.ModelMetadata{Name: m.name, Versions: []string{ModelVersion}, Platform: Platform,
		Inputs: []oip.TensorMetadata{}, Outputs: []oip.TensorMetadata{}}
	for _, s := range m.inputs {
		md.Inputs = append(md.Inputs, oip.TensorMetadata{Name: s.Name, Datatype: Datatype(s.DType), Shape: metadataShape(s)})
	}
	for _, s := range m.outputs {
		md.Outputs = append(md.Outputs, oip.TensorMetadata{Name: s.Name, Datatype: Datatype(s.DType), Shape: metadataShape(s)})
	}
	return md
}

// httpInfer decodes a JSON or binary-extension request, runs it and
// answers in kind: an output is binary when the request asks for it
// (binary_data on the output, or binary_data_output on the request).
//
// Hostile input is stopped as early as it can be: an unknown model is
// answered before the body is read, a declared length over the limit
// before a byte of it is read, and the body is read in chunks reserved in
// the in-flight byte budget as they arrive. Each declared input is checked
// against the model's spec, and its element count against the bytes sent,
// before anything is allocated for it.
func (s *Server) httpInfer(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	m, err := s.lookup(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		s.met.unknownModel.Inc()
		writeErr(w, err)
		return
	}
	res := &reservation{b: s.budget}
	defer res.done()
	req, wire, err := s.readHTTPInfer(r, m, res)
	if err != nil {
		m.met.requests.WithLabelValues(outcome(err)).Inc()
		m.met.duration.Observe(time.Since(start).Seconds())
		writeErr(w, err)
		return
	}
	resp, err := s.inferModel(r.Context(), m, req, start)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeHTTPInfer(w, resp, wire)
}

// readHTTPInfer reads and decodes the body of an infer request for m,
// reserving its bytes (body, then decoded tensors) in res.
func (s *Server) readHTTPInfer(r *http.Request, m *model, res *reservation) (*InferRequest, *wireRequest, error) {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return nil, nil, &UnsupportedMediaError{Encoding: ce}
	}
	limit := int64(s.opts.MaxMessageBytes)
	if r.ContentLength > limit {
		return nil, nil, &TooLargeError{Limit: limit, Got: r.ContentLength}
	}
	body, err := readBody(r.Body, limit, res)
	if err != nil {
		return nil, nil, err
	}
	req, wire, decoded, err := decodeHTTPInfer(body, r.Header.Get(oip.HeaderInferenceLength), specsOf(m))
	if err != nil {
		return nil, nil, err
	}
	if err := res.grow(decoded); err != nil {
		return nil, nil, err
	}
	return req, wire, nil
}

// UnsupportedMediaError says a body came compressed (415; gRPC
// InvalidArgument).
type UnsupportedMediaError struct {
	Encoding string
	Header   string // the header that named it; "" is Content-Encoding
}

func (e *UnsupportedMediaError) Error() string {
	h := e.Header
	if h == "" {
		h = "Content-Encoding"
	}
	return fmt.Sprintf("%s %q is not supported: send the body uncompressed", h, e.Encoding)
}

// wireRequest is what the response needs from the request: which outputs
// are binary.
type wireRequest struct {
	binaryAll bool
	binary    map[string]bool // per output, overriding binaryAll
}

func badRequest(format string, a ...any) error {
	return &errs.Error{Kind: errs.InvalidArgument, Op: "decode request", Err: fmt.Errorf(format, a...)}
}

// decodeHTTPInfer parses a REST infer body for the model whose inputs
// specs describes: JSON, or JSON followed by binary tensors when headerLen
// (the Inference-Header-Content-Length header) is set. Every input's
// declared name, datatype and shape is checked against specs, and its
// element count against the bytes that carry it, before its elements are
// decoded. decoded is the bytes allocated for elements decoded from JSON
// (binary tensors are slices of body).
func decodeHTTPInfer(body []byte, headerLen string, specs *inputSpecs) (req *InferRequest, wire *wireRequest, decoded int64, err error) {
	jsonPart, rest := body, []byte(nil)
	if headerLen != "" {
		n, err := strconv.Atoi(headerLen)
		if err != nil || n < 0 || n > len(body) {
			return nil, nil, 0, badRequest("header %s: %q is not a length within the %d-byte body", oip.HeaderInferenceLength, oip.Clip(headerLen), len(body))
		}
		jsonPart, rest = body[:n], body[n:]
	}
	if err := oip.CheckJSON(jsonPart, specs.jsonLimits()); err != nil {
		return nil, nil, 0, badRequest("malformed JSON request: %v", err)
	}
	var jr oip.InferRequest
	dec := json.NewDecoder(bytes.NewReader(jsonPart))
	if err := dec.Decode(&jr); err != nil {
		return nil, nil, 0, badRequest("malformed JSON request: %v", err)
	}
	if dec.More() {
		return nil, nil, 0, badRequest("malformed JSON request: data after the JSON object")
	}
	if len(jr.Inputs) == 0 {
		return nil, nil, 0, badRequest("the request has no inputs")
	}
	req = &InferRequest{ID: jr.ID}
	if us, ok, err := jr.Parameters.Int(oip.ParamTimeout); err != nil {
		return nil, nil, 0, badRequest("%v", err)
	} else if ok && us > 0 {
		req.Timeout = time.Duration(us) * time.Microsecond
	}
	wire = &wireRequest{binary: map[string]bool{}}
	if b, ok, err := jr.Parameters.Bool(oip.ParamBinaryOutput); err != nil {
		return nil, nil, 0, badRequest("%v", err)
	} else if ok {
		wire.binaryAll = b
	}
	for _, o := range jr.Outputs {
		if _, ok := o.Parameters[oip.ParamClassification]; ok {
			return nil, nil, 0, &errs.InputError{Name: o.Name, Problem: "value",
				Expected: "no classification parameter (the classification extension is not supported)", Got: "classification"}
		}
		req.Outputs = append(req.Outputs, o.Name)
		if b, ok, err := o.Parameters.Bool(oip.ParamBinary); err != nil {
			return nil, nil, 0, badRequest("output %q: %v", o.Name, err)
		} else if ok {
			wire.binary[o.Name] = b
		}
	}
	for _, in := range jr.Inputs {
		dt, shape, n, err := specs.check(in.Name, in.Datatype, in.Shape)
		if err != nil {
			return nil, nil, 0, err
		}
		t := Tensor{Name: in.Name, DType: dt, Shape: shape}
		want := int64(n) * int64(dt.Size())
		size, hasBinary, err := in.Parameters.Int(oip.ParamBinarySize)
		if err != nil {
			return nil, nil, 0, &errs.InputError{Name: in.Name, Problem: "value", Expected: "an integer binary_data_size", Got: err.Error()}
		}
		switch {
		case hasBinary && len(in.Data) > 0:
			return nil, nil, 0, &errs.InputError{Name: in.Name, Problem: "value", Expected: "data or binary_data_size, not both", Got: "both"}
		case hasBinary:
			if size != want {
				return nil, nil, 0, &errs.InputError{Name: in.Name, Problem: "value",
					Expected: fmt.Sprintf("binary_data_size %d (%d %s elements for shape %v)", want, n, in.Datatype, in.Shape), Got: strconv.FormatInt(size, 10)}
			}
			if size > int64(len(rest)) {
				return nil, nil, 0, &errs.InputError{Name: in.Name, Problem: "value",
					Expected: fmt.Sprintf("binary_data_size within the %d binary bytes left", len(rest)), Got: strconv.FormatInt(size, 10)}
			}
			t.Data, rest = rest[:size:size], rest[size:]
		case len(in.Data) == 0:
			return nil, nil, 0, &errs.InputError{Name: in.Name, Problem: "value", Expected: "data (JSON) or binary_data_size (binary)", Got: "neither"}
		default:
			t.Data, err = oip.DecodeJSONData(in.Data, in.Datatype, n)
			if err != nil {
				return nil, nil, 0, dataError(in.Name, in.Datatype, shape, n, err)
			}
			decoded += int64(cap(t.Data))
		}
		req.Inputs = append(req.Inputs, t)
	}
	if len(rest) > 0 {
		return nil, nil, 0, badRequest("%d bytes after the JSON header that no input's binary_data_size accounts for", len(rest))
	}
	return req, wire, decoded, nil
}

// writeHTTPInfer writes the JSON response, followed by the binary outputs
// when any are binary.
func writeHTTPInfer(w http.ResponseWriter, resp *InferResponse, wire *wireRequest) {
	jr := oip.InferResponse{ModelName: resp.ModelName, ModelVersion: ModelVersion, ID: resp.ID}
	var binary [][]byte
	for _, t := range resp.Outputs {
		dt := Datatype(t.DType)
		o := oip.OutputTensor{Name: t.Name, Datatype: dt, Shape: shapeInt64s(t.Shape)}
		bin := wire.binaryAll
		if b, ok := wire.binary[t.Name]; ok {
			bin = b
		}
		if bin {
			o.Parameters = oip.Parameters{oip.ParamBinarySize: len(t.Data)}
			binary = append(binary, t.Data)
		} else {
			data, err := oip.AppendJSONData(nil, dt, t.Data)
			if err != nil {
				writeErr(w, &errs.Error{Kind: errs.Internal, Op: "encode response", Err: err})
				return
			}
			o.Data = data
		}
		jr.Outputs = append(jr.Outputs, o)
	}
	head, err := json.Marshal(jr)
	if err != nil {
		writeErr(w, &errs.Error{Kind: errs.Internal, Op: "encode response", Err: err})
		return
	}
	total := len(head)
	for _, b := range binary {
		total += len(b)
	}
	h := w.Header()
	h.Set("Content-Length", strconv.Itoa(total))
	if len(binary) > 0 {
		h.Set("Content-Type", "application/octet-stream")
		h.Set(oip.HeaderInferenceLength, strconv.Itoa(len(head)))
	} else {
		h.Set("Content-Type", "application/json")
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(head)
	for _, b := range binary {
		_, _ = w.Write(b)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, oip.ErrorBody{Error: msg})
}

// writeErr answers err with its status; a 503 says when to retry.
func writeErr(w http.ResponseWriter, err error) {
	code, _ := status(err)
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter(retryAfterSeconds(err)))
	}
	if code == http.StatusRequestEntityTooLarge {
		w.Header().Set("Connection", "close") // the rest of the body is not read
	}
	writeError(w, code, err.Error())
}
