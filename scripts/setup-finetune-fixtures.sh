#!/usr/bin/env bash
# Creates the fine-tuning references of issue 27 in
# ~/.cache/tensorbridge/finetune-fixtures: PEFT adapters, per-step losses
# and logits of LoRA and full fine-tunes by transformers + PEFT
# (scripts/gen-finetune-fixtures.py), and the tokenization references of
# the JSONL shapes (scripts/sft_reference.py), from the LLM fixture
# checkpoints (made first by scripts/setup-llm-fixtures.sh) in the same
# cached venv with peft pinned. Safe to re-run: nothing is done when the
# fixtures were made by these scripts' versions.
#
# Cost measured on the 2-core development machine: peft 0.15.2 a few
# seconds once, the references about 40 s.
set -euo pipefail
cd "$(dirname "$0")/.."

PEFT_VERSION=0.15.2
scripts/setup-llm-fixtures.sh
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tensorbridge"
venv="$cache/llm-venv"
fixtures="$cache/llm-fixtures"
out="$cache/finetune-fixtures"
inputs=(scripts/gen-finetune-fixtures.py scripts/sft_reference.py \
  llm/sft/testdata/text.jsonl llm/sft/testdata/prompt.jsonl llm/sft/testdata/messages.jsonl \
  "$fixtures/.stamp")
stamp="$(cat "${inputs[@]}" | sha256sum | cut -d' ' -f1)-peft-$PEFT_VERSION"

if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
  echo "fine-tuning fixtures up to date in $out"
  exit 0
fi
"$venv/bin/pip" install -q "peft==$PEFT_VERSION"
tmp="$(mktemp -d "$cache/finetune-fixtures.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" scripts/sft_reference.py "$tmp" "$fixtures"
"$venv/bin/python" scripts/gen-finetune-fixtures.py "$tmp" "$fixtures"
echo "$stamp" > "$tmp/.stamp"
sync
rm -rf "$out.old"
if [ -d "$out" ]; then mv "$out" "$out.old"; fi
mv "$tmp" "$out"
rm -rf "$out.old"
trap - EXIT
echo "fine-tuning fixtures in $out"
