#!/usr/bin/env bash
# LoRA fine-tuning of the 100M Llama (issue 27, "Speed and memory"):
# `tensorbridge train DIR --lora r=8,alpha=16,targets=q_proj,v_proj` at
# --seq-len 256 on each of BACKENDS beside transformers + PEFT eager
# (scripts/bench-finetune.py peer), float32, AdamW lr 1e-4, the same rows
# in the same order, the same threads. The runs alternate (tensorbridge,
# peer, tensorbridge, peer, ...) for ROUNDS rounds because the machine is
# shared. Each run prints one JSON line: the median step over the steps
# after the first two, training tokens/s (target tokens per step, BATCH x
# (SEQ-1), over that median), the peak RSS (/usr/bin/time's maximum
# resident set size) and the load average before and after; a summary
# line per system follows (the median over runs, and the run's least
# step, the figure least hurt by other jobs: on a loaded machine the peer's
# step time swings 2-20 s), with the ratio to the peer and the RSS against
# the base weights (the targets: >= 1.5x the peer's tokens/s, peak RSS <=
# base weights + 30%).
#
#   scripts/bench-finetune.sh [STEPS] [THREADS]   (default 10 steps, 2 threads)
#   env: BATCH (4), SEQ (256), ROUNDS (2), BACKENDS ("xla-cpu cpu"),
#        FULL=1 (also a full fine-tune, --full, one round), REMAT=1 (each
#        LoRA run again with --remat, gradient checkpointing),
#        BASE_PRECISION=bfloat16|int8 (tensorbridge's LoRA runs hold the
#        frozen weights so, --base-precision; the peer stays float32),
#        LOGS=DIR (keep each run's per-step log there)
#
# Needs ~/.cache/tensorbridge/llm-bench/llama-100m (scripts/bench-llm.py
# make, in the venv of scripts/setup-llm-fixtures.sh) and peft 0.15.2 in
# that venv; the first run adds a copy with a tokenizer and the data
# (scripts/bench-finetune.py setup, a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-10}
THREADS=${2:-2}
BATCH=${BATCH:-4}
SEQ=${SEQ:-256}
ROUNDS=${ROUNDS:-2}
BACKENDS=${BACKENDS:-xla-cpu cpu}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/tensorbridge
PY=$CACHE/llm-venv/bin/python
SRC=$CACHE/llm-bench/llama-100m
DIR=$CACHE/llm-bench/llama-100m-tok
LORA=r=8,alpha=16,targets=q_proj,v_proj
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[[ -f $SRC/model.safetensors ]] || { echo "no $SRC: run $PY scripts/bench-llm.py make $SRC" >&2; exit 1; }
"$PY" -c 'import peft' 2>/dev/null || { echo "no peft in $PY: $PY -m pip install peft==0.15.2" >&2; exit 1; }
[[ -f $DIR/tokenizer.json && -f $DIR/data.jsonl ]] || "$PY" scripts/bench-finetune.py setup "$SRC" "$DIR"
CGO_ENABLED=0 go build -o "$OUT/tensorbridge" ./cmd/tensorbridge
BASE=$(stat -c %s "$DIR/model.safetensors")
echo "{\"date\": \"$(date -u +%FT%TZ)\", \"commit\": \"$(git rev-parse --short HEAD 2>/dev/null)\", \"steps\": $STEPS, \"threads\": $THREADS, \"batch\": $BATCH, \"seq\": $SEQ, \"base_weights_bytes\": $BASE}"

# report NAME LOG RSSFILE LOAD0 RC: one JSON line for a run (and, with
# LOGS=DIR, a copy of its per-step log in DIR).
report() {
	[[ -z ${LOGS:-} ]] || cp "$2" "$LOGS/$1-$(date -u +%H%M%S).jsonl"
	python3 - "$@" "$BATCH" "$SEQ" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY' | tee -a "$OUT/runs.jsonl"
import json, statistics, sys
name, log, rssf, load0, rc, b, seq, load1 = sys.argv[1:]
rows = [r for r in map(json.loads, (l for l in open(log) if l.strip().startswith("{"))) if "step_ms" in r]
ms = [r["step_ms"] for r in rows if r["step"] > 2]
rss = open(rssf).read().split()
out = {"system": name, "load_before": load0, "load_after": load1,
       "peak_rss_mib": round(int(rss[-1]) / 1024, 1) if rss and rss[-1].isdigit() else None}
if rc != "0" or not ms:
    out["failed"] = f"exit {rc}"
else:
    med = statistics.median(ms)
    tok = int(b) * (int(seq) - 1) * 1000
    out.update(median_step_ms=round(med, 1), steps=len(ms), tokens_per_s=round(tok / med, 2),
               least_step_ms=round(min(ms), 1), tokens_per_s_least_step=round(tok / min(ms), 2),
               first_step_ms=round(rows[0]["step_ms"], 1), last_loss=rows[-1].get("loss"))
print(json.dumps(out))
PY
}

# tb BACKEND MODEFLAG... : one tensorbridge run.
tb() {
	local be=$1 name=$2; shift 2
	local load0 rc=0
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	rm -f "$OUT/$name.json"
	/usr/bin/time -f '%M' -o "$OUT/$name.rss" "$OUT/tensorbridge" train "$DIR" --data "$DIR/data.jsonl" \
		--seq-len "$SEQ" --batch "$BATCH" --steps "$STEPS" --lr 1e-4 "$@" --backend "$be" --threads "$THREADS" \
		--log-json "$OUT/$name.json" >/dev/null 2>"$OUT/$name.err" || rc=$?
	[[ $rc == 0 ]] || { echo "$name failed (exit $rc):" >&2; grep -m3 -E 'rror|out of memory' "$OUT/$name.err" >&2 || tail -3 "$OUT/$name.err" >&2; }
	touch "$OUT/$name.json"
	report "$name" "$OUT/$name.json" "$OUT/$name.rss" "$load0" "$rc"
}

# peer MODE: one transformers (+ PEFT) run.
peer() {
	local name=peer-$1 load0 rc=0
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	/usr/bin/time -f '%M' -o "$OUT/$name.rss" "$PY" scripts/bench-finetune.py peer "$DIR" "$THREADS" "$STEPS" \
		"$BATCH" "$SEQ" "$1" >"$OUT/$name.json" 2>"$OUT/$name.err" || rc=$?
	[[ $rc == 0 ]] || { echo "$name failed (exit $rc):" >&2; tail -3 "$OUT/$name.err" >&2; }
	report "$name" "$OUT/$name.json" "$OUT/$name.rss" "$load0" "$rc"
}

for round in $(seq "$ROUNDS"); do
	for be in $BACKENDS; do
		tb "$be" "tb-$be-lora" --lora "$LORA" ${BASE_PRECISION:+--base-precision "$BASE_PRECISION"}
		[[ ${REMAT:-0} != 1 ]] || tb "$be" "tb-$be-lora-remat" --lora "$LORA" --remat ${BASE_PRECISION:+--base-precision "$BASE_PRECISION"}
		[[ $be != "${BACKENDS%% *}" ]] || peer lora
	done
done
if [[ ${FULL:-0} == 1 ]]; then
	tb "${BACKENDS%% *}" "tb-${BACKENDS%% *}-full" --full
	peer full
fi

python3 - "$OUT/runs.jsonl" "$BASE" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    runs[r["system"]].append(r)
base = int(sys.argv[2]) / 2**20
tps = {k: statistics.median([r["tokens_per_s"] for r in v if "tokens_per_s" in r] or [0]) for k, v in runs.items()}
for k, v in runs.items():
    mode = k.rsplit("-", 1)[1]
    rss = max((r["peak_rss_mib"] or 0) for r in v)
    out = {"summary": k, "runs": len(v), "ok": sum("tokens_per_s" in r for r in v),
           "tokens_per_s_median": tps[k],
           "tokens_per_s_least_step": max([r["tokens_per_s_least_step"] for r in v if "tokens_per_s_least_step" in r] or [0]),
           "peak_rss_mib_max": rss,
           "rss_over_base_weights": round(rss / base, 2)}
    if not k.startswith("peer") and tps.get("peer-" + mode):
        out["speed_vs_peer"] = round(tps[k] / tps["peer-" + mode], 2)
    print(json.dumps(out))
PY
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
