#pragma once
// One DeepSeek-V4 decoder block over a batch of sequence chunks (continuous batching): tokens of all
// sequences are concatenated for the token-parallel work (linears, norms, mHC, MoE); attention, the
// compressors and the indexer run per sequence against its KV state.
#include <cstdint>
#include <span>
#include <vector>

#include "cache/kv_cache.h"
#include "io/model_config.h"
#include "kernels/cpu/rope.h"
#include "model/numerics.h"
#include "model/weights.h"

namespace moeserve::model {

struct RoutingHistogram;  // model/routing_histogram.h

struct Segment {
  cache::SequenceKv* seq = nullptr;
  int64_t begin = 0;      // first row in the batch
  int64_t count = 0;      // tokens of this sequence in the batch
  int64_t start_pos = 0;  // position of its first token (= committed length)
};

// The tokens of one step: each sequence's chunk as a segment, and every token's position and id.
struct BatchLayout {
  std::vector<Segment> segments;
  std::vector<int64_t> positions;
  std::vector<int32_t> ids;
  int64_t tokens = 0;
  // Appends `chunk` of `seq` at positions start_pos, start_pos + 1, ...; ids must lie in [0, vocab).
  void add(cache::SequenceKv* seq, int64_t start_pos, std::span<const int32_t> chunk, int64_t vocab);
};

struct BlockContext {
  const io::ModelConfig* config = nullptr;
  const kernels::cpu::RopeTable* rope_main = nullptr;
  const kernels::cpu::RopeTable* rope_compress = nullptr;
  Numerics numerics;
  cache::KvCache* cache = nullptr;
  const std::vector<Segment>* segments = nullptr;
  const std::vector<int64_t>* positions = nullptr;  // [T]
  const std::vector<int32_t>* token_ids = nullptr;  // [T], for hash routing
  int64_t tokens = 0;
  RoutingHistogram* routing = nullptr;  // records each MoE layer's chosen experts when set
};

BlockContext block_context(const io::ModelConfig& config, const kernels::cpu::RopeTable& rope_main,
                           const kernels::cpu::RopeTable& rope_compress, const Numerics& numerics,
                           cache::KvCache& cache, const BatchLayout& batch);

// h [T, hc, D] updated in place by the block at cache layer index `layer`.
void run_block(const BlockContext& ctx, int64_t layer, const io::LayerSpec& spec, const BlockWeights& w, float* h);

// Attention sub-block: x [T, D] (normed block input) -> out [T, D].
void attention_forward(const BlockContext& ctx, int64_t layer, const io::LayerSpec& spec, const AttentionWeights& w,
                       const float* x, float* out);
// MoE sub-block of layer `layer`: x [T, D] -> out [T, D].
void moe_forward(const BlockContext& ctx, int64_t layer, const io::LayerSpec& spec, const MoeWeights& w, const float* x,
                 float* out);

}  // namespace moeserve::model
