#!/usr/bin/env python3
"""Reads a *_sass.csv of scripts/device-profile.sh (ncu --page source --csv --print-source sass: one row per SASS
instruction with its execution count and warp-stall samples) and prints where the kernel's warps spend their time:

- the basic blocks that hold at least 1 % of the stall samples (runs of consecutive instructions executed equally
  often), each with its instruction count, executions, share of samples, leading stall reasons and instruction mix;
- the instructions with the most samples and their leading stall reasons;
- the mbarrier waits (SYNCS.PHASECHK ... TRYWAIT): how often each polled, which is how long warps waited on a
  barrier (the retry loop at the kernel's end repeats the poll).

usage: tools/ncu_sass.py FILE_sass.csv [number of top instructions, default 20]
"""
import collections
import csv
import sys

SAMPLES = 'Warp Stall Sampling (All Samples)'
EXECUTED = 'Instructions Executed'


def as_int(text):
    try:
        return int(text)
    except ValueError:
        return 0


def opcode(source):
    words = source.split()
    if words and words[0].startswith('@'):  # predicate guard
        words = words[1:]
    return words[0] if words else '?'


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    lines = list(csv.reader(open(sys.argv[1])))
    # The first row names the kernel; the header row is the first with the column names.
    start = next(i for i, row in enumerate(lines) if SAMPLES in row and EXECUTED in row)
    kernel = lines[0][1] if start > 0 and len(lines[0]) > 1 else '?'
    header, rows = lines[start], lines[start + 1:]
    col = {name: i for i, name in enumerate(header)}
    stall_cols = [h for h in header if h.startswith('stall_') and 'Not Issued' not in h]
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 20

    insts = []
    for row in rows:
        if len(row) < len(header):
            continue
        src = row[col['Source']].strip()
        insts.append({
            'src': src,
            'op': opcode(src),
            'n': as_int(row[col[EXECUTED]]),
            'samples': as_int(row[col[SAMPLES]]),
            'stalls': {h[len('stall_'):]: as_int(row[col[h]]) for h in stall_cols},
        })
    total = sum(x['samples'] for x in insts) or 1
    executed = sum(x['n'] for x in insts)
    print(f'{kernel[:150]}')
    print(f'{len(insts)} instructions, {executed / 1e6:.1f} M warp instructions executed, {total} stall samples\n')

    def reasons(group, k=4):
        c = collections.Counter()
        for x in group:
            c.update(x['stalls'])
        s = sum(c.values()) or 1
        return ', '.join(f'{r} {100 * v / s:.0f}%' for r, v in c.most_common(k) if v)

    # Basic blocks: runs of instructions with the same execution count.
    blocks, cur = [], []
    for i, x in enumerate(insts):
        if cur and x['n'] != insts[cur[-1]]['n']:
            blocks.append(cur)
            cur = []
        cur.append(i)
    if cur:
        blocks.append(cur)
    print('blocks with >= 1 % of the samples (lines, instructions, executions each, samples, stalls; mix):')
    for b in blocks:
        group = [insts[i] for i in b]
        s = sum(x['samples'] for x in group)
        if s < 0.01 * total:
            continue
        mix = collections.Counter(x['op'] for x in group)
        mix_text = ' '.join(f'{op}x{n}' for op, n in mix.most_common(8))
        print(f'  {b[0]:5d}-{b[-1]:<5d} {len(b):4d} inst  x{group[0]["n"]:<10d} {100 * s / total:5.1f}%  '
              f'[{reasons(group)}]\n               {mix_text}')

    print(f'\ntop {top_n} instructions by samples:')
    order = sorted(range(len(insts)), key=lambda i: -insts[i]['samples'])[:top_n]
    for i in sorted(order):
        x = insts[i]
        print(f'  {i:5d} {100 * x["samples"] / total:5.1f}%  x{x["n"]:<10d} {x["src"][:64]:64s} [{reasons([x], 2)}]')

    waits = [(i, x) for i, x in enumerate(insts) if 'TRYWAIT' in x['src'] and x['n'] > 0]
    if waits:
        print('\nmbarrier polls (line, executions, barrier operand):')
        for i, x in waits:
            operand = x['src'].split('[')[1].split(']')[0] if '[' in x['src'] else ''
            print(f'  {i:5d} x{x["n"]:<10d} [{operand}]')


if __name__ == '__main__':
    main()
