#include "planner/layout.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace moeserve::planner {

std::vector<int64_t> balanced_stage_layers(int64_t num_layers, int64_t pp) {
  std::vector<int64_t> counts(size_t(pp), num_layers / pp);
  for (int64_t i = 0; i < num_layers % pp; ++i) counts[size_t(i)] += 1;
  return counts;
}

namespace {

// A dimension split across `parts` ranks must divide evenly; a split dimension of a block-quantized weight
// must also keep whole quantization blocks on each rank.
int64_t split(int64_t total, int64_t parts, const char* what, const char* group, int64_t block = 1,
              const char* block_what = "") {
  check(total % parts == 0, "layout: {} = {} is not divisible by {} = {}", what, total, group, parts);
  int64_t local = total / parts;
  if (parts > 1 && block > 1)
    check(local % block == 0, "layout: {} = {} split over {} = {} leaves {} per rank, not a multiple of the {}-wide {}",
          what, total, group, parts, local, block, block_what);
  return local;
}

}  // namespace

Layout resolve_layout(const io::ModelConfig& c, const ParallelSpec& spec, WeightFormat weights, bool mtp) {
  Layout l;
  l.spec = spec;
  const bool fp8_dense = weights != WeightFormat::BF16;
  const int64_t dense_block = fp8_dense ? 128 : 1;
  const int64_t expert_block = weights == WeightFormat::FP8 ? 128 : weights == WeightFormat::MXFP4_FP8 ? 32 : 1;

  l.heads_per_rank = split(c.num_heads, spec.attn_tp, "num_attention_heads", "attention tp");
  l.o_groups_per_rank = split(c.o_groups, spec.attn_tp, "o_groups", "attention tp");
  l.index_heads_per_rank = split(c.index_n_heads, spec.attn_tp, "index_n_heads", "attention tp");
  // Block alignment of the head-split FP8 linears (wq_b and indexer wq_b rows, wo_b columns).
  split(c.num_heads * c.head_dim, spec.attn_tp, "wq_b rows (num_attention_heads x head_dim)", "attention tp",
        dense_block, "FP8 scale block");
  split(c.o_groups * c.o_lora_rank, spec.attn_tp, "wo_b columns (o_groups x o_lora_rank)", "attention tp",
        dense_block, "FP8 scale block");
  split(c.index_n_heads * c.index_head_dim, spec.attn_tp, "indexer wq_b rows (index_n_heads x index_head_dim)",
        "attention tp", dense_block, "FP8 scale block");

  int64_t experts = c.n_routed_experts + spec.redundant_experts;
  check(experts % spec.moe_ep == 0,
        "layout: n_routed_experts + redundant experts = {} + {} = {} is not divisible by moe ep = {}",
        c.n_routed_experts, spec.redundant_experts, experts, spec.moe_ep);
  check(spec.redundant_experts <= c.n_routed_experts,
        "layout: redundant_experts = {} exceeds n_routed_experts = {}", spec.redundant_experts, c.n_routed_experts);
  l.experts_per_rank = experts / spec.moe_ep;
  l.moe_intermediate_per_rank = split(c.moe_intermediate_size, spec.moe_tp, "moe_intermediate_size", "moe tp",
                                      std::max(dense_block, expert_block), "quantization block");
  l.vocab_per_rank = split(c.vocab_size, spec.vocab_parallel, "vocab_size", "vocab_parallel");

  if (mtp)
    check(c.num_mtp_layers >= 1,
          "layout: speculative decoding with MTP needs an MTP layer, but {} has num_nextn_predict_layers = {}",
          c.source, c.num_mtp_layers);

  std::vector<int64_t> counts = spec.pp_layers.empty() ? std::vector<int64_t>{} : spec.pp_layers;
  if (counts.empty()) {
    check(spec.pp <= c.num_layers, "layout: pp = {} stages exceed num_hidden_layers = {}", spec.pp, c.num_layers);
    counts = balanced_stage_layers(c.num_layers, spec.pp);
  }
  check(int64_t(counts.size()) == spec.pp, "layout: pp_layers lists {} stages, pp = {}", counts.size(), spec.pp);
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  check(total == c.num_layers, "layout: pp_layers sum to {} layers, the model has num_hidden_layers = {}", total,
        c.num_layers);
  int64_t first = 0;
  for (int64_t s = 0; s < spec.pp; ++s) {
    StageMap m;
    m.stage = s;
    m.first_layer = first;
    m.num_layers = counts[size_t(s)];
    m.has_embedding = s == 0;
    m.has_head = s == spec.pp - 1;
    m.has_mtp = mtp && m.has_head;
    first += m.num_layers;
    l.stages.push_back(m);
  }
  return l;
}

}  // namespace moeserve::planner
