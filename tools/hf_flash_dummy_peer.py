#!/usr/bin/env python3
"""Peer benchmark (run on the GPU machine by scripts/device-check.sh): HF transformers' eager DeepSeek-V4 on a
V4-Flash-shaped 2-layer model with random weights, side by side with `moeserve generate --load-format dummy` on the
same shape. Prints one markdown table row per measurement and, last, a one-line summary.

The model: presets/models/deepseek-v4-flash/config.json (the config `--load-format dummy` reads) cut to its first
2 layers. Those two layers are sliding-window attention (compress_ratios 0, 0) with hash-routed MoE (the first
num_hash_layers = 3 are hash layers), 256 experts of 2048, top-6, plus embedding, mHC head and the 129280-row head.
The HF config is the official config mapped to HF's field names the way tools/make_fixtures.py maps between the
two forms (official_config() there, inverted here).

HF side (in process, bf16, cuda, eval, torch.manual_seed(0), the model's own init; the hash layers' tid2eid table,
which HF's init leaves all zero so that every token would hit expert 0 six times, is filled with 6 distinct random
experts per token id, as the fixture tooling does). Timed with torch.cuda.synchronize() around
`generate(16-token prompt, max_new_tokens=N, min_new_tokens=N, do_sample=False)` after a warm-up of 8 tokens:
  * prefill 16 + 64 greedy tokens, batch 1: tokens/s = 64 / time (the tools/torch_peers.py figure);
  * 63 decode steps = t(64 tokens) - t(1 token): the decode-only rate, 63 / difference;
  * batch 8 (8 different prompts), prefill 16 + 64: tokens/s = 8 * 64 / time, when the time budget allows.
Cache on: HF's cached decode skips the CSA indexer's top-k mask (design/architecture.md, Testing), which only
changes CSA layers, and only once index_topk prunes; these two layers have no compressor, so it does not apply.
It is a timing, not a reference, anyway.

moeserve side: the CLI prints no timings (and this script does not change it), so each figure comes from the wall
time of a whole `moeserve generate` process: start, CUDA init, random weight creation on the GPU, prefill, decode
(first step eager, then CUDA graph capture and replays). Runs with --max-new-tokens 1, 64 and 576; the best of the
repeats of each is taken. Rows:
  * wall, 16 + 64: the whole process, tokens/s = 64 / wall (includes everything above; not a decode rate);
  * 63 decode steps = T(64) - T(1): the same difference as the HF row, incl. the one-off graph capture;
  * steady decode = (T(576) - T(64)) / 512: per-token time of replayed decode steps (context up to 592; every
    layer here is window-only, so the attention work stops growing at 128 tokens).
Two weight formats: the V4-Flash checkpoint's (FP8 linears, MXFP4 routed experts: the config as is, with
--cuda-kernels fast --numerics checkpoint) and, for the same dtype as HF, BF16 (the config without
quantization_config / expert_dtype, --numerics reference). moeserve's CLI has no batch > 1 generate.

Binaries: $MOESERVE_BIN (relative to the repository root; device-check.sh passes its $BIN; unset: the first of
build-prebuilt, .device-bin, build-device that has one) holds `moeserve` (scripts/device-prepare.sh gathers it).
Time budget: $HF_PEER_BUDGET_S seconds (default 170) for the whole script; what does not fit is skipped and says
so. HF's routed experts run transformers' default experts implementation (named in the rows);
HF_EXPERTS_IMPL=eager|grouped_mm|batched_mm picks another.

Usage: python3 tools/hf_flash_dummy_peer.py [--skip-hf] [--skip-moeserve]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

T_START = time.time()
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FLASH_DIR = os.path.join(ROOT, "presets/models/deepseek-v4-flash")
LAYERS = 2
PROMPT_LEN = 16
NEW_TOKENS = 64
WARMUP_TOKENS = 8
STEADY_EXTRA = 512  # moeserve steady-decode run: NEW_TOKENS + STEADY_EXTRA tokens
BUDGET_S = float(os.environ.get("HF_PEER_BUDGET_S", "170"))
MOESERVE_RESERVE_S = 60.0  # kept for the moeserve runs when the HF part decides what to skip
HF_LABEL = "HF eager DeepseekV4 V4-Flash-shaped 2 layers (bf16, random)"


def elapsed():
    return time.time() - T_START


def left():
    return BUDGET_S - elapsed()


def row(*cells):
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def prompt_ids(batch_row=0):
    # 16 ids spread over the vocabulary (no special ids 0/1), distinct per batch row.
    return [2 + (1000 + 7919 * (i + PROMPT_LEN * batch_row)) % 129000 for i in range(PROMPT_LEN)]


def load_flash_config():
    with open(os.path.join(FLASH_DIR, "config.json")) as f:
        return json.load(f)


def hf_config_dict(off, layers):
    """Official-form config -> HF DeepseekV4Config kwargs, first `layers` layers: the inverse of
    tools/make_fixtures.py's official_config() (the HF keys its fixtures pass, same names, same meaning)."""
    ratios = off["compress_ratios"]
    csa_rate = 4  # the engine's rule (io/model_config.h): 4 = CSA with an indexer, 0 = window only, other = HCA
    hca_rates = sorted({r for r in ratios if r not in (0, csa_rate)})
    assert len(hca_rates) <= 1, f"more than one HCA rate in compress_ratios: {hca_rates}"
    rates = {"compressed_sparse_attention": csa_rate,
             "heavily_compressed_attention": hca_rates[0] if hca_rates else 128}
    kind = {0: "sliding_attention", csa_rate: "compressed_sparse_attention"}
    layer_types = [kind.get(r, "heavily_compressed_attention") for r in ratios[:layers]]
    n_hash = off.get("num_hash_layers", 3)
    mlp_layer_types = ["hash_moe" if i < n_hash else "moe" for i in range(layers)]
    copied = ("vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "q_lora_rank",
              "o_groups", "o_lora_rank", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
              "moe_intermediate_size", "scoring_func", "routed_scaling_factor", "swiglu_limit", "index_n_heads",
              "index_head_dim", "index_topk", "sliding_window", "hc_mult", "hc_sinkhorn_iters", "hc_eps",
              "rms_norm_eps", "rope_theta", "compress_rope_theta", "max_position_embeddings",
              "num_nextn_predict_layers", "bos_token_id", "eos_token_id", "tie_word_embeddings",
              # HF fields whose defaults these equal (norm_topk_prob True, hidden_act silu); passed for the record
              "norm_topk_prob", "hidden_act")
    hf = {k: off[k] for k in copied if k in off}
    hf["num_hidden_layers"] = layers
    hf["layer_types"] = layer_types
    hf["compress_rates"] = rates
    hf["mlp_layer_types"] = mlp_layer_types
    hf["partial_rotary_factor"] = off["qk_rope_head_dim"] / off["head_dim"]
    rs = off.get("rope_scaling")
    if rs:
        hf["rope_parameters"] = {"rope_type": rs["type"], "factor": rs["factor"],
                                 "original_max_position_embeddings": rs["original_max_position_embeddings"],
                                 "beta_fast": rs["beta_fast"], "beta_slow": rs["beta_slow"]}
    # Left out: architectures/model_type (the class says it), compress_ratios/num_hash_layers/qk_rope_head_dim/
    # rope_scaling (mapped above), torch_dtype (bf16 below), topk_method (not an HF field: HF always adds the
    # correction bias), quantization_config/expert_dtype (random bf16 weights here, no FP8 quantizer).
    return hf


# ---------------------------------------------------------------------------------------------------------------
# HF transformers
# ---------------------------------------------------------------------------------------------------------------

def build_hf_model(hf):
    import torch
    import transformers
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    config = DeepseekV4Config(**hf)
    config._attn_implementation = "eager"  # the only attention V4 has in transformers (as in make_fixtures.py)
    # Routed experts: transformers' default (grouped_mm where torch has it, else its per-expert loop);
    # HF_EXPERTS_IMPL=eager|grouped_mm|batched_mm picks one.
    extra = {"experts_implementation": os.environ["HF_EXPERTS_IMPL"]} if os.environ.get("HF_EXPERTS_IMPL") else {}
    torch.manual_seed(0)
    how = "constructed on cuda"
    t0 = time.perf_counter()
    try:
        # Parameters are created (and initialized by post_init) on the GPU in bf16: no 26 GB CPU copy.
        with torch.device("cuda"):
            model = DeepseekV4ForCausalLM._from_config(config, dtype=torch.bfloat16, **extra)
    except Exception as e:  # older/newer _from_config signature: plain construction under a bf16 default dtype
        print(f"# _from_config on cuda failed ({type(e).__name__}: {str(e)[:200]}); constructing on the CPU", flush=True)
        torch.cuda.empty_cache()
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            torch.manual_seed(0)
            if extra:
                config._experts_implementation = extra["experts_implementation"]
            model = DeepseekV4ForCausalLM(config)
        finally:
            torch.set_default_dtype(old)
        how = "constructed on the CPU, moved to cuda"
    model = model.to("cuda").eval()
    devices = {p.device.type for p in model.parameters()}
    assert devices == {"cuda"}, f"parameters on {devices}"
    # Hash routing: HF's init leaves tid2eid zero (every token -> expert 0, six times). Give each token id
    # num_experts_per_tok distinct random experts, like tools/make_fixtures.py's randomize().
    gen = torch.Generator(device="cuda").manual_seed(0)
    filled = 0
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("tid2eid"):
                V, k = buf.shape
                E = config.n_routed_experts
                pick = torch.rand(V, E, generator=gen, device="cuda").argsort(dim=1)[:, :k]
                buf.copy_(pick.to(buf.dtype))
                filled += 1
    torch.cuda.synchronize()
    dtypes = {}
    for p in model.parameters():
        dtypes[str(p.dtype).replace("torch.", "")] = dtypes.get(str(p.dtype).replace("torch.", ""), 0) + p.numel()
    experts = getattr(model.config, "_experts_implementation", None) or "default"
    print(f"# HF model: {how} in {time.perf_counter() - t0:.1f} s; parameters by dtype {dtypes}; "
          f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated; tid2eid filled in {filled} layers; "
          f"attention {config._attn_implementation}, experts {experts}; layer_types {config.layer_types}, "
          f"mlp_layer_types {config.mlp_layer_types}; transformers {transformers.__version__}, torch {torch.__version__}",
          flush=True)
    note = f"experts {experts}" + ("" if filled else "; tid2eid NOT found: hash routing left at HF's init")
    return model, note


def hf_generate_time(model, prompt, n):
    import torch
    mask = torch.ones_like(prompt)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             pad_token_id=1)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    got = out.shape[1] - prompt.shape[1]
    assert got == n, f"generate made {got} tokens, asked for {n}"
    return dt


def run_hf():
    """Returns {figure name: value} for the summary line."""
    res = {}
    import torch
    import transformers
    ver = f"transformers {transformers.__version__}"
    if left() < MOESERVE_RESERVE_S + 30:
        row(HF_LABEL, "not run: time budget", "", "", ver)
        return res
    model, note = build_hf_model(hf_config_dict(load_flash_config(), LAYERS))
    ver += f", {note}"
    dev = torch.device("cuda")
    p1 = torch.tensor([prompt_ids(0)], device=dev)
    hf_generate_time(model, p1, WARMUP_TOKENS)  # warm-up
    t64 = [hf_generate_time(model, p1, NEW_TOKENS)]
    best = min(t64)
    row(HF_LABEL, f"prefill {PROMPT_LEN} + {NEW_TOKENS} greedy tokens, batch 1 (cache on)", f"{best * 1000:9.1f} ms",
        f"{NEW_TOKENS / best:.1f} tokens/s", ver)
    res["hf_b1"] = NEW_TOKENS / best
    # Decode-only: t(64) - t(1); one more pair when it fits (best of each).
    t1 = []
    for rep in range(2):
        if left() < MOESERVE_RESERVE_S + 2 * best + 5:
            break
        t1.append(hf_generate_time(model, p1, 1))
        if rep == 0 and left() >= MOESERVE_RESERVE_S + 2 * best + 5:
            t64.append(hf_generate_time(model, p1, NEW_TOKENS))
    if t1 and min(t64) <= min(t1):
        row(HF_LABEL, f"t({NEW_TOKENS}) - t(1)", f"not measurable: {(min(t64) - min(t1)) * 1000:.1f} ms", "", ver)
    elif t1:
        d = min(t64) - min(t1)
        steps = NEW_TOKENS - 1
        row(HF_LABEL, f"{steps} decode steps = t({NEW_TOKENS}) - t(1), batch 1 (best of {len(t64)} / {len(t1)})",
            f"{d * 1000:9.1f} ms", f"{steps / d:.1f} tokens/s ({d / steps * 1000:.2f} ms/token)", ver)
        res["hf_decode"] = steps / d
    else:
        row(HF_LABEL, "decode steps = t(64) - t(1), batch 1", "not run: time budget", "", "")
    # Batch 8, when it fits (warm-up at batch 8, then one timed run).
    if left() > MOESERVE_RESERVE_S + 4 * best + 10:
        try:
            p8 = torch.tensor([prompt_ids(b) for b in range(8)], device=dev)
            hf_generate_time(model, p8, WARMUP_TOKENS)
            dt = hf_generate_time(model, p8, NEW_TOKENS)
            row(HF_LABEL, f"prefill {PROMPT_LEN} + {NEW_TOKENS} greedy tokens, batch 8 (cache on)",
                f"{dt * 1000:9.1f} ms", f"{8 * NEW_TOKENS / dt:.1f} tokens/s", ver)
            res["hf_b8"] = 8 * NEW_TOKENS / dt
        except Exception as e:
            row(HF_LABEL, "batch 8", f"not run: {type(e).__name__}: {str(e)[:200]}", "", "")
    else:
        row(HF_LABEL, "batch 8", "not run: time budget", "", "")
    return res


def free_gpu_memory():
    try:
        import gc
        gc.collect()
        if "torch" in sys.modules:
            sys.modules["torch"].cuda.empty_cache()
    except Exception:
        pass


# ---------------------------------------------------------------------------------------------------------------
# moeserve
# ---------------------------------------------------------------------------------------------------------------

def moeserve_binary():
    env = os.environ.get("MOESERVE_BIN")
    dirs = [env] if env else ["build-prebuilt", ".device-bin", "build-device"]
    for d in dirs:
        d = d if os.path.isabs(d) else os.path.join(ROOT, d)
        exe = os.path.join(d, "moeserve")
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            return exe
    return None


def moeserve_command(exe, model_dir, n, fmt):
    cmd = [exe, "generate", "--device", "cuda", "--load-format", "dummy", "--model", model_dir,
           "--num-layers", str(LAYERS), "--prompt-ids", ",".join(str(i) for i in prompt_ids(0)),
           "--max-new-tokens", str(n), "--ignore-eos", "--cuda-graph", "--cuda-kernels", "fast"]
    cmd += ["--numerics", "checkpoint" if fmt == "fp8" else "reference"]
    return cmd


def run_moeserve_once(cmd, n, timeout):
    env = dict(os.environ)
    bindir = os.path.dirname(cmd[0])
    env["LD_LIBRARY_PATH"] = bindir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"rc={p.returncode}: {(p.stderr or p.stdout).strip()[-300:]}")
    lines = [l for l in p.stdout.strip().splitlines() if l.startswith("{")]
    out = json.loads(lines[-1]) if lines else {}
    got = len(out.get("output_ids", []))
    if got != n:
        raise RuntimeError(f"made {got} tokens, asked for {n}: {p.stdout.strip()[-200:]}")
    return dt


def run_moeserve():
    res = {}
    exe = moeserve_binary()
    label0 = f"moeserve CLI V4-Flash dummy {LAYERS} layers"
    if exe is None:
        where = os.environ.get("MOESERVE_BIN") or "build-prebuilt, .device-bin, build-device"
        row(label0, f"not run: no moeserve binary in {where} (scripts/device-prepare.sh gathers it)", "", "", "")
        return res
    print(f"# moeserve: {exe}", flush=True)
    tmp = tempfile.mkdtemp(prefix="flash_bf16_")
    try:
        cfg = load_flash_config()
        for k in ("quantization_config", "expert_dtype"):
            cfg.pop(k, None)
        cfg["torch_dtype"] = "bfloat16"
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        # (name, model dir, row label, flags)
        variants = [("fp8", FLASH_DIR, "FP8 linears, MXFP4 experts", "--numerics checkpoint"),
                    ("bf16", tmp, "BF16 weights", "--numerics reference")]
        big = NEW_TOKENS + STEADY_EXTRA
        ns = [NEW_TOKENS, 1, big]
        walls = {(v[0], n): [] for v in variants for n in ns}
        failed, skipped = {}, []
        longest = None
        # Order: every figure of the checkpoint format once, then bf16 once, then the second repeats.
        for rep in range(2):
            for v, d, _, _ in variants:
                for n in ns:
                    if v in failed:
                        continue
                    if left() < (longest or 30.0) * 1.2 + 2:
                        skipped.append(f"{v} N={n} rep {rep + 1}")
                        continue
                    cmd = moeserve_command(exe, d, n, v)
                    if rep == 0 and n == NEW_TOKENS:
                        print("# command: " + " ".join(cmd), flush=True)
                    try:
                        dt = run_moeserve_once(cmd, n, timeout=max(10.0, min(120.0, left())))
                    except Exception as e:
                        failed[v] = f"{type(e).__name__}: {str(e)[:300]}"
                        continue
                    walls[(v, n)].append(dt)
                    longest = max(longest or 0.0, dt)
                    print(f"# {v} max-new-tokens {n}: {dt * 1000:.1f} ms wall", flush=True)
        if skipped:
            print(f"# moeserve runs skipped for the time budget: {', '.join(skipped)}", flush=True)
        for v, _, what, numerics in variants:
            label = f"{label0} ({what})"
            flags = f"--cuda-graph --cuda-kernels fast {numerics}"
            if v in failed:
                row(label, f"not run: {failed[v]}", "", "", flags)
                continue
            w = {n: min(walls[(v, n)]) for n in ns if walls[(v, n)]}
            reps = {n: len(walls[(v, n)]) for n in ns}

            def note(*which):
                s = [f"T({n}) {(max(walls[(v, n)]) - min(walls[(v, n)])) * 1000:.0f} ms"
                     for n in which if reps[n] > 1]
                return flags + ("; spread of repeats " + ", ".join(s) if s else "; one run each")

            if NEW_TOKENS in w:
                t = w[NEW_TOKENS]
                row(label, f"prefill {PROMPT_LEN} + {NEW_TOKENS} greedy tokens, batch 1: WALL of the whole process "
                    f"(start, CUDA init, random weights, graph capture), best of {reps[NEW_TOKENS]}",
                    f"{t * 1000:9.1f} ms", f"{NEW_TOKENS / t:.1f} tokens/s", note(NEW_TOKENS))
                res[f"ms_{v}_wall"] = NEW_TOKENS / t
            else:
                row(label, f"prefill {PROMPT_LEN} + {NEW_TOKENS}, wall", "not run: time budget", "", flags)
            if NEW_TOKENS in w and 1 in w:
                d = w[NEW_TOKENS] - w[1]
                steps = NEW_TOKENS - 1
                what_ = f"{steps} decode steps = T({NEW_TOKENS}) - T(1) (process walls; incl. graph capture)"
                if d > 0:
                    row(label, what_, f"{d * 1000:9.1f} ms", f"{steps / d:.1f} tokens/s ({d / steps * 1000:.2f} ms/token)",
                        note(1, NEW_TOKENS))
                    res[f"ms_{v}_decode"] = steps / d
                else:
                    row(label, what_, f"not measurable: {d * 1000:.1f} ms (start-up noise)", "", note(1, NEW_TOKENS))
            if NEW_TOKENS in w and big in w:
                d = w[big] - w[NEW_TOKENS]
                what_ = f"steady decode = (T({big}) - T({NEW_TOKENS})) / {STEADY_EXTRA} (process walls; graph replays)"
                if d > 0:
                    row(label, what_, f"{d / STEADY_EXTRA * 1000:9.3f} ms/token", f"{STEADY_EXTRA / d:.1f} tokens/s",
                        note(NEW_TOKENS, big))
                    res[f"ms_{v}_steady"] = STEADY_EXTRA / d
                else:
                    row(label, what_, f"not measurable: {d * 1000:.1f} ms (start-up noise)", "", note(NEW_TOKENS, big))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def main():
    args = set(sys.argv[1:])
    res = {}
    print(f"| peer | workload | time | rate | notes |\n|---|---|---:|---:|---|", flush=True)
    if "--skip-hf" not in args:
        try:
            res.update(run_hf())
        except Exception as e:  # report, do not fail the run
            row(HF_LABEL, f"not run: {type(e).__name__}: {str(e)[:300]}", "", "", "")
        free_gpu_memory()  # here, not in the handler: the exception's frames hold the model until it ends
    if "--skip-moeserve" not in args:
        try:
            res.update(run_moeserve())
        except Exception as e:
            row(f"moeserve CLI V4-Flash dummy {LAYERS} layers", f"not run: {type(e).__name__}: {str(e)[:300]}", "",
                "", "")
    # One short line for device-check's summary table (it keeps 120 characters).
    short = {"hf_b1": "HF 16+64", "hf_decode": "HF dec", "ms_fp8_decode": "moeserve dec",
             "ms_fp8_steady": "steady", "ms_bf16_steady": "bf16 steady", "ms_fp8_wall": "wall",
             "hf_b8": "HF b8"}
    parts = [f"{s} {res[k]:.0f}" for k, s in short.items() if k in res]
    print(f"tok/s: {', '.join(parts) if parts else 'nothing measured'} ({elapsed():.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
