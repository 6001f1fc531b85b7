#!/usr/bin/env python3
"""Creates the LLM test checkpoints and their transformers references.

Run in a throw-away virtual environment with pinned torch and transformers
(scripts/setup-llm-fixtures.sh does that). For each of four small
random-weight configurations (Llama with llama3 rope scaling, sharded;
Mistral with a sliding window shorter than the context; Qwen2 with tied
embeddings and q/k/v biases; Qwen3 with q/k norms and head_dim != hidden /
heads) it writes OUT/<name>/ with save_pretrained (safetensors), a BPE
tokenizer trained with `tokenizers`, and reference.json: for several
prompts, the prompt ids, greedy generate()'s new token ids (float32,
do_sample=False) and the prompt's logits; and penalties.json: greedy ids
under transformers' logits processors for repetition_penalty,
sequence_bias (single-token biases: OpenAI's logit_bias) and
min_new_tokens (the min_tokens of the serving APIs).

usage: gen-llm-fixtures.py OUT [NAME...]   (NAME: only that checkpoint, e.g. llama-tp4)
"""
import json
import os
import sys

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, processors, trainers
from transformers import PreTrainedTokenizerFast

CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Large language models generate text one token at a time, reading a cache of keys and values.",
    "Grüße aus München! Ça va? 日本語のテキストも少し。 Emoji: 🙂🚀",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Continuous batching lets new requests join the running batch between decode steps.",
]
PROMPTS = [
    "The quick brown fox",
    "Large language models generate",
    "Grüße aus München! 🙂",
    "def fib(n):\n    return",
]
NEW_TOKENS = 48
CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   chat_template=CHAT_TEMPLATE)


def configs(vocab):
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, pad_token_id=2,
                  initializer_range=0.2)
    return {
        "llama": transformers.LlamaConfig(**common, rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32}),
        "mistral": transformers.MistralConfig(**common, sliding_window=16, rope_theta=10000.0),
        "qwen2": transformers.Qwen2Config(**common, tie_word_embeddings=True, rope_theta=1000000.0),
        "qwen3": transformers.Qwen3Config(**common, head_dim=32, tie_word_embeddings=False, rope_theta=1000000.0),
        # 8 query and 4 key-value heads: tensor-parallel generation over
        # model=4 (llm/mesh_test.go) needs both head counts divisible by 4.
        "llama-tp4": transformers.LlamaConfig(**dict(common, num_attention_heads=8, num_key_value_heads=4),
                                              rope_theta=10000.0),
    }


# Penalty references: generate() keyword arguments (JSON-able: a bias
# is [[token id], value], transformers' list form of sequence_bias).
PENALTY_CASES = [
    {"repetition_penalty": 1.3},
    {"repetition_penalty": 0.7},
    {"repetition_penalty": 1.2, "sequence_bias": [[[5], 3.0], [[40], -2.5], [[100], 4.0]]},
    # EOS (1) pushed up, held off until min_new_tokens.
    {"min_new_tokens": 5, "sequence_bias": [[[1], 30.0]]},
]
PENALTY_NEW_TOKENS = 24


def penalty_refs(model, tokenizer):
    refs = []
    for text in PROMPTS[:2]:
        ids = tokenizer.encode(text)
        inp = torch.tensor([ids])
        for case in PENALTY_CASES:
            kw = dict(case)
            if "sequence_bias" in kw:
                kw["sequence_bias"] = {tuple(k): v for k, v in kw["sequence_bias"]}
            with torch.no_grad():
                gen = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                     max_new_tokens=PENALTY_NEW_TOKENS, pad_token_id=2, **kw)[0, len(ids):].tolist()
            refs.append({"prompt_ids": ids, "settings": case, "token_ids": gen,
                         "decoded": tokenizer.decode(gen, skip_special_tokens=True)})
    return refs


def logprob_refs(model, refs):
    """logprobs.json: for each reference, prompt and greedy tokens run in one
    forward pass; at every position, the float32 log-softmax of the next
    token and the top 20 (ids and values, best first), as the serving APIs'
    logprobs report them."""
    out = []
    for r in refs:
        ids = r["prompt_ids"] + r["token_ids"]
        with torch.no_grad():
            lsm = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
        top = torch.topk(lsm, 20, -1)
        out.append({"ids": ids, "prompt_len": len(r["prompt_ids"]),
                    "token_logprobs": [lsm[i, ids[i + 1]].item() for i in range(len(ids) - 1)],
                    "top_ids": top.indices.tolist(), "top_logprobs": top.values.tolist()})
    return out


# Embedding references: texts (tokenised with the default special tokens,
# so BOS first) and token-id inputs, one of them a single token.
EMBED_INPUTS = [{"text": t} for t in PROMPTS[:3]] + [{"ids": [5]}, {"ids": [0, 17, 42, 99, 7, 7, 130]}]


def embedding_refs(model, tokenizer):
    """embeddings.json: for each input, the final hidden states (after the
    final norm) of its tokens alone, pooled by the last token, the mean over
    tokens and the first token (sentence-transformers' lasttoken, mean and
    cls pooling), each L2-normalised in float32, as /v1/embeddings answers."""
    out = []
    for inp in EMBED_INPUTS:
        ids = inp["ids"] if "ids" in inp else tokenizer.encode(inp["text"])
        with torch.no_grad():
            h = model.model(torch.tensor([ids])).last_hidden_state[0].float()
        pooled = {"last": h[-1], "mean": h.mean(0), "cls": h[0]}
        out.append({"text": inp.get("text"), "ids": ids,
                    **{k: torch.nn.functional.normalize(v, dim=0).tolist() for k, v in pooled.items()}})
    return out


def main(out, only=()):
    torch.manual_seed(0)
    tokenizer = train_tokenizer()
    classes = {"llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM,
               "qwen2": transformers.Qwen2ForCausalLM, "qwen3": transformers.Qwen3ForCausalLM,
               "llama-tp4": transformers.LlamaForCausalLM}
    for name, cfg in configs(len(tokenizer)).items():
        if only and name not in only:
            continue
        torch.manual_seed({"llama": 1, "mistral": 2, "qwen2": 3, "qwen3": 4, "llama-tp4": 5}[name])
        cfg._attn_implementation = "eager"
        model = classes[name](cfg).to(torch.float32).eval()
        with torch.no_grad():  # biases are zero-initialised: make them count
            for n, p in model.named_parameters():
                if n.endswith(".bias") or "norm" in n:
                    p.add_(torch.randn_like(p) * 0.1)
        d = os.path.join(out, name)
        shard = {"max_shard_size": "100KB"} if name == "llama" else {}
        model.save_pretrained(d, safe_serialization=True, **shard)
        tokenizer.save_pretrained(d)
        refs = []
        for i, text in enumerate(PROMPTS + PROMPTS[:1]):
            chat = i == len(PROMPTS)
            if chat:  # as `generate --chat` does: one user message
                ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                    add_generation_prompt=True, tokenize=True)
            else:
                ids = tokenizer.encode(text)
                assert ids[0] == tokenizer.bos_token_id
            inp = torch.tensor([ids])
            with torch.no_grad():
                logits = model(inp).logits[0].tolist()
                gen = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                     max_new_tokens=NEW_TOKENS, pad_token_id=2)[0, len(ids):].tolist()
            refs.append({"text": text, "chat": chat, "prompt_ids": ids, "token_ids": gen, "logits": logits,
                         "decoded": tokenizer.decode(gen, skip_special_tokens=True)})
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                       "new_tokens": NEW_TOKENS, "references": refs}, f)
        with open(os.path.join(d, "penalties.json"), "w") as f:
            json.dump({"transformers": transformers.__version__, "references": penalty_refs(model, tokenizer)}, f)
        with open(os.path.join(d, "logprobs.json"), "w") as f:
            json.dump({"transformers": transformers.__version__, "references": logprob_refs(model, refs)}, f)
        with open(os.path.join(d, "embeddings.json"), "w") as f:
            json.dump({"transformers": transformers.__version__, "references": embedding_refs(model, tokenizer)}, f)
        print(name, "ok", [len(r["token_ids"]) for r in refs])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])  # OUT [NAME...]: only the named checkpoints
