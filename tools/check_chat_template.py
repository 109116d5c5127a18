#!/usr/bin/env python3
"""Renders conversations with the DeepSeek-V3 Jinja chat template (Jinja2, set up the way transformers
sets it up) to cross-check the native C++ renderer (src/server/chat_template.cpp). Runs here, no GPU.

python3 tools/check_chat_template.py [TOKENIZER_CONFIG] [OUT_JSON]
Defaults: data/deepseek-v3/tokenizer_config.json and tests/fixtures/tokenizer/chat_template_jinja.json.
Also checks that the HF chat goldens' text equals Jinja2's render of the same messages.
"""
import hashlib
import json
import os
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
config_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "data/deepseek-v3/tokenizer_config.json")
out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "tests/fixtures/tokenizer/chat_template_jinja.json")
fixtures = os.path.join(root, "tests/fixtures/tokenizer")

config = json.load(open(config_path, encoding="utf-8"))
source = config["chat_template"]
token = lambda t: t["content"] if isinstance(t, dict) else t
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
template = env.from_string(source)


def render(messages, add_generation_prompt):
    return template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                           bos_token=token(config["bos_token"]), eos_token=token(config["eos_token"]))


goldens = json.load(open(os.path.join(fixtures, "tokenizer_goldens.json"), encoding="utf-8"))
for g in goldens["chat"]:
    assert render(g["messages"], g["add_generation_prompt"]) == g["text"], f"HF golden differs from Jinja2: {g['name']}"

renders = []
for conv in json.load(open(os.path.join(fixtures, "chat_edge_conversations.json"), encoding="utf-8")):
    for agp in (True, False):
        renders.append({"name": conv["name"], "messages": conv["messages"], "add_generation_prompt": agp,
                        "text": render(conv["messages"], agp)})
result = {"template_sha256": hashlib.sha256(source.encode()).hexdigest(), "renders": renders}
with open(out_path, "w", encoding="utf-8") as f:
    json.dump(result, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"HF goldens agree with Jinja2 ({len(goldens['chat'])} renders); wrote {len(renders)} renders to {out_path}")
