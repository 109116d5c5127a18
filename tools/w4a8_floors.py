#!/usr/bin/env python3
"""The two floors of a W4A8 expert GEMM launch (moe_w4a8_gemm.cu), and where measured times stand against both.

Per shape of issue 8 and token count, top-6 routing with every expert touched (uniform routing at prefill sizes):
- bytes: the experts' packed MXFP4 weights (N K / 2 codes + N K / 32 scale bytes + N flag bytes, the layout of
  kernels/cpu/moe_w4a8_pack.h), the FP8 activations with their fp32 scale per 128 channels, and the bf16 output;
- FLOPs: 2 x 6T x N x K.
It prints the HBM floor (bytes / 4.28 TB/s), the FP8 floor (FLOPs / 1418 TFLOP/s), the time at issue 8's prefill target
(60 % of 1418) and the share of 4.28 TB/s that this time needs: at that share the kernel must stream its bytes while
it computes at the target rate. With bench logs (`bench_gpu_moe_w4a8` result lines: `SHAPE prefill ROUTING T=N ...
w4a8 US us [CONFIG]`) it adds each uniform-routing result's FP8 and HBM shares (the fastest over the logs).

Usage: python3 tools/w4a8_floors.py [--tokens 4096,16384,32768] [LOG ...]
"""
import argparse
import sys

from w4a8_sweep_ab import PICK, matches  # the bench's result lines, as the A/B tool reads them

COPY_BW = 4.28e12   # bytes/s, shared/reference/h200.md
FP8_PEAK = 1418e12  # FLOP/s, the same
TARGET = 0.60       # issue 8's prefill target, share of FP8_PEAK
TOPK = 6
SHAPES = {  # bench_gpu_moe_w4a8's names: (experts, N, K)
    'pro_w13': (384, 6144, 7168),
    'pro_w2': (384, 7168, 3072),
    'flash_w13': (256, 4096, 4096),
    'flash_w2': (256, 4096, 2048),
}


def expert_bytes(n, k):
    return n * k // 2 + n * k // 32 + n


def launch(shape, tokens):
    """(bytes, FLOPs) of one launch with every expert touched."""
    e, n, k = SHAPES[shape]
    slots = TOPK * tokens
    act = slots * k + slots * (k // 128) * 4  # e4m3 codes + fp32 scale per 128 channels
    out = slots * n * 2                        # bf16
    return e * expert_bytes(n, k) + act + out, 2.0 * slots * n * k


def measured(logs):
    """{(shape, tokens): (us, config)}: the fastest uniform prefill result per key over the logs."""
    best = {}
    for m in matches(logs, PICK):
        shape, phase, routing, tokens, us, config = m.groups()
        if shape not in SHAPES or phase != 'prefill' or routing != 'uniform':
            continue
        key, us = (shape, int(tokens)), float(us)
        if key not in best or us < best[key][0]:
            best[key] = (us, config)
    return best


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--tokens', default='4096,16384,32768')
    ap.add_argument('logs', nargs='*')
    args = ap.parse_args(argv)
    try:
        tokens = [int(t) for t in args.tokens.split(',')]
    except ValueError:
        ap.error('--tokens: expected comma-separated integers, got %r' % args.tokens)
    if any(t <= 0 for t in tokens):
        ap.error('--tokens: expected positive token counts, got %r' % args.tokens)
    best = measured(args.logs)
    print('| shape | tokens | bytes | HBM floor | FP8 floor | 60 %% line | HBM share at the line |%s' %
          (' measured (config) | FP8 share | HBM share |' if args.logs else ''))
    print('|---|---|---|---|---|---|---|%s' % ('---|---|---|' if args.logs else ''))
    for shape in SHAPES:
        for t in tokens:
            nbytes, flops = launch(shape, t)
            hbm_s, fp8_s = nbytes / COPY_BW, flops / FP8_PEAK
            line_s = fp8_s / TARGET
            row = '| %s | %d | %.2f GB | %.0f us | %.0f us | %.0f us | %.0f %% |' % (
                shape, t, nbytes / 1e9, hbm_s * 1e6, fp8_s * 1e6, line_s * 1e6, 100 * hbm_s / line_s)
            if args.logs:
                m = best.get((shape, t))
                if m:
                    us, cfg = m
                    row += ' %.0f us (%s) | %.1f %% | %.0f %% |' % (us, cfg, 100 * fp8_s / (us * 1e-6),
                                                                  100 * hbm_s / (us * 1e-6))
                else:
                    row += ' - | - | - |'
            print(row)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
