#!/usr/bin/env bash
# End-to-end test of `tensorbridge serve CHECKPOINT_DIR` with the real
# openai Python client: builds the binary, serves the qwen2 test
# checkpoint (scripts/setup-llm-fixtures.sh makes it) on a 127.0.0.1 port
# the kernel picks, runs scripts/openai_e2e.py (greedy texts against
# transformers', streaming, stop strings, max_tokens, seeds, bad requests),
# which sends SIGTERM with a stream running; the server must then exit 0
# within 15 s. Loopback only; every step is bounded in time.
#
# openai is installed, pinned, into a disposable venv in the user cache
# (rebuilt when missing). Python is a test tool here: the server never
# needs it.
#
#   OPENAI_E2E_BACKEND   backend to serve on (default cpu; e.g. xla-cpu)
#   TENSORBRIDGE_LLM_FIXTURES   the fixtures (default ~/.cache/tensorbridge/llm-fixtures)
set -euo pipefail
cd "$(dirname "$0")/.."

OPENAI_VERSION=2.54.0
backend="${OPENAI_E2E_BACKEND:-cpu}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tensorbridge"
checkpoint="${TENSORBRIDGE_LLM_FIXTURES:-$cache/llm-fixtures}/qwen2"
if [ ! -f "$checkpoint/reference.json" ]; then
	echo "openai e2e: no test checkpoint at $checkpoint: run scripts/setup-llm-fixtures.sh" >&2
	exit 1
fi
venv="$cache/venv-openai-${OPENAI_VERSION}"
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
	echo "== openai e2e: installing openai==${OPENAI_VERSION} into $venv"
	rm -rf "$venv"
	python3 -m venv "$venv"
	timeout 600 "$venv/bin/pip" install --quiet --disable-pip-version-check "openai==${OPENAI_VERSION}"
fi

work="$(mktemp -d)"
pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

echo "== openai e2e: building"
CGO_ENABLED=0 go build -o "$work/tensorbridge" ./cmd/tensorbridge

"$work/tensorbridge" serve --backend "$backend" --cache-dir off --http 127.0.0.1:0 --grpc off \
	--max-sequences 4 "$checkpoint" 2>"$work/serve.log" &
pid=$!

http=""
for _ in $(seq 1 600); do
	http="$({ grep -o "msg=listening protocol=http addr=[0-9.:]*" "$work/serve.log" || true; } | head -1 | sed "s/.*addr=//")"
	if [ -n "$http" ] && grep -q "msg=ready" "$work/serve.log"; then
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$work/serve.log" >&2
		echo "openai e2e: the server exited before it was ready" >&2
		exit 1
	fi
	sleep 0.2
done
if ! grep -q "msg=ready" "$work/serve.log"; then
	cat "$work/serve.log" >&2
	echo "openai e2e: not ready within 120 s" >&2
	exit 1
fi
echo "== openai e2e: serving $checkpoint on http $http ($backend)"

# The Python test sends SIGTERM itself, mid-stream, as its last step.
if ! timeout 300 "$venv/bin/python" scripts/openai_e2e.py --http "$http" --checkpoint "$checkpoint" --server-pid "$pid"; then
	cat "$work/serve.log" >&2
	exit 1
fi
status=0
timeout 15 tail --pid="$pid" -f /dev/null || { echo "openai e2e: no exit within 15 s of SIGTERM" >&2; exit 1; }
wait "$pid" || status=$?
pid=""
if [ "$status" -ne 0 ]; then
	cat "$work/serve.log" >&2
	echo "openai e2e: exit status $status after SIGTERM, want 0" >&2
	exit 1
fi
grep -q "msg=drained" "$work/serve.log"
echo "== openai e2e: SIGTERM drained the running stream and exited 0"
