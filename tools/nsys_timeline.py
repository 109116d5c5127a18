#!/usr/bin/env python3
"""Reads the layer_trace.csv of scripts/device-profile.sh (nsys cuda_gpu_trace of the batch-1 decode graph) and
prints one graph replay as a timeline: each kernel's start and end (µs from the replay's first kernel), its grid,
and 'gap' = how much later it ended than the kernel that ended before it. Ordered by end time, the gaps add up to
the replay's span, so a kernel's gap is what the step waited on it (with PDL, a kernel's start and duration
include its wait for the previous one; the end is what counts). A summary adds the gaps per kernel name and grid.

usage: tools/nsys_timeline.py layer_trace.csv [replay index, default: the middle one]
"""
import collections
import csv
import re
import sys


def short(name, width=48):
    """A kernel's name without the namespace and the parameter list, cut to `width` characters."""
    name = re.sub(r'void moeserve::cuda::(<unnamed>::)?', '', name)
    name = re.sub(r'moeserve::cuda::(<unnamed>::)?', '', name)
    return re.sub(r'\(.*', '', name)[:width]


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    replays, cur = [], None
    for r in rows:  # the bench uploads the step's inputs before each replay
        if 'memcpy Host-to-Device' in r['Name']:
            cur = []
            replays.append(cur)
        elif cur is not None and 'memcpy' not in r['Name'] and 'memset' not in r['Name']:
            cur.append(r)
    replays = [r for r in replays if r]
    if not replays:
        sys.exit('no replays found')
    idx = int(sys.argv[2]) if len(sys.argv) > 2 else len(replays) // 2
    rep = replays[idx]
    t0 = min(int(r['Start (ns)']) for r in rep)
    ev = []
    for r in rep:
        s = (int(r['Start (ns)']) - t0) / 1000
        e = s + int(r['Duration (ns)']) / 1000
        grid = f"{r['GrdX']}x{r['GrdY']}x{r['GrdZ']}"
        ev.append((e, s, grid, short(r['Name'])))
    ev.sort()
    print(f'{len(replays)} replays; replay {idx}: {len(rep)} kernels, span {ev[-1][0]:.1f} us')
    print(f"{'start':>8} {'end':>8} {'gap':>6}  {'grid':<10} kernel")
    prev = 0.0
    per_name = collections.defaultdict(float)
    for e, s, grid, name in ev:
        gap = max(0.0, e - prev)
        per_name[f"{name} {grid}"] += gap
        print(f'{s:8.1f} {e:8.1f} {gap:6.1f}  {grid:<10} {name}')
        prev = max(prev, e)
    print('\nwaited-on time per kernel name (sum of gaps):')
    for name, g in sorted(per_name.items(), key=lambda x: -x[1]):
        print(f'{g:8.1f}  {name}')


if __name__ == '__main__':
    main()
