#!/usr/bin/env python3
"""PyTorch peers for bench_gpu_ops (run on the GPU machine by the device run): torch ops on the same V4-Flash
shapes, and HF transformers' eager DeepSeek-V4 on the tiny_hf fixture (tokens/s of a 16-token prompt + 64 greedy
tokens, cache on). Prints one markdown table row per measurement."""
import os
import sys
import time

import torch

BW = 4.28e12


def bench(fn, reps=50):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(3):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1000.0 / (3 * reps)


def row(op, shape, us, nbytes):
    print(f"| torch {op:<22} | {shape:<34} | {us:9.2f} | {nbytes / 1e6:9.3f} | {nbytes / us / 1e3:8.1f} GB/s | roof {100 * nbytes / BW * 1e6 / us:5.1f}% |", flush=True)


def main():
    dev = torch.device("cuda")
    for name, n, k in [("wq_b", 32768, 1024), ("wo_b", 4096, 8192), ("shared w13", 4096, 4096), ("head", 129280, 4096)]:
        ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(max(2, (256 << 20) // (n * k * 2) + 1))]
        for m in (1, 8, 32, 4096 if name != "head" else 64):
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            i = [0]

            def f():
                i[0] += 1
                torch.nn.functional.linear(x, ws[i[0] % len(ws)])

            us = bench(f, 20 if m >= 4096 else 50)
            row("linear bf16", f"flash {name} M={m} {n}x{k}", us, n * k * 2 + m * (n + k) * 2)
    for t in (1, 64, 4096):
        x = torch.randn(t, 4096, device=dev)
        w = torch.ones(4096, device=dev)
        us = bench(lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6))
        row("rms_norm fp32", f"flash T={t}", us, t * 4096 * 8)
    # HF eager DeepSeek-V4 on the tiny fixture.
    try:
        import transformers
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        path = os.path.join(root, "tests/fixtures/models/tiny_hf/hf_save_pretrained")
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(dev).eval()
        prompt = torch.tensor([[2 + (i * 37) % 318 for i in range(16)]], device=dev)
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(prompt, max_new_tokens=64, min_new_tokens=64, do_sample=False)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        n = out.shape[1] - prompt.shape[1]
        print(f"| HF eager DeepseekV4 tiny_hf | prefill 16 + {n} greedy tokens (cache on) | {dt * 1000:9.1f} ms | {n / dt:.0f} tokens/s | transformers {transformers.__version__} |")
    except Exception as e:  # report, do not fail the run
        print(f"| HF eager DeepseekV4 tiny_hf | not run: {type(e).__name__}: {str(e)[:200]} |")


if __name__ == "__main__":
    sys.exit(main())
