#!/usr/bin/env bash
# Measures the embedded cpu backend beside ONNX Runtime (and, unless
# SKIP_XLA=1, beside xla-cpu) in the same run, on the same inputs, thread
# counts and batch sizes, and prints the table of BENCHMARKS.md "The cpu
# engine against ONNX Runtime".
#
#   scripts/bench-cpu.sh [RESULTS_DIR]
#
# Environment: MODELS_DIR, ORT_VENV (as scripts/bench.sh, which exports the
# models and installs onnxruntime: run it once with SKIP_CPU=1 SKIP_RESTART=1
# SKIP_BF16=1 REPEATS=1 MODELS=mlp if they are missing), MODELS (all six),
# THREADS_LIST ("1 2"), BATCHES (1,8), ITERS (20; the MLP: 500), WARMUP (3),
# SKIP_XLA=1.
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tensorbridge/bench-cpu/$(date -u +%Y%m%dT%H%M%SZ)}
MODELS_DIR=${MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tensorbridge/bench-models}
ORT_VENV=${ORT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tensorbridge/ort-venv}
MODELS=${MODELS:-"mlp bert_encoder bert_encoder_op13 mobilenet_v2 resnet18 resnet50"}
THREADS_LIST=${THREADS_LIST:-"1 2"}
BATCHES=${BATCHES:-1,8}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-3}
mkdir -p "$RESULTS"
for m in $MODELS; do
	[[ -f $MODELS_DIR/$m.onnx ]] || { echo "missing $MODELS_DIR/$m.onnx: run scripts/bench.sh first (see the header)" >&2; exit 2; }
done
[[ -x $ORT_VENV/bin/python ]] || { echo "missing $ORT_VENV: run scripts/bench.sh first (see the header)" >&2; exit 2; }
TB=$RESULTS/tensorbridge
CGO_ENABLED=0 go build -o "$TB" ./cmd/tensorbridge
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\))' || true
	echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "onnxruntime: $("$ORT_VENV/bin/python" -c 'import onnxruntime as o; print(o.__version__)')"
} >"$RESULTS/machine.txt"
log() { echo "[bench-cpu $(date -u +%H:%M:%S)] $*" >&2; }
for t in $THREADS_LIST; do
	for m in $MODELS; do
		iters=$ITERS
		[[ $m == mlp ]] && iters=$((ITERS * 25))
		io=$RESULTS/io/$m
		backends="cpu"
		[[ ${SKIP_XLA:-0} == 1 ]] || backends="cpu xla-cpu"
		for be in $backends; do
			log "$m $be threads $t"
			"$TB" bench "$MODELS_DIR/$m.onnx" --backend "$be" --batch "$BATCHES" --threads "$t" --iters "$iters" \
				--warmup "$WARMUP" --save-io "$io" --json >"$RESULTS/$m.$be.t$t.json" 2>"$RESULTS/$m.$be.t$t.err" ||
				log "failed: see $m.$be.t$t.err"
		done
		log "$m ort threads $t"
		"$ORT_VENV/bin/python" scripts/bench-ort.py "$MODELS_DIR/$m.onnx" --batch "$BATCHES" --threads "$t" --iters "$iters" \
			--warmup "$WARMUP" --inputs "$io" >"$RESULTS/$m.ort.t$t.json" 2>"$RESULTS/$m.ort.t$t.err" ||
			log "ORT failed: see $m.ort.t$t.err"
	done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS/machine.txt"
python3 - "$RESULTS" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
print(open(os.path.join(d, "machine.txt")).read())
print("| model | threads | batch | cpu p50 ms | xla-cpu p50 ms | ORT p50 ms | ORT / cpu |")
print("|---|---|---|---|---|---|---|")
def p50(path):
    try:
        rep = json.load(open(path))
    except Exception:
        return {}
    return {b["batch"]: b["latency"]["p50_ms"] for b in rep.get("batches", []) if "latency" in b}
for f in sorted(glob.glob(os.path.join(d, "*.cpu.t*.json"))):
    m, _, t = os.path.basename(f)[:-5].rsplit(".", 2)
    cpu, xla, ort = p50(f), p50(os.path.join(d, "%s.xla-cpu.%s.json" % (m, t))), p50(os.path.join(d, "%s.ort.%s.json" % (m, t)))
    for b in sorted(cpu):
        fmt = lambda v: "%.3f" % v if v is not None else "-"
        r = ort.get(b) / cpu[b] if ort.get(b) else None
        print("| %s | %s | %d | %s | %s | %s | %s |" % (m, t[1:], b, fmt(cpu[b]), fmt(xla.get(b)), fmt(ort.get(b)), "%.2f" % r if r else "-"))
PY
