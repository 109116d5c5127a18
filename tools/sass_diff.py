#!/usr/bin/env python3
"""Compares the SASS of two builds kernel by kernel (dumps from scripts/device-sass.sh: `cuobjdump -sass` output,
plain or .xz) and says which kernels compiled to the same instructions.

Why: the same source compiled twice can time a few % apart between calls (the forty-sixth session found a "4-12 %
slower" W4A8 config to be identical SASS), so a refactor whose kernels come out identical needs no timing, and one
whose kernels differ names the ones to time.

Each kernel's instructions are compared without their addresses and encodings; the anonymous namespace's per-build
hash in the mangled names is ignored. Prints one line per kernel that differs (instruction counts, first differing
instruction), the kernels found in one dump only, and a summary line.

usage: tools/sass_diff.py A.sass[.xz] B.sass[.xz] [name regex]
"""
import lzma
import re
import sys

COMMENT = re.compile(r'/\*.*?\*/')
# The anonymous namespace's name in mangled names: hashes (of the source, its path) around the file's name, which
# differ between builds of the same kernel. Groups: prefix, first hash, file part, second hash.
ANON = re.compile(r'(_GLOBAL__N__)([0-9a-f]+)(_\d+_\w+?_)([0-9a-f]{8})')


def read(path):
    opener = lzma.open if path.endswith('.xz') else open
    with opener(path, 'rt', errors='replace') as f:
        return f.read()


def kernels(text):
    """{normalized function name: [instructions]} of a cuobjdump -sass dump."""
    out, name = {}, None
    for line in text.splitlines():
        m = re.search(r'Function : (\S+)', line)
        if m:
            name = ANON.sub('_GLOBAL__N_', m.group(1))
            out[name] = []
            continue
        if name is None:
            continue
        ins = COMMENT.sub('', line).strip()
        if ins and not ins.startswith('.'):  # instructions only, no section directives
            out[name].append(ins)
    return out


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    match = re.compile(argv[3]) if len(argv) == 4 else None
    a, b = kernels(read(argv[1])), kernels(read(argv[2]))
    if match:
        a = {k: v for k, v in a.items() if match.search(k)}
        b = {k: v for k, v in b.items() if match.search(k)}
    same = differ = 0
    for name in sorted(set(a) & set(b)):
        if a[name] == b[name]:
            same += 1
            continue
        differ += 1
        first = next((i for i, (x, y) in enumerate(zip(a[name], b[name])) if x != y), min(len(a[name]), len(b[name])))
        at = lambda ins: ins[first] if first < len(ins) else '(end)'
        print(f'differs  {name}: {len(a[name])} -> {len(b[name])} instructions; first at #{first}: '
              f'{at(a[name])!r} -> {at(b[name])!r}')
    for name in sorted(set(a) - set(b)):
        print(f'only A   {name}')
    for name in sorted(set(b) - set(a)):
        print(f'only B   {name}')
    print(f'sass_diff: {same} kernels identical, {differ} differ, {len(set(a) - set(b))} only in A, '
          f'{len(set(b) - set(a))} only in B')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
