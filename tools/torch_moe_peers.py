#!/usr/bin/env python3
"""PyTorch peers for bench_gpu_moe_w4a8 (run on the GPU machine by scripts/device-check.sh).

Times PyTorch's grouped GEMM ops on the shapes of docs/benchmarks/moe-w4a8.md: V4-Pro (E=384) W13 6144x7168 and
W2 7168x3072, V4-Flash (E=256) W13 4096x4096 and W2 4096x2048; top-6 uniform random routing (fixed seeds); decode
T = 1..256 and prefill T = 4096..32768. Ops, where this torch has them:
  _grouped_mm_bf16            torch._grouped_mm, bf16 activations [rows, K] x bf16 weights [E, K, N] (2d x 3d, offs)
  _scaled_grouped_mm_fp8      torch._scaled_grouped_mm, e4m3 x e4m3, rowwise fp32 scales, bf16 out
  _scaled_grouped_mm_fp8_fast the same with use_fast_accum=True (prefill only)
  _scaled_mm_loop_fp8         one torch._scaled_mm (rowwise) per active expert (decode only)
Weights are stored like nn.Linear ([E, N, K] contiguous) and passed transposed ([E, K, N], column-major per expert),
which is the layout _scaled_grouped_mm requires and _grouped_mm accepts.

Each timing: eager warm-up, then a CUDA graph of one call per routing (8 routings for decode, so the touched experts
change every call as in the C++ bench; 2 for prefill), replayed several times; us = median replay time / calls.
weight bytes = active experts x N x K x (2 bf16 | 1 fp8); mxfp4_MB = the same GEMM's MXFP4 bytes
(N*K*(1/2+1/32) per active expert), the figure bench_gpu_moe_w4a8 divides by. tflops counts useful rows (6T) only.

Group sizes that are not multiples of 16 rows made torch 2.8's grouped kernels hit a device-side assert (after which
the process's CUDA context is unusable); later versions accept them. A child process probes this first on a tiny
problem (and checks the results against a float reference); an op that does not pass the probe gets each expert's rows
padded up to 16. (The probe runs bf16 first: if that asserts, the fp8 probe fails too and fp8 is padded as well.)

Usage: python3 tools/torch_moe_peers.py [--quick] [--budget SECONDS] [--pad auto|1|16]
Writes $OUT/torch_moe_peers.json when OUT is set. Not yet run on the GPU machine as first written.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from gpu_ceilings import ceilings_for, describe

HBM_BPS = None  # bytes/s: the running GPU's copy bandwidth (bench/ceilings.json), set in main
TOPK = 6
SEED = 20261129
SHAPES = [  # name, E, N, K
    ("pro_w13", 384, 6144, 7168),
    ("pro_w2", 384, 7168, 3072),
    ("flash_w13", 256, 4096, 4096),
    ("flash_w2", 256, 4096, 2048),
]
DECODE_T = [1, 4, 16, 64, 128, 256]
PREFILL_T = [4096, 16384, 32768]
FP8 = getattr(torch, "float8_e4m3fn", None)

OP_BF16 = "_grouped_mm_bf16"
OP_FP8 = "_scaled_grouped_mm_fp8"
OP_FP8_FAST = "_scaled_grouped_mm_fp8_fast"
OP_LOOP = "_scaled_mm_loop_fp8"


def missing_reason(op):
    """None if this torch/GPU can try the op, else why not."""
    if FP8 is None and op != OP_BF16:
        return "torch has no float8_e4m3fn"
    name = {OP_BF16: "_grouped_mm", OP_FP8: "_scaled_grouped_mm", OP_FP8_FAST: "_scaled_grouped_mm",
            OP_LOOP: "_scaled_mm"}[op]
    if not hasattr(torch, name):
        return f"torch {torch.__version__} has no torch.{name}"
    return None


# ---------------------------------------------------------------- probe (child process)

def probe():
    """Tiny 2d x 3d problem with group sizes 1, 3, 0, 5 (not multiples of 8/16, one empty expert). Prints
    'probe OP ok relerr=...' per op that ran; anything else (an error, a device-side assert raised at synchronize,
    a dead process) the parent reads as 'needs padding'."""
    dev = torch.device("cuda")
    torch.manual_seed(1)
    counts = [1, 3, 0, 5]
    E, N, K = len(counts), 128, 256
    rows = sum(counts)
    starts = [sum(counts[:e]) for e in range(E)]
    offs = torch.tensor(counts).cumsum(0).to(torch.int32).to(dev)
    x = torch.randn(rows, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16)

    def relerr(out, ref):
        return ((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()

    try:
        out = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        ref = torch.cat([x[starts[e]:starts[e] + counts[e]].float() @ w[e].float().t() for e in range(E)])
        print(f"probe {OP_BF16} ok relerr={relerr(out[:rows], ref):.2e}", flush=True)
    except Exception as e:  # report, keep going
        print(f"probe {OP_BF16} error: {type(e).__name__}: {str(e)[:300]}", flush=True)
    try:
        x8, w8 = x.to(FP8), w.to(FP8)
        sa = torch.rand(rows, device=dev) + 0.5
        sb = torch.rand(E, N, device=dev) + 0.5
        out = torch._scaled_grouped_mm(x8, w8.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        ref = torch.cat([(x8[starts[e]:starts[e] + counts[e]].float() @ w8[e].float().t())
                         * sa[starts[e]:starts[e] + counts[e], None] * sb[e][None, :] for e in range(E)])
        print(f"probe {OP_FP8} ok relerr={relerr(out[:rows], ref):.2e}", flush=True)
    except Exception as e:
        print(f"probe {OP_FP8} error: {type(e).__name__}: {str(e)[:300]}", flush=True)


def run_probe():
    """Runs probe() in a child process (before this process touches CUDA, so an exclusive-process GPU is no
    obstacle). Returns (lines, {op: True if the op ran on unaligned group sizes})."""
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe"], capture_output=True, text=True,
                           timeout=180)
        lines = p.stdout.splitlines()
        if p.returncode != 0:
            lines.append(f"probe exited rc={p.returncode}: {p.stderr.strip()[-300:]}")
    except Exception as e:
        lines = [f"probe failed: {type(e).__name__}: {e}"]
    ok = {}
    for op in (OP_BF16, OP_FP8):
        hit = [l for l in lines if l.startswith(f"probe {op} ok relerr=")]
        ok[op] = bool(hit)
        if hit and not float(hit[0].split("=")[-1]) < 2e-2:  # bf16 output rounding is ~4e-3
            lines.append(f"WARNING: {op} disagrees with the float reference on the probe; its timings below are "
                         f"of a wrong computation (layout misread?)")
    return lines, ok


# ---------------------------------------------------------------- routing, layouts, timing

def routing_hist(E, T, r):
    """Uniform top-6: each token picks 6 distinct experts (top-6 of iid uniforms). Returns rows per expert."""
    g = torch.Generator().manual_seed(SEED + 7919 * r + T)
    idx = torch.rand(T, E, generator=g).topk(TOPK, dim=1).indices
    return torch.bincount(idx.flatten(), minlength=E)


def layout(hist, pad):
    """Rows per expert rounded up to `pad`; returns (counts, starts, total rows)."""
    counts = [(int(c) + pad - 1) // pad * pad for c in hist.tolist()]
    starts, s = [], 0
    for c in counts:
        starts.append(s)
        s += c
    return counts, starts, s


def quietly(fn):
    """Cleanup that must not raise (the CUDA context may be dead after a failed op)."""
    try:
        fn()
    except Exception:
        pass


def time_calls(calls, budget_s):
    """calls: one zero-argument callable per routing. Eager warm-up, then a CUDA graph of all calls (eager if capture
    fails), replayed n times; returns (median us per call, 'graph'|'eager', n)."""
    for f in calls:
        f()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for f in calls:
        f()
    b.record()
    torch.cuda.synchronize()
    est_s = max(a.elapsed_time(b) / 1e3, 1e-6)

    def eager():
        for f in calls:
            f()

    run, mode, g = eager, "eager", None
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for f in calls:
                f()
        g.replay()
        torch.cuda.synchronize()
        run, mode = g.replay, "graph"
    except Exception as e:
        print(f"#   graph capture failed ({type(e).__name__}: {str(e)[:120]}), timing eagerly", flush=True)
        g = None
        quietly(torch.cuda.synchronize)
    n = max(3, min(30, int(budget_s / est_s)))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for s, e in ev:
        s.record()
        run()
        e.record()
    torch.cuda.synchronize()
    us = statistics.median(s.elapsed_time(e) for s, e in ev) * 1e3 / len(calls)
    del g
    return us, mode, n


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="T in {1, 64, 4096}, W13 shapes only")
    ap.add_argument("--budget", type=float, default=170.0, help="stop starting measurements after this many s")
    ap.add_argument("--pad", default="auto", help="rows-per-expert padding: auto (probe), 1 or 16")
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        return probe()
    t_start = time.time()
    ops = [OP_BF16, OP_FP8, OP_FP8_FAST, OP_LOOP]
    missing = {op: missing_reason(op) for op in ops}
    probe_lines = []
    if args.pad == "auto":
        probe_lines, ok = run_probe() if (missing[OP_BF16] is None or missing[OP_FP8] is None) else ([], {})
        pads = {op: 1 if ok.get(OP_BF16 if op == OP_BF16 else OP_FP8) else 16 for op in ops}
    else:
        pads = {op: int(args.pad) for op in ops}
    max_pad = max(pads.values())

    if not torch.cuda.is_available():
        print("torch_moe_peers: 0 measurements, CUDA not available")
        return 0
    dev = torch.device("cuda")
    prop = torch.cuda.get_device_properties(dev)
    global HBM_BPS
    roofs = ceilings_for(prop.name)
    HBM_BPS = roofs["copy_tbs"] * 1e12
    print(f"# {describe(roofs)}", flush=True)
    print(f"# torch {torch.__version__} cuda {torch.version.cuda} on {prop.name} (sm_{prop.major}{prop.minor}, "
          f"{prop.total_memory / 2**30:.0f} GiB)", flush=True)
    for l in probe_lines:
        print(f"# {l}", flush=True)
    shapes = [s for s in SHAPES if not args.quick or s[0].endswith("w13")]
    tokens = [1, 64, 4096] if args.quick else DECODE_T + PREFILL_T
    for op in ops:
        if missing[op]:
            print(f"# {op}: not available: {missing[op]}", flush=True)
        elif pads[op] > 1:
            why = "--pad" if args.pad != "auto" else "the probe did not pass with unaligned group sizes"
            print(f"# {op}: padding each expert's rows up to a multiple of {pads[op]} ({why}); "
                  f"tflops counts the unpadded rows", flush=True)
        else:
            print(f"# {op}: exact rows per expert (no padding)", flush=True)

    results, errors, unavailable, failed = [], [], set(), 0  # unavailable: ops missing or failing
    hist_cache = {}
    for name, E, N, K in shapes:
        quietly(torch.cuda.empty_cache)
        try:
            w16 = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16)  # nn.Linear layout per expert
            w8 = w16.to(FP8) if FP8 is not None else None
            sb = torch.rand(E, N, device=dev) + 0.5  # per (expert, output column) fp32 scale
        except Exception as e:
            print(f"moe_peer shape={name} not run: weights: {type(e).__name__}: {str(e)[:200]}", flush=True)
            failed += 1
            continue
        for T in tokens:
            prefill = T >= 4096
            nrout = 2 if prefill else 8
            key = (E, T)
            if key not in hist_cache:
                hist_cache[key] = [routing_hist(E, T, r) for r in range(nrout)]
            hists = hist_cache[key]
            active = statistics.mean(int((h > 0).sum()) for h in hists)
            useful_rows = TOPK * T
            max_rows = max(layout(h, max_pad)[2] for h in hists)
            try:
                x16 = torch.randn(max_rows, K, device=dev, dtype=torch.bfloat16)
                x8 = x16.to(FP8) if FP8 is not None else None
                sa = torch.rand(max_rows, device=dev) + 0.5
            except Exception as e:
                print(f"moe_peer shape={name} T={T} not run: activations: {type(e).__name__}: {str(e)[:200]}",
                      flush=True)
                failed += 1
                continue
            for op in ops:
                if (op == OP_LOOP and prefill) or (op == OP_FP8_FAST and not prefill):
                    continue
                head = f"moe_peer shape={name} T={T} op={op}"
                if missing[op]:
                    print(f"{head} not available: {missing[op]}", flush=True)
                    unavailable.add(op)
                    continue
                if time.time() - t_start > args.budget:
                    print(f"{head} skipped: time budget ({args.budget:.0f} s) spent", flush=True)
                    errors.append(dict(shape=name, T=T, op=op, error="skipped: time budget"))
                    failed += 1
                    continue
                pad = pads[op]
                lays = [layout(h, pad) for h in hists]
                calls, keep = [], []  # keep: tensors the graph reads must outlive it
                for counts, starts, rows in lays:
                    offs = torch.tensor(counts, dtype=torch.int64).cumsum(0).to(torch.int32).to(dev)
                    keep.append(offs)
                    if op == OP_BF16:
                        calls.append(lambda a=x16[:rows], o=offs: torch._grouped_mm(
                            a, w16.transpose(-2, -1), offs=o, out_dtype=torch.bfloat16))
                    elif op in (OP_FP8, OP_FP8_FAST):
                        calls.append(lambda a=x8[:rows], s=sa[:rows], o=offs, fast=(op == OP_FP8_FAST):
                                     torch._scaled_grouped_mm(a, w8.transpose(-2, -1), s, sb, offs=o,
                                                              out_dtype=torch.bfloat16, use_fast_accum=fast))
                    else:  # one rowwise _scaled_mm per active expert; scales copied so each starts aligned
                        items = [(x8[s0:s0 + c], w8[e].t(), sa[s0:s0 + c].reshape(c, 1).clone(),
                                  sb[e].reshape(1, N).clone()) for e, (c, s0) in enumerate(zip(counts, starts)) if c]
                        keep.append(items)
                        calls.append(lambda it=items: [torch._scaled_mm(a, b, scale_a=s_a, scale_b=s_b,
                                                                        out_dtype=torch.bfloat16) for a, b, s_a, s_b in it])
                try:
                    us, mode, reps = time_calls(calls, budget_s=0.5)
                except Exception as e:
                    msg = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                    print(f"{head} not available: {msg}", flush=True)
                    errors.append(dict(shape=name, T=T, op=op, error=msg))
                    unavailable.add(op)
                    failed += 1
                    del calls, keep
                    quietly(torch.cuda.synchronize)
                    quietly(torch.cuda.empty_cache)
                    continue
                bpw = 2 if op == OP_BF16 else 1
                wbytes = active * N * K * bpw
                mx_bytes = active * N * K * (0.5 + 1 / 32)
                row = dict(shape=name, E=E, N=N, K=K, T=T, op=op, us=round(us, 2),
                           weight_MB=round(wbytes / 1e6, 1), weight_GBps=round(wbytes / us / 1e3, 1),
                           bw_pct=round(100 * wbytes / (us * 1e-6) / HBM_BPS, 1),
                           tflops=round(2 * useful_rows * N * K / (us * 1e-6) / 1e12, 2),
                           mxfp4_MB=round(mx_bytes / 1e6, 1), active_experts=active, rows=useful_rows,
                           rows_padded=round(statistics.mean(l[2] for l in lays), 1), pad=pad,
                           timing=mode, routings=len(calls), reps=reps)
                results.append(row)
                print(f"{head} us={us:.1f} weight_GBps={row['weight_GBps']:.0f} bw_pct={row['bw_pct']:.1f} "
                      f"tflops={row['tflops']:.1f} weight_MB={row['weight_MB']:.0f} mxfp4_MB={row['mxfp4_MB']:.0f} "
                      f"active={active:g} rows={useful_rows} pad={pad} timing={mode}x{len(calls)}x{reps}", flush=True)
                del calls, keep
            del x16, x8, sa
        del w16, w8, sb

    out_dir = os.environ.get("OUT")
    if out_dir:
        try:
            os.makedirs(out_dir, exist_ok=True)
            meta = dict(torch=torch.__version__, cuda=torch.version.cuda, device=prop.name, quick=args.quick,
                        pads=pads, probe=probe_lines, seconds=round(time.time() - t_start, 1))
            with open(os.path.join(out_dir, "torch_moe_peers.json"), "w") as f:
                json.dump(dict(meta=meta, rows=results, errors=errors), f, indent=1)
        except Exception as e:
            print(f"# could not write JSON: {type(e).__name__}: {e}", flush=True)
    print(f"torch_moe_peers: {len(results)} measurements, {len(unavailable)} ops unavailable"
          f"{' (' + ', '.join(sorted(unavailable)) + ')' if unavailable else ''}, {failed} failed/skipped, "
          f"{time.time() - t_start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
