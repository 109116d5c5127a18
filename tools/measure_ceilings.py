#!/usr/bin/env python3
"""Measure the GPU's ceilings the way shared/reference/h200.md measured the H200's (median of 20 timed runs after
warm-up, random data): device-to-device copy (bytes read + written), a read-only stream, bf16 GEMM 8192^3, fp8 e4m3
GEMM 8192^3 (torch._scaled_mm), the weight-read-bound bf16 GEMM M=8 N=28672 K=7168, and fp32 SIMT GEMM 8192^3 (TF32
off). The benchmarks' percentages use bench/ceilings.json; this tool is how an entry there is made (and checked: the
device run prints it beside the committed entry). Runs on the GPU machine.

Usage: python3 tools/measure_ceilings.py [--json FILE]
  Prints a markdown table; FILE gets a file in bench/ceilings.json's format holding this GPU's entry (the benchmarks
  use it in place of the committed one when MOESERVE_CEILINGS names it).
"""
import argparse
import json
import statistics
import sys
import time

import torch


def median_us(fn, runs=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def copy_tbs(dev):
    """1 GiB copied: 2 GiB moved per call."""
    n = 1 << 30
    src, dst = torch.randint(0, 255, (n,), dtype=torch.uint8, device=dev), torch.empty(n, dtype=torch.uint8, device=dev)
    return 2 * n / median_us(lambda: dst.copy_(src)) / 1e6


def read_tbs(dev):
    """A 1 GiB fp32 sum: reads only (the write is one scalar)."""
    x = torch.rand(1 << 28, dtype=torch.float32, device=dev)
    out = torch.empty((), dtype=torch.float32, device=dev)
    return x.numel() * 4 / median_us(lambda: torch.sum(x, 0, out=out)) / 1e6


def gemm_tflops(dev, dtype, n=8192):
    a, b = torch.randn(n, n, device=dev).to(dtype), torch.randn(n, n, device=dev).to(dtype)
    return 2 * n**3 / median_us(lambda: a @ b) / 1e6


def fp8_tflops(dev, n=8192):
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # _scaled_mm wants the second operand column-major
    one = torch.ones((), device=dev)
    return 2 * n**3 / median_us(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)) / 1e6


def weight_read_tbs(dev):
    x = torch.randn(8, 7168, device=dev, dtype=torch.bfloat16)
    w = torch.randn(28672, 7168, device=dev, dtype=torch.bfloat16)
    return w.numel() * 2 / median_us(lambda: x @ w.t()) / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the bench/ceilings.json entry for this GPU here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("measure_ceilings: skipped: no CUDA device")
        return 0
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    entry = {
        "match": name,
        "source": f"tools/measure_ceilings.py, {time.strftime('%Y-%m-%d', time.gmtime())}",
        "copy_tbs": round(copy_tbs(dev), 2),
        "read_tbs": round(read_tbs(dev), 2),
        "bf16_tflops": round(gemm_tflops(dev, torch.bfloat16)),
        "fp8_tflops": round(fp8_tflops(dev)),
        "fp32_simt_tflops": round(gemm_tflops(dev, torch.float32), 1),
        "weight_read_tbs": round(weight_read_tbs(dev), 2),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    print(f"| ceiling on {name} | measured |\n|---|---|")
    for key, label in (("copy_tbs", "device-to-device copy (read + written), TB/s"),
                       ("read_tbs", "read-only stream (1 GiB fp32 sum), TB/s"),
                       ("bf16_tflops", "bf16 GEMM 8192^3, TFLOP/s"),
                       ("fp8_tflops", "fp8 e4m3 GEMM 8192^3 (torch._scaled_mm), TFLOP/s"),
                       ("fp32_simt_tflops", "fp32 GEMM 8192^3, TF32 off, TFLOP/s"),
                       ("weight_read_tbs", "bf16 GEMM M=8 N=28672 K=7168, TB/s of weight reads")):
        print(f"| {label} | {entry[key]} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"about": "measured by tools/measure_ceilings.py", "gpus": [entry]}, f, indent=1)
            f.write("\n")
    print(f"measure_ceilings: {name}: copy {entry['copy_tbs']} TB/s, read {entry['read_tbs']} TB/s, "
          f"bf16 {entry['bf16_tflops']}, fp8 {entry['fp8_tflops']}, fp32 {entry['fp32_simt_tflops']} TFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
