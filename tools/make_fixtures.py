#!/usr/bin/env python3
"""Oracle fixtures for the reference engine, made with HF transformers' DeepseekV4ForCausalLM (fp32).

Run on the GPU machine (transformers 5.17, torch): python3 tools/make_fixtures.py OUT_DIR

For each tiny model it writes OUT_DIR/<name>/:
  config.json               the config the engine reads (official or HF form, per fixture)
  config.hf.json            the config given to transformers (HF form)
  model.safetensors         weights under the official DeepSeek names (BF16 matrices, F32 hc/sink/ape/bias)
  hf_save_pretrained/       what `save_pretrained` writes (sharded, with model.safetensors.index.json)
  hf_modules/               the module state_dict names (model.layers.0.self_attn.q_a_proj.weight, stacked experts)
  oracle.safetensors        input_ids [P+N] (I64), prompt_len, logits [P+N-1, vocab] (F32), greedy ids
  keys.txt                  the tensor names each dialect holds (for the record)

The oracle is the full-sequence forward WITHOUT cache: transformers' cached decode skips the CSA
indexer's top-k mask, so it is not a valid reference. Greedy tokens come from repeated no-cache forwards.
All weights are rounded to bf16 values first, so every dialect holds exactly the same numbers.
"""
import json
import os
import sys
import traceback

import torch
from safetensors.torch import save_file

import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

OUT = sys.argv[1] if len(sys.argv) > 1 else "fixtures-out"

FIXTURES = {
    # HF-form config: window / CSA / HCA layers, one hash layer, default (non-YaRN) compress rope,
    # small swiglu_limit so the clamps bite, index_topk < number of compressed entries.
    "tiny_hf": dict(
        engine_form="hf",
        seed=1234,
        prompt_len=48,
        new_tokens=24,
        weight_std=0.08,
        hf=dict(
            vocab_size=320, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1,
            head_dim=64, partial_rotary_factor=0.25, q_lora_rank=32, o_groups=2, o_lora_rank=16,
            n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=32,
            scoring_func="sqrtsoftplus", routed_scaling_factor=1.5, swiglu_limit=0.5,
            layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                         "compressed_sparse_attention"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
            mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
            index_n_heads=4, index_head_dim=32, index_topk=4, sliding_window=8,
            hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
            rope_theta=10000.0, compress_rope_theta=160000.0, max_position_embeddings=4096,
            num_nextn_predict_layers=0, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
        ),
    ),
    # Official-form config (compress_ratios incl. a trailing MTP entry, num_hash_layers, qk_rope_head_dim,
    # rope_scaling YaRN): real 64 rope dims, HCA rate 32, two hash layers, Pro-like HCA-first schedule.
    "tiny_yarn": dict(
        engine_form="official",
        seed=99,
        prompt_len=100,
        new_tokens=30,
        weight_std=0.08,
        hf=dict(
            vocab_size=288, hidden_size=96, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=1,
            head_dim=128, partial_rotary_factor=0.5, q_lora_rank=48, o_groups=2, o_lora_rank=24,
            n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4, moe_intermediate_size=24,
            scoring_func="sqrtsoftplus", routed_scaling_factor=2.5, swiglu_limit=1.0,
            layer_types=["heavily_compressed_attention", "compressed_sparse_attention",
                         "heavily_compressed_attention", "compressed_sparse_attention", "sliding_attention"],
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 32},
            mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe"],
            index_n_heads=4, index_head_dim=64, index_topk=8, sliding_window=16,
            hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
            rope_theta=10000.0, compress_rope_theta=160000.0, max_position_embeddings=256,
            rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                             "beta_fast": 32, "beta_slow": 1},
            num_nextn_predict_layers=1, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
        ),
    ),
}


def official_config(hf):
    """The same model in the official form."""
    rates = hf["compress_rates"]
    ratios = [0 if t == "sliding_attention" else rates[t] for t in hf["layer_types"]]
    ratios += [0] * hf.get("num_nextn_predict_layers", 0)
    out = {k: v for k, v in hf.items()
           if k not in ("layer_types", "compress_rates", "mlp_layer_types", "partial_rotary_factor",
                        "rope_parameters")}
    out["architectures"] = ["DeepseekV4ForCausalLM"]
    out["model_type"] = "deepseek_v4"
    out["compress_ratios"] = ratios
    out["num_hash_layers"] = sum(1 for t in hf["mlp_layer_types"] if t == "hash_moe")
    out["qk_rope_head_dim"] = int(hf["head_dim"] * hf["partial_rotary_factor"])
    rp = hf.get("rope_parameters")
    if rp:
        out["rope_scaling"] = {"type": rp["rope_type"], "factor": rp["factor"],
                               "original_max_position_embeddings": rp["original_max_position_embeddings"],
                               "beta_fast": rp["beta_fast"], "beta_slow": rp["beta_slow"]}
    return out


def randomize(model, cfg, std, gen):
    """Fill every parameter/buffer with seeded values; non-zero where HF's init leaves zeros."""
    hf = cfg
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if "inv_freq" in name:
            continue
        with torch.no_grad():
            if name.endswith("tid2eid"):
                E, k = hf["n_routed_experts"], hf["num_experts_per_tok"]
                rows = [torch.randperm(E, generator=gen)[:k] for _ in range(p.shape[0])]
                p.copy_(torch.stack(rows).to(p.dtype))
                continue
            if p.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                print("  leaving", name, p.dtype)
                continue
            short = name.split(".")[-1]
            if "norm" in name and short == "weight":
                v = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
            elif short in ("sinks",):
                v = torch.randn(p.shape, generator=gen)
            elif short == "position_bias":
                v = 0.5 * torch.randn(p.shape, generator=gen)
            elif short == "e_score_correction_bias":
                v = 0.1 * torch.randn(p.shape, generator=gen)
            elif short in ("base", "hc_base"):
                v = 0.5 * torch.randn(p.shape, generator=gen)
            elif short in ("scale", "hc_scale"):
                v = 0.5 + torch.rand(p.shape, generator=gen)
            elif short in ("fn", "hc_fn"):
                v = 0.1 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=gen)
            else:
                v = std * torch.randn(p.shape, generator=gen)
            p.copy_(v.to(torch.bfloat16).to(p.dtype))


FP32_OFFICIAL_SUFFIXES = ("attn_sink", ".ape", "gate.bias", "hc_attn_fn", "hc_attn_base", "hc_attn_scale",
                          "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", "hc_head_fn", "hc_head_base", "hc_head_scale")


# HF module names inside a decoder layer -> official names inside `layers.L.` (also used for `mtp.0.`).
HF_TO_OFFICIAL_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "attn_hc.fn": "hc_attn_fn", "attn_hc.base": "hc_attn_base", "attn_hc.scale": "hc_attn_scale",
    "ffn_hc.fn": "hc_ffn_fn", "ffn_hc.base": "hc_ffn_base", "ffn_hc.scale": "hc_ffn_scale",
    "self_attn.q_a_proj.weight": "attn.wq_a.weight",
    "self_attn.q_a_norm.weight": "attn.q_norm.weight",
    "self_attn.q_b_proj.weight": "attn.wq_b.weight",
    "self_attn.kv_proj.weight": "attn.wkv.weight",
    "self_attn.kv_norm.weight": "attn.kv_norm.weight",
    "self_attn.o_a_proj.weight": "attn.wo_a.weight",
    "self_attn.o_b_proj.weight": "attn.wo_b.weight",
    "self_attn.sinks": "attn.attn_sink",
    "self_attn.compressor.kv_proj.weight": "attn.compressor.wkv.weight",
    "self_attn.compressor.gate_proj.weight": "attn.compressor.wgate.weight",
    "self_attn.compressor.position_bias": "attn.compressor.ape",
    "self_attn.compressor.kv_norm.weight": "attn.compressor.norm.weight",
    "self_attn.compressor.indexer.kv_proj.weight": "attn.indexer.compressor.wkv.weight",
    "self_attn.compressor.indexer.gate_proj.weight": "attn.indexer.compressor.wgate.weight",
    "self_attn.compressor.indexer.position_bias": "attn.indexer.compressor.ape",
    "self_attn.compressor.indexer.kv_norm.weight": "attn.indexer.compressor.norm.weight",
    "self_attn.compressor.indexer.q_b_proj.weight": "attn.indexer.wq_b.weight",
    "self_attn.compressor.indexer.scorer.weights_proj.weight": "attn.indexer.weights_proj.weight",
    "mlp.gate.weight": "ffn.gate.weight",
    "mlp.gate.e_score_correction_bias": "ffn.gate.bias",
    "mlp.gate.tid2eid": "ffn.gate.tid2eid",
    "mlp.shared_experts.gate_proj.weight": "ffn.shared_experts.w1.weight",
    "mlp.shared_experts.up_proj.weight": "ffn.shared_experts.w3.weight",
    "mlp.shared_experts.down_proj.weight": "ffn.shared_experts.w2.weight",
}


def to_official(sd, cfg):
    """HF module names -> official DeepSeek names."""
    out = {}
    I = cfg["moe_intermediate_size"]

    def put(name, t):
        keep32 = any(name.endswith(s) for s in FP32_OFFICIAL_SUFFIXES)
        if t.dtype == torch.int64:
            out[name] = t.contiguous()
        else:
            out[name] = t.to(torch.float32 if keep32 else torch.bfloat16).contiguous()

    for name, t in sd.items():
        if "inv_freq" in name:
            continue
        if name == "model.embed_tokens.weight":
            put("embed.weight", t)
        elif name == "lm_head.weight":
            put("head.weight", t)
        elif name == "model.norm.weight":
            put("norm.weight", t)
        elif name.startswith("model.hc_head."):
            put({"hc_fn": "hc_head_fn", "hc_base": "hc_head_base", "hc_scale": "hc_head_scale"}[name.split(".")[-1]], t)
        elif name.startswith("model.layers."):
            parts = name.split(".")
            L, rest = parts[2], ".".join(parts[3:])
            if rest == "mlp.experts.gate_up_proj":
                for e in range(t.shape[0]):
                    put(f"layers.{L}.ffn.experts.{e}.w1.weight", t[e, :I])
                    put(f"layers.{L}.ffn.experts.{e}.w3.weight", t[e, I:])
            elif rest == "mlp.experts.down_proj":
                for e in range(t.shape[0]):
                    put(f"layers.{L}.ffn.experts.{e}.w2.weight", t[e])
            elif rest in HF_TO_OFFICIAL_LAYER:
                put(f"layers.{L}.{HF_TO_OFFICIAL_LAYER[rest]}", t)
            else:
                raise KeyError(f"no official name for {name}")
        else:
            raise KeyError(f"no official name for {name}")
    return out


@torch.no_grad()
def full_logits(model, ids):
    out = model(input_ids=ids[None].cuda(), use_cache=False)
    return out.logits[0].float().cpu()


def make(name, spec):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    hf = spec["hf"]
    gen = torch.Generator().manual_seed(spec["seed"])
    config = DeepseekV4Config(**hf)
    config._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = DeepseekV4ForCausalLM(config).float()
    randomize(model, hf, spec["weight_std"], gen)
    model = model.cuda().eval()
    print(name, "rope_parameters:", config.rope_parameters, "layer_types:", config.layer_types,
          "mlp_layer_types:", config.mlp_layer_types)

    # Greedy tokens by repeated full forwards (no cache).
    prompt = torch.randint(2, hf["vocab_size"], (spec["prompt_len"],), generator=gen)
    ids = prompt.clone()
    for _ in range(spec["new_tokens"]):
        logits = full_logits(model, ids)
        ids = torch.cat([ids, logits[-1].argmax().view(1)])
    logits = full_logits(model, ids)[:-1].contiguous()  # [P+N-1, vocab]
    # Margin of the greedy choices, so a reader can see ties are not an issue.
    top2 = logits[spec["prompt_len"] - 1:].topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).min().item()
    # Cached decode for comparison only (documents the transformers pitfall; not used as a reference).
    cached_diff = None
    try:
        out = model(input_ids=ids[None, : spec["prompt_len"]].cuda(), use_cache=True)
        past = out.past_key_values
        rows = [out.logits[0, -1].float().cpu()]
        for t in range(spec["prompt_len"], len(ids) - 1):
            out = model(input_ids=ids[None, t:t + 1].cuda(), past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0, -1].float().cpu())
        cached = torch.stack(rows)
        cached_diff = (cached - logits[spec["prompt_len"] - 1:]).abs().max().item()
    except Exception as e:  # noqa: BLE001
        cached_diff = f"failed: {e}"

    sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    official = to_official(sd, hf)
    save_file(official, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    os.makedirs(os.path.join(d, "hf_modules"), exist_ok=True)
    modules = {k: v.contiguous() for k, v in sd.items() if "inv_freq" not in k}
    save_file(modules, os.path.join(d, "hf_modules", "model.safetensors"), metadata={"format": "pt"})
    model.cpu().save_pretrained(os.path.join(d, "hf_save_pretrained"), max_shard_size="100KB")

    engine_cfg = official_config(hf) if spec["engine_form"] == "official" else dict(hf, model_type="deepseek_v4",
                                                                                    architectures=["DeepseekV4ForCausalLM"])
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(engine_cfg, f, indent=2)
    with open(os.path.join(d, "config.hf.json"), "w") as f:
        json.dump(dict(hf, model_type="deepseek_v4", architectures=["DeepseekV4ForCausalLM"]), f, indent=2)
    # The other form as well, for the config-parity test.
    other = dict(hf, model_type="deepseek_v4") if spec["engine_form"] == "official" else official_config(hf)
    with open(os.path.join(d, "config.other_form.json"), "w") as f:
        json.dump(other, f, indent=2)

    save_file({
        "input_ids": ids.to(torch.int64).contiguous(),
        "prompt_len": torch.tensor([spec["prompt_len"]], dtype=torch.int64),
        "logits": logits,
    }, os.path.join(d, "oracle.safetensors"), metadata={
        "transformers": transformers.__version__, "torch": torch.__version__,
        "greedy_min_margin": str(margin), "hf_cached_decode_max_abs_diff": str(cached_diff)})
    saved = sorted(os.listdir(os.path.join(d, "hf_save_pretrained")))
    from safetensors import safe_open
    sp_keys = []
    for fn in saved:
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, "hf_save_pretrained", fn), "pt") as f:
                sp_keys += [(k, str(f.get_slice(k).get_dtype()), f.get_slice(k).get_shape()) for k in f.keys()]
    with open(os.path.join(d, "keys.txt"), "w") as f:
        f.write("## save_pretrained files: %s\n" % saved)
        for k, dt, sh in sorted(sp_keys):
            f.write(f"save_pretrained {k} {dt} {sh}\n")
        for k, v in sorted(modules.items()):
            f.write(f"modules {k} {v.dtype} {list(v.shape)}\n")
        for k, v in sorted(official.items()):
            f.write(f"official {k} {v.dtype} {list(v.shape)}\n")
    print(f"{name}: ids {len(ids)} logits {tuple(logits.shape)} greedy margin {margin:.4f} "
          f"hf-cached-vs-nocache {cached_diff}")


def main():
    os.makedirs(OUT, exist_ok=True)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    ok = True
    for name, spec in FIXTURES.items():
        try:
            make(name, spec)
        except Exception:  # noqa: BLE001
            ok = False
            traceback.print_exc()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
