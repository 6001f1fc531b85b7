package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tensorbridge/tensorbridge/internal/oip"
)

// DefaultMaxResponseBytes bounds a response body (REST) or message (gRPC)
// the clients read, unless changed (WithMaxResponseBytes, or gRPC's
// MaxCallRecvMsgSize): a server, or something posing as one, cannot make
// the client allocate without bound.
const DefaultMaxResponseBytes = 512 << 20

// HTTP talks to a server's REST API.
type HTTP struct {
	base    string
	hc      *http.Client
	token   string
	maxBody int64
}

// NewHTTP returns a client for the server at addr ("host:port", or a URL
// with a scheme). A nil hc uses http.DefaultClient.
func NewHTTP(addr string, hc *http.Client) *HTTP {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &HTTP{base: strings.TrimRight(addr, "/"), hc: hc, maxBody: DefaultMaxResponseBytes}
}

// WithToken returns a copy of c that sends "Authorization: Bearer token"
// (for a server started with --auth-token-file).
func (c *HTTP) WithToken(token string) *HTTP {
	d := *c
	d.token = token
	return &d
}

// WithMaxResponseBytes returns a copy of c that reads response bodies of
// at most n bytes (default DefaultMaxResponseBytes); a larger one is an
// error.
func (c *HTTP) WithMaxResponseBytes(n int64) *HTTP {
	d := *c
	d.maxBody = n
	return &d
}

func (c *HTTP) do(ctx context.Context, method, path string, body []byte, header http.Header) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.ContentLength > c.maxBody {
		return nil, nil, fmt.Errorf("response of %d bytes is over the client's limit of %d", resp.ContentLength, c.maxBody)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(b)) > c.maxBody {
		return nil, nil, fmt.Errorf("response over the client's limit of %d bytes", c.maxBody)
	}
	return resp, b, nil
}

func httpError(resp *http.Response, body []byte) error {
	var e oip.ErrorBody
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(body))
	}
	return &Error{Status: resp.StatusCode, Message: e.Error}
}

func (c *HTTP) status(ctx context.Context, path string) (bool, error) {
	resp, _, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return false, err
	}
	return resp.StatusCode == http.StatusOK, nil
}

// Live says whether the server answers.
func (c *HTTP) Live(ctx context.Context) (bool, error) { return c.status(ctx, "/v2/health/live") }

// Ready says whether the server takes inference requests.
func (c *HTTP) Ready(ctx context.Context) (bool, error) { return c.status(ctx, "/v2/health/ready") }

// ModelReady says whether one model takes inference requests.
func (c *HTTP) ModelReady(ctx context.Context, model string) (bool, error) {
	return c.status(ctx, "/v2/models/"+url.PathEscape(model)+"/ready")
}

func (c *HTTP) getJSON(ctx context.Context, path string, v any) error {
	resp, body, err := c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return httpError(resp, body)
	}
	return json.Unmarshal(body, v)
}

// ServerMetadata returns the server's name, version and extensions.
func (c *HTTP) ServerMetadata(ctx context.Context) (*ServerMetadata, error) {
	var md ServerMetadata
	return &md, c.getJSON(ctx, "/v2", &md)
}

// ModelMetadata describes a model.
func (c *HTTP) ModelMetadata(ctx context.Context, model string) (*ModelMetadata, error) {
	var md ModelMetadata
	return &md, c.getJSON(ctx, "/v2/models/"+url.PathEscape(model), &md)
}

// Infer runs one request, binary unless req.JSON.
func (c *HTTP) Infer(ctx context.Context, model string, req *InferRequest) (*InferResponse, error) {
	body, headerLen, err := EncodeHTTPInfer(req)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	if headerLen >= 0 {
		h.Set(oip.HeaderInferenceLength, strconv.Itoa(headerLen))
	}
	resp, rb, err := c.do(ctx, http.MethodPost, "/v2/models/"+url.PathEscape(model)+"/infer", body, h)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, httpError(resp, rb)
	}
	return DecodeHTTPInfer(rb, resp.Header.Get(oip.HeaderInferenceLength))
}

// EncodeHTTPInfer builds a REST infer body; headerLen is the length of its
// JSON part when binary tensors follow, else -1.
func EncodeHTTPInfer(req *InferRequest) (body []byte, headerLen int, err error) {
	jr := oip.InferRequest{ID: req.ID, Parameters: oip.Parameters{}}
	if req.Timeout > 0 {
		jr.Parameters[oip.ParamTimeout] = req.Timeout.Microseconds()
	}
	if !req.JSON {
		jr.Parameters[oip.ParamBinaryOutput] = true
	}
	var bin [][]byte
	for _, t := range req.Inputs {
		in := oip.InputTensor{Name: t.Name, Shape: t.Shape, Datatype: t.Datatype}
		if req.JSON {
			in.Data, err = oip.AppendJSONData(nil, t.Datatype, t.Data)
			if err != nil {
				return nil, 0, fmt.Errorf("input %q: %w", t.Name, err)
			}
		} else {
			in.Parameters = oip.Parameters{oip.ParamBinarySize: len(t.Data)}
			bin = append(bin, t.Data)
		}
		jr.Inputs = append(jr.Inputs, in)
	}
	for _, o := range req.Outputs {
		jr.Outputs = append(jr.Outputs, oip.RequestOutput{Name: o, Parameters: oip.Parameters{oip.ParamBinary: !req.JSON}})
	}
	head, err := json.Marshal(jr)
	if err != nil {
		return nil, 0, err
	}
	if req.JSON {
		return head, -1, nil
	}
	body = head
	for _, b := range bin {
		body = append(body, b...)
	}
	return body, len(head), nil
}

// responseLimits bound a response's JSON structure before it is decoded
// (up to about 2,000 outputs with their parameters), so that what the
// decoder allocates stays a small multiple of the body.
var responseLimits = oip.JSONLimits{Depth: oip.MaxDepth, Objects: 4096, Keys: 65536}

// DecodeHTTPInfer parses a REST infer response body. Each output's shape
// is checked (non-negative, no overflow) and its element count against the
// bytes that carry it before anything is allocated for it.
func DecodeHTTPInfer(body []byte, headerLen string) (*InferResponse, error) {
	head, rest := body, []byte(nil)
	if headerLen != "" {
		n, err := strconv.Atoi(headerLen)
		if err != nil || n < 0 || n > len(body) {
			return nil, fmt.Errorf("response header %s %q is not a length within the %d-byte body", oip.HeaderInferenceLength, oip.Clip(headerLen), len(body))
		}
		head, rest = body[:n], body[n:]
	}
	if err := oip.CheckJSON(head, responseLimits); err != nil {
		return nil, fmt.Errorf("malformed response: %w", err)
	}
	var jr oip.InferResponse
	if err := json.Unmarshal(head, &jr); err != nil {
		return nil, fmt.Errorf("malformed response: %w", err)
	}
	out := &InferResponse{ModelName: jr.ModelName, ID: jr.ID}
	for _, o := range jr.Outputs {
		t := Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape}
		n, err := oip.Elements(o.Shape)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", o.Name, err)
		}
		elem, known := oip.ElemSize(o.Datatype)
		if !known {
			return nil, fmt.Errorf("output %q: datatype %q is not one the client decodes", oip.Clip(o.Name), oip.Clip(o.Datatype))
		}
		if size, ok, err := o.Parameters.Int(oip.ParamBinarySize); err != nil {
			return nil, fmt.Errorf("output %q: %w", o.Name, err)
		} else if ok {
			if size != int64(n)*int64(elem) {
				return nil, fmt.Errorf("output %q: binary_data_size %d, but shape %v of %s takes %d bytes", o.Name, size, o.Shape, o.Datatype, int64(n)*int64(elem))
			}
			if size > int64(len(rest)) {
				return nil, fmt.Errorf("output %q: binary_data_size %d beyond the %d bytes left", o.Name, size, len(rest))
			}
			t.Data, rest = rest[:size:size], rest[size:]
		} else {
			t.Data, err = oip.DecodeJSONData(o.Data, o.Datatype, n)
			if err != nil {
				return nil, fmt.Errorf("output %q: %w", o.Name, err)
			}
		}
		out.Outputs = append(out.Outputs, t)
	}
	return out, nil
}
