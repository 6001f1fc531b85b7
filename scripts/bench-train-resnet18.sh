#!/usr/bin/env bash
# The ResNet-18 training step of issue 23 (batch 8, eval-mode batch norm,
# AdamW lr 0.01) on the embedded cpu backend, beside PyTorch eager
# (Debian's python3-torch and python3-torchvision) and, unless SKIP_XLA=1,
# xla-cpu, with the same threads, model, data and order, in one run: the
# median step over the steps after the first two (BENCHMARKS.md).
#
#   scripts/bench-train-resnet18.sh [STEPS] [THREADS]   (default 8 steps, 2 threads)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-8}
THREADS=${2:-2}
DIR=${XDG_CACHE_HOME:-$HOME/.cache}/tensorbridge/bench-train-resnet18
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[[ -f $DIR/model.onnx ]] || /usr/bin/python3 scripts/bench-train-resnet18.py make "$DIR"
CGO_ENABLED=0 go build -o "$OUT/tensorbridge" ./cmd/tensorbridge
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 scripts/bench-train-resnet18.py peer "$DIR" "$THREADS" "$STEPS"
backends="cpu"
[[ ${SKIP_XLA:-0} == 1 ]] || backends="cpu xla-cpu"
for be in $backends; do
	"$OUT/tensorbridge" train "$DIR/model.onnx" --data "$DIR/data" --steps "$STEPS" --batch 8 \
		--loss cross_entropy:logits:labels --lr 0.01 --freeze 'running_(mean|var)' --backend "$be" \
		--threads "$THREADS" --cache-dir off --log-json "$OUT/$be.json" >/dev/null 2>"$OUT/$be.err" ||
		{ echo "$be failed:"; tail -3 "$OUT/$be.err"; continue; }
	python3 - "$OUT/$be.json" "$be" "$THREADS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
ms = [r["step_ms"] for r in rows if r.get("step", 0) > 2]
print(json.dumps({"model": "resnet18", "backend": sys.argv[2], "threads": int(sys.argv[3]),
                  "median_step_ms": round(statistics.median(ms), 1), "steps": len(ms)}))
PY
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
