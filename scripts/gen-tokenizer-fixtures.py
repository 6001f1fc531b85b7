#!/usr/bin/env python3
"""Generate the reference fixtures for package llm/tokenizer.

Trains small BPE tokenizers with Hugging Face `tokenizers` in each family the
Go tokenizer supports, saves them with `transformers` (tokenizer.json plus
tokenizer_config.json carrying the chat template), and records what the
Python libraries give for a set of test strings, id sequences and
conversations in expected.json beside them:

  encode:  ids of tokenizer(text, add_special_tokens=True/False) in transformers
           (checked equal to tokenizers' Tokenizer.encode(...).ids)
  decode:  transformers tokenizer.decode(ids, skip_special_tokens=True/False)
  chat:    transformers apply_chat_template(messages, tokenize=False,
           add_generation_prompt=True/False) and its ids with tokenize=True,
           or "error" when it raises

Run in a throw-away virtual environment:
  python3 -m venv /tmp/tokvenv
  /tmp/tokvenv/bin/pip install tokenizers==0.22.1 transformers==4.57.1 jinja2
  /tmp/tokvenv/bin/python scripts/gen-tokenizer-fixtures.py llm/tokenizer/testdata/tokenizers
  /tmp/tokvenv/bin/python scripts/gen-tokenizer-fixtures.py llm/tokenizer/testdata/tokenizers components 400

  /tmp/tokvenv/bin/python scripts/gen-tokenizer-fixtures.py llm/tokenizer/testdata/tokenizers templates

The second run writes components.json: single pre-tokenizers and normalizers
applied to random strings over an alphabet of the characters whose classes
matter (letters, numbers, the white space Oniguruma's \s knows, apostrophes,
case-folding oddities, combining marks). The third writes templates.json:
chat templates in the styles of Qwen3, Llama 3.1, Gemma and Zephyr (written
for these tests) rendered by transformers.

The byte-level tokenizers train the same way each run; the SentencePiece-style
trainer orders merges of equal count arbitrarily, so a rerun may give those
families different (equally valid) files and references.
"""
import json
import os
import random
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,
                        normalizers, pre_tokenizers, processors, trainers)
import tokenizers
import transformers
from transformers import AutoTokenizer, LlamaTokenizerFast, PreTrainedTokenizerFast

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Patterns of other byte-level families, run through the generic path (RE2
# alternatives around the one look-ahead): tiktoken's o200k pattern and the
# last of DeepSeek-V3's splits.
O200K_STYLE_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                     r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                     r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_STYLE_SPLIT = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
                        r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 10:45 and we're late!",
    "I'll say it again: don't panic, they've got 3 towels and 42 answers.",
    "Le cœur a ses raisons que la raison ne connaît point. Ça va très bien, merci.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Größe, Fußball.",
    "¿Dónde está la biblioteca? ¡Mañana será otro día! El niño comió piña.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε!",
    "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧。",
    "私はガラスを食べられます。それは私を傷つけません。東京は日本の首都です。",
    "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요. 안녕하세요 세계!",
    "أنا قادر على أكل الزجاج و هذا لا يؤلمني. مرحبا بالعالم",
    "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती. नमस्ते दुनिया",
    "Tôi có thể ăn thủy tinh mà không hại gì. Tiếng Việt có dấu: ằ ẳ ẵ ặ ễ ự.",
    "Emoji: 😀 😃 😄 👍🏽 ❤️ 🎉 🚀 👨‍👩‍👧‍👦 🇫🇷 🇯🇵 and more 🙂🙃.",
    "def main():\n\tprint('hello, world')\n\treturn 0\n\nif __name__ == '__main__':\n    main()\n",
    "Numbers: 1234567890, 3.14159, 2,718, 1e-10, 0x1F, 100%, $5.99, €20, ¥300.",
    "Whitespace   runs\t\ttabs\n\n\nnewlines \r\n crlf    end   ",
    "Special tokens in text: <|begin_of_text|> hello <|eot_id|> <s> [INST] </s> <|im_start|>",
    "Combining marks: e\u0301 a\u0308 o\u0302 n\u0303 and precomposed é ä ô ñ; Å Å.",
    "Mixed: naïve café résumé coöperate façade jalapeño piñata smörgåsbord.",
    "THE END. THE END! the end? The End... 'quoted' \"double\" (paren) [bracket] {brace}",
]

TESTS = [
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "\n\n\n",
    " \n ",
    "a\r\nb",
    "hello",
    " hello",
    "hello ",
    "Hello, world!",
    "Hello world, how are you doing today?",
    "  leading and trailing  ",
    "a  b   c    d\te\t\tf\ng \n\nh",
    "I'M sure you'RE right, it's THEY'LL and we'd",
    "don't won't can't shouldn't",
    "12345678901234567890",
    "Pi is 3.14159265 and e is 2.71828.",
    "x=1+2*3/4-5; y = [1, 2, 3]",
    "Ünïcödé: façade, naïve, Ångström, ﬁnance (ligature), ｆｕｌｌｗｉｄｔｈ",
    "e\u0301e\u0301e\u0301 o\u0308",
    "中文测试：你好，世界！这是一个测试。",
    "日本語のテキストです。カタカナとひらがな。",
    "한국어 문장입니다.",
    "Привет, мир! Как дела?",
    "مرحبا كيف حالك",
    "नमस्ते, आप कैसे हैं?",
    "😀",
    "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏿 thumbs",
    "🇺🇸🇬🇧🇩🇪",
    "mixed中文and English字符",
    "nbsp\u00a0here and ideographic\u3000space",
    "zero\u200bwidth and soft\u00adhyphen",
    "ſ long s: 'ſ and 'S",
    "İstanbul ΣΊΣΥΦΟΣ",
    "<|begin_of_text|>",
    "<|begin_of_text|>Hello<|eot_id|>",
    "text <|eot_id|> more",
    "<s>[INST] question [/INST] answer</s>",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<s><s></s>",
    "<mask> masked <mask>",
    "say hello world now",
    "testing in the inn <extra>",
    "hello worldwide",
    "[RS]   after rs",
    "tabs\tand\ttabs\t\t\t",
    "line1\nline2\r\nline3\rline4",
    "    indented code\n        more",
    "!!!???...,,,;;;",
    "a" * 100,
    "🙂" * 5,
    "~`@#$%^&*()_+-={}|[]\\:\";'<>?,./",
    "The café's naïve piñata—really?",
    " .  ,  !  ?  n't 've 're 'm 's ' x ' ",
    "Hello . world , yes ! no ? don 't I 'm",
]

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "  Tell me a joke.\n\n"}],
    [{"role": "user", "content": "Unicode: 你好 😀 café\nnew line\ttab"}],
    [{"role": "assistant", "content": "I start"}],
]

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

# A multi-line ChatML template in the style Qwen2.5 ships (trim_blocks and
# lstrip_blocks matter here).
CHATML_TEMPLATE = """{%- for message in messages %}
    {%- if loop.first and messages[0]['role'] != 'system' %}
        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

GENERIC_TEMPLATE = """{% for message in messages %}
{% if message.role == 'system' %}
System: {{ message.content }}
{% else %}
{{ message.role | capitalize }}: {{ message.content }}
{% endif %}
{% endfor %}
{% if add_generation_prompt %}Assistant:{% endif %}"""


def train_bytelevel(split_regex, specials, vocab_size, normalizer=None, gpt2_regex=False,
                    add_prefix_space=False):
    tok = Tokenizer(models.BPE(ignore_merges=not gpt2_regex))
    if normalizer is not None:
        tok.normalizer = normalizer
    if gpt2_regex:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer)
    return tok


def train_sentencepiece_bpe(vocab_size):
    """Llama 2 style: BPE over '▁'-joined text with byte fallback, <0xXX> tokens in the vocab."""
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    base.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False, limit_alphabet=180)
    base.train_from_iterator(CORPUS * 3, trainer)
    data = json.loads(base.to_str())
    trained = data["model"]["vocab"]
    merges = data["model"]["merges"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for t, _ in sorted(trained.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]
    return vocab, merges


def sp_tokenizer(vocab, merges, legacy=True, metaspace_split=False, byte_fallback=True):
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=byte_fallback,
                               fuse_unk=True))
    if legacy:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                     split=metaspace_split)
        tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first"),
                                         decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken("<unk>", normalized=False, special=True),
                            AddedToken("<s>", normalized=False, special=True),
                            AddedToken("</s>", normalized=False, special=True)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    return tok


def build_families():
    fams = {}

    # Llama 3: byte-level BPE, Llama-3 split regex, ignore_merges, BOS by TemplateProcessing.
    l3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>", "<|reserved_special_token_0|>"]
    tok = train_bytelevel(LLAMA3_SPLIT, l3_specials, 900)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    fams["llama3"] = dict(tok=tok, cls=PreTrainedTokenizerFast, template=LLAMA3_TEMPLATE,
                          kw=dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                  clean_up_tokenization_spaces=True))

    # Qwen2: byte-level BPE, Qwen split regex (single digits), NFC, no BOS, ChatML.
    q_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = train_bytelevel(QWEN2_SPLIT, q_specials, 900, normalizer=normalizers.NFC())
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    fams["qwen2"] = dict(tok=tok, cls=PreTrainedTokenizerFast, template=CHATML_TEMPLATE,
                         kw=dict(eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 clean_up_tokenization_spaces=False))

    # GPT-2 style: ByteLevel pre-tokenizer with its own regex and add_prefix_space, NFKC +
    # Lowercase normalizers, added tokens with lstrip / rstrip / single_word / normalized.
    tok = train_bytelevel(None, ["<|endoftext|>"], 700,
                          normalizer=normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]),
                          gpt2_regex=True, add_prefix_space=True)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("hello world", single_word=True, normalized=True, special=False),
                    AddedToken("[RS]", rstrip=True, normalized=False, special=False)])
    tok.post_processor = processors.RobertaProcessing(sep=("<|endoftext|>", 0), cls=("<|endoftext|>", 0),
                                                     add_prefix_space=True, trim_offsets=True)
    fams["gpt2"] = dict(tok=tok, cls=PreTrainedTokenizerFast, template=GENERIC_TEMPLATE,
                        kw=dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                mask_token="<mask>", clean_up_tokenization_spaces=False))

    # Llama 2: SentencePiece-style BPE with byte fallback, Prepend+Replace normalizer,
    # Replace/ByteFallback/Fuse/Strip decoder.
    vocab, merges = train_sentencepiece_bpe(700)
    fams["llama2"] = dict(tok=sp_tokenizer(vocab, merges, legacy=True), cls=LlamaTokenizerFast,
                          template=LLAMA2_TEMPLATE,
                          kw=dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  add_bos_token=True, add_eos_token=False, legacy=True,
                                  clean_up_tokenization_spaces=False))
    # Mistral (v0.3 / Llama 2 legacy=False conversion): Metaspace pre-tokenizer and decoder.
    fams["mistral"] = dict(tok=sp_tokenizer(vocab, merges, legacy=False), cls=PreTrainedTokenizerFast,
                           template=MISTRAL_TEMPLATE,
                           kw=dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   clean_up_tokenization_spaces=False))
    # Metaspace with split=True plus Digits / Punctuation pre-tokenizers and Strip normalizer.
    tok = sp_tokenizer(vocab, merges, legacy=False, metaspace_split=True)
    tok.normalizer = normalizers.Sequence([normalizers.Strip(left=False, right=True), normalizers.NFD()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),
    ])
    fams["metaspace"] = dict(tok=tok, cls=PreTrainedTokenizerFast, template=GENERIC_TEMPLATE,
                             kw=dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                     clean_up_tokenization_spaces=True))
    # No byte fallback: characters outside the vocabulary become <unk>, fused.
    # Its config also declares special tokens tokenizer.json lacks ("in" is in
    # the vocabulary, "<extra>" is not): transformers adds both as special.
    fams["unk"] = dict(tok=sp_tokenizer(vocab, merges, legacy=True, byte_fallback=False),
                       cls=PreTrainedTokenizerFast, template=MISTRAL_TEMPLATE, small=True,
                       extra_config={"additional_special_tokens": ["in", "<extra>"]},
                       kw=dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                               clean_up_tokenization_spaces=False))
    # Subword markers: continuing_subword_prefix and end_of_word_suffix, the
    # Whitespace pre-tokenizer, no decoder (tokens joined by spaces).
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "[CLS]", "[SEP]"], show_progress=False,
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>", limit_alphabet=120)
    tok.train_from_iterator(CORPUS * 3, trainer)
    tok.post_processor = processors.BertProcessing(sep=("[SEP]", tok.token_to_id("[SEP]")),
                                                   cls=("[CLS]", tok.token_to_id("[CLS]")))
    fams["subword"] = dict(tok=tok, cls=PreTrainedTokenizerFast, template=GENERIC_TEMPLATE, small=True,
                           kw=dict(unk_token="[UNK]", sep_token="[SEP]", cls_token="[CLS]",
                                   eos_token="[SEP]", clean_up_tokenization_spaces=False))
    return fams


def decode_cases(tok, hf, rng, n_random=150, n_low=50):
    """Id sequences for decode: partial byte tokens, byte-fallback runs, random ids."""
    cases = []
    vocab = tok.get_vocab()
    size = len(hf)

    def ids_of(tokens):
        return [vocab[t] for t in tokens if t in vocab]

    # Byte-level alphabet: map raw bytes to their token strings.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    b2u = {b: chr(c) for b, c in zip(bs, cs)}
    byte_seqs = [[0xE2, 0x82], [0xE2, 0x82, 0xAC], [0xE2, 0x41], [0xFF], [0xF0, 0x9F, 0x98],
                 [0xF0, 0x9F, 0x98, 0x80], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0x80, 0x80, 0x41],
                 [0xE4, 0xB8], [0xF4, 0x90, 0x80, 0x80], [0xC3]]
    for seq in byte_seqs:
        for fmt in (lambda b: b2u[b], lambda b: "<0x%02X>" % b):
            toks = [fmt(b) for b in seq]
            if all(t in vocab for t in toks):
                ids = ids_of(toks)
                cases.append(ids)
                hello = hf.encode("hi", add_special_tokens=False)
                cases.append(hello + ids + hello)
                cases.append(ids + ids)
    for _ in range(n_random):
        cases.append([rng.randrange(size) for _ in range(rng.randrange(1, 16))])
    # Low ids (specials and bytes) are the interesting ones.
    for _ in range(n_low):
        cases.append([rng.randrange(min(size, 300)) for _ in range(rng.randrange(1, 12))])
    return cases


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "llm/tokenizer/testdata/tokenizers"
    rng = random.Random(20)
    for name, fam in build_families().items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        fast = fam["cls"](tokenizer_object=fam["tok"], chat_template=fam["template"], **fam["kw"])
        fast.save_pretrained(d)
        for extra in ("special_tokens_map.json",):
            p = os.path.join(d, extra)
            if os.path.exists(p):
                os.remove(p)
        if fam.get("extra_config"):
            p = os.path.join(d, "tokenizer_config.json")
            cfg = json.load(open(p, encoding="utf-8"))
            cfg.update(fam["extra_config"])
            with open(p, "w", encoding="utf-8") as f:
                json.dump(cfg, f, ensure_ascii=False, indent=2)
        hf = AutoTokenizer.from_pretrained(d)
        raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        enc = []
        for s in TESTS:
            rec = {"text": s}
            for add in (True, False):
                ids = hf(s, add_special_tokens=add)["input_ids"]
                raw_ids = raw.encode(s, add_special_tokens=add).ids
                if ids != raw_ids:
                    # transformers may rebuild the post-processor (LlamaTokenizerFast); record both.
                    rec["raw_with" if add else "raw_without"] = raw_ids
                rec["with" if add else "without"] = ids
            enc.append(rec)
        dec = []
        if fam.get("small"):
            cases = [e["with"] for e in enc] + decode_cases(fam["tok"], hf, rng, 40, 20)
        else:
            cases = [e["with"] for e in enc] + decode_cases(fam["tok"], hf, rng)
        for ids in cases:
            dec.append({"ids": ids,
                        "skip": hf.decode(ids, skip_special_tokens=True),
                        "keep": hf.decode(ids, skip_special_tokens=False)})
        chat = []
        for conv in CONVERSATIONS:
            for gen in (True, False):
                rec = {"messages": conv, "add_generation_prompt": gen}
                try:
                    rec["text"] = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
                    rec["ids"] = hf.apply_chat_template(conv, tokenize=True, add_generation_prompt=gen)
                except Exception as e:  # noqa: BLE001 - the template raised, as intended for some
                    rec["error"] = type(e).__name__ + ": " + str(e)
                chat.append(rec)
        meta = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
                "vocab_size": len(hf), "bos": hf.bos_token_id, "eos": hf.eos_token_id,
                "special_ids": sorted(hf.all_special_ids)}
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "encode": enc, "decode": dec, "chat": chat}, f,
                      ensure_ascii=False, separators=(",", ":"))
        print(name, "vocab", len(hf), "encode", len(enc), "decode", len(dec), "chat", len(chat))
    with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(CORPUS + TESTS))


if __name__ == "__main__" and len(sys.argv) < 3:
    main()


# --- component-level references: pre-tokenizers and normalizers on random strings ---

ALPHABET = (["a", "B", "z", "s", "t", "l", "d", "m", "r", "e", "v", "S", "T", "L", "D", "ſ", "\u212a", "İ", "ß",
             "Σ", "中", "ー", "1", "7", "٣", "²", "Ⅻ", " ", " ", " ", " ", "\t", "\n", "\r", "\u00a0", "\u3000",
             "\u2028", "\u0085", "\u000b", "\u000c", "'", "'", "'", "\"", ".", ",", "-", "_", "$", "+", "😀",
             "\u0301", "\u200d", "▁", "ﬁ", "Ａ"])


def component_fixtures(out, rng, count):
    from tokenizers import normalizers as N, pre_tokenizers as P
    strings = ["".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 11))) for _ in range(count)]
    pres = {
        "split-llama3": P.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        "split-qwen2": P.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        "bytelevel-gpt2": P.ByteLevel(add_prefix_space=False, use_regex=True),
        "bytelevel-prefix": P.ByteLevel(add_prefix_space=True, use_regex=True),
        "split-o200k-style": P.Split(Regex(O200K_STYLE_SPLIT), behavior="isolated"),
        "split-deepseek-style": P.Split(Regex(DEEPSEEK_STYLE_SPLIT), behavior="isolated"),
        "split-words-removed-inverted": P.Split(Regex(r"\w+|[^\w\s]+"), behavior="removed", invert=True),
        "split-space-merged-prev": P.Split(" ", behavior="merged_with_previous"),
        "split-digits-contiguous": P.Split(Regex(r"\d"), behavior="contiguous"),
        "metaspace-first-nosplit": P.Metaspace(prepend_scheme="first", split=False),
        "metaspace-never-split": P.Metaspace(prepend_scheme="never", split=True),
        "whitespace": P.Whitespace(),
        "whitespace-split": P.WhitespaceSplit(),
        "digits": P.Digits(individual_digits=False),
        "punctuation-prev": P.Punctuation(behavior="merged_with_previous"),
    }
    norms = {
        "nfc": N.NFC(), "nfd": N.NFD(), "nfkc": N.NFKC(), "nfkd": N.NFKD(), "lowercase": N.Lowercase(),
        "strip": N.Strip(), "strip-left": N.Strip(left=True, right=False),
        "replace-regex": N.Replace(Regex(r"\s+"), "_"),
        "prepend": N.Prepend("▁"),
    }
    cases = []
    for name, p in pres.items():
        t = Tokenizer(models.BPE())
        t.pre_tokenizer = p
        spec = json.loads(t.to_str())["pre_tokenizer"]
        res = [[s for s, _ in p.pre_tokenize_str(x)] for x in strings]
        cases.append({"name": name, "kind": "pre_tokenizer", "spec": spec, "out": res})
    for name, n in norms.items():
        t = Tokenizer(models.BPE())
        t.normalizer = n
        spec = json.loads(t.to_str())["normalizer"]
        cases.append({"name": name, "kind": "normalizer", "spec": spec,
                      "out": [n.normalize_str(x) for x in strings]})
    from tokenizers import decoders as D
    decs = {
        "fuse-replace-multichar": D.Sequence([D.Fuse(), D.Replace("ab", "X")]),
        "replace-then-fuse": D.Sequence([D.Replace("▁", " "), D.Fuse()]),
        "strip-per-token": D.Strip(" ", 2, 1),
        "fuse-strip": D.Sequence([D.Fuse(), D.Strip(" ", 1, 2)]),
        "metaspace-never": D.Metaspace(prepend_scheme="never"),
        "metaspace-always": D.Metaspace(prepend_scheme="always"),
        "bytefallback-fuse-metaspace": D.Sequence([D.ByteFallback(), D.Fuse(), D.Metaspace()]),
        "bytelevel": D.ByteLevel(),
        "bytefallback-strip": D.Sequence([D.ByteFallback(), D.Strip("a", 1, 1)]),
    }
    toks = ["▁", "a", "▁b", "<0xE2>", "<0x82>", "<0xAC>", "<0xFF>", "<0x41>", " ", "  x", "ab", "b", "x ",
            "Ġ", "ĠĠ", "Ã", "©", "é", "ð", "Ł", "ĺ", "Ģ", "<s>", "▁▁"]
    seqs = [[rng.choice(toks) for _ in range(rng.randrange(0, 9))] for _ in range(count)]
    def decode(d, q):
        try:
            return d.decode(q)
        except BaseException:  # noqa: BLE001 - Strip panics when its cuts cross; recorded as null
            return None

    for name, d in decs.items():
        t = Tokenizer(models.BPE())
        t.decoder = d
        spec = json.loads(t.to_str())["decoder"]
        cases.append({"name": name, "kind": "decoder", "spec": spec,
                      "out": [decode(d, q) for q in seqs]})
    with open(os.path.join(out, "components.json"), "w", encoding="utf-8") as f:
        json.dump({"strings": strings, "token_seqs": seqs, "cases": cases}, f, ensure_ascii=False,
                  separators=(",", ":"))


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[2] == "components":
    component_fixtures(sys.argv[1], random.Random(7), int(sys.argv[3]) if len(sys.argv) > 3 else 400)


def bench(out):
    """Encode throughput of Hugging Face tokenizers on the corpus the Go
    benchmark uses (corpus.txt repeated to about 1 MB, encoded line by line on
    one thread), for comparison with `go test -bench Encode ./llm/tokenizer`."""
    import time
    raw = open(os.path.join(out, "corpus.txt"), encoding="utf-8").read()
    text = (raw + "\n") * ((1 << 20) // len(raw.encode()) + 1)
    lines = text.split("\n")
    nbytes = sum(len(l.encode()) for l in lines)
    for name in ["llama3", "qwen2", "gpt2", "llama2", "mistral", "metaspace"]:
        tok = Tokenizer.from_file(os.path.join(out, name, "tokenizer.json"))
        for l in lines[:1000]:
            tok.encode(l, add_special_tokens=False)
        best = cpu_best = None
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            for l in lines:
                tok.encode(l, add_special_tokens=False)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            best = dt if best is None else min(best, dt)
            cpu_best = dc if cpu_best is None else min(cpu_best, dc)
        # process_time is the comparable figure on a shared machine: wall
        # time there measures the neighbours.
        print(f"{name}: encode line by line {nbytes / best / 1e6:.2f} MB/s wall, "
              f"{nbytes / cpu_best / 1e6:.2f} MB/cpu-s")


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[2] == "bench":
    bench(sys.argv[1])


# --- chat templates in the styles checkpoints ship (written for these tests) ---

QWEN3_STYLE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    {{- "# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

LLAMA31_STYLE = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

GEMMA_STYLE = """{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"""

ZEPHYR_STYLE = """{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>\\n'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""

EXTRA_CONVERSATIONS = CONVERSATIONS + [
    [{"role": "user", "content": "Think first"},
     {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nAnswer"},
     {"role": "user", "content": "again"}],
    [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "q"},
     {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}],
]


def template_fixtures(out):
    """Render the templates above with transformers (on the llama3 fixture
    tokenizer, whose bos/eos the Go test uses too) into templates.json."""
    hf = AutoTokenizer.from_pretrained(os.path.join(out, "llama3"))
    cases = []
    for name, tmpl in [("qwen3-style", QWEN3_STYLE), ("llama3.1-style", LLAMA31_STYLE),
                       ("gemma-style", GEMMA_STYLE), ("zephyr-style", ZEPHYR_STYLE)]:
        for conv in EXTRA_CONVERSATIONS:
            for gen in (True, False):
                rec = {"template": name, "messages": conv, "add_generation_prompt": gen}
                try:
                    rec["text"] = hf.apply_chat_template(conv, chat_template=tmpl, tokenize=False,
                                                         add_generation_prompt=gen)
                except Exception as e:  # noqa: BLE001 - raise_exception in the template
                    rec["error"] = str(e)
                cases.append(rec)
    templates = {"qwen3-style": QWEN3_STYLE, "llama3.1-style": LLAMA31_STYLE,
                 "gemma-style": GEMMA_STYLE, "zephyr-style": ZEPHYR_STYLE}
    with open(os.path.join(out, "templates.json"), "w", encoding="utf-8") as f:
        json.dump({"templates": templates, "cases": cases}, f, ensure_ascii=False, indent=0)


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[2] == "templates":
    template_fixtures(sys.argv[1])
