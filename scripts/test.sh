#!/usr/bin/env bash
# The project's test command (README "Run the tests"; CI runs exactly this).
# It installs what the tests need into per-user caches (idempotent, nothing
# committed), then vets, builds without cgo, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "== go vet"
go vet ./...
echo "== CGO_ENABLED=0 go build"
CGO_ENABLED=0 go build ./...
echo "== go test"
# -p 2: the CI machine has 2 cores; the ONNX conformance floor test is the long pole.
CGO_ENABLED=0 go test -p 2 -timeout 40m "$@" ./...
