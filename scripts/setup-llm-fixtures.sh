#!/usr/bin/env bash
# Creates the LLM test checkpoints and their transformers references
# (scripts/gen-llm-fixtures.py) in ~/.cache/tensorbridge/llm-fixtures,
# from pinned torch and transformers in a throw-away virtual environment
# kept at ~/.cache/tensorbridge/llm-venv so that later runs reuse it.
# Safe to re-run: nothing is done when the fixtures were made by this
# script's version of gen-llm-fixtures.py.
#
# Cost measured on the 2-core development machine: torch 2.5.1 (the
# default index's CUDA build, 5.3 GB installed) 643 s cold, transformers
# 40 s, the fixtures 103 s. Set PIP_INDEX_URL to a CPU-only torch index to
# download far less.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.5.1
TRANSFORMERS_VERSION=4.51.3
TOKENIZERS_VERSION=0.21.4
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tensorbridge"
venv="$cache/llm-venv"
out="$cache/llm-fixtures"
stamp="$(sha256sum scripts/gen-llm-fixtures.py | cut -d' ' -f1)-$TORCH_VERSION-$TRANSFORMERS_VERSION"

if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
  echo "LLM fixtures up to date in $out"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION" "tokenizers==$TOKENIZERS_VERSION" safetensors
tmp="$(mktemp -d "$cache/llm-fixtures.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" scripts/gen-llm-fixtures.py "$tmp"
echo "$stamp" > "$tmp/.stamp"
sync
rm -rf "$out.old"
if [ -d "$out" ]; then mv "$out" "$out.old"; fi
mv "$tmp" "$out"
rm -rf "$out.old"
trap - EXIT
echo "LLM fixtures in $out"
