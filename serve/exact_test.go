package serve_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestExactAnswers (issue 19): a token id outside bert_tiny's 1000-row
// vocabulary is a 400 naming the input and the node (ONNX Runtime raises
// on it; before the change the server answered 200 with the row of id
// 999), and an empty batch of the MLP is a 200 with a (0, 10) output, as
// ONNX Runtime gives (before, the cpu backend answered 500).
func TestExactAnswers(t *testing.T) {
	b := openBackend(t, batchBuckets(t, testBuckets))
	ts := startServer(t, b, testCfg, 1, "mlp", "bert_tiny")
	ids := func(first int) string {
		v := make([]string, 16)
		for k := range v {
			v[k] = "1"
		}
		v[0] = fmt.Sprint(first)
		return "[" + strings.Join(v, ",") + "]"
	}
	bert := func(first int) string {
		return fmt.Sprintf(`{"inputs":[{"name":"input_ids","datatype":"INT64","shape":[1,16],"data":%s},`+
			`{"name":"attention_mask","datatype":"INT64","shape":[1,16],"data":%s}]}`, ids(first), ids(1))
	}
	cases := []struct {
		name, model, body string
		status            int
		says              string
	}{
		{"token id 1000", "bert_tiny", bert(1000), 400, `got 1000 at flat position 0`},
		{"token id -1001", "bert_tiny", bert(-1001), 400, `/tok/Gather`},
		{"token id 999", "bert_tiny", bert(999), 200, `"shape":[1,64]`},
		{"empty batch", "mlp", `{"inputs":[{"name":"x","datatype":"FP32","shape":[0,64],"data":[]}]}`, 200, `"shape":[0,10]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post("http://"+ts.httpAddr+"/v2/models/"+c.model+"/infer", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !json.Valid(body) {
				t.Fatalf("status %d, body not JSON: %q", resp.StatusCode, body)
			}
			if resp.StatusCode != c.status || !strings.Contains(string(body), c.says) {
				t.Fatalf("status %d %s; want %d with %q", resp.StatusCode, body, c.status, c.says)
			}
		})
	}
}

// TestInferMethodNotAllowed: a GET (or PUT) on an inference path is a 405
// with Allow: POST, as RFC 9110 section 15.5.6 requires, not a 404; an
// unknown path stays a 404. Before the change the GET got a 404 "the API
// is under /v2".
func TestInferMethodNotAllowed(t *testing.T) {
	b := openBackend(t, batchBuckets(t, testBuckets))
	ts := startServer(t, b, testCfg, 1, "mlp")
	cases := []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, "/v2/models/mlp/infer", 405, "POST"},
		{http.MethodPut, "/v2/models/mlp/versions/1/infer", 405, "POST"},
		{http.MethodGet, "/v2/models/mlp/nothing", 404, ""},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, "http://"+ts.httpAddr+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow || !json.Valid(body) {
			t.Errorf("%s %s: %d Allow=%q %s; want %d Allow=%q with a JSON error", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), body, c.status, c.allow)
		}
	}
}
