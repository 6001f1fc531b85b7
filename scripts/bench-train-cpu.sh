#!/usr/bin/env bash
# The training step on the embedded cpu backend beside xla-cpu and PyTorch
# eager (Debian's python3-torch), one thread each, in the same run: the
# three training fixtures of testdata/train, AdamW lr 0.01, batch 8, the
# median step over steps 21..STEPS (BENCHMARKS.md "Training step").
#
#   scripts/bench-train-cpu.sh [STEPS]   (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
CGO_ENABLED=0 go build -o "$OUT/tensorbridge" ./cmd/tensorbridge
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 scripts/bench-train-torch.py 1 "$STEPS"
for m in mlp_ce cnn_ce decoder_lossgraph; do
	loss="--loss cross_entropy:logits:labels"
	[[ $m == decoder_lossgraph ]] && loss="--loss loss"
	for be in cpu xla-cpu; do
		"$OUT/tensorbridge" train "testdata/train/$m/model.onnx" --data "testdata/train/$m/data" --steps "$STEPS" --batch 8 \
			$loss --lr 0.01 --backend "$be" --threads 1 --log-json "$OUT/$m.$be.json" >/dev/null 2>"$OUT/$m.$be.err" ||
			{ echo "$m $be failed:"; tail -3 "$OUT/$m.$be.err"; continue; }
		python3 - "$OUT/$m.$be.json" "$m" "$be" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
ms = [r["step_ms"] for r in rows if "step_ms" in r and r.get("step", 0) > 20]
print(json.dumps({"model": sys.argv[2], "backend": sys.argv[3], "median_step_ms": round(statistics.median(ms), 4), "steps": len(ms)}))
PY
	done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
