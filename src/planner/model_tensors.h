#pragma once
// Every weight tensor of a DeepSeek-V4 model, from its config: official checkpoint names, full shapes,
// what kind of weight it is (for the memory breakdown), how it is stored for each weight format, and how a
// parallel layout shards it. Routed experts are one entry per projection with `count` = n_routed_experts.
#include <cstdint>
#include <string>
#include <vector>

#include "io/model_config.h"

namespace moeserve::planner {

enum class WeightKind {
  Attention,      // wq_a, wq_b, wkv, wo_a, wo_b, attn_sink, q_norm, kv_norm
  Compressor,     // the main KV compressor of a CSA/HCA layer (wkv, wgate, ape, norm)
  Indexer,        // the CSA lightning indexer (wq_b, weights_proj, its compressor)
  MHC,            // hc_{attn,ffn}_{fn,base,scale}
  Norms,          // attn_norm, ffn_norm
  Router,         // gate.weight, gate.bias, tid2eid
  SharedExpert,
  RoutedExperts,
  Embedding,
  Head,           // final norm, hc_head, lm_head
  MTP,            // every tensor of the MTP layer (mtp.0.*)
};
constexpr int kWeightKinds = 11;
const char* weight_kind_name(WeightKind kind);

enum class Storage {
  DenseLinear,   // BF16 under bf16; FP8 e4m3 + e8m0 per 128x128 block under fp8 and mxfp4-fp8
  ExpertLinear,  // routed experts: BF16 / FP8 as DenseLinear / MXFP4 (e2m1 + e8m0 per 32) under mxfp4-fp8
  BF16,          // always BF16: compressor and indexer wkv/wgate, weights_proj, router gate, norms, embed,
                 // head, and wo_a (FP8 on disk, dequantized to BF16 at load for the grouped einsum)
  F32,           // always fp32: mHC parameters, ape, attn_sink, router bias
  I32,           // tid2eid (I64 on disk; the engine keeps it as int32 on the device)
};

enum class Shard {
  Replicated,
  HeadRows,    // rows split by attention tp (wq_b, wo_a groups, attn_sink, indexer wq_b / weights_proj)
  HeadCols,    // columns split by attention tp (wo_b)
  ExpertRows,  // experts split by moe ep, rows by moe tp (w1, w3)
  ExpertCols,  // experts split by moe ep, columns by moe tp (w2)
  SharedRows,  // rows split by moe tp (shared w1, w3)
  SharedCols,  // columns split by moe tp (shared w2)
  VocabRows,   // rows split by vocab_parallel (embed, head)
};

struct TensorSpec {
  std::string name;
  WeightKind kind = WeightKind::Attention;
  Storage storage = Storage::BF16;
  Shard shard = Shard::Replicated;
  int64_t rows = 0, cols = 1;  // [rows, cols]; vectors have cols = 1
  int64_t count = 1;           // routed experts: n_routed_experts copies of this shape
  int64_t params() const { return rows * cols * count; }
};

// Tensors of main layer `layer` (names "layers.<layer>.*").
std::vector<TensorSpec> layer_tensors(const io::ModelConfig& config, int64_t layer);
// embed.weight.
std::vector<TensorSpec> embedding_tensors(const io::ModelConfig& config);
// norm.weight, hc_head_{fn,base,scale}, head.weight.
std::vector<TensorSpec> head_tensors(const io::ModelConfig& config);
// mtp.<index>.*: e_proj, h_proj, enorm, hnorm, norm, hc_head_*, and a window-only block with a bias-routed
// MoE. Every tensor has kind MTP.
std::vector<TensorSpec> mtp_tensors(const io::ModelConfig& config, int64_t index = 0);

// Parameter counts of the whole model (no sharding, no redundant experts), for the sizes in deepseek-v4.md.
struct ParameterCounts {
  int64_t by_kind[kWeightKinds] = {};
  int64_t total = 0;       // main model (embedding, layers, head)
  int64_t mtp = 0;         // MTP layers
  int64_t active = 0;      // per token: everything except the non-selected routed experts (main model)
};
ParameterCounts count_parameters(const io::ModelConfig& config);

}  // namespace moeserve::planner
