#!/usr/bin/env bash
# The project's test command (README "Run the tests"; CI runs exactly this).
# It installs what the tests need into per-user caches (idempotent, nothing
# committed), then vets, builds without cgo, and runs every test: the whole
# suite on the embedded cpu backend, the portable API's suite again on XLA's
# CPU compiler (pjrt backend, several host devices), and the ONNX
# conformance runner on both.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
# Everything the tests use is installed now: a test that finds its data or
# plugin missing fails instead of skipping.
export TENSORBRIDGE_REQUIRE_TESTDATA=1

echo "== go vet"
go vet ./...
echo "== CGO_ENABLED=0 go build"
CGO_ENABLED=0 go build ./...
echo "== go test (all packages; portable API on cpu)"
CGO_ENABLED=0 go test -timeout 40m "$@" ./...
echo "== go test (portable API on xla-cpu)"
TENSORBRIDGE_TEST_BACKEND=xla-cpu CGO_ENABLED=0 go test -count=1 -timeout 20m "$@" .
echo "== go test (LLM decode path, context buckets crossed, donation and adapters on xla-cpu)"
TENSORBRIDGE_TEST_BACKEND=xla-cpu CGO_ENABLED=0 go test -count=1 -timeout 20m \
	-run 'TestAgainstTransformers|TestContinuousBatching|TestSlowReaderDoesNotStallOthers|TestBuilderFieldFound|TestDonationWithoutBuilderField|TestServedAdapters|TestLoRADropout|TestRematLoss' "$@" ./llm ./ir
echo "== go test (LLM fine-tuning against transformers + PEFT on xla-cpu)"
TENSORBRIDGE_TEST_BACKEND=xla-cpu CGO_ENABLED=0 go test -count=1 -timeout 20m \
	-run 'TestTrainLLMMatchesPEFT|TestMergeMatchesPEFT|TestTrainLLMRemat' "$@" ./cmd/tensorbridge
echo "== go test -race (runtime concurrency: root, cache, pjrt, internal/capi, cpu engine)"
# The race detector needs cgo; the code under test does not. The root's
# model-level tests are slow under the detector, so it runs the ones about
# concurrency, ownership and shutdown there, and everything elsewhere.
race_root='Concurrent|Close|Closed|Compile|Timeout|Leaves|Bucket|Warmup|DiskCache|RunRejects|Options|WithoutHome'
CGO_ENABLED=1 go test -race -short -count=1 -timeout 20m -run "$race_root" "$@" .
TENSORBRIDGE_TEST_BACKEND=xla-cpu CGO_ENABLED=1 go test -race -short -count=1 -timeout 20m -run "$race_root" "$@" .
CGO_ENABLED=1 go test -race -short -count=1 -timeout 20m "$@" ./cache ./pjrt ./internal/capi ./cpu/...
echo "== go test -tags purego (the cpu engine on its pure-Go kernels, as on an ISA without assembly)"
CGO_ENABLED=0 go test -tags purego -count=1 -timeout 20m "$@" ./cpu/...
echo "== plan: 7B and 70B decoders on v5e, v5p and v6e slices (libtpu, no TPU; a few minutes)"
TB_PLAN_LARGE=1 CGO_ENABLED=0 go test -count=1 -timeout 20m -run TestPlanLlama "$@" ./plan/
echo "== serve e2e (tritonclient over HTTP and gRPC)"; scripts/serve-e2e.sh
echo "== openai e2e (the openai client against a served checkpoint)"; scripts/openai-e2e.sh
