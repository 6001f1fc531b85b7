package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/internal/testreq"
)

// TestServeMesh: `serve DIR --mesh model=2` on xla-cpu with two host
// devices answers a greedy /v1/completions with transformers' text for
// the llama fixture, and exits 0 when stopped.
func TestServeMesh(t *testing.T) {
	dir, refs := llmFixture(t, "llama")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", dir, "--http", addr, "--grpc", "off", "--backend", "xla-cpu:devices=2",
			"--mesh", "model=2", "--max-context", "128", "--max-sequences", "2"}, &stdout, &stderr)
	}()
	url := "http://" + addr
	for deadline := time.Now().Add(5 * time.Minute); ; {
		select {
		case code := <-done:
			if strings.Contains(stderr.String(), "plugin") {
				testreq.Skipf(t, "xla-cpu: %s", stderr.String())
			}
			t.Fatalf("serve exited %d before ready: %s", code, stderr.String())
		default:
		}
		resp, err := http.Get(url + "/v1/models")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("not ready after 5 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	checked := 0
	for _, r := range refs {
		if r.Chat {
			continue
		}
		body, _ := json.Marshal(map[string]any{"model": "llama", "prompt": r.Text, "max_tokens": len(r.TokenIDs), "temperature": 0})
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(got.Choices) != 1 {
			t.Fatalf("%q: status %d, %v, %+v", r.Text, resp.StatusCode, err, got)
		}
		if got.Choices[0].Text != r.Decoded {
			t.Errorf("%q: text %q, transformers %q", r.Text, got.Choices[0].Text, r.Decoded)
		}
		if checked++; checked == 2 {
			break
		}
	}
	if checked == 0 {
		t.Fatal("no plain-text reference prompt")
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve exited %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "data=1,model=2") {
		t.Errorf("the log does not say the model is on mesh model=2:\n%s", stderr.String())
	}
	// The fixture's 2 KV heads do not split over 4 devices: serve refuses
	// to start, naming the config value.
	code, _, errOut := run(t, "serve", dir, "--http", "127.0.0.1:0", "--grpc", "off", "--backend", "xla-cpu:devices=4", "--mesh", "model=4")
	if code == 0 || !strings.Contains(errOut, "num_key_value_heads = 2") {
		t.Errorf("--mesh model=4: exit %d, stderr %q; want a refusal naming num_key_value_heads = 2", code, errOut)
	}
}
