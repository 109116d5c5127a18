#include "planner/buffers.h"

#include <algorithm>

#include <fmt/format.h>

namespace moeserve::planner {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Sum {
  std::vector<BufferItem>& items;
  int64_t total = 0;
  void add(const std::string& name, int64_t bytes, const std::string& formula) {
    if (bytes <= 0) return;
    items.push_back({name, bytes, formula});
    total += bytes;
  }
};

// Bytes of one quantized activation row of width n: FP8 e4m3 plus one fp32 scale per 128, or BF16.
int64_t act_row(int64_t n, WeightFormat weights) {
  return weights == WeightFormat::BF16 ? 2 * n : n + 4 * ceil_div(n, 128);
}

int64_t moe_tokens(const Layout& l, int64_t t) { return t * l.spec.attn_dp * l.spec.attn_cp; }

}  // namespace

BufferGroup forward_activations(const io::ModelConfig& c, const Layout& l, const StageMap& stage,
                                WeightFormat weights, int64_t t, int64_t rows) {
  BufferGroup out;
  if (t <= 0) return out;
  const int64_t D = c.hidden_size, d = c.head_dim, hcD = c.hc_dim(), k = c.experts_per_token;
  const int64_t Hl = l.heads_per_rank, Gl = l.o_groups_per_rank, IHl = l.index_heads_per_rank;
  const int64_t Il = l.moe_intermediate_per_rank, ep = l.spec.moe_ep;
  bool csa = false, hca = false;
  for (int64_t i = stage.first_layer; i < stage.first_layer + stage.num_layers; ++i) {
    csa |= c.layers[size_t(i)].attention == io::AttentionKind::CSA;
    hca |= c.layers[size_t(i)].attention == io::AttentionKind::HCA;
  }
  const bool quant = weights != WeightFormat::BF16;

  std::vector<BufferItem> persistent_items, attn_items, moe_items, head_items;
  Sum persistent{persistent_items}, attn{attn_items}, moe{moe_items}, head{head_items};
  persistent.add("hidden streams", 2 * t * hcD * 2, "2 (residual, output) x t x hc_mult*hidden x 2 B");

  attn.add("hc_pre", t * hcD * 4 + t * D * 2, "t x hc_mult*hidden x 4 B (fp32 mix input) + t x hidden x 2 B");
  attn.add("q path", t * c.q_lora_rank * 2 + t * Hl * d * 2, "t x q_lora x 2 B + t x heads/tp x head_dim x 2 B");
  attn.add("kv", t * d * 2, "t x head_dim x 2 B");
  if (csa || hca) {
    const int64_t coff = csa ? 2 : 1;
    attn.add("compressor", 2 * t * coff * d * 4, "2 (kv, score) x t x coff*head_dim x 4 B");
  }
  if (csa)
    attn.add("indexer",
             t * IHl * c.index_head_dim * 2 + t * IHl * 4 + t * kIndexScoreTile * 4 + t * c.index_topk * 4,
             fmt::format("t x (index_heads/tp x index_head_dim x 2 B + index_heads/tp x 4 B + {} score tile x 4 B "
                         "+ index_topk x 4 B)",
                         kIndexScoreTile));
  attn.add("attention output", t * Hl * d * 2 + t * Gl * c.o_lora_rank * 2 + t * D * 4,
           "t x (heads/tp x head_dim x 2 B + o_groups/tp x o_lora x 2 B + hidden x 4 B fp32 for the reduce)");
  if (quant)
    attn.add("fp8 activation copy", t * act_row(std::max(D, Gl * c.o_lora_rank), weights),
             "t x max(hidden, o_groups/tp x o_lora) x (1 B + 4 B per 128)");

  const int64_t g = moe_tokens(l, t);             // tokens the stage group's MoE sees
  const int64_t local = ep > 1 ? t : g;           // tokens routed / run through the shared expert on this rank
  const int64_t pairs = g * k / ep;               // token-expert pairs per rank, balanced
  moe.add("hc_pre", t * hcD * 4 + t * D * 2, "t x hc_mult*hidden x 4 B + t x hidden x 2 B");
  if (ep == 1 && g > t) moe.add("gathered tokens", g * D * 2, "g x hidden x 2 B (all-gathered for MoE-TP)");
  moe.add("router", local * c.n_routed_experts * 4 + local * k * 8, "tokens x n_routed_experts x 4 B + tokens x topk x 8 B");
  moe.add("expert inputs", pairs * act_row(D, weights), "p x hidden (fp8 + scales, or bf16)");
  moe.add("gate/up output", pairs * 2 * Il * 2, "p x 2 x moe_inter/tp x 2 B");
  moe.add("swiglu output", pairs * act_row(Il, weights), "p x moe_inter/tp (fp8 + scales, or bf16)");
  moe.add("down output", pairs * D * 2, "p x hidden x 2 B");
  moe.add("shared expert", local * 2 * Il * 2 + local * D * 2, "tokens x (2 x moe_inter/tp + hidden) x 2 B");
  moe.add("moe output", t * D * 4, "t x hidden x 4 B (fp32 reduce)");

  if (stage.has_head) {
    const int64_t V = c.vocab_size, Vl = l.vocab_per_rank;
    head.add("hc_head + norm", t * hcD * 4 + t * D * 2, "t x hc_mult*hidden x 4 B + t x hidden x 2 B");
    head.add("logits", rows * Vl * 4 + (Vl < V ? rows * V * 4 : 0),
             "rows x vocab/vocab_parallel x 4 B (+ rows x vocab x 4 B gathered)");
  }

  const Sum* peak = &attn;
  out.peak_of = "attention";
  if (moe.total > peak->total) peak = &moe, out.peak_of = "moe";
  if (head.total > peak->total) peak = &head, out.peak_of = "head";
  out.items = persistent_items;
  out.items.insert(out.items.end(), peak->items.begin(), peak->items.end());
  out.bytes = persistent.total + peak->total;
  return out;
}

RuntimeBuffers runtime_buffers(const io::ModelConfig& c, const Layout& l, const StageMap& stage, const Profile& p) {
  RuntimeBuffers b;
  const ParallelSpec& s = l.spec;
  b.prefill_tokens = p.chunked_prefill_size / s.attn_cp;
  b.activations = forward_activations(c, l, stage, p.weights, b.prefill_tokens,
                                      std::min(b.prefill_tokens, p.max_running_requests));
  if (!p.cuda_graph_batch_sizes.empty()) {
    b.decode_tokens = p.cuda_graph_batch_sizes.back() * p.speculative.tokens_per_request();
    b.cuda_graphs = forward_activations(c, l, stage, p.weights, b.decode_tokens, b.decode_tokens);
  }

  const int64_t t = std::max(b.prefill_tokens, b.decode_tokens), g = moe_tokens(l, t);
  const int64_t D = c.hidden_size, hcD = c.hc_dim();
  Sum comm{b.communication.items};
  if (s.attn_tp > 1 || (s.moe_tp > 1 && g == t))
    comm.add("all-reduce staging", 2 * t * D * 4, "2 (in, out) x t x hidden x 4 B (fp32, symmetric memory)");
  if (s.moe_ep == 1 && g > t)
    comm.add("MoE-TP all-gather / reduce-scatter", 2 * g * D * 2, "2 x g x hidden x 2 B");
  if (s.moe_ep > 1) {
    const int64_t pairs = g * c.experts_per_token / s.moe_ep;
    comm.add("EP dispatch", pairs * act_row(D, p.weights), "p x hidden (fp8 + scales, or bf16)");
    comm.add("EP combine", pairs * D * 2, "p x hidden x 2 B");
  }
  if (s.pp > 1) comm.add("pipeline send/recv", 2 * t * hcD * 2, "2 x t x hc_mult*hidden x 2 B");
  if (s.attn_cp > 1)
    comm.add("CP kv all-gather", t * s.attn_cp * c.head_dim * 2, "t x cp x head_dim x 2 B");
  b.communication.bytes = comm.total;
  return b;
}

}  // namespace moeserve::planner
