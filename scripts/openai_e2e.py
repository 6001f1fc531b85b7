"""Drives `tensorbridge serve CHECKPOINT_DIR` with the real openai client.

Run by scripts/openai-e2e.sh. The expected texts are transformers' greedy
generations, decoded by its tokenizer (reference.json beside the
checkpoint, written by scripts/gen-llm-fixtures.py), never the server's
own output.
"""
import argparse
import json
import os
import signal
import sys

import openai

p = argparse.ArgumentParser()
p.add_argument("--http", required=True)
p.add_argument("--checkpoint", required=True)
p.add_argument("--server-pid", type=int, required=True)
args = p.parse_args()

name = os.path.basename(os.path.normpath(args.checkpoint))
with open(os.path.join(args.checkpoint, "reference.json")) as f:
    refs = json.load(f)["references"]
client = openai.OpenAI(base_url=f"http://{args.http}/v1", api_key="unused", max_retries=0, timeout=60)
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(what)


def finish_of(ref):
    return "stop" if len(ref["token_ids"]) < 48 and ref["token_ids"][-1] == 1 else "length"


models = [m.id for m in client.models.list()]
check("models lists the checkpoints", sorted(models) == sorted([name, "qwen2-long"]), models)

for i, ref in enumerate(refs):
    want_usage = (len(ref["prompt_ids"]), len(ref["token_ids"]))
    if ref["chat"]:
        msgs = [{"role": "user", "content": ref["text"]}]
        r = client.chat.completions.create(model=name, messages=msgs, max_tokens=48, temperature=0)
        c = r.choices[0]
        check(f"chat {i} greedy text", c.message.content == ref["decoded"], (c.message.content, ref["decoded"]))
        check(f"chat {i} finish and usage", c.finish_reason == finish_of(ref) and (r.usage.prompt_tokens, r.usage.completion_tokens) == want_usage,
              (c.finish_reason, r.usage))
        text, usage, finish = "", None, None
        for ch in client.chat.completions.create(model=name, messages=msgs, max_tokens=48, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}):
            if ch.choices:
                text += ch.choices[0].delta.content or ""
                finish = ch.choices[0].finish_reason or finish
            if ch.usage:
                usage = ch.usage
        check(f"chat {i} streamed", text == ref["decoded"] and finish == finish_of(ref) and usage is not None
              and (usage.prompt_tokens, usage.completion_tokens) == want_usage, (text, finish, usage))
        continue
    r = client.completions.create(model=name, prompt=ref["text"], max_tokens=48, temperature=0)
    c = r.choices[0]
    check(f"completion {i} greedy text", c.text == ref["decoded"], (c.text, ref["decoded"]))
    check(f"completion {i} finish and usage", c.finish_reason == finish_of(ref) and (r.usage.prompt_tokens, r.usage.completion_tokens) == want_usage,
          (c.finish_reason, r.usage))
    text, usage, finish = "", None, None
    for ch in client.completions.create(model=name, prompt=ref["text"], max_tokens=48, temperature=0, stream=True,
                                        stream_options={"include_usage": True}):
        if ch.choices:
            text += ch.choices[0].text
            finish = ch.choices[0].finish_reason or finish
        if ch.usage:
            usage = ch.usage
    check(f"completion {i} streamed", text == ref["decoded"] and finish == finish_of(ref) and usage is not None
          and (usage.prompt_tokens, usage.completion_tokens) == want_usage, (text, finish, usage))

# Stop strings: transformers' greedy text cut before the first stop.
ref = refs[1]
cut = ref["decoded"].index("dog")
for stream in (False, True):
    if stream:
        text, finish = "", None
        for ch in client.completions.create(model=name, prompt=ref["text"], max_tokens=48, temperature=0, stop=["zzzz", "dog"], stream=True):
            if ch.choices:
                text += ch.choices[0].text
                finish = ch.choices[0].finish_reason or finish
    else:
        c = client.completions.create(model=name, prompt=ref["text"], max_tokens=48, temperature=0, stop="dog").choices[0]
        text, finish = c.text, c.finish_reason
    check(f"stop string (stream={stream})", text == ref["decoded"][:cut] and finish == "stop", (text, finish))

# max_tokens.
r = client.completions.create(model=name, prompt=refs[0]["text"], max_tokens=5, temperature=0)
check("max_tokens 5", r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length", r)

# Seeds: a seeded sampled completion is reproducible.
def sampled(seed):
    return client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hello"}], max_tokens=24,
                                          temperature=1.0, top_p=0.95, seed=seed).choices[0].message.content
a, b = sampled(1234), sampled(1234)
check("seed reproducible", a == b, (a, b))

# Usage: on whole answers; in a stream only with include_usage (a last
# chunk with no choices), every other chunk's usage null.
chunks = list(client.completions.create(model=name, prompt=refs[0]["text"], max_tokens=4, temperature=0, stream=True))
check("stream without include_usage has no usage", chunks and all(c.usage is None and len(c.choices) == 1 for c in chunks),
      chunks[-1:] if chunks else "no chunks")
chunks = list(client.completions.create(model=name, prompt=refs[0]["text"], max_tokens=4, temperature=0, stream=True,
                                        stream_options={"include_usage": True}))
last = chunks[-1]
check("include_usage: last chunk", last.choices == [] and last.usage is not None and last.usage.completion_tokens == 4
      and last.usage.total_tokens == last.usage.prompt_tokens + 4, last)

# Penalties (vLLM's extra fields in extra_body, OpenAI's logit_bias):
# transformers' greedy ids under the same logits processors
# (penalties.json, decoded by transformers' tokenizer), prompts as ids.
with open(os.path.join(args.checkpoint, "penalties.json")) as f:
    pen_refs = json.load(f)["references"]
for i, pref in enumerate(pen_refs):
    st = pref["settings"]
    extra, kw = {}, {}
    if "repetition_penalty" in st:
        extra["repetition_penalty"] = st["repetition_penalty"]
    if "min_new_tokens" in st:
        extra["min_tokens"] = st["min_new_tokens"]
    if "sequence_bias" in st:
        kw["logit_bias"] = {str(ids[0]): v for ids, v in st["sequence_bias"]}
    r = client.completions.create(model=name, prompt=pref["prompt_ids"], max_tokens=24, temperature=0,
                                  extra_body=extra, **kw)
    check(f"penalties {i} {st}: transformers' text and token count",
          r.choices[0].text == pref["decoded"] and r.usage.completion_tokens == len(pref["token_ids"]),
          (r.choices[0].text, pref["decoded"], r.usage))
    streamed_text = "".join(c.choices[0].text for c in client.completions.create(
        model=name, prompt=pref["prompt_ids"], max_tokens=24, temperature=0, stream=True, extra_body=extra, **kw) if c.choices)
    check(f"penalties {i} streamed equals whole", streamed_text == r.choices[0].text, (streamed_text, r.choices[0].text))
r = client.completions.create(model=name, prompt=refs[0]["text"], max_tokens=8, temperature=0, frequency_penalty=2.0,
                              presence_penalty=2.0)
check("frequency and presence penalties accepted", len(r.choices) == 1 and r.usage.completion_tokens >= 1, r)

# Logprobs: every token's log-probability and its top 5 alternatives
# equal transformers' float32 log-softmax (logprobs.json) within 1e-4,
# streamed and whole; completions echo the prompt's (its first null);
# chat's bytes rebuild the message's text.
with open(os.path.join(args.checkpoint, "logprobs.json")) as f:
    lp_refs = json.load(f)["references"]


def close(a, b):
    return a is not None and abs(a - b) <= 1e-4


def chat_logprobs(msgs, n, stream):
    kw = dict(model=name, messages=msgs, max_tokens=n, temperature=0, logprobs=True, top_logprobs=5)
    if not stream:
        c = client.chat.completions.create(**kw).choices[0]
        return c.message.content, c.finish_reason, c.logprobs.content
    text, finish, content = "", None, []
    for ch in client.chat.completions.create(stream=True, **kw):
        if ch.choices:
            text += ch.choices[0].delta.content or ""
            finish = ch.choices[0].finish_reason or finish
            if ch.choices[0].logprobs and ch.choices[0].logprobs.content:
                content += ch.choices[0].logprobs.content
    return text, finish, content


def completion_logprobs(prompt, n, stream):
    kw = dict(model=name, prompt=prompt, max_tokens=n, temperature=0, logprobs=5, echo=True)
    if not stream:
        c = client.completions.create(**kw).choices[0]
        return c.text, c.logprobs.tokens, c.logprobs.token_logprobs, c.logprobs.top_logprobs
    text, toks, lps, tops = "", [], [], []
    for ch in client.completions.create(stream=True, **kw):
        if ch.choices:
            text += ch.choices[0].text
            if ch.choices[0].logprobs:
                toks += ch.choices[0].logprobs.tokens
                lps += ch.choices[0].logprobs.token_logprobs
                tops += ch.choices[0].logprobs.top_logprobs
    return text, toks, lps, tops


for i, ref in enumerate(refs):
    lr, n = lp_refs[i], len(ref["token_ids"])
    want_lp, want_top, pl = lr["token_logprobs"], lr["top_logprobs"], lr["prompt_len"]
    for stream in (False, True):
        if ref["chat"]:
            text, finish, content = chat_logprobs([{"role": "user", "content": ref["text"]}], n, stream)
            ok = len(content) == n and all(
                close(c.logprob, want_lp[pl - 1 + j]) and len(c.top_logprobs) == 5
                and all(close(t.logprob, want_top[pl - 1 + j][m]) for m, t in enumerate(c.top_logprobs))
                for j, c in enumerate(content))
            kept = content[:-1] if finish == "stop" else content
            raw = bytes(b for c in kept for b in c.bytes)
            check(f"chat {i} logprobs (stream={stream})", ok, [(c.logprob, want_lp[pl - 1 + j]) for j, c in enumerate(content)][:4])
            check(f"chat {i} bytes rebuild the text (stream={stream})",
                  raw.decode("utf-8", errors="replace") == text and "\ufffd".encode() not in raw, (raw, text))
            continue
        text, toks, lps, tops = completion_logprobs(ref["text"], n, stream)
        ok = len(toks) == len(lr["ids"]) and lps[0] is None and tops[0] is None and all(
            close(lps[j], want_lp[j - 1]) and 1 <= len(tops[j]) <= 6
            and all(any(close(v, w) for w in want_top[j - 1][:5] + [want_lp[j - 1]]) for v in tops[j].values())
            for j in range(1, len(toks)))
        check(f"completion {i} echo logprobs (stream={stream})", ok and text.startswith(ref["text"]),
              (len(toks), len(lr["ids"]), lps[:3], want_lp[:2]))

# Embeddings: every input (texts, with BOS as transformers' tokenizer
# adds it, and token-id lists) equals transformers' last-token pooled,
# L2-normalised hidden states (embeddings.json) within 1e-4: as floats,
# as base64 decoded by the client itself (its default, encoding_format
# omitted), and as base64 decoded here.
with open(os.path.join(args.checkpoint, "embeddings.json")) as f:
    emb_refs = json.load(f)["references"]
emb_inputs = [r["text"] for r in emb_refs if r["text"] is not None]
emb_want = [r["last"] for r in emb_refs if r["text"] is not None]
for fmt in ("float", None, "base64"):
    kw = {} if fmt is None else {"encoding_format": fmt}
    for inputs, want in ((emb_inputs, emb_want), ([r["ids"] for r in emb_refs], [r["last"] for r in emb_refs])):
        e = client.embeddings.create(model=name, input=inputs, **kw)
        got = [d.embedding for d in e.data]
        if fmt == "base64":
            import array, base64
            got = [array.array("f", base64.b64decode(g)).tolist() for g in got]
        ok = len(got) == len(want) and all(len(g) == len(w) and max(abs(a - b) for a, b in zip(g, w)) <= 1e-4
                                           for g, w in zip(got, want))
        ntok = sum(len(r["ids"]) for r in emb_refs) if isinstance(inputs[0], list) else None
        check(f"embeddings of {'ids' if ntok else 'texts'} (encoding_format={fmt})",
              ok and [d.index for d in e.data] == list(range(len(want))) and (ntok is None or e.usage.prompt_tokens == ntok),
              (e.usage, [len(g) for g in got]))


# Structured output: response_format json_schema on both endpoints (chat
# through the client's own argument, completions in extra_body as vLLM
# takes it), at temperature 1 from the random model: every answer that
# finished parses and validates against the schema (checked here, by
# hand). Whitespace-only tokens are biased down (the grammar allows runs
# of 12 bytes between JSON tokens, too many for the 128-token context).
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "minItems": 1, "maxItems": 2},
    "ok": {"type": "boolean"}},
    "required": ["name", "age", "tags"], "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
with open(os.path.join(args.checkpoint, "tokenizer.json")) as f:
    vocab = json.load(f)["model"]["vocab"]
ws_bias = {str(i): -100 for t, i in vocab.items() if t and set(t) <= set("\u0120\u010a\u0109\u010d")}


def valid_person(text):
    try:
        v = json.loads(text)
    except ValueError:
        return False
    return (isinstance(v, dict) and set(v) <= {"name", "age", "tags", "ok"} and {"name", "age", "tags"} <= set(v)
            and isinstance(v["name"], str) and 1 <= len(v["name"]) <= 6
            and type(v["age"]) is int and 0 <= v["age"] <= 120
            and isinstance(v["tags"], list) and 1 <= len(v["tags"]) <= 2 and all(t in ("red", "green") for t in v["tags"])
            and isinstance(v.get("ok", True), bool))


for seed in range(3):
    r = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "a person"}], max_tokens=90,
                                       temperature=1, seed=seed, response_format=FORMAT, logit_bias=ws_bias)
    c = r.choices[0]
    check(f"json_schema chat seed {seed}", c.finish_reason == "stop" and valid_person(c.message.content), (c.finish_reason, c.message.content))
    text, finish = "", None
    for ch in client.completions.create(model=name, prompt="person:", max_tokens=90, temperature=1, seed=seed, stream=True,
                                        logit_bias=ws_bias, extra_body={"response_format": FORMAT}):
        if ch.choices:
            text += ch.choices[0].text
            finish = ch.choices[0].finish_reason or finish
    check(f"json_schema completions streamed seed {seed}", finish == "stop" and valid_person(text), (finish, text))
r = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "x"}], max_tokens=90, temperature=1,
                                   seed=5, response_format={"type": "json_object"}, logit_bias=ws_bias)
check("json_object starts an object", r.choices[0].message.content.startswith("{"), r.choices[0].message.content)

# n: three choices of one prompt, prefilled once. At temperature 0 each is
# transformers' greedy text; streamed, chunks carry their index; usage
# counts the prompt once.
ref = next(r for r in refs if r["chat"])
msgs = [{"role": "user", "content": ref["text"]}]
r = client.chat.completions.create(model=name, messages=msgs, max_tokens=48, temperature=0, n=3)
check("n=3 greedy: every choice is transformers' text",
      [c.index for c in r.choices] == [0, 1, 2] and all(c.message.content == ref["decoded"] for c in r.choices)
      and r.usage.prompt_tokens == len(ref["prompt_ids"]) and r.usage.completion_tokens == 3 * len(ref["token_ids"]),
      ([c.message.content for c in r.choices], r.usage))
texts = {}
for ch in client.chat.completions.create(model=name, messages=msgs, max_tokens=48, temperature=0, n=3, stream=True):
    for c in ch.choices:
        texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
check("n=3 greedy streamed, by index", texts == {i: ref["decoded"] for i in range(3)}, texts)
a = client.completions.create(model=name, prompt="hello", max_tokens=12, temperature=1, seed=99, n=3)
b = client.completions.create(model=name, prompt="hello", max_tokens=12, temperature=1, seed=99, n=3)
one = client.completions.create(model=name, prompt="hello", max_tokens=12, temperature=1, seed=99)
check("n=3 seeded: the same seed gives the same choices; choice 0 is the n=1 answer",
      [c.text for c in a.choices] == [c.text for c in b.choices] and a.choices[0].text == one.choices[0].text
      and len({c.text for c in a.choices}) > 1, ([c.text for c in a.choices], one.choices[0].text))

# Bad requests: 4xx with a message (some come with the tools below).
def refused(what, status, fn):
    try:
        fn()
    except openai.APIStatusError as e:
        msg = (e.body or {}).get("message", "") if isinstance(e.body, dict) else ""
        check(what, e.status_code == status and msg != "", (e.status_code, e.body))
        return
    check(what, False, "accepted")


# Tools, on qwen2-long (the same weights with a 1024-token context: the
# fixture's template ignores tools, so their definitions go into the system
# prompt). tool_choice required and named constrain the answer: every call
# is of a declared function, its arguments valid (checked here by hand),
# finish_reason tool_calls, whole and streamed; a tool result renders.
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "the forecast", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 8},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": False}}},
         {"type": "function", "function": {"name": "time_in", "parameters": {
             "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"], "additionalProperties": False}}}]


def valid_call(fn_name, args):
    try:
        a = json.loads(args)
    except ValueError:
        return False
    if fn_name == "weather":
        return (set(a) == {"city", "days"} and isinstance(a["city"], str) and 1 <= len(a["city"]) <= 8
                and type(a["days"]) is int and 1 <= a["days"] <= 7)
    return fn_name == "time_in" and a in ({"zone": "UTC"}, {"zone": "CET"})


for choice in ("required", {"type": "function", "function": {"name": "weather"}}):
    for seed in range(2):
        kw = dict(model="qwen2-long", messages=[{"role": "user", "content": "weather in Oslo?"}], tools=TOOLS, tool_choice=choice,
                  max_tokens=80, temperature=1, seed=seed, logit_bias=ws_bias)
        r = client.chat.completions.create(**kw)
        c = r.choices[0]
        calls = c.message.tool_calls or []
        check(f"tool_choice {choice} seed {seed}", c.finish_reason == "tool_calls" and len(calls) == 1 and calls[0].id.startswith("call_")
              and valid_call(calls[0].function.name, calls[0].function.arguments)
              and (choice == "required" or calls[0].function.name == "weather"), (c.finish_reason, calls, c.message.content))
        name_s, args_s, finish = "", "", None
        for ch in client.chat.completions.create(stream=True, **kw):
            for cc in ch.choices:
                for d in cc.delta.tool_calls or []:
                    name_s += d.function.name or ""
                    args_s += d.function.arguments or ""
                finish = cc.finish_reason or finish
        check(f"tool_choice {choice} seed {seed} streamed", finish == "tool_calls" and calls and name_s == calls[0].function.name
              and args_s == calls[0].function.arguments, (finish, name_s, args_s))
conv = [{"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                               "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\", \"days\": 2}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"}]
r0 = client.chat.completions.create(model="qwen2-long", messages=conv[:1], tools=TOOLS, max_tokens=1, temperature=0)
r1 = client.chat.completions.create(model="qwen2-long", messages=conv, tools=TOOLS, max_tokens=1, temperature=0)
check("a tool call and its result render into the prompt", r1.usage.prompt_tokens > r0.usage.prompt_tokens + 10,
      (r0.usage.prompt_tokens, r1.usage.prompt_tokens))
refused("tools with an invalid parameter schema 400", 400, lambda: client.chat.completions.create(
    model="qwen2-long", messages=[{"role": "user", "content": "x"}],
    tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string", "format": "email"}}}]))
refused("tool_choice naming an undeclared function 400", 400, lambda: client.chat.completions.create(
    model="qwen2-long", messages=[{"role": "user", "content": "x"}], tools=TOOLS,
    tool_choice={"type": "function", "function": {"name": "nope"}}))

refused("unknown model 404", 404, lambda: client.completions.create(model="nosuchmodel", prompt="x", max_tokens=2))
refused("negative max_tokens 400", 400, lambda: client.completions.create(model=name, prompt="x", max_tokens=-1))
refused("max_tokens past the context 400", 400, lambda: client.completions.create(model=name, prompt="x", max_tokens=100000))
refused("prompt longer than the context 400", 400, lambda: client.completions.create(model=name, prompt="hello world " * 300, max_tokens=2))
refused("presence_penalty 3 400", 400, lambda: client.completions.create(model=name, prompt="x", presence_penalty=3))
refused("logit_bias outside the vocabulary 400", 400, lambda: client.completions.create(model=name, prompt="x", logit_bias={"999999": 1}))
refused("negative repetition_penalty 400", 400, lambda: client.completions.create(model=name, prompt="x", extra_body={"repetition_penalty": -1}))
refused("chat n=5 over the 4 sequences 400", 400, lambda: client.chat.completions.create(model=name, messages=[{"role": "user", "content": "x"}], n=5))
refused("n=10^9 400", 400, lambda: client.completions.create(model=name, prompt="x", n=10**9))
refused("json_schema with pattern 400", 400, lambda: client.chat.completions.create(
    model=name, messages=[{"role": "user", "content": "x"}],
    response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}}))
refused("response_format type yaml 400", 400, lambda: client.completions.create(model=name, prompt="x", extra_body={"response_format": {"type": "yaml"}}))
refused("top_logprobs 21 400", 400, lambda: client.chat.completions.create(
    model=name, messages=[{"role": "user", "content": "x"}], logprobs=True, top_logprobs=21))
refused("top_logprobs without logprobs 400", 400, lambda: client.chat.completions.create(
    model=name, messages=[{"role": "user", "content": "x"}], top_logprobs=3))
refused("completions logprobs 21 400", 400, lambda: client.completions.create(model=name, prompt="x", logprobs=21))
refused("embeddings dimensions 400", 400, lambda: client.embeddings.create(model=name, input="x", dimensions=8))
refused("embeddings of an empty string 400", 400, lambda: client.embeddings.create(model=name, input=""))

# SIGTERM while a stream runs: the stream ends properly (finished, or
# cancelled at the drain deadline); the shell script checks the exit.
stream = client.completions.create(model=name, prompt="hello", max_tokens=100, temperature=1.0, stream=True,
                                   stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
it = iter(stream)
next(it)
os.kill(args.server_pid, signal.SIGTERM)
finish, usage = None, None
for ch in it:
    if ch.choices:
        finish = ch.choices[0].finish_reason or finish
    if ch.usage:
        usage = ch.usage
check("SIGTERM: the running stream ends with a finish reason and usage", finish in ("length", "abort") and usage is not None, (finish, usage))

print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
