#include "planner/model_tensors.h"

#include <fmt/format.h>

namespace moeserve::planner {

const char* weight_kind_name(WeightKind kind) {
  switch (kind) {
    case WeightKind::Attention: return "attention";
    case WeightKind::Compressor: return "compressor";
    case WeightKind::Indexer: return "indexer";
    case WeightKind::MHC: return "mhc";
    case WeightKind::Norms: return "norms";
    case WeightKind::Router: return "router";
    case WeightKind::SharedExpert: return "shared_expert";
    case WeightKind::RoutedExperts: return "routed_experts";
    case WeightKind::Embedding: return "embedding";
    case WeightKind::Head: return "lm_head";
    case WeightKind::MTP: return "mtp";
  }
  return "?";
}

namespace {

struct Builder {
  std::vector<TensorSpec>& out;
  std::string prefix;

  void add(const std::string& name, WeightKind kind, Storage storage, Shard shard, int64_t rows, int64_t cols = 1,
           int64_t count = 1) {
    out.push_back(TensorSpec{prefix + name, kind, storage, shard, rows, cols, count});
  }
};

// One decoder block: attention (with its compressor and indexer by layer kind), mHC sites, norms and MoE.
void block_tensors(const io::ModelConfig& c, const io::LayerSpec& spec, Builder& b) {
  const int64_t D = c.hidden_size, d = c.head_dim;
  using K = WeightKind;
  using S = Storage;
  using H = Shard;
  // Attention.
  b.add("attn.wq_a.weight", K::Attention, S::DenseLinear, H::Replicated, c.q_lora_rank, D);
  b.add("attn.q_norm.weight", K::Attention, S::BF16, H::Replicated, c.q_lora_rank);
  b.add("attn.wq_b.weight", K::Attention, S::DenseLinear, H::HeadRows, c.num_heads * d, c.q_lora_rank);
  b.add("attn.wkv.weight", K::Attention, S::DenseLinear, H::Replicated, d, D);
  b.add("attn.kv_norm.weight", K::Attention, S::BF16, H::Replicated, d);
  b.add("attn.wo_a.weight", K::Attention, S::BF16, H::HeadRows, c.o_groups * c.o_lora_rank,
        c.num_heads * d / c.o_groups);
  b.add("attn.wo_b.weight", K::Attention, S::DenseLinear, H::HeadCols, D, c.o_groups * c.o_lora_rank);
  b.add("attn.attn_sink", K::Attention, S::F32, H::HeadRows,
        c.num_heads);
  // Compressor (CSA: overlapping windows, 2x width; HCA: plain).
  if (spec.attention != io::AttentionKind::Sliding) {
    const int64_t r = spec.compress_ratio, coff = spec.attention == io::AttentionKind::CSA ? 2 : 1;
    b.add("attn.compressor.wkv.weight", K::Compressor, S::BF16, H::Replicated, coff * d, D);
    b.add("attn.compressor.wgate.weight", K::Compressor, S::BF16, H::Replicated, coff * d, D);
    b.add("attn.compressor.ape", K::Compressor, S::F32, H::Replicated, r, coff * d);
    b.add("attn.compressor.norm.weight", K::Compressor, S::BF16, H::Replicated, d);
  }
  if (spec.attention == io::AttentionKind::CSA) {
    const int64_t r = spec.compress_ratio, di = c.index_head_dim;
    b.add("attn.indexer.wq_b.weight", K::Indexer, S::DenseLinear, H::HeadRows, c.index_n_heads * di, c.q_lora_rank);
    b.add("attn.indexer.weights_proj.weight", K::Indexer, S::BF16, H::HeadRows, c.index_n_heads, D);
    b.add("attn.indexer.compressor.wkv.weight", K::Indexer, S::BF16, H::Replicated, 2 * di, D);
    b.add("attn.indexer.compressor.wgate.weight", K::Indexer, S::BF16, H::Replicated, 2 * di, D);
    b.add("attn.indexer.compressor.ape", K::Indexer, S::F32, H::Replicated, r, 2 * di);
    b.add("attn.indexer.compressor.norm.weight", K::Indexer, S::BF16, H::Replicated, di);
  }
  // mHC sites and norms.
  for (const char* site : {"attn", "ffn"}) {
    b.add(fmt::format("hc_{}_fn", site), K::MHC, S::F32, H::Replicated, c.hc_mix(), c.hc_dim());
    b.add(fmt::format("hc_{}_base", site), K::MHC, S::F32, H::Replicated, c.hc_mix());
    b.add(fmt::format("hc_{}_scale", site), K::MHC, S::F32, H::Replicated, 3);
  }
  b.add("attn_norm.weight", K::Norms, S::BF16, H::Replicated, D);
  b.add("ffn_norm.weight", K::Norms, S::BF16, H::Replicated, D);
  // MoE: router, routed experts, shared expert.
  const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size;
  b.add("ffn.gate.weight", K::Router, S::BF16, H::Replicated, E, D);
  if (spec.hash_moe)
    b.add("ffn.gate.tid2eid", K::Router, S::I32, H::Replicated, c.vocab_size, c.experts_per_token);
  else
    b.add("ffn.gate.bias", K::Router, S::F32, H::Replicated, E);
  b.add("ffn.experts.{e}.w1.weight", K::RoutedExperts, S::ExpertLinear, H::ExpertRows, I, D, E);
  b.add("ffn.experts.{e}.w3.weight", K::RoutedExperts, S::ExpertLinear, H::ExpertRows, I, D, E);
  b.add("ffn.experts.{e}.w2.weight", K::RoutedExperts, S::ExpertLinear, H::ExpertCols, D, I, E);
  b.add("ffn.shared_experts.w1.weight", K::SharedExpert, S::DenseLinear, H::SharedRows, I, D);
  b.add("ffn.shared_experts.w3.weight", K::SharedExpert, S::DenseLinear, H::SharedRows, I, D);
  b.add("ffn.shared_experts.w2.weight", K::SharedExpert, S::DenseLinear, H::SharedCols, D, I);
}

}  // namespace

std::vector<TensorSpec> layer_tensors(const io::ModelConfig& c, int64_t layer) {
  std::vector<TensorSpec> out;
  Builder b{out, fmt::format("layers.{}.", layer)};
  block_tensors(c, c.layers.at(size_t(layer)), b);
  return out;
}

std::vector<TensorSpec> embedding_tensors(const io::ModelConfig& c) {
  return {TensorSpec{"embed.weight", WeightKind::Embedding, Storage::BF16, Shard::VocabRows, c.vocab_size,
                     c.hidden_size, 1}};
}

std::vector<TensorSpec> head_tensors(const io::ModelConfig& c) {
  std::vector<TensorSpec> out;
  Builder b{out, ""};
  b.add("norm.weight", WeightKind::Head, Storage::BF16, Shard::Replicated, c.hidden_size);
  b.add("hc_head_fn", WeightKind::Head, Storage::F32, Shard::Replicated, c.hc_mult, c.hc_dim());
  b.add("hc_head_base", WeightKind::Head, Storage::F32, Shard::Replicated, c.hc_mult);
  b.add("hc_head_scale", WeightKind::Head, Storage::F32, Shard::Replicated, 1);
  b.add("head.weight", WeightKind::Head, Storage::BF16, Shard::VocabRows, c.vocab_size, c.hidden_size);
  return out;
}

std::vector<TensorSpec> mtp_tensors(const io::ModelConfig& c, int64_t index) {
  std::vector<TensorSpec> out;
  Builder b{out, fmt::format("mtp.{}.", index)};
  const int64_t D = c.hidden_size;
  b.add("e_proj.weight", WeightKind::MTP, Storage::DenseLinear, Shard::Replicated, D, D);
  b.add("h_proj.weight", WeightKind::MTP, Storage::DenseLinear, Shard::Replicated, D, D);
  b.add("enorm.weight", WeightKind::MTP, Storage::BF16, Shard::Replicated, D);
  b.add("hnorm.weight", WeightKind::MTP, Storage::BF16, Shard::Replicated, D);
  b.add("norm.weight", WeightKind::MTP, Storage::BF16, Shard::Replicated, D);
  b.add("hc_head_fn", WeightKind::MTP, Storage::F32, Shard::Replicated, c.hc_mult, c.hc_dim());
  b.add("hc_head_base", WeightKind::MTP, Storage::F32, Shard::Replicated, c.hc_mult);
  b.add("hc_head_scale", WeightKind::MTP, Storage::F32, Shard::Replicated, 1);
  io::LayerSpec block;  // window-only attention, bias-routed MoE
  block.attention = io::AttentionKind::Sliding;
  block.compress_ratio = 0;
  block.hash_moe = false;
  size_t first = out.size();
  block_tensors(c, block, b);
  for (size_t i = first; i < out.size(); ++i) out[i].kind = WeightKind::MTP;
  return out;
}

ParameterCounts count_parameters(const io::ModelConfig& c) {
  ParameterCounts p;
  auto add = [&](const std::vector<TensorSpec>& tensors) {
    for (const auto& t : tensors) {
      p.by_kind[int(t.kind)] += t.params();
      if (t.kind != WeightKind::MTP) {
        p.total += t.params();
        p.active += t.kind == WeightKind::RoutedExperts ? t.params() / t.count * c.experts_per_token : t.params();
      } else {
        p.mtp += t.params();
      }
    }
  };
  add(embedding_tensors(c));
  for (int64_t i = 0; i < c.num_layers; ++i) add(layer_tensors(c, i));
  add(head_tensors(c));
  for (int64_t i = 0; i < c.num_mtp_layers; ++i) add(mtp_tensors(c, i));
  return p;
}

}  // namespace moeserve::planner
