#!/usr/bin/env python3
"""transformers' rendering of a conversation with tools, for serve's tool tests.

  gen-tool-template-ref.py CHECKPOINT_DIR > serve/testdata/tool_template.json

Renders, with transformers' apply_chat_template(messages, tools=...,
chat_template=TEMPLATE), a conversation holding an assistant tool call
(arguments as an object, as transformers' templates read them) and a tool
result, through a small template written here that renders tools with
tojson; prints the template, the tools, the text and the ids. Run in the
venv of scripts/setup-llm-fixtures.sh on its qwen2 checkpoint.
"""
import json
import sys

from transformers import AutoTokenizer

TEMPLATE = """{%- if tools %}<s>system: Tools:
{%- for t in tools %}
{{ t | tojson }}
{%- endfor %}
{% endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' and m.tool_calls %}<s>assistant:{% for c in m.tool_calls %}<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}
{% elif m.role == 'tool' %}<s>tool({{ m.tool_call_id }}): {{ m.content }}
{% else %}<s>{{ m.role }}: {{ m.content }}
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}assistant:{% endif %}
"""

tok = AutoTokenizer.from_pretrained(sys.argv[1])
tools = [{"type": "function", "function": {"name": "weather", "description": "the forecast <city>", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]
msgs = [{"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo", "days": 2}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"}]
kw = dict(tools=tools, chat_template=TEMPLATE, add_generation_prompt=True)
print(json.dumps({"template": TEMPLATE, "tools": tools, "text": tok.apply_chat_template(msgs, tokenize=False, **kw),
                  "ids": tok.apply_chat_template(msgs, tokenize=True, **kw)}))
