package serve_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/internal/testreq"
	"github.com/tensorbridge/tensorbridge/llm"
	"github.com/tensorbridge/tensorbridge/serve"
)

// /v1/embeddings against transformers' pooled hidden states
// (embeddings.json, scripts/gen-llm-fixtures.py's embedding_refs).

type embedFixture struct {
	References []struct {
		Text *string   `json:"text"`
		IDs  []int     `json:"ids"`
		Last []float64 `json:"last"`
		Mean []float64 `json:"mean"`
	} `json:"references"`
}

func loadEmbedFixture(t testing.TB, f *llmFixture) *embedFixture {
	raw, err := os.ReadFile(filepath.Join(f.dir, "embeddings.json"))
	if err != nil {
		testreq.Skipf(t, "embeddings.json not in the LLM fixtures (rerun scripts/setup-llm-fixtures.sh): %v", err)
	}
	var e embedFixture
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return &e
}

// embedAnswer is OpenAI's embeddings answer; Embedding is a list of
// numbers or a base64 string.
type embedAnswer struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage map[string]int `json:"usage"`
}

// vectors decodes the answer's embeddings (float lists, or base64 of
// little-endian float32 as OpenAI's client decodes it), checking the
// object fields and the indices.
func (a *embedAnswer) vectors(t *testing.T, model string, b64 bool) [][]float32 {
	t.Helper()
	if a.Object != "list" || a.Model != model {
		t.Fatalf("object %q model %q", a.Object, a.Model)
	}
	out := make([][]float32, len(a.Data))
	for i, d := range a.Data {
		if d.Object != "embedding" || d.Index != i {
			t.Fatalf("data[%d]: object %q index %d", i, d.Object, d.Index)
		}
		if !b64 {
			if err := json.Unmarshal(d.Embedding, &out[i]); err != nil {
				t.Fatalf("data[%d]: %v", i, err)
			}
			continue
		}
		var s string
		if err := json.Unmarshal(d.Embedding, &s); err != nil {
			t.Fatalf("data[%d]: want a base64 string: %v", i, err)
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw)%4 != 0 {
			t.Fatalf("data[%d]: %v (%d bytes)", i, err, len(raw))
		}
		for j := 0; j < len(raw); j += 4 {
			out[i] = append(out[i], math.Float32frombits(binary.LittleEndian.Uint32(raw[j:])))
		}
	}
	return out
}

func maxDiff(got []float32, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	d := 0.0
	for i, w := range want {
		d = math.Max(d, math.Abs(float64(got[i])-w))
	}
	return d
}

// TestOpenAIEmbeddings: every input form, both encodings, equal to
// transformers' last-token embeddings within 1e-4 (the checkpoint has no
// sentence-transformers config), with usage counting the tokens. The
// texts are tokenized with BOS first, as transformers' tokenizer.encode
// does (the references' ids). Injected fault: tokenizing without the
// default special tokens (Encode(t, false)) fails the text cases.
func TestOpenAIEmbeddings(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	ref := loadEmbedFixture(t, f)
	gs := startGen(t, f, serve.Options{})
	var texts []string
	var textIdx, idIdx []int
	for i, r := range ref.References {
		if r.Text != nil {
			texts, textIdx = append(texts, *r.Text), append(textIdx, i)
		} else {
			idIdx = append(idIdx, i)
		}
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	ids := func(idx []int) [][]int {
		var out [][]int
		for _, i := range idx {
			out = append(out, ref.References[i].IDs)
		}
		return out
	}
	all := append(append([]int(nil), textIdx...), idIdx...)
	cases := []struct {
		name, input string
		want        []int // reference indices, in answer order
	}{
		{"string", js(texts[0]), textIdx[:1]},
		{"strings", js(texts), textIdx},
		{"token ids", js(ref.References[idIdx[0]].IDs), idIdx[:1]},
		{"lists of ids", js(ids(all)), all},
	}
	for _, c := range cases {
		for _, format := range []string{"", "float", "base64"} {
			t.Run(c.name+"/"+format, func(t *testing.T) {
				body := fmt.Sprintf(`{"model": %q, "input": %s`, gs.name, c.input)
				if format != "" {
					body += fmt.Sprintf(`, "encoding_format": %q`, format)
				}
				var a embedAnswer
				decodeJSON(t, postJSON(t, gs.url+"/v1/embeddings", body+"}"), 200, &a)
				got := a.vectors(t, gs.name, format == "base64")
				if len(got) != len(c.want) {
					t.Fatalf("%d embeddings, want %d", len(got), len(c.want))
				}
				tokens := 0
				for k, i := range c.want {
					tokens += len(ref.References[i].IDs)
					if d := maxDiff(got[k], ref.References[i].Last); d > 1e-4 {
						t.Errorf("data[%d]: max |diff| from transformers %.3g", k, d)
					}
				}
				if a.Usage["prompt_tokens"] != tokens || a.Usage["total_tokens"] != tokens {
					t.Errorf("usage %v, want %d tokens", a.Usage, tokens)
				}
			})
		}
	}
}

// TestOpenAIEmbeddingsSentenceTransformers: a checkpoint whose
// sentence-transformers config says mean pooling answers the mean
// pooling references, and GeneratorSource.Pooling (--pooling) overrides it.
func TestOpenAIEmbeddingsSentenceTransformers(t *testing.T) {
	src := loadLLMFixture(t, "qwen2")
	ref := loadEmbedFixture(t, src)
	dir := filepath.Join(t.TempDir(), "qwen2-st")
	if err := os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(src.dir)
	for _, e := range ents {
		if err := os.Symlink(filepath.Join(src.dir, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"modules.json": `[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
			{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
			{"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]`,
		"1_Pooling/config.json": `{"word_embedding_dimension": 64, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true,
			"pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_weightedmean_tokens": false,
			"pooling_mode_lasttoken": false, "include_prompt": true}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := ref.References[1]
	for _, tc := range []struct {
		pooling string
		want    []float64
	}{{"", r.Mean}, {"last", r.Last}} {
		t.Run("pooling="+tc.pooling, func(t *testing.T) {
			gs := startGenPooling(t, &llmFixture{dir: dir}, tc.pooling)
			var a embedAnswer
			body, _ := json.Marshal(map[string]any{"model": gs.name, "input": [][]int{r.IDs}})
			decodeJSON(t, postJSON(t, gs.url+"/v1/embeddings", string(body)), 200, &a)
			if d := maxDiff(a.vectors(t, gs.name, false)[0], tc.want); d > 1e-4 {
				t.Errorf("max |diff| from transformers %.3g", d)
			}
		})
	}
}

// startGenPooling is startGen with GeneratorSource.Pooling set (what
// serve's --pooling flag sets).
func startGenPooling(t *testing.T, f *llmFixture, pooling string) *genServer {
	t.Helper()
	o := serve.Options{Backend: openBackend(t, tensorbridge.Settings{}), Logger: quietLogger(t), DrainTimeout: 20 * time.Second,
		Generators: []serve.GeneratorSource{{Dir: f.dir, Engine: llm.EngineOptions{MaxSequences: 2, MaxQueue: 16}, Pooling: llm.Pooling(pooling)}}}
	s, err := serve.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{s: s, httpAddr: hl.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- s.Run(ctx, hl, nil) }()
	t.Cleanup(func() { ts.stop(t) })
	for !s.Ready() {
		select {
		case err := <-ts.done:
			t.Fatalf("server stopped before ready: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return &genServer{testServer: ts, url: "http://" + ts.httpAddr, name: filepath.Base(f.dir), ctx: 128}
}

// TestHostileEmbeddings: requests built to exhaust or crash the endpoint
// are 4xx with OpenAI's error object naming the field, never a 500, and
// 2048 inputs (the most allowed) are answered while completions run.
// Injected faults: without the vocabulary check in llm.Embedder.check
// the ids past the vocabulary (and past int32) were answered 200 on cpu
// (the gather clamps them); without the maxEmbedInputs check, 2049 inputs
// were answered 200.
func TestHostileEmbeddings(t *testing.T) {
	f := loadLLMFixture(t, "qwen2")
	gs := startGen(t, f, serve.Options{MaxMessageBytes: 4 << 20})
	model := fmt.Sprintf("%q", gs.name)
	many := "[" + strings.TrimSuffix(strings.Repeat("[1],", 2049), ",") + "]"
	long := "[" + strings.TrimSuffix(strings.Repeat("7,", 129), ",") + "]"
	cases := []struct {
		name, body string
		code       int
		param      string
	}{
		{"dimensions", `{"model":` + model + `,"input":"x","dimensions":32}`, 400, "dimensions"},
		{"dimensions huge", `{"model":` + model + `,"input":"x","dimensions":1000000000000}`, 400, "dimensions"},
		{"encoding", `{"model":` + model + `,"input":"x","encoding_format":"int8"}`, 400, "encoding_format"},
		{"no input", `{"model":` + model + `}`, 400, "input"},
		{"empty list", `{"model":` + model + `,"input":[]}`, 400, "input"},
		{"empty string", `{"model":` + model + `,"input":["a",""]}`, 400, "input"},
		{"empty id list", `{"model":` + model + `,"input":[[1],[]]}`, 400, "input"},
		{"object input", `{"model":` + model + `,"input":{"a":1}}`, 400, "input"},
		{"mixed list", `{"model":` + model + `,"input":["a",1]}`, 400, "input"},
		{"float ids", `{"model":` + model + `,"input":[1.5,2]}`, 400, "input"},
		{"id over int64", `{"model":` + model + `,"input":[1e300]}`, 400, "input"},
		{"negative id", `{"model":` + model + `,"input":[[1,-3]]}`, 400, ""},
		{"id past the vocabulary", `{"model":` + model + `,"input":[1,99999]}`, 400, ""},
		{"id past int32", `{"model":` + model + `,"input":[4294967301]}`, 400, ""},
		{"2049 inputs", `{"model":` + model + `,"input":` + many + `}`, 400, "input"},
		{"over the context", `{"model":` + model + `,"input":` + long + `}`, 400, "input"},
		{"deep nesting", `{"model":` + model + `,"input":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`, 400, ""},
		{"unknown model", `{"model":"nope","input":"x"}`, 404, ""},
		{"body over the limit", `{"model":` + model + `,"input":"` + strings.Repeat("a", 5<<20) + `"}`, 413, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := oaiErrorBody(t, postJSON(t, gs.url+"/v1/embeddings", c.body), c.code)
			if c.param != "" && (e.Param == nil || *e.Param != c.param) {
				t.Errorf("param %v, want %s: %s", e.Param, c.param, e.Message)
			}
		})
	}
	t.Run("GET is 405", func(t *testing.T) {
		resp, err := http.Get(gs.url + "/v1/embeddings")
		if err != nil {
			t.Fatal(err)
		}
		oaiErrorBody(t, resp, 405)
		if resp.Header.Get("Allow") != http.MethodPost {
			t.Errorf("Allow %q", resp.Header.Get("Allow"))
		}
	})
	t.Run("2048 inputs and generations at once", func(t *testing.T) {
		full := "[" + strings.TrimSuffix(strings.Repeat("[0,5,9],", 2048), ",") + "]"
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for i := range codes {
			wg.Go(func() {
				resp, err := http.Post(gs.url+"/v1/completions", "application/json",
					strings.NewReader(`{"model":`+model+`,"prompt":"The quick","max_tokens":16,"temperature":0}`))
				if err == nil {
					codes[i] = resp.StatusCode
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		var a embedAnswer
		decodeJSON(t, postJSON(t, gs.url+"/v1/embeddings", `{"model":`+model+`,"input":`+full+`}`), 200, &a)
		wg.Wait()
		if codes[0] != 200 || codes[1] != 200 {
			t.Errorf("completions beside the embeddings: status %v", codes)
		}
		if len(a.Data) != 2048 || a.Usage["total_tokens"] != 3*2048 {
			t.Fatalf("%d embeddings, usage %v", len(a.Data), a.Usage)
		}
	})
}
