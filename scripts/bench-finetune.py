#!/usr/bin/env python3
"""The LoRA fine-tuning benchmark's inputs and its transformers + PEFT peer
(issue 27, "Speed and memory"; scripts/bench-finetune.sh runs it).

  bench-finetune.py setup SRC DIR
      DIR: the 100M Llama of `scripts/bench-llm.py make` (SRC) with a
      tokenizer, and DIR/data.jsonl, synthetic {"text": ...} rows that each
      tokenize to at least 320 tokens. config.json and model.safetensors
      are hard links to SRC's (a copy where linking fails). The tokenizer
      is a byte-level BPE of 16000 entries (<s> = 0, </s> = 1, as the
      checkpoint's bos/eos ids; a Llama-style post-processor prepends <s>)
      trained with the `tokenizers` library on pseudo-words drawn with a
      fixed seed: the weights are random, so only the token count per row
      matters to the step time, not what the text says.
  bench-finetune.py peer DIR THREADS STEPS BATCH SEQ MODE
      transformers eager (attn_implementation="eager"), float32, MODE lora
      (PEFT LoRA r=8 alpha=16 on q_proj,v_proj, dropout 0) or full;
      torch.optim.AdamW lr 1e-4 (weight decay 0.01, betas 0.9,0.999, eps
      1e-8: tensorbridge train's defaults); batches are rows 0..B-1,
      B..2B-1, ... of DIR/data.jsonl cut to SEQ tokens, labels = input ids
      (transformers shifts them: SEQ-1 targets per row). Prints one JSON
      line per step ({"step", "loss", "step_ms"}) and a summary line with
      VmHWM (the process's peak RSS).

Run in the venv of scripts/setup-llm-fixtures.sh with peft 0.15.2.
"""
import json
import os
import random
import shutil
import sys
import time

LORA = dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def words(rng, n):
    """n pseudo-words of 1-4 syllables (a 30000-word lexicon, Zipf-drawn)."""
    syl = [c + v for c in "bcdfghjklmnprstvwz" for v in ["a", "e", "i", "o", "u", "ai", "ou"]]
    lex = ["".join(rng.choice(syl) for _ in range(rng.randint(1, 4))) for _ in range(30000)]
    weights = [1 / (i + 1) for i in range(len(lex))]
    return rng.choices(lex, weights=weights, k=n)


def link_or_copy(src, dst):
    if os.path.exists(dst):
        os.remove(dst)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def train_tokenizer(rng):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=16000, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    corpus = (" ".join(words(rng, 200)) for _ in range(3000))
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 0)])
    return tok


def setup(src, d):
    os.makedirs(d, exist_ok=True)
    for f in ["config.json", "model.safetensors", "generation_config.json"]:
        if os.path.exists(os.path.join(src, f)):
            link_or_copy(os.path.join(src, f), os.path.join(d, f))
    rng = random.Random(0)
    tok = train_tokenizer(rng)
    if tok.get_vocab_size() > 16000 or tok.token_to_id("<s>") != 0 or tok.token_to_id("</s>") != 1:
        sys.exit(f"tokenizer: {tok.get_vocab_size()} entries, <s>={tok.token_to_id('<s>')}: want <= 16000, 0")
    tmp = os.path.join(d, ".tokenizer.json.tmp")
    tok.save(tmp)
    os.replace(tmp, os.path.join(d, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
           "model_max_length": 1024, "add_bos_token": True}
    write_atomic(os.path.join(d, "tokenizer_config.json"), json.dumps(cfg, indent=1) + "\n")
    rows, counts = [], []
    for _ in range(64):
        text = " ".join(words(rng, 300))
        n = len(tok.encode(text).ids)
        if n < 320:
            sys.exit(f"a row tokenizes to {n} tokens: want >= 320")
        rows.append(json.dumps({"text": text}))
        counts.append(n)
    write_atomic(os.path.join(d, "data.jsonl"), "\n".join(rows) + "\n")
    print(json.dumps({"dir": d, "vocab": tok.get_vocab_size(), "rows": len(rows),
                      "min_tokens": min(counts), "max_tokens": max(counts)}))


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def vmhwm_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


def peer(d, threads, steps, batch, seq, mode):
    import torch
    import transformers
    from tokenizers import Tokenizer
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "data.jsonl")) as f:
        ids = [tok.encode(json.loads(line)["text"]).ids[:seq] for line in f if line.strip()]
    if min(len(r) for r in ids) < seq:
        sys.exit(f"a row has fewer than {seq} tokens")
    m = transformers.LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    if mode == "lora":
        import peft
        m = peft.get_peft_model(m, peft.LoraConfig(task_type="CAUSAL_LM", bias="none", **LORA))
    m.train()
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    for step in range(1, steps + 1):
        s = ((step - 1) * batch) % len(ids)
        t0 = time.perf_counter()
        x = torch.tensor([ids[(s + i) % len(ids)] for i in range(batch)], dtype=torch.long)
        opt.zero_grad(set_to_none=True)
        loss = m(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        lv = float(loss)
        print(json.dumps({"step": step, "loss": lv, "step_ms": (time.perf_counter() - t0) * 1000}), flush=True)
    print(json.dumps({"summary": True, "mode": mode, "threads": threads, "trainable": sum(p.numel() for p in params),
                      "vmhwm_mib": vmhwm_mib(), "torch": torch.__version__,
                      "transformers": transformers.__version__}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "setup":
        setup(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 8 and sys.argv[1] == "peer":
        a = sys.argv
        peer(a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6]), a[7])
    else:
        sys.exit(__doc__)
