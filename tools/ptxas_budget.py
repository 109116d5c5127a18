#!/usr/bin/env python3
"""Spill and stack budgets of the kernels in ptxas -v reports (build/ptxas/*.log, tests/kernels/cuda/ptxas_report.sh).

A kernel that starts to spill, or spills more, has usually got slower (the W4A8 GEMM's configs moved 2-12 % with a
few bytes of spill, docs/benchmarks/moe-w4a8.md), and ptxas says so only in a verbose report that nobody reads. The
budget file lists, per kernel, the spill stores, spill loads and stack frame (bytes) its build is allowed; `check`
fails when a kernel exceeds its entry, or when a kernel with no entry spills or has a stack frame at all. A change
that is worth its spills writes a new budget in the same commit (`write`), which makes the spill a decision.

  ptxas_budget.py write LOG... > tests/kernels/cuda/ptxas_budget.txt
  ptxas_budget.py check BUDGET LOG...
"""
import re
import sys

from cubin_sass import demangle as cxxfilt  # c++filt over a list of names (the names unchanged without it)
from sass_diff import ANON


def normalize(name):
    """The name with the anonymous namespace's hashes as zeros of the same length (so that it still demangles): the
    same kernel of two checkouts or two versions of its file then has one name."""
    return ANON.sub(lambda m: m.group(1) + '0' * len(m.group(2)) + m.group(3) + '0' * len(m.group(4)), name)


ENTRY = re.compile(r"Compiling entry function '([^']+)'")
FRAME = re.compile(r'(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads')
REGS = re.compile(r'Used (\d+) registers')


def parse(paths):
    """{normalized kernel name: (spill stores, spill loads, stack frame, registers)} of ptxas -v reports."""
    out = {}
    for path in paths:
        name, frame, found = None, None, 0
        with open(path, errors='replace') as f:
            for line in f:
                m = ENTRY.search(line)
                if m:
                    name, frame = normalize(m.group(1)), (0, 0, 0)
                    continue
                m = FRAME.search(line)
                if m and name:
                    frame = (int(m.group(2)), int(m.group(3)), int(m.group(1)))
                    continue
                m = REGS.search(line)
                if m and name:
                    out[name] = frame + (int(m.group(1)),)
                    name = None
                    found += 1
        if not found:
            sys.exit(f'ptxas_budget: {path}: no kernels (not a ptxas -v report?)')
    return out


def demangle(names):
    """{mangled: short readable name}: c++filt's, without namespaces, return type and parameters."""
    short = {}
    for n, d in zip(names, cxxfilt(names)):
        for prefix in ('(anonymous namespace)::', 'moeserve::cuda::', 'moeserve::'):
            d = d.replace(prefix, '')
        short[n] = re.sub(r'\([^()]*\)$', '', d.removeprefix('void '))  # the parameter list
    return short


def read_budget(path):
    budget = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.startswith('#'):
                continue
            fields = line.split()
            if len(fields) != 4 or not all(x.isdigit() for x in fields[:3]):
                sys.exit(f'ptxas_budget: {path}:{number}: expected "STORES LOADS FRAME KERNEL", got {line.strip()!r}')
            budget[fields[3]] = tuple(int(x) for x in fields[:3])
    return budget


def write(logs):
    kernels = parse(logs)
    names = demangle(sorted(kernels))
    print('# Spill stores, spill loads and stack frame (bytes) that each kernel of the ptxas reports may have;')
    print('# tools/ptxas_budget.py writes it (`write build/ptxas/*.log`) and checks it (ctest ptxas.spill_budget).')
    print('# Kernels with none of the three need no line.')
    for name in sorted(kernels):
        stores, loads, frame, regs = kernels[name]
        if stores or loads or frame:
            print(f'# {names[name]}: {regs} registers')
            print(f'{stores} {loads} {frame} {name}')


def check(budget_path, logs):
    kernels, budget = parse(logs), read_budget(budget_path)
    names = demangle(sorted(kernels))
    over = []
    for name, (stores, loads, frame, regs) in sorted(kernels.items()):
        allowed = budget.get(name, (0, 0, 0))
        if stores > allowed[0] or loads > allowed[1] or frame > allowed[2]:
            over.append(f'  {names[name]}\n    {stores} / {loads} bytes spilled (stores / loads), {frame} bytes stack, '
                        f'{regs} registers; allowed {allowed[0]} / {allowed[1]}, {allowed[2]}')
    gone = [n for n in budget if n not in kernels]
    spilling = sum(1 for v in kernels.values() if v[0] or v[1])
    print(f'ptxas_budget: {len(kernels)} kernels, {spilling} with spills, {len(over)} over budget'
          + (f'; {len(gone)} budget entries match no kernel (rewrite the budget)' if gone else ''))
    if over:
        print('over budget (a faster kernel may be worth it: then `tools/ptxas_budget.py write` in the same commit):')
        print('\n'.join(over))
        return 1
    return 0


def main(argv):
    if len(argv) >= 2 and argv[0] == 'write':
        write(argv[1:])
        return 0
    if len(argv) >= 3 and argv[0] == 'check':
        return check(argv[1], argv[2:])
    sys.exit(__doc__)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
