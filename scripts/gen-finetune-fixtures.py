#!/usr/bin/env python3
"""Creates the fine-tuning references of issue 27 with transformers + PEFT.

Run in the LLM fixture venv (scripts/setup-finetune-fixtures.sh installs
peft==0.15.2 there and runs this). For each tiny random checkpoint
FIXTURES/<arch> (llama, mistral, qwen2, qwen3; made by
scripts/gen-llm-fixtures.py), float32, eager attention, dropout 0, it writes
OUT/<arch>/:

  adapter0/            PEFT LoRA r=8, lora_alpha=16, target_modules
                       ["q_proj", "v_proj"]: get_peft_model after
                       torch.manual_seed(0) (A Kaiming-uniform, B zero), then
                       every lora_B replaced by randn * B_STD drawn after
                       torch.manual_seed(1), so that the adapter matters;
                       written by save_pretrained.
  lora-<shape>/        adapter0 after STEPS AdamW steps on
                       llm/sft/testdata/<shape>.jsonl (save_pretrained).
  full-<shape>         (no files: its losses and logits are in refs.json)
  refs.json            the hyper-parameters, every run's per-step losses,
                       final probe logits, and the merged-adapter references
                       (see write_refs below for the layout).

A step: rows of the shape's file tokenized by scripts/sft_reference.py
(encode_row, seq_len SEQ_LEN; the messages rows with its CHATML_TEMPLATE,
since the fixture tokenizer's own template fails the prefix rule) and
batched by its make_batch (right padding, labels -100 except targets,
position t predicts t+1). The loss is written out here: the sum of the
per-token cross-entropy over the batch's target tokens divided by their
number in the whole batch; at step 1 of each run it is checked against
transformers' own labels loss. torch.optim.AdamW(lr=LR,
weight_decay=WEIGHT_DECAY, other arguments default), constant learning
rate, one parameter group: the trainable LoRA tensors, or for "full" every
parameter of the base model (tied embeddings are one tensor). Each run's
probe is the first row of its first batch (unpadded, all positions); the
merged references use the text run's probe. OUT/chatml.jinja is the chat
template of the messages runs.

usage: gen-finetune-fixtures.py OUT FIXTURES
"""
import importlib.util
import json
import os
import sys

import peft
import torch
import torch.nn.functional as F
import transformers
from peft import LoraConfig, PeftModel, get_peft_model

ARCHS = ("llama", "mistral", "qwen2", "qwen3")
SHAPES = ("text", "prompt", "messages")
R, ALPHA, TARGETS = 8, 16, ["q_proj", "v_proj"]
STEPS, BATCH, SEQ_LEN = 6, 2, 64
LR, WEIGHT_DECAY = 1e-3, 0.01
INIT_SEED, B_SEED, B_STD = 0, 1, 0.05
MERGED_MODULES = ("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj")

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "..", "llm", "sft", "testdata")


def load_sft_reference():
    """scripts/sft_reference.py, imported by path (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("sft_reference", os.path.join(HERE, "sft_reference.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_base(path):
    return transformers.AutoModelForCausalLM.from_pretrained(
        path, torch_dtype=torch.float32, attn_implementation="eager")


def encode_rows(sft, tok, shape):
    """Every row of <shape>.jsonl as (ids, targets); every row must encode."""
    rows = []
    for line, obj in sft.read_jsonl(os.path.join(TESTDATA, shape + ".jsonl")):
        try:
            rows.append(sft.encode_row(tok, obj, SEQ_LEN))
        except sft.RowError as e:
            sys.exit(f"{shape}.jsonl line {line}: {e}")
    return rows


def batch(sft, rows, step, pad_id):
    tokens, labels = sft.make_batch(rows, step, BATCH, pad_id)
    ids = torch.tensor(tokens)
    mask = torch.tensor([[1] * len(r[0]) + [0] * (ids.shape[1] - len(r[0]))
                         for r in (rows[((step - 1) * BATCH + i) % len(rows)] for i in range(BATCH))])
    return ids, mask, torch.tensor(labels)


def sft_loss(logits, labels):
    """Sum of per-token cross-entropy over the targets / their number in the
    whole batch; labels are already shifted (labels[t] is token t+1)."""
    lp = F.log_softmax(logits.float(), dim=-1)
    keep = labels != -100
    picked = lp[keep].gather(1, labels[keep].unsqueeze(1)).squeeze(1)
    return -picked.sum() / keep.sum()


def check_hf_loss(model, ids, mask, labels, loss):
    """transformers' labels loss (it shifts the labels itself) must agree."""
    hf_labels = torch.full_like(labels, -100)
    hf_labels[:, 1:] = labels[:, :-1]
    with torch.no_grad():
        hf = model(input_ids=ids, attention_mask=mask, labels=hf_labels).loss
    if abs(hf.item() - loss) > 1e-6 * max(1.0, abs(loss)):
        sys.exit(f"explicit loss {loss!r} != transformers' labels loss {hf.item()!r}")


def train(model, params, sft, rows, pad_id):
    """STEPS AdamW steps; returns each step's loss before its update."""
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)
    model.train()
    losses = []
    for step in range(1, STEPS + 1):
        ids, mask, labels = batch(sft, rows, step, pad_id)
        opt.zero_grad()
        loss = sft_loss(model(input_ids=ids, attention_mask=mask).logits, labels)
        if step == 1:
            check_hf_loss(model, ids, mask, labels, loss.item())
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    model.eval()
    return losses


def probe_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].tolist()


def make_adapter0(base_dir, out):
    model = load_base(base_dir)
    torch.manual_seed(INIT_SEED)
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, target_modules=list(TARGETS), lora_dropout=0.0, bias="none")
    pm = get_peft_model(model, cfg)
    torch.manual_seed(B_SEED)
    with torch.no_grad():
        for name, p in pm.named_parameters():  # named_parameters order is fixed
            if ".lora_B." in name:
                p.copy_(torch.randn_like(p) * B_STD)
    pm.save_pretrained(out)


def merged_refs(base_dir, adapter_dir, probe):
    pm = PeftModel.from_pretrained(load_base(base_dir), adapter_dir).eval()
    unmerged = probe_logits(pm, probe)
    merged = pm.merge_and_unload().eval()
    sd = merged.state_dict()
    weights = {m: {"shape": list(sd[m + ".weight"].shape), "data": sd[m + ".weight"].flatten().tolist()}
               for m in MERGED_MODULES}
    return {"probe_ids": probe, "adapter_logits": unmerged, "logits": probe_logits(merged, probe),
            "weights": weights}


def run_arch(sft, base_dir, out):
    tok = transformers.AutoTokenizer.from_pretrained(base_dir)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    runs, probes = {}, {}
    make_adapter0(base_dir, os.path.join(out, "adapter0"))
    for shape in SHAPES:
        if shape == "messages":
            tok.chat_template = sft.CHATML_TEMPLATE
        rows = encode_rows(sft, tok, shape)
        probe = list(rows[0][0])
        probes[shape] = probe
        pm = PeftModel.from_pretrained(load_base(base_dir), os.path.join(out, "adapter0"), is_trainable=True)
        params = [p for p in pm.parameters() if p.requires_grad]
        losses = train(pm, params, sft, rows, pad_id)
        pm.save_pretrained(os.path.join(out, "lora-" + shape))
        runs["lora-" + shape] = {"data": shape + ".jsonl", "init": "adapter0", "losses": losses,
                                 "adapter": "lora-" + shape, "probe_ids": probe,
                                 "probe_logits": probe_logits(pm, probe)}
        full = load_base(base_dir)
        losses = train(full, list(full.parameters()), sft, rows, pad_id)
        runs["full-" + shape] = {"data": shape + ".jsonl", "losses": losses, "probe_ids": probe,
                                 "probe_logits": probe_logits(full, probe)}
    base = load_base(base_dir).eval()
    merged = merged_refs(base_dir, os.path.join(out, "adapter0"), probes["text"])
    merged["base_logits"] = probe_logits(base, probes["text"])
    return pad_id, runs, merged


def write_refs(path, arch, pad_id, runs, merged, chat_template):
    """refs.json: {"versions", "arch", "hyper", "messages_chat_template",
    "runs": {"lora-<shape>" | "full-<shape>": {"data", "losses" [STEPS],
    "probe_ids", "probe_logits" [len(probe_ids)][vocab], ("init",
    "adapter")}}, "merged": {"probe_ids", "base_logits", "adapter_logits"
    (PeftModel, unmerged), "logits" (merge_and_unload), "weights":
    {module: {"shape" [out, in], "data" row-major}}}}."""
    hyper = {"r": R, "lora_alpha": ALPHA, "target_modules": TARGETS, "lora_dropout": 0.0,
             "steps": STEPS, "batch": BATCH, "seq_len": SEQ_LEN, "optimizer": "torch.optim.AdamW",
             "lr": LR, "weight_decay": WEIGHT_DECAY, "betas": [0.9, 0.999], "eps": 1e-8,
             "schedule": "constant", "dtype": "float32", "attn_implementation": "eager",
             "pad_id": pad_id, "init_seed": INIT_SEED, "b_seed": B_SEED, "b_std": B_STD,
             "loss": "sum of target-token cross-entropy / target tokens in the batch"}
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"versions": versions, "arch": arch, "hyper": hyper, "messages_chat_template": chat_template,
                   "runs": runs, "merged": merged}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(out, fixtures):
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    sft = load_sft_reference()
    with open(os.path.join(out, "chatml.jinja"), "w") as f:  # the messages runs' template, for a CLI flag
        f.write(sft.CHATML_TEMPLATE)
    for arch in ARCHS:
        d = os.path.join(out, arch)
        os.makedirs(d, exist_ok=True)
        pad_id, runs, merged = run_arch(sft, os.path.join(fixtures, arch), d)
        write_refs(os.path.join(d, "refs.json"), arch, pad_id, runs, merged, sft.CHATML_TEMPLATE)
        print(arch, "ok", {k: [round(x, 4) for x in v["losses"]] for k, v in runs.items()})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gen-finetune-fixtures.py OUT FIXTURES")
    main(sys.argv[1], sys.argv[2])
