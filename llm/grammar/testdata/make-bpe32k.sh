#!/usr/bin/env bash
# Makes the 32,000-token byte-level BPE vocabulary that the llm/grammar
# benchmark and random walks use when no real 32k tokenizer is at hand:
# Hugging Face tokenizers' BpeTrainer (GPT-2 style ByteLevel pre-tokenizer
# and decoder) trained on the Go distribution's sources and docs, which mix
# English prose, code and punctuation. Output:
#   ~/.cache/tensorbridge/grammar-bench/bpe32k/tokenizer.json
# (override with TENSORBRIDGE_GRAMMAR_VOCAB to point the tests elsewhere).
# Needs the venv of scripts/setup-llm-fixtures.sh (tokenizers 0.21.4).
set -euo pipefail
venv="${TENSORBRIDGE_LLM_VENV:-$HOME/.cache/tensorbridge/llm-venv}"
out="$HOME/.cache/tensorbridge/grammar-bench/bpe32k"
goroot="$(go env GOROOT)"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
find "$goroot/src" -type f \( -name '*.go' -o -name '*.md' -o -name '*.html' -o -name '*.txt' \) \
  | LC_ALL=C sort > "$tmp/all"
head -n 6000 "$tmp/all" > "$tmp/files"
"$venv/bin/python" - "$tmp/files" "$tmp/tokenizer.json" <<'PY'
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
files = [l.strip() for l in open(sys.argv[1]) if l.strip()]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
def texts():
    for f in files:
        try:
            yield open(f, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            pass  # testdata in other encodings
tok.train_from_iterator(texts(), trainer)
tok.save(sys.argv[2])
print("vocab", tok.get_vocab_size())
PY
mv "$tmp/tokenizer.json" "$out/tokenizer.json.tmp" && mv "$out/tokenizer.json.tmp" "$out/tokenizer.json"
echo "wrote $out/tokenizer.json"
