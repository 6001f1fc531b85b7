#!/usr/bin/env bash
# End-to-end test of `tensorbridge serve CHECKPOINT_DIR` with the real
# openai Python client: builds the binary, serves the qwen2 test
# checkpoint (scripts/setup-llm-fixtures.sh makes it) on a 127.0.0.1 port
# the kernel picks, runs scripts/openai_e2e.py (greedy texts, and greedy
# ids under penalties and logit_bias, against
# transformers', streaming, usage and include_usage, stop strings,
# max_tokens, seeds, embeddings against transformers' pooled hidden
# states, response_format json_schema answers validated, n choices
# against transformers' greedy text, tool_choice required and named
# with arguments validated, bad requests),
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
label="openai e2e"
. scripts/e2e-lib.sh
venv="$cache/venv-openai-${OPENAI_VERSION}"
e2e_venv "$venv" 'import openai' "openai==${OPENAI_VERSION}"

# The same checkpoint with a 1024-token context, served as qwen2-long:
# the tool definitions written into the system prompt take more than the
# test checkpoint's 128 tokens.
long="$work/qwen2-long"
mkdir "$long"
for f in "$checkpoint"/*; do
	[ "$(basename "$f")" = config.json ] || ln -s "$f" "$long/"
done
"$venv/bin/python" -c 'import json,sys; c=json.load(open(sys.argv[1])); c["max_position_embeddings"]=1024; json.dump(c, open(sys.argv[2], "w"))' \
	"$checkpoint/config.json" "$long/config.json"

"$work/tensorbridge" serve --backend "$backend" --cache-dir off --http 127.0.0.1:0 --grpc off \
	--max-sequences 4 "$checkpoint" "$long" 2>"$work/serve.log" &
pid=$!
e2e_wait_ready http
http="$(e2e_addr http)"
echo "== openai e2e: serving $checkpoint on http $http ($backend)"

# The Python test sends SIGTERM itself, mid-stream, as its last step.
if ! timeout 300 "$venv/bin/python" scripts/openai_e2e.py --http "$http" --checkpoint "$checkpoint" --server-pid "$pid"; then
	cat "$work/serve.log" >&2
	exit 1
fi
e2e_wait_exit 15
echo "== openai e2e: SIGTERM drained the running stream and exited 0"
