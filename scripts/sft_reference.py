#!/usr/bin/env python3
"""Reference tokenization and batching of fine-tuning JSONL rows (issue 27).

The same rules as Go's package llm/sft, written against a transformers
tokenizer so that Go's results can be compared with an independent
implementation:

  {"text": T}                 ids = tok(T) (the tokenizer's own special tokens,
                              no EOS appended); every token is a target.
  {"prompt": P,               ids = tok(P + C); targets are the tokens from
   "completion": C}           index len(tok(P)) on (by count, as TRL's SFT
                              trainer does for prompt-completion rows).
  {"messages": [...]}         ids = apply_chat_template(messages) (no special
                              tokens added; the template writes its own). The
                              targets of assistant message i are the tokens
                              between apply_chat_template(messages[:i],
                              add_generation_prompt=True) and
                              apply_chat_template(messages[:i+1]); both must be
                              token prefixes of the whole conversation,
                              otherwise the row is an error (PrefixMismatch).

ids and targets are then cut to seq_len; a row whose tokens after the first
include no target (it would add nothing to the loss) is an error.

Usage: python scripts/sft_reference.py OUT FIXTURES
  FIXTURES is ~/.cache/tensorbridge/llm-fixtures (llama, mistral, qwen2,
  qwen3); for each, OUT/sft/<arch>/<shape>.json holds every row of
  llm/sft/testdata/<shape>.jsonl tokenized at seq_len 64, and
  OUT/sft/<arch>/messages-chatml.json the messages rows rendered with
  CHATML_TEMPLATE (a template whose generation prompt is a prefix of the
  rendered conversation), recorded in the file; OUT/sft/repo-<name>/<shape>.json
  the same for the real tokenizers and templates in
  llm/tokenizer/testdata/tokenizers/<name> (REPO_TOKENIZERS).

Other scripts import encode_row and make_batch (scripts/gen-finetune-fixtures.py).
"""
import json
import os
import sys

SEQ_LEN = 64
ARCHS = ("llama", "mistral", "qwen2", "qwen3")
SHAPES = ("text", "prompt", "messages")
ROLES = ("system", "user", "assistant")
REPO_TOKENIZERS = ("qwen2", "llama2", "llama3", "mistral")
IGNORE = -100  # transformers' ignore_index for labels

# A ChatML-like template over the fixture tokenizer's special tokens: the
# generation prompt "<s>assistant\n" is what each assistant turn starts with,
# and "\n" is its own pre-token, so the prefix rule holds in token space.
CHATML_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


class RowError(ValueError):
    """A row that is not one of the three shapes or cannot be tokenized."""


class PrefixMismatch(RowError):
    """The chat template's rendering of the messages before an assistant
    message is not a token prefix of the whole conversation."""

    def __init__(self, index, what):
        super().__init__(f"messages[{index}]: {what} is not a token prefix of the whole conversation")
        self.index = index


def _shape(obj):
    if not isinstance(obj, dict):
        raise RowError(f"expected a JSON object, got {type(obj).__name__}")
    found = [s for s, keys in (("text", ("text",)), ("prompt", ("prompt", "completion")),
                               ("messages", ("messages",))) if any(k in obj for k in keys)]
    if len(found) != 1:
        raise RowError(f"expected exactly one of text, prompt+completion, messages; keys {sorted(obj)}")
    return found[0]


def _string(obj, key):
    if key not in obj:
        raise RowError(f"missing {key!r}")
    if not isinstance(obj[key], str):
        raise RowError(f"{key!r} must be a string, got {type(obj[key]).__name__}")
    return obj[key]


def _messages(obj):
    msgs = obj["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise RowError("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise RowError(f"messages[{i}] must be an object with exactly role and content")
        if m["role"] not in ROLES:
            raise RowError(f"messages[{i}].role {m['role']!r} is not one of {ROLES}")
        if not isinstance(m["content"], str):
            raise RowError(f"messages[{i}].content must be a string")
        out.append({"role": m["role"], "content": m["content"]})
    if out[0]["role"] == "assistant":
        raise RowError("messages[0] is an assistant message; a conversation starts with system or user")
    if not any(m["role"] == "assistant" for m in out):
        raise RowError("no assistant message")
    return out


def _chat_ids(tok, msgs, gen):
    from jinja2.exceptions import TemplateError

    try:
        return list(tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=gen))
    except TemplateError as e:  # the template's raise_exception
        raise RowError(f"rendering the chat template: {e}") from e


def _encode_messages(tok, msgs):
    ids = _chat_ids(tok, msgs, False)
    targets = [False] * len(ids)
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        start = _chat_ids(tok, msgs[:i], True)
        end = _chat_ids(tok, msgs[:i + 1], False)
        if ids[:len(start)] != start:
            raise PrefixMismatch(i, "the template of the messages before it with add_generation_prompt=True")
        if ids[:len(end)] != end:
            raise PrefixMismatch(i, "the template of the messages up to it")
        for t in range(len(start), len(end)):
            targets[t] = True
    return ids, targets


def encode_row(tok, obj, seq_len):
    """Returns (ids, targets) of one JSONL row (a parsed object), cut to
    seq_len; raises RowError for a row the rules reject."""
    shape = _shape(obj)
    if shape == "text":
        ids = list(tok(_string(obj, "text"))["input_ids"])
        targets = [True] * len(ids)
    elif shape == "prompt":
        p, c = _string(obj, "prompt"), _string(obj, "completion")
        n = len(tok(p)["input_ids"])
        ids = list(tok(p + c)["input_ids"])
        targets = [t >= n for t in range(len(ids))]
    else:
        ids, targets = _encode_messages(tok, _messages(obj))
    ids, targets = ids[:seq_len], targets[:seq_len]
    if not any(targets[1:]):
        raise RowError(f"no target token after the first within seq_len {seq_len}")
    return ids, targets


def make_batch(rows, step, b, pad_id):
    """Step `step` (1-based) of batch size b over rows [(ids, targets)]:
    rows (step-1)*b ... step*b-1 in order, wrapping at the end, right-padded
    with pad_id to the batch's longest row. Returns (tokens, labels), lists of
    b lists; labels[r][t] is tokens[r][t+1] when token t+1 is a target, else
    -100 (position t predicts token t+1; pads and the last position never)."""
    picked = [rows[((step - 1) * b + r) % len(rows)] for r in range(b)]
    width = max(len(ids) for ids, _ in picked)
    tokens, labels = [], []
    for ids, targets in picked:
        tokens.append(list(ids) + [pad_id] * (width - len(ids)))
        lab = [IGNORE] * width
        for t in range(len(ids) - 1):
            if targets[t + 1]:
                lab[t] = ids[t + 1]
        labels.append(lab)
    return tokens, labels


def read_jsonl(path):
    """The objects of a JSONL file, one per line ('\\n'-separated, a final
    '\\r' stripped), as (line number, object)."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [(n + 1, json.loads((line[:-1] if line.endswith(b"\r") else line).decode("utf-8")))
            for n, line in enumerate(lines)]


def encode_file(tok, path, seq_len):
    """Every row of path: {"line", "ids", "targets"} or, for a row that
    fails, {"line", "error", "message_index" (PrefixMismatch only)}."""
    out = []
    for line, obj in read_jsonl(path):
        try:
            ids, targets = encode_row(tok, obj, seq_len)
            out.append({"line": line, "ids": ids, "targets": [int(t) for t in targets]})
        except RowError as e:
            rec = {"line": line, "error": str(e)}
            if isinstance(e, PrefixMismatch):
                rec["message_index"] = e.index
            out.append(rec)
    return out


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(out, fixtures_dir):
    import transformers
    from transformers import AutoTokenizer

    testdata = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "llm", "sft", "testdata")
    for arch in ARCHS:
        tok = AutoTokenizer.from_pretrained(os.path.join(fixtures_dir, arch))
        d = os.path.join(out, "sft", arch)
        os.makedirs(d, exist_ok=True)
        runs = [(s, s, None) for s in SHAPES] + [("messages-chatml", "messages", CHATML_TEMPLATE)]
        for name, shape, template in runs:
            if template is not None:
                tok.chat_template = template
            rows = encode_file(tok, os.path.join(testdata, shape + ".jsonl"), SEQ_LEN)
            _write_json(os.path.join(d, name + ".json"), {
                "transformers": transformers.__version__, "seq_len": SEQ_LEN, "data": shape + ".jsonl",
                "chat_template": tok.chat_template, "rows": rows})
        print(f"sft references for {arch} in {d}")
    # Real tokenizers and chat templates kept in the repository (ChatML,
    # [INST], Llama 3 headers), so the span rule meets the templates it is
    # written for; their rows that a template refuses are recorded as errors.
    for name in REPO_TOKENIZERS:
        tok = AutoTokenizer.from_pretrained(os.path.join(testdata, "..", "..", "tokenizer", "testdata", "tokenizers", name))
        d = os.path.join(out, "sft", "repo-" + name)
        os.makedirs(d, exist_ok=True)
        for shape in SHAPES:
            rows = encode_file(tok, os.path.join(testdata, shape + ".jsonl"), SEQ_LEN)
            _write_json(os.path.join(d, shape + ".json"), {
                "transformers": transformers.__version__, "seq_len": SEQ_LEN, "data": shape + ".jsonl",
                "chat_template": None, "rows": rows})
        print(f"sft references for llm/tokenizer/testdata/tokenizers/{name} in {d}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: sft_reference.py OUT FIXTURES")
    main(sys.argv[1], sys.argv[2])
