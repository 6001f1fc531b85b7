#!/usr/bin/env python3
"""The LLM benchmark's checkpoint and its transformers peer.

  bench-llm.py make DIR          a ~100M-parameter Llama-shaped float32
                                 checkpoint with random weights
  bench-llm.py peer DIR THREADS  transformers eager generate on it with
                                 THREADS torch threads: single-stream
                                 tokens/s over 128 new tokens, time to first
                                 token for a 512-token prompt

Run in the venv of scripts/setup-llm-fixtures.sh. Prints one JSON object.
"""
import json
import sys
import time

import torch
import transformers


def make(d):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=16000, hidden_size=768, intermediate_size=2048,
                                   num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                                   max_position_embeddings=1024, rms_norm_eps=1e-5, bos_token_id=0,
                                   eos_token_id=1, tie_word_embeddings=False)
    m = transformers.LlamaForCausalLM(cfg).to(torch.float32)
    m.save_pretrained(d, safe_serialization=True)
    print(json.dumps({"parameters": sum(p.numel() for p in m.parameters())}))


def peer(d, threads):
    torch.set_num_threads(threads)
    m = transformers.LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
    prompt = torch.arange(2, 18).unsqueeze(0)
    with torch.no_grad():
        m.generate(prompt, max_new_tokens=4, do_sample=False, min_new_tokens=4)  # warm
        t0 = time.perf_counter()
        m.generate(prompt, max_new_tokens=128, min_new_tokens=128, do_sample=False)
        single = 128 / (time.perf_counter() - t0)
        long = (torch.arange(512) % 15000 + 2).unsqueeze(0)
        t0 = time.perf_counter()
        m.generate(long, max_new_tokens=1, do_sample=False)
        ttft = (time.perf_counter() - t0) * 1000
    print(json.dumps({"threads": threads, "tokens_per_s": single, "ttft_512_ms": ttft,
                      "torch": torch.__version__, "transformers": transformers.__version__}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        peer(sys.argv[2], int(sys.argv[3]))
