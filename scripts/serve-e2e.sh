#!/usr/bin/env bash
# End-to-end test of `tensorbridge serve` with the real tritonclient (HTTP and
# gRPC): builds the binary, starts it on 127.0.0.1 ports the kernel picks,
# runs scripts/serve_e2e.py against testdata/models (reference outputs from
# PyTorch), then sends SIGTERM and requires exit status 0. Loopback only;
# every step is bounded in time.
#
# tritonclient is installed, pinned, into a disposable venv in the user
# cache (delete it at will; it is rebuilt when missing). Python is a setup
# tool here: the server never needs it.
#
#   SERVE_E2E_BACKEND   backend to serve on (default cpu; e.g. xla-cpu)
set -euo pipefail
cd "$(dirname "$0")/.."

TRITONCLIENT_VERSION=2.73.0
backend="${SERVE_E2E_BACKEND:-cpu}"
label="serve e2e"
. scripts/e2e-lib.sh
venv="${XDG_CACHE_HOME:-$HOME/.cache}/tensorbridge/venv-tritonclient-${TRITONCLIENT_VERSION}"
e2e_venv "$venv" 'import tritonclient.http, tritonclient.grpc, numpy' "tritonclient[http,grpc]==${TRITONCLIENT_VERSION}"

"$work/tensorbridge" serve --backend "$backend" --cache-dir off \
	--http 127.0.0.1:0 --grpc 127.0.0.1:0 \
	--buckets "batch=1,2,4,8;sequence=16" --max-queue-delay 2ms \
	testdata/models/mlp.onnx testdata/models/bert_tiny.onnx 2>"$work/serve.log" &
pid=$!

e2e_wait_ready http grpc
http="$(e2e_addr http)" grpc="$(e2e_addr grpc)"
echo "== serve e2e: server on http $http, grpc $grpc ($backend)"

if ! timeout 300 "$venv/bin/python" scripts/serve_e2e.py --http "$http" --grpc "$grpc" --models testdata/models; then
	cat "$work/serve.log" >&2
	exit 1
fi

kill -TERM "$pid"
e2e_wait_exit 60
echo "== serve e2e: SIGTERM drained and exited 0"
