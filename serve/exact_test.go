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
