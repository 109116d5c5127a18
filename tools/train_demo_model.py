#!/usr/bin/env python3
"""Train moeserve's built-in demo model: a small DeepSeek-V4 (HF transformers DeepseekV4ForCausalLM) with an MTP
layer, on the Brown Corpus. Runs on the GPU machine (torch 2.11, transformers 5.17, tokenizers 0.23).

    python3 tools/train_demo_model.py --corpus data/demo-corpus --out OUT [--budget-s 270] [--smoke]

Input: OUT of tools/prepare_corpus.py ({train,valid,heldout}.jsonl, chat_template.json).
Output, under OUT/:
  model/          config.json (official form), model.safetensors (official names, MTP under mtp.0.*),
                  tokenizer.json, tokenizer_config.json, keys.txt
  fixtures/       demo_oracle.safetensors, demo_heldout.safetensors (see write_fixtures)
  train_log.csv   one row per 10 steps (train losses) and per evaluation (validation losses)
  summary.json    everything the docs and the report quote: sizes, times, losses, perplexity, MTP agreement
  samples.json    greedy and sampled continuations and a chat answer, from the exported weights (fp32)

What is trained:
  * tokenizer: byte-level BPE (ByteLevel pre-tokenizer with the GPT-2 regex, ByteLevel decoder, no normalizer),
    vocabulary 8192, special tokens <｜begin▁of▁sentence｜>=0, <｜end▁of▁sentence｜>=1, <｜▁pad▁｜>=2,
    <｜User｜>=3, <｜Assistant｜>=4, trained on the train split only.
  * model: the real V4 per-head geometry (head_dim 512, 64 RoPE dims, window 128, CSA rate 4 with the lightning
    indexer, HCA rate 128, 4 mHC streams, sqrtsoftplus routing with e_score_correction_bias, hash routing in the
    first layers, YaRN on the compressed layers exactly as the released configs) at small width and depth.
  * MTP (DeepSeek-V4 official MTPBlock semantics): at position t, e = enorm(embed(token[t+1])),
    x = e_proj(e) broadcast over the hc streams + h_proj(hnorm(h_main[t])) per stream, where h_main is the main
    model's final mHC streams before hc_head; then one window-only V4 block (HF DeepseekV4DecoderLayer with layer
    type sliding_attention, so the "main" rope with theta=rope_theta), its own top-k MoE and mHC; then its own
    hc_head, mtp.norm and the shared lm_head; trained on token[t+2] with loss weight 0.3.
  * routing balance: the auxiliary-loss-free bias update of DeepSeek-V3/V4 on e_score_correction_bias.
  * lightning indexer: its top-k selection has no gradient, so it is trained as in DeepSeek-V3.2 (sparse stage):
    KL(main attention mass over the selected compressed entries, summed over heads || softmax of the indexer
    scores over the same entries); the indexer's gradient reaches only the indexer's own parameters.
  * HF's cached decode is never used (it skips the CSA top-k mask): every evaluation is a full forward without cache.
"""
import argparse
import csv
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import HF_TO_OFFICIAL_LAYER, official_config, to_official  # noqa: E402

import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: E402
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdv4  # noqa: E402

BOS, EOS, PAD, USER, ASSISTANT = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>",
                                  "<｜User｜>", "<｜Assistant｜>")
SPECIALS = [BOS, EOS, PAD, USER, ASSISTANT]
BOS_ID, EOS_ID, PAD_ID, USER_ID, ASSISTANT_ID = range(5)

# The model in HF form. Official form: official_config(HF_CONFIG) (compress_ratios [0,4,128,4,128,0], ...).
HF_CONFIG = dict(
    vocab_size=8192, hidden_size=192, num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=1,
    head_dim=512, partial_rotary_factor=0.125, q_lora_rank=96, o_groups=2, o_lora_rank=96,
    n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=96,
    scoring_func="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5, swiglu_limit=10.0,
    layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                 "compressed_sparse_attention", "heavily_compressed_attention"],
    compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
    mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe"],
    index_n_heads=4, index_head_dim=128, index_topk=32, sliding_window=128,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
    rope_theta=10000.0, compress_rope_theta=160000.0, max_position_embeddings=1048576,
    rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    num_nextn_predict_layers=1, bos_token_id=BOS_ID, eos_token_id=EOS_ID, tie_word_embeddings=False,
)

FP32_HF_MARKERS = ("attn_hc.", "ffn_hc.", "hc_head.", "sinks", "position_bias", "e_score_correction_bias")


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# ----------------------------------------------------------------------------------------------------------------
# Tokenizer and data

def load_docs(corpus, split):
    return [json.loads(line) for line in open(os.path.join(corpus, f"{split}.jsonl"), encoding="utf-8")]


def doc_text(doc):
    return "\n".join(doc["paragraphs"])


def train_tokenizer(texts, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def tokenizer_config(chat_template):
    def added(content):
        return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": False,
                "rstrip": False, "single_word": False}
    return {
        "add_bos_token": True, "add_eos_token": False,
        "bos_token": added(BOS), "eos_token": added(EOS), "pad_token": added(PAD), "unk_token": None,
        "clean_up_tokenization_spaces": False, "legacy": False, "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": chat_template,
    }


def encode(tok, texts):
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def plain_doc_ids(tok, docs):
    return [[BOS_ID] + ids + [EOS_ID] for ids in encode(tok, [doc_text(d) for d in docs])]


def chat_doc_ids(tok, doc):
    """A document as a multi-turn chat, exactly as the DeepSeek-V3 template renders it (no system prompt):
    <bos><｜User｜>p0<｜Assistant｜>p1<eos><｜User｜>p2<｜Assistant｜>p3<eos>..."""
    paras = doc["paragraphs"]
    enc = encode(tok, paras)
    ids = [BOS_ID]
    for i in range(0, len(paras) - 1, 2):
        ids += [USER_ID] + enc[i] + [ASSISTANT_ID] + enc[i + 1] + [EOS_ID]
    return ids if len(ids) > 1 else [BOS_ID] + enc[0] + [EOS_ID]


# ----------------------------------------------------------------------------------------------------------------
# Model: HF DeepseekV4ForCausalLM + the MTP layer

def make_config(hf):
    cfg = DeepseekV4Config(**hf)
    cfg._attn_implementation = "eager"
    cfg.use_cache = False
    return cfg


def mtp_config(hf):
    """A one-layer config whose only layer is window-only with a (non-hash) top-k MoE: the MTP block."""
    return make_config(dict(hf, num_hidden_layers=1, layer_types=["sliding_attention"], mlp_layer_types=["moe"]))


class MTPLayer(nn.Module):
    """DeepSeek-V4 MTPBlock (official inference/model.py) on top of HF's DeepseekV4DecoderLayer."""

    def __init__(self, cfg):
        super().__init__()
        d, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.e_proj = nn.Linear(d, d, bias=False)
        self.h_proj = nn.Linear(d, d, bias=False)
        self.enorm = mdv4.DeepseekV4RMSNorm(d, eps=eps)
        self.hnorm = mdv4.DeepseekV4RMSNorm(d, eps=eps)
        self.norm = mdv4.DeepseekV4RMSNorm(d, eps=eps)
        self.block = mdv4.DeepseekV4DecoderLayer(cfg, 0)
        assert self.block.self_attn.compressor is None and self.block.self_attn.rope_layer_type == "main"
        assert not self.block.mlp.is_hash
        self.hc_head = mdv4.DeepseekV4HyperHead(cfg)

    def forward(self, h_main, next_ids, embed, lm_head, layer_kwargs):
        # h_main: [B,S,hc,D] final mHC streams of the main model (before its hc_head); next_ids[t] = token t+1
        e = self.enorm(embed(next_ids))
        x = self.e_proj(e).unsqueeze(2) + self.h_proj(self.hnorm(h_main))
        x = self.block(x, input_ids=next_ids, **layer_kwargs)
        return lm_head(self.norm(self.hc_head(x)))


@torch.no_grad()
def init_module(module, std):
    """HF-style init for modules built outside a PreTrainedModel (the MTP layer)."""
    for m in module.modules():
        if isinstance(m, mdv4.DeepseekV4RMSNorm):
            m.weight.fill_(1.0)
        elif isinstance(m, nn.Linear):
            m.weight.normal_(0.0, std)
        elif isinstance(m, mdv4.DeepseekV4Experts):
            m.gate_up_proj.normal_(0.0, std)
            m.down_proj.normal_(0.0, std)
        elif isinstance(m, mdv4.DeepseekV4TopKRouter):
            m.weight.normal_(0.0, std)
            m.e_score_correction_bias.zero_()
        elif isinstance(m, mdv4.DeepseekV4Attention):
            m.sinks.zero_()
        elif isinstance(m, mdv4.DeepseekV4HyperConnection):
            m.fn.normal_(0.0, std)
            m.base.zero_()
            m.scale.fill_(1.0)
        elif isinstance(m, mdv4.DeepseekV4HyperHead):
            m.hc_fn.normal_(0.0, std)
            m.hc_base.zero_()
            m.hc_scale.fill_(1.0)


class MainCapture:
    """Forward hooks on the main model's last decoder layer: its keyword arguments (rope cos/sin, mask, positions)
    and its output, the final mHC streams before hc_head. The MTP block reuses both."""

    def __init__(self, model):
        last = model.model.layers[-1]
        self.kwargs, self.h = None, None
        self.handles = [last.register_forward_pre_hook(self._pre, with_kwargs=True),
                        last.register_forward_hook(self._post)]

    def _pre(self, module, args, kwargs):
        self.kwargs = {k: v for k, v in kwargs.items() if k not in ("input_ids", "hidden_states")}

    def _post(self, module, args, output):
        self.h = output[0] if isinstance(output, tuple) else output

    def take(self):
        kw, h = self.kwargs, self.h
        self.kwargs, self.h = None, None
        return h, kw


def forward_main_and_mtp(model, mtp, capture, ids, next_ids):
    """Main logits [B,S,V] and MTP logits [B,S,V] (MTP at t reads next_ids[t] = token t+1)."""
    logits = model(input_ids=ids, use_cache=False).logits
    h_main, kw = capture.take()
    assert h_main is not None and h_main.dim() == 4, "could not capture the final mHC streams"
    mtp_logits = mtp(h_main, next_ids, model.model.embed_tokens, model.lm_head, kw)
    return logits, mtp_logits


def count_params(model, mtp):
    main = sum(p.numel() for p in model.parameters())
    extra = sum(p.numel() for p in mtp.parameters())
    return main, extra


def active_params(hf):
    """Parameters touched per token by the main model (routed experts: top-k of E)."""
    d, E, k, inter = hf["hidden_size"], hf["n_routed_experts"], hf["num_experts_per_tok"], hf["moe_intermediate_size"]
    return (E - k) * 3 * d * inter  # subtract the routed experts a token does not use (per layer)


# ----------------------------------------------------------------------------------------------------------------
# Training helpers: routing bias update, indexer KL, residual dropout

class RouterLoad:
    """Counts expert loads of every top-k router and applies the auxiliary-loss-free bias update."""

    def __init__(self, routers, gamma):
        self.routers, self.gamma = routers, gamma
        self.counts = [torch.zeros(r.num_experts, device=r.weight.device) for r in routers]
        self.enabled = True
        for i, r in enumerate(routers):
            r.register_forward_hook(self._hook(i))

    def _hook(self, i):
        def hook(module, args, output):
            if self.enabled and torch.is_grad_enabled():
                idx = output[2].reshape(-1)
                self.counts[i] += torch.bincount(idx, minlength=module.num_experts).float()
        return hook

    @torch.no_grad()
    def update(self):
        for r, c in zip(self.routers, self.counts):
            if c.sum() > 0:
                r.e_score_correction_bias += self.gamma * torch.sign(c.mean() - c)
            c.zero_()

    def imbalance(self):
        return [float((c.max() / c.mean().clamp_min(1)).item()) for c in self.counts]


class IndexerKL:
    """DeepSeek-V3.2-style indexer loss on every CSA layer (see module docstring)."""

    def __init__(self, model):
        self.losses = []
        self.params = []
        self.enabled = True
        for layer in model.model.layers:
            attn = layer.self_attn
            if not isinstance(attn.compressor, mdv4.DeepseekV4CSACompressor):
                continue
            state = {}
            attn.compressor.indexer.scorer.register_forward_hook(self._scores(state))
            attn.compressor.register_forward_hook(self._bias(state))
            attn.register_forward_hook(self._attn(state))
            self.params += list(attn.compressor.indexer.parameters())

    def _active(self):
        return self.enabled and torch.is_grad_enabled()

    def _scores(self, state):
        def hook(module, args, output):
            if self._active():
                state["scores"] = output  # [B,S,T], differentiable w.r.t. the indexer
        return hook

    def _bias(self, state):
        def hook(module, args, output):
            if self._active():
                state["bias"] = output[1]  # [B,1,S,T]: 0 for indexer-selected causal entries, -inf otherwise
        return hook

    def _attn(self, state):
        def hook(module, args, output):
            if not self._active() or "scores" not in state:
                return
            scores, bias = state.pop("scores"), state.pop("bias")
            probs = output[1]  # [B,H,S,S+T]: window keys then compressed entries
            T = scores.shape[-1]
            if T == 0 or probs is None:
                return
            sel = bias[:, 0] == 0
            p = probs[..., -T:].detach().float().sum(1) * sel
            z = p.sum(-1, keepdim=True)
            valid = z.squeeze(-1) > 0
            p = p / z.clamp_min(1e-30)
            logq = torch.log_softmax(scores.float().masked_fill(~sel, -1e30), dim=-1)
            kl = torch.where(sel, p * (torch.log(p.clamp_min(1e-30)) - logq), torch.zeros_like(p)).sum(-1)
            if valid.any():
                self.losses.append(kl[valid].mean())
        return hook

    def take(self):
        out, self.losses = self.losses, []
        return out


def add_residual_dropout(layer, p):
    def attn_hook(module, args, output):
        if module.training and p > 0:
            return (F.dropout(output[0], p, True),) + tuple(output[1:])
    def mlp_hook(module, args, output):
        if module.training and p > 0:
            return F.dropout(output, p, True)
    layer.self_attn.register_forward_hook(attn_hook)
    layer.mlp.register_forward_hook(mlp_hook)


# ----------------------------------------------------------------------------------------------------------------
# Export and round trip

def hf_name_is_fp32(name):
    return any(m in name for m in FP32_HF_MARKERS)


@torch.no_grad()
def round_like_export(module):
    """Round in place every parameter that the export stores as BF16 (everything but hc/sink/ape/bias)."""
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if t.dtype == torch.float32 and not hf_name_is_fp32(name) and "inv_freq" not in name:
            t.copy_(t.to(torch.bfloat16).to(torch.float32))


MTP_OWN = {"e_proj.weight": "e_proj.weight", "h_proj.weight": "h_proj.weight", "enorm.weight": "enorm.weight",
           "hnorm.weight": "hnorm.weight", "norm.weight": "norm.weight", "hc_head.hc_fn": "hc_head_fn",
           "hc_head.hc_base": "hc_head_base", "hc_head.hc_scale": "hc_head_scale"}


def export_official(model, mtp, hf):
    sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    out = to_official(sd, hf)
    block = {f"model.layers.0.{k}": v.detach().cpu() for k, v in mtp.block.state_dict().items()}
    for name, t in to_official(block, hf).items():
        assert name.startswith("layers.0."), name
        out["mtp.0." + name[len("layers.0."):]] = t
    own = {k: v.detach().cpu() for k, v in mtp.state_dict().items() if not k.startswith("block.")}
    assert set(own) == set(MTP_OWN), sorted(own)
    for k, v in own.items():
        name = "mtp.0." + MTP_OWN[k]
        out[name] = v.to(torch.float32 if name.startswith("mtp.0.hc_head_") else torch.bfloat16).contiguous()
    return out


def from_official(official, hf):
    """Official names -> (HF DeepseekV4ForCausalLM state dict, MTPLayer state dict)."""
    inv = {v: k for k, v in HF_TO_OFFICIAL_LAYER.items()}
    inv_own = {v: k for k, v in MTP_OWN.items()}
    E = hf["n_routed_experts"]
    main, mtp, experts = {}, {}, {}
    for name, t in official.items():
        t = t if t.dtype == torch.int64 else t.to(torch.float32)
        if name == "embed.weight":
            main["model.embed_tokens.weight"] = t
        elif name == "head.weight":
            main["lm_head.weight"] = t
        elif name == "norm.weight":
            main["model.norm.weight"] = t
        elif name in ("hc_head_fn", "hc_head_base", "hc_head_scale"):
            main["model.hc_head." + name.replace("hc_head_", "hc_")] = t
        else:
            parts = name.split(".")
            if parts[0] == "layers":
                dst, prefix, rest = main, f"model.layers.{parts[1]}.", ".".join(parts[2:])
            elif parts[0] == "mtp" and parts[1] == "0":
                rest = ".".join(parts[2:])
                if rest in inv_own:
                    mtp[inv_own[rest]] = t
                    continue
                dst, prefix = mtp, "block."
            else:
                raise KeyError(name)
            if rest.startswith("ffn.experts."):
                _, _, e, w, _ = rest.split(".")
                experts.setdefault(prefix, {})[(int(e), w)] = t
            else:
                dst[prefix + inv[rest]] = t
    for prefix, ex in experts.items():
        dst = mtp if prefix == "block." else main
        dst[prefix + "mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([ex[(e, "w1")], ex[(e, "w3")]], 0) for e in range(E)])
        dst[prefix + "mlp.experts.down_proj"] = torch.stack([ex[(e, "w2")] for e in range(E)])
    return main, mtp


def build(hf, device):
    cfg = make_config(hf)
    model = DeepseekV4ForCausalLM(cfg).float().to(device)
    mtp = MTPLayer(mtp_config(hf)).float().to(device)
    return model, mtp


# ----------------------------------------------------------------------------------------------------------------
# Evaluation (fp32, no cache)

@torch.no_grad()
def eval_windows(model, mtp, capture, windows, batch):
    """windows: [W, L] token ids. Per window: summed main NLL over positions 1..L-1, summed MTP NLL over 2..L-1,
    counts, and top-1 statistics (main accuracy, MTP accuracy, MTP agreement with the main next-next argmax)."""
    res = {"nll": [], "mtp_nll": [], "n": [], "mtp_n": [], "main_acc": 0, "mtp_acc": 0, "agree": 0, "agree_n": 0}
    for i in range(0, windows.shape[0], batch):
        w = windows[i:i + batch].cuda()
        nxt = torch.cat([w[:, 1:], torch.full_like(w[:, :1], PAD_ID)], 1)
        logits, mlog = forward_main_and_mtp(model, mtp, capture, w, nxt)
        logits, mlog = logits.float(), mlog.float()
        lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, w[:, 1:, None])[..., 0]
        mlp = torch.log_softmax(mlog[:, :-2], -1).gather(-1, w[:, 2:, None])[..., 0]
        res["nll"] += (-lp.double().sum(1)).tolist()
        res["mtp_nll"] += (-mlp.double().sum(1)).tolist()
        res["n"] += [w.shape[1] - 1] * w.shape[0]
        res["mtp_n"] += [w.shape[1] - 2] * w.shape[0]
        am, amt = logits.argmax(-1), mlog.argmax(-1)
        res["main_acc"] += int((am[:, :-1] == w[:, 1:]).sum())
        res["mtp_acc"] += int((amt[:, :-2] == w[:, 2:]).sum())
        res["agree"] += int((amt[:, :-2] == am[:, 1:-1]).sum())
        res["agree_n"] += am[:, 1:-1].numel()
    return res


@torch.no_grad()
def generate(model, ids, n, temperature=0.0, top_p=1.0, gen=None, stop=()):
    ids = list(ids)
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids], device="cuda"), use_cache=False, logits_to_keep=1).logits
        logits = logits[0, -1].float()
        if temperature <= 0:
            nxt = int(logits.argmax())
        else:
            probs = torch.softmax(logits / temperature, -1)
            sp, si = probs.sort(descending=True)
            keep = sp.cumsum(0) - sp < top_p
            sp = sp * keep
            nxt = int(si[torch.multinomial(sp / sp.sum(), 1, generator=gen)])
        ids.append(nxt)
        if nxt in stop:
            break
    return ids


# ----------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="data/demo-corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--budget-s", type=float, default=270.0, help="wall-clock budget of the training loop")
    ap.add_argument("--steps", type=int, default=0, help="fixed number of steps (default: from the budget)")
    ap.add_argument("--max-epochs", type=float, default=20.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--bias-gamma", type=float, default=3e-3)
    ap.add_argument("--chat-frac", type=float, default=0.15)
    ap.add_argument("--smoke", action="store_true", help="tiny run through every code path")
    args = ap.parse_args()
    t_start = time.time()
    if args.smoke:
        args.budget_s, args.batch, args.warmup = min(args.budget_s, 25.0), 4, 5
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    out = args.out
    for d in ("model", "fixtures"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    summary = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
               "args": vars(args), "device": torch.cuda.get_device_name(0)}
    hf = dict(HF_CONFIG)
    S = args.seq

    # ---- tokenizer
    train_docs, valid_docs, heldout_docs = (load_docs(args.corpus, s) for s in ("train", "valid", "heldout"))
    tok_texts = [doc_text(d) for d in train_docs]
    if args.smoke:
        tok_texts = tok_texts[:40]
    t0 = time.time()
    tok = train_tokenizer(tok_texts, hf["vocab_size"])
    summary["tokenizer_train_s"] = time.time() - t0
    summary["tokenizer_vocab"] = tok.get_vocab_size()
    log("tokenizer:", tok.get_vocab_size(), "tokens in", f"{summary['tokenizer_train_s']:.1f}s")
    if tok.get_vocab_size() != hf["vocab_size"]:
        log(f"WARNING: tokenizer has {tok.get_vocab_size()} tokens, model vocabulary is {hf['vocab_size']}")
    tok.save(os.path.join(out, "model", "tokenizer.json"))
    chat_template = json.load(open(os.path.join(args.corpus, "chat_template.json"), encoding="utf-8"))["chat_template"]
    with open(os.path.join(out, "model", "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(chat_template), f, ensure_ascii=False, indent=2)
    tok_json = json.load(open(os.path.join(out, "model", "tokenizer.json"), encoding="utf-8"))
    summary["tokenizer_shape"] = {k: tok_json[k] for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}
    summary["tokenizer_added_tokens"] = tok_json["added_tokens"]
    # How transformers reads it (for the docs; the engine reads tokenizer.json itself).
    try:
        from transformers import AutoTokenizer
        at = AutoTokenizer.from_pretrained(os.path.join(out, "model"))
        probe = "The jury said it did find that many of Georgia's laws are outmoded."
        raw = tok.encode(probe, add_special_tokens=False).ids
        summary["hf_autotokenizer"] = {
            "class": type(at).__name__, "ids_plain_equal_raw": at(probe, add_special_tokens=False)["input_ids"] == raw,
            "ids_with_special": at(probe)["input_ids"][:4], "raw_first": raw[:3],
            "chat_render": at.apply_chat_template([{"role": "user", "content": "Hello!"}], tokenize=False,
                                                  add_generation_prompt=True),
            "decode_roundtrip": tok.decode(raw) == probe}
    except Exception as e:  # noqa: BLE001
        summary["hf_autotokenizer"] = f"failed: {e!r}"
    log("autotokenizer:", summary["hf_autotokenizer"])

    # ---- data
    rng = random.Random(args.seed)
    chat_mask = [rng.random() < args.chat_frac for _ in train_docs]
    plain_ids = plain_doc_ids(tok, [d for d, c in zip(train_docs, chat_mask) if not c])
    chat_ids = [chat_doc_ids(tok, d) for d, c in zip(train_docs, chat_mask) if c]
    docs_ids = plain_ids + chat_ids
    rng.shuffle(docs_ids)
    starts, pos = [], 0
    for d in docs_ids:
        starts.append(pos)
        pos += len(d)
    train_stream = torch.tensor([t for d in docs_ids for t in d], dtype=torch.long)
    valid_stream = torch.tensor([t for d in plain_doc_ids(tok, valid_docs) for t in d], dtype=torch.long)
    heldout_doc_ids = plain_doc_ids(tok, heldout_docs)
    heldout_stream = torch.tensor([t for d in heldout_doc_ids for t in d], dtype=torch.long)
    summary["tokens"] = {"train": train_stream.numel(), "train_chat_docs": len(chat_ids),
                         "valid": valid_stream.numel(), "heldout": heldout_stream.numel()}
    log("tokens:", summary["tokens"])
    nvw = (valid_stream.numel() // (S + 2))
    valid_windows = valid_stream[: nvw * (S + 2)].view(nvw, S + 2)[: (4 if args.smoke else 48)]
    train_gpu = train_stream.cuda()
    doc_starts = torch.tensor([s for s in starts if s + S + 2 <= train_stream.numel()])
    gen_data = torch.Generator().manual_seed(args.seed + 1)

    def batch_windows(B):
        n_aligned = B // 2
        off_rand = torch.randint(0, train_stream.numel() - (S + 2), (B - n_aligned,), generator=gen_data)
        off_doc = doc_starts[torch.randint(0, doc_starts.numel(), (n_aligned,), generator=gen_data)]
        offs = torch.cat([off_doc, off_rand]).cuda()
        return train_gpu[offs[:, None] + torch.arange(S + 2, device="cuda")[None]]

    # ---- model
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model, mtp = build(hf, "cuda")
    init_module(mtp, model.config.initializer_range)
    gen_init = torch.Generator().manual_seed(args.seed + 2)
    E, k = hf["n_routed_experts"], hf["num_experts_per_tok"]
    for layer in list(model.model.layers):
        if layer.mlp.is_hash:
            rows = torch.stack([torch.randperm(E, generator=gen_init)[:k] for _ in range(hf["vocab_size"])])
            layer.mlp.gate.tid2eid.copy_(rows.to(layer.mlp.gate.tid2eid.device))
    bad = [(n, float(p.float().std())) for n, p in list(model.named_parameters()) + list(mtp.named_parameters())
           if not torch.isfinite(p).all() or (p.dim() >= 2 and "position_bias" not in n  # zero-init, as HF
                                              and not 1e-3 < float(p.detach().float().std()) < 0.5)]
    assert not bad, f"badly initialised parameters: {bad}"
    n_main, n_mtp = count_params(model, mtp)
    d = hf["hidden_size"]
    n_routed_unused = sum(1 for _ in model.model.layers) * active_params(hf)
    summary["params"] = {"main": n_main, "mtp": n_mtp, "total": n_main + n_mtp,
                         "embed_and_head": 2 * hf["vocab_size"] * d,
                         "main_active_per_token": n_main - n_routed_unused}
    log("params:", summary["params"])
    for layer in list(model.model.layers) + [mtp.block]:
        add_residual_dropout(layer, args.dropout)
    capture = MainCapture(model)
    routers = [m for m in list(model.modules()) + list(mtp.modules()) if isinstance(m, mdv4.DeepseekV4TopKRouter)]
    load = RouterLoad(routers, args.bias_gamma)
    ikl = IndexerKL(model)
    idx_param_ids = {id(p) for p in ikl.params}
    params = [p for p in list(model.parameters()) + list(mtp.parameters()) if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    tokens_per_step = args.batch * S
    max_steps_epochs = int(args.max_epochs * train_stream.numel() / tokens_per_step)
    total_steps = args.steps or max_steps_epochs

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = min(1.0, (step - args.warmup) / max(1, total_steps - args.warmup))
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))

    @torch.no_grad()
    def validate():
        model.eval(), mtp.eval()
        ikl.enabled = load.enabled = False
        r = eval_windows(model, mtp, capture, valid_windows, 8)
        model.train(), mtp.train()
        ikl.enabled = load.enabled = True
        return sum(r["nll"]) / sum(r["n"]), sum(r["mtp_nll"]) / sum(r["mtp_n"])

    log_path = os.path.join(out, "train_log.csv")
    logf = open(log_path, "w", newline="")
    writer = csv.writer(logf)
    writer.writerow(["step", "tokens", "elapsed_s", "lr", "train_main", "train_mtp", "train_indexer_kl",
                     "valid_main", "valid_mtp", "max_over_mean_expert_load"])
    model.train(), mtp.train()
    best = (float("inf"), None, -1)
    acc = {"main": 0.0, "mtp": 0.0, "idx": 0.0, "n": 0}
    eval_every, step, t_loop = None, 0, time.time()
    step_times = []
    while step < total_steps:
        ts = time.time()
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        w = batch_windows(args.batch)
        inp, nxt, tgt2 = w[:, :S], w[:, 1:S + 1], w[:, 2:S + 2]
        logits, mlog = forward_main_and_mtp(model, mtp, capture, inp, nxt)
        loss_main = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), nxt.reshape(-1))
        loss_mtp = F.cross_entropy(mlog.float().reshape(-1, mlog.shape[-1]), tgt2.reshape(-1))
        idx_losses = ikl.take()
        loss_idx = torch.stack(idx_losses).mean() if idx_losses else None
        opt.zero_grad(set_to_none=True)
        if loss_idx is not None:
            gi = torch.autograd.grad(loss_idx, ikl.params, retain_graph=True, allow_unused=True)
        (loss_main + args.mtp_weight * loss_mtp).backward()
        if loss_idx is not None:
            for p, g in zip(ikl.params, gi):
                if g is not None:
                    p.grad = g if p.grad is None else p.grad + g
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        imb = load.imbalance()
        load.update()
        acc["main"] += float(loss_main.detach())
        acc["mtp"] += float(loss_mtp.detach())
        acc["idx"] += float(loss_idx.detach()) if loss_idx is not None else 0.0
        acc["n"] += 1
        step += 1
        step_times.append(time.time() - ts)
        elapsed = time.time() - t_loop
        if step == 25 and not args.steps:
            per_step = sorted(step_times[5:])[len(step_times[5:]) // 2]
            by_budget = int(0.93 * args.budget_s / per_step)  # evaluations take the rest
            total_steps = max(step + 1, min(max_steps_epochs, by_budget))
            log(f"median step {per_step * 1000:.0f} ms -> {total_steps} steps "
                f"({total_steps * tokens_per_step / train_stream.numel():.1f} epochs)")
        if eval_every is None and (step >= 25 or args.steps):
            eval_every = max(10 if args.smoke else 50, total_steps // 16)
        stop = elapsed > args.budget_s
        row_valid = ["", ""]
        if (eval_every and step % eval_every == 0) or step == total_steps or stop:
            vm, vt = validate()
            row_valid = [f"{vm:.5f}", f"{vt:.5f}"]
            score = vm + args.mtp_weight * vt
            if score < best[0]:
                best = (score, {"model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                                "mtp": {k: v.detach().clone() for k, v in mtp.state_dict().items()}}, step)
            log(f"step {step}/{total_steps} {elapsed:.0f}s lr {lr_at(step):.2e} train {acc['main'] / acc['n']:.4f} "
                f"mtp {acc['mtp'] / acc['n']:.4f} idx {acc['idx'] / acc['n']:.4f} | valid {vm:.4f} mtp {vt:.4f} "
                f"| expert load max/mean per router {[round(x, 2) for x in imb]}")
        if step % 10 == 0 or row_valid[0] or stop:
            writer.writerow([step, step * tokens_per_step, f"{elapsed:.1f}", f"{lr_at(step):.3e}",
                             f"{acc['main'] / acc['n']:.5f}", f"{acc['mtp'] / acc['n']:.5f}",
                             f"{acc['idx'] / acc['n']:.5f}"] + row_valid + [f"{max(imb):.3f}"])
            logf.flush()
            acc = {"main": 0.0, "mtp": 0.0, "idx": 0.0, "n": 0}
        if stop:
            log("wall-clock budget reached")
            break
    logf.close()
    train_s = time.time() - t_loop
    summary["training"] = {"steps": step, "planned_steps": total_steps, "seconds": train_s,
                           "tokens_seen": step * tokens_per_step,
                           "epochs": step * tokens_per_step / train_stream.numel(),
                           "median_step_ms": 1000 * sorted(step_times)[len(step_times) // 2],
                           "best_step": best[2], "batch": args.batch, "seq": S,
                           "last_step_expert_load_max_over_mean": imb}
    model.load_state_dict(best[1]["model"])
    mtp.load_state_dict(best[1]["mtp"])
    vm, vt = validate()
    summary["training"].update({"best_valid_main": vm, "best_valid_mtp": vt,
                                "e_score_correction_bias_absmax": [float(r.e_score_correction_bias.abs().max())
                                                                   for r in routers]})
    log(f"best step {best[2]}: valid main {vm:.4f} (ppl {math.exp(vm):.2f}) mtp {vt:.4f}; training {train_s:.0f}s")

    # ---- export, in fp32 from here on
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model.eval(), mtp.eval()
    ikl.enabled = load.enabled = False
    probe = heldout_stream[:S].view(1, S)
    probe_next = torch.cat([probe[:, 1:], torch.full_like(probe[:, :1], PAD_ID)], 1)
    with torch.no_grad():
        l_unrounded, _ = forward_main_and_mtp(model, mtp, capture, probe.cuda(), probe_next.cuda())
        round_like_export(model)
        round_like_export(mtp)
        l_a, m_a = forward_main_and_mtp(model, mtp, capture, probe.cuda(), probe_next.cuda())
    official = export_official(model, mtp, hf)
    mdir = os.path.join(out, "model")
    save_file(official, os.path.join(mdir, "model.safetensors"), metadata={"format": "pt"})
    ocfg = official_config(hf)
    ocfg["torch_dtype"] = "bfloat16"
    with open(os.path.join(mdir, "config.json"), "w") as f:
        json.dump(ocfg, f, indent=2)
    with open(os.path.join(mdir, "keys.txt"), "w") as f:
        for kname, v in sorted(official.items()):
            f.write(f"{kname} {str(v.dtype).replace('torch.', '')} {list(v.shape)}\n")
    summary["export"] = {"tensors": len(official), "bytes": os.path.getsize(os.path.join(mdir, "model.safetensors")),
                         "mtp_tensors": sum(1 for kname in official if kname.startswith("mtp.0."))}
    log("export:", summary["export"])
    del model, mtp, capture
    torch.cuda.empty_cache()

    # ---- round trip: a fresh HF model + MTP layer from the exported file
    loaded = {}
    with safe_open(os.path.join(mdir, "model.safetensors"), "pt") as f:
        for kname in f.keys():
            loaded[kname] = f.get_tensor(kname)
    main_sd, mtp_sd = from_official(loaded, hf)
    model, mtp = build(hf, "cuda")
    model.load_state_dict(main_sd, strict=True)
    mtp.load_state_dict(mtp_sd, strict=True)
    model.eval(), mtp.eval()
    capture = MainCapture(model)
    with torch.no_grad():
        l_b, m_b = forward_main_and_mtp(model, mtp, capture, probe.cuda(), probe_next.cuda())
    rt = {"main_max_abs_diff": float((l_a - l_b).abs().max()), "mtp_max_abs_diff": float((m_a - m_b).abs().max()),
          "bf16_rounding_effect_max_abs": float((l_unrounded - l_a).abs().max())}
    summary["round_trip"] = rt
    log("round trip:", rt)
    assert rt["main_max_abs_diff"] <= 1e-5 and rt["mtp_max_abs_diff"] <= 1e-5, rt

    # ---- held-out perplexity (fp32, exported weights), MTP agreement
    nwin = (heldout_stream.numel() + S - 1) // S
    if args.smoke:
        nwin = 3
    full = heldout_stream.numel() // S
    windows = heldout_stream[: min(nwin, full) * S].view(-1, S)
    r = eval_windows(model, mtp, capture, windows, 8)
    tail = heldout_stream[full * S:]
    if not args.smoke and tail.numel() >= 3:
        r2 = eval_windows(model, mtp, capture, tail.view(1, -1), 1)
        for kname in ("nll", "mtp_nll", "n", "mtp_n"):
            r[kname] += r2[kname]
        for kname in ("main_acc", "mtp_acc", "agree", "agree_n"):
            r[kname] += r2[kname]
    ntok = sum(r["n"])
    summary["heldout"] = {
        "documents": len(heldout_docs), "stream_tokens": heldout_stream.numel(), "window": S,
        "windows": len(r["n"]), "scored_tokens": ntok, "nll_per_token": sum(r["nll"]) / ntok,
        "perplexity": math.exp(sum(r["nll"]) / ntok), "main_top1_accuracy": r["main_acc"] / ntok,
        "mtp_scored_tokens": sum(r["mtp_n"]), "mtp_perplexity": math.exp(sum(r["mtp_nll"]) / sum(r["mtp_n"])),
        "mtp_top1_accuracy": r["mtp_acc"] / sum(r["mtp_n"]),
        "mtp_agreement_with_main_next_next_argmax": r["agree"] / r["agree_n"], "agreement_positions": r["agree_n"]}
    log("heldout:", summary["heldout"])
    save_file({"heldout_ids": heldout_stream.contiguous(),
               "window_nll": torch.tensor(r["nll"], dtype=torch.float64),
               "window_tokens": torch.tensor(r["n"], dtype=torch.int64)},
              os.path.join(out, "fixtures", "demo_heldout.safetensors"),
              metadata={"window": str(S), "perplexity": repr(summary["heldout"]["perplexity"]),
                        "scored_tokens": str(ntok),
                        "what": "held-out stream ([BOS] doc [EOS] per document); window w is heldout_ids[w*window:"
                                "(w+1)*window] (the last one shorter), each a fresh sequence; window_nll = sum of "
                                "-log p(ids[t+1] | ids[..t]) over t = 0..len-2, fp32 HF forward without cache"})

    # ---- oracle fixture on one held-out text
    L = 300
    ids = torch.tensor(heldout_doc_ids[0][:L], dtype=torch.long)
    assert ids.numel() == L and ids[0] == BOS_ID
    nxt = torch.cat([ids[1:], torch.tensor([PAD_ID])])
    with torch.no_grad():
        lg, ml = forward_main_and_mtp(model, mtp, capture, ids[None].cuda(), nxt[None].cuda())
    lg, ml = lg[0].float().cpu(), ml[0, :L - 1].float().cpu()

    def pick(n, first=8, last=8, mid=16):
        mids = [round(first + (n - last - first) * (i + 0.5) / mid) for i in range(mid)]
        return torch.tensor(sorted(set(list(range(first)) + mids + list(range(n - last, n)))), dtype=torch.long)

    pos, mpos = pick(L), pick(L - 1)
    lse, mlse = torch.logsumexp(lg, -1), torch.logsumexp(ml, -1)
    fx = {"input_ids": ids, "positions": pos, "logits": lg[pos].contiguous(),
          "logprob_next": (lg[:-1].gather(-1, ids[1:, None])[:, 0] - lse[:-1]).contiguous(),
          "logsumexp": lse.contiguous(), "argmax": lg.argmax(-1),
          "mtp_positions": mpos, "mtp_logits": ml[mpos].contiguous(),
          "mtp_logprob": (ml[:-1].gather(-1, ids[2:, None])[:, 0] - mlse[:-1]).contiguous(),
          "mtp_logsumexp": mlse.contiguous(), "mtp_argmax": ml.argmax(-1)}
    save_file(fx, os.path.join(out, "fixtures", "demo_oracle.safetensors"), metadata={
        "transformers": transformers.__version__, "torch": torch.__version__, "text": heldout_docs[0]["id"],
        "what": "fp32 forward without cache of models/demo (bf16 weights) on input_ids (BOS + the first 299 tokens "
                "of held-out document " + heldout_docs[0]["id"] + "); logits[i] = logits at positions[i]; "
                "MTP at position t reads token input_ids[t+1] and predicts input_ids[t+2], t = 0..298"})
    summary["oracle_fixture"] = {k: [str(v.dtype).replace("torch.", ""), list(v.shape)] for k, v in fx.items()}

    # ---- samples (fp32, exported weights, full forward per token)
    gen = torch.Generator(device="cuda").manual_seed(args.seed + 3)
    n_new = 12 if args.smoke else 80
    prompts = ["The jury said that", "She opened the door and", "In the spring of 1961, the city council"]
    samples = {"greedy": [], "sampled": [], "chat": [], "greedy_mtp_acceptance": None}
    agree = agree_n = 0
    for p in prompts:
        pid = [BOS_ID] + tok.encode(p, add_special_tokens=False).ids
        g = generate(model, pid, n_new)
        samples["greedy"].append({"prompt": p, "text": tok.decode(g[len(pid):])})
        # greedy speculative acceptance of the MTP draft on the model's own greedy text
        gt = torch.tensor(g)
        gnext = torch.cat([gt[1:], torch.tensor([PAD_ID])])
        with torch.no_grad():
            a, b = forward_main_and_mtp(model, mtp, capture, gt[None].cuda(), gnext[None].cuda())
        am, bm = a[0].argmax(-1), b[0].argmax(-1)
        lo = len(pid) - 1
        agree += int((bm[lo:-2] == am[lo + 1:-1]).sum())
        agree_n += am[lo + 1:-1].numel()
        s = generate(model, pid, n_new, temperature=0.8, top_p=0.95, gen=gen)
        samples["sampled"].append({"prompt": p, "temperature": 0.8, "top_p": 0.95, "text": tok.decode(s[len(pid):])})
    samples["greedy_mtp_acceptance"] = agree / max(1, agree_n)
    for q in ["Tell me about the weather in the city.", "What did the committee decide?"]:
        pid = [BOS_ID, USER_ID] + tok.encode(q, add_special_tokens=False).ids + [ASSISTANT_ID]
        g = generate(model, pid, n_new, temperature=0.7, top_p=0.9, gen=gen, stop=(EOS_ID,))
        samples["chat"].append({"user": q, "temperature": 0.7, "top_p": 0.9,
                                "assistant": tok.decode(g[len(pid):], skip_special_tokens=True),
                                "ended_with_eos": g[-1] == EOS_ID})
    with open(os.path.join(out, "samples.json"), "w", encoding="utf-8") as f:
        json.dump(samples, f, ensure_ascii=False, indent=1)
    summary["greedy_mtp_acceptance"] = samples["greedy_mtp_acceptance"]
    for s in samples["greedy"] + samples["sampled"]:
        log(repr(s["prompt"]), "->", repr(s["text"][:300]))
    for s in samples["chat"]:
        log("chat", repr(s["user"]), "->", repr(s["assistant"][:300]))
    summary["total_s"] = time.time() - t_start
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
    log(f"done in {summary['total_s']:.0f}s")


if __name__ == "__main__":
    main()
