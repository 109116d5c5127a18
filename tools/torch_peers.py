#!/usr/bin/env python3
"""PyTorch peers for bench_gpu_ops (run on the GPU machine by the device run): torch ops on the same V4-Flash
shapes, and HF transformers' eager DeepSeek-V4 on the tiny_hf fixture (tokens/s of a 16-token prompt + 64 greedy
tokens, cache on). Prints one markdown table row per measurement."""
import os
import sys
import time

import torch

from gpu_ceilings import ceilings_for, describe

BW = None  # bytes/s: the running GPU's copy bandwidth (bench/ceilings.json), set in main


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


def sample_top_p(logits, temperature, top_p, top_k):
    """The sort-based torch sampler engines fall back to (vLLM and SGLang without FlashInfer): top-k, then the
    smallest prefix of the sorted probabilities reaching top_p, then one multinomial draw."""
    x = logits / temperature
    if top_k:
        x, idx = torch.topk(x, top_k, dim=-1)
    else:
        x, idx = torch.sort(x, dim=-1, descending=True)
    p = torch.softmax(x, dim=-1)
    cut = torch.cumsum(p, dim=-1) - p >= top_p
    p = p.masked_fill(cut, 0.0)
    pick = torch.multinomial(p, 1)
    return torch.gather(idx, -1, pick)


def sampling_peers(dev):
    """The same settings as bench_gpu_ops' sample rows: 129280 logits uniform in [-8, 8], 1 and 32 rows."""
    for rows in (1, 32):
        logits = (torch.rand(rows, 129280, device=dev) * 2 - 1) * 8
        modes = [("greedy", lambda: torch.argmax(logits, dim=-1)),
                 ("T 1.0", lambda: torch.multinomial(torch.softmax(logits, dim=-1), 1)),
                 ("T 0.7, top-p 0.95", lambda: sample_top_p(logits, 0.7, 0.95, 0)),
                 ("T 0.7, top-k 50, top-p 0.95", lambda: sample_top_p(logits, 0.7, 0.95, 50))]
        for name, fn in modes:
            try:
                us = bench(fn, 20)
            except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
                print(f"| torch sample {name} | rows {rows} | not run: {type(e).__name__}: {str(e)[:120]} |", flush=True)
                continue
            row(f"sample {name}", f"vocab 129280 rows {rows}", us, rows * 129280 * 4)


def main():
    global BW
    dev = torch.device("cuda")
    roofs = ceilings_for(torch.cuda.get_device_name(dev))
    BW = roofs["copy_tbs"] * 1e12
    print(f"# {describe(roofs)}", flush=True)
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
    sampling_peers(dev)
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
