#!/usr/bin/env python3
"""A/B of two W4A8 GEMM builds from their tuning sweeps.

Reads the `sweep SHAPE PHASE ROUTING T=N: config=us ...` lines that `bench_gpu_moe_w4a8 --tune FILE` prints, from
the logs of a baseline build and of a new one (alternate the two in one device call, e.g. three rounds each), takes
each config's minimum over the rounds, and prints per (shape, phase, routing, tokens): the best config's time of each
side and their ratio, the ratio of the baseline's best config in the new build, and the range of same-config ratios.
With --picks it compares instead what each build's dispatch table picks (the `SHAPE PHASE ROUTING T=N ... w4a8 US us
[CONFIG]` result lines; each key's minimum over the rounds): for A/B of two tables. Both end with the geomean ratio.

Usage: python3 tools/w4a8_sweep_ab.py --base 'OUT/base*.log' --new 'OUT/new*.log' [--routing uniform|zipf|all]
                                      [--picks]
"""
import argparse
import collections
import glob
import math
import re
import sys

SWEEP = re.compile(r'\s*sweep (\S+) (decode|prefill) (\S+) T=(\d+):(.*)')
ENTRY = re.compile(r'(\S+)=([\d.]+)')
PICK = re.compile(r'(\S+)\s+(decode|prefill)\s+(\S+)\s+T=(\d+)\s.*?\bw4a8\s+([\d.]+) us \[([^\]]+)\]')


def matches(files, pattern):
    """The match of `pattern` on each line of `files` that it matches, in order."""
    for name in files:
        with open(name, encoding='utf-8', errors='replace') as f:
            for line in f:
                m = pattern.match(line)
                if m:
                    yield m


def sweep_minima(files, key=lambda shape, phase, routing, tokens: (shape, phase, routing, tokens), reduce=min):
    """{key: {config: min us}} over the sweep lines of `files` (reduce: how a config's times over the files combine,
    min by default); key(shape, phase, routing, tokens) None skips a line."""
    times = collections.defaultdict(lambda: collections.defaultdict(list))
    for m in matches(files, SWEEP):
        k = key(m.group(1), m.group(2), m.group(3), int(m.group(4)))
        if k is None:
            continue
        for cfg, us in ENTRY.findall(m.group(5)):
            times[k][cfg].append(float(us))
    return collections.defaultdict(dict, {k: {c: reduce(v) for c, v in t.items()} for k, t in times.items()})


def files_of(pattern):
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit(f"w4a8_sweep_ab: no files match {pattern!r}")
    return files


def minima(pattern):
    return sweep_minima(files_of(pattern))  # (shape, phase, routing, T) -> {config: min us}


def pick_minima(pattern):
    """(shape, phase, routing, T) -> (min us, config) of the table's pick over the result lines of the files."""
    best = {}
    for m in matches(files_of(pattern), PICK):
        k = (m.group(1), m.group(2), m.group(3), int(m.group(4)))
        us = float(m.group(5))
        if k not in best or us < best[k][0]:
            best[k] = (us, m.group(6))
    return best


def geomean(ratios):
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float('nan')


def compare_picks(a):
    base, new = pick_minima(a.base), pick_minima(a.new)
    print(f"{'shape':<10} {'phase':<7} {'routing':<8} {'T':>6}  {'base us':>9} {'new us':>9} {'new/base':>8}  "
          f"{'base pick':<34} new pick")
    ratios, changed = [], []
    for key in sorted(set(base) & set(new)):
        if a.routing != 'all' and key[2] != a.routing:
            continue
        (b_us, b_cfg), (n_us, n_cfg) = base[key], new[key]
        r = n_us / b_us
        ratios.append(r)
        if n_cfg != b_cfg:
            changed.append(r)
        print(f"{key[0]:<10} {key[1]:<7} {key[2]:<8} {key[3]:>6}  {b_us:>9.1f} {n_us:>9.1f} {r:>8.3f}  "
              f"{b_cfg:<34} {n_cfg if n_cfg != b_cfg else '(same)'}")
    print(f"geomean new/base {geomean(ratios):.3f} over {len(ratios)} keys; " +
          (f"the {len(changed)} keys whose pick changed: {geomean(changed):.3f} ({min(changed):.3f}-{max(changed):.3f})"
           if changed else "no pick changed"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--base', required=True, help='glob of the baseline build\'s logs')
    ap.add_argument('--new', required=True, help='glob of the new build\'s logs')
    ap.add_argument('--routing', default='uniform', help='uniform, zipf, recorded or all (default uniform)')
    ap.add_argument('--picks', action='store_true', help='compare the dispatch tables\' picks, not the best configs')
    a = ap.parse_args()
    if a.picks:
        return compare_picks(a)
    base, new = minima(a.base), minima(a.new)
    ratios = []
    print(f"{'shape':<10} {'phase':<7} {'routing':<8} {'T':>6}  {'base us':>9} {'new us':>9} {'new/base':>8}  "
          f"{'base best cfg':<26} {'same cfg':>8} {'range':>13}")
    for key in sorted(set(base) & set(new)):
        if a.routing != 'all' and key[2] != a.routing:
            continue
        b, n = base[key], new[key]
        common = [c for c in b if c in n]
        if not common:
            continue
        b_cfg = min(b, key=b.get)
        b_us, n_us = b[b_cfg], min(n.values())
        same_cfg = sorted(n[c] / b[c] for c in common)
        same = f"{n[b_cfg] / b_us:.3f}" if b_cfg in n else 'n/a'
        ratios.append(n_us / b_us)
        print(f"{key[0]:<10} {key[1]:<7} {key[2]:<8} {key[3]:>6}  {b_us:>9.1f} {n_us:>9.1f} {n_us / b_us:>8.3f}  "
              f"{b_cfg:<26} {same:>8} {same_cfg[0]:.3f}-{same_cfg[-1]:.3f}")
    print(f"geomean new/base (best configs) {geomean(ratios):.3f} over {len(ratios)} keys")


if __name__ == '__main__':
    main()
