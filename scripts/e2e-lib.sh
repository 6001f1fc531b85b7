# Shared steps of the end-to-end scripts (serve-e2e.sh, openai-e2e.sh):
# a pinned client in a disposable venv, a work directory cleaned up on exit
# (killing the server if it is still running), the built binary, waiting
# for the server to listen and be ready, and its exit after SIGTERM.
# Source it after setting `label` (the prefix of every message).

# e2e_venv DIR CHECK SPEC: a venv at DIR where python -c CHECK succeeds,
# made with pip install SPEC when it does not.
e2e_venv() {
	local venv="$1" check="$2" spec="$3"
	if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
		echo "== $label: installing $spec into $venv"
		rm -rf "$venv"
		python3 -m venv "$venv"
		timeout 600 "$venv/bin/pip" install --quiet --disable-pip-version-check "$spec"
	fi
}

work="$(mktemp -d)"
pid=""
e2e_cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap e2e_cleanup EXIT

echo "== $label: building"
CGO_ENABLED=0 go build -o "$work/tensorbridge" ./cmd/tensorbridge

# e2e_addr PROTOCOL: the address the server logged it listens on for
# PROTOCOL (http, grpc), or nothing yet.
e2e_addr() { { grep -o "msg=listening protocol=$1 addr=[0-9.:]*" "$work/serve.log" || true; } | head -1 | sed "s/.*addr=//"; }

# e2e_wait_ready PROTOCOL...: waits up to 120 s for the server ($pid,
# logging to $work/serve.log) to listen on every PROTOCOL and log ready.
e2e_wait_ready() {
	local p ok
	for _ in $(seq 1 600); do
		ok=1
		for p in "$@"; do [ -n "$(e2e_addr "$p")" ] || ok=""; done
		if [ -n "$ok" ] && grep -q "msg=ready" "$work/serve.log"; then
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			cat "$work/serve.log" >&2
			echo "$label: the server exited before it was ready" >&2
			exit 1
		fi
		sleep 0.2
	done
	cat "$work/serve.log" >&2
	echo "$label: not ready within 120 s" >&2
	exit 1
}

# e2e_wait_exit SECONDS: after SIGTERM, the server must exit 0 within
# SECONDS having logged that it drained.
e2e_wait_exit() {
	local status=0
	timeout "$1" tail --pid="$pid" -f /dev/null || { echo "$label: no exit within $1 s of SIGTERM" >&2; exit 1; }
	wait "$pid" || status=$?
	pid=""
	if [ "$status" -ne 0 ]; then
		cat "$work/serve.log" >&2
		echo "$label: exit status $status after SIGTERM, want 0" >&2
		exit 1
	fi
	grep -q "msg=drained" "$work/serve.log"
}
