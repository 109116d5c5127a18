#!/usr/bin/env python3
"""Reads an nsys cuda_gpu_trace CSV of back-to-back launches of one op (scripts/device-profile.sh linear:SHAPE: the
graphs of bench_gpu_ops' timing, each a chain of the same launch) and prints, per kernel name and grid, how the
launches of a chain sit against each other: the period (one launch's end to the next one's end: what a launch
costs in the chain), the duration (its blocks' first start to its last end; with PDL this includes its wait for
the previous launch), and the lead (how long before the previous launch ended this one started: > 0 means its
blocks were resident and could issue their pre-wait loads while the previous one ran). Medians over the trace.

usage: tools/nsys_overlap.py TRACE.csv
"""
import collections
import csv
import statistics
import sys

from nsys_timeline import short


def main():
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if 'memcpy' not in r['Name'] and 'memset' not in r['Name']]
    rows.sort(key=lambda r: int(r['Start (ns)']))
    by_kind = collections.defaultdict(lambda: {'period': [], 'duration': [], 'lead': []})
    prev = None
    for r in rows:
        kind = f"{short(r['Name'], 60)} grid {r['GrdX']}x{r['GrdY']}x{r['GrdZ']}"
        start, dur = int(r['Start (ns)']), int(r['Duration (ns)'])
        end = start + dur
        k = by_kind[kind]
        k['duration'].append(dur / 1000)
        if prev is not None and prev[0] == kind:
            # The same kernel launched right after: a link of the chain (not the first of a replay or a new op).
            period = (end - prev[2]) / 1000
            if period < 50:
                k['period'].append(period)
                k['lead'].append((prev[2] - start) / 1000)
        prev = (kind, start, end)
    print(f"{'launches':>8} {'period us':>9} {'duration':>8} {'lead us':>8}  kernel")
    for kind, k in sorted(by_kind.items(), key=lambda x: -len(x[1]['duration'])):
        med = lambda v: f'{statistics.median(v):8.2f}' if v else '       -'
        print(f"{len(k['duration']):8d} {med(k['period']):>9} {med(k['duration'])} {med(k['lead'])}  {kind}")


if __name__ == '__main__':
    main()
