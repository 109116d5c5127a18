#pragma once
// What the KV state of a DeepSeek-V4 model looks like, derived from the config (one source for the cache,
// the planner and the kernels):
//  - per request slot: a sliding-window ring per layer (window + speculative headroom entries), and per
//    compressed layer a ring of raw compressor rows (kv and gate scores of the last R tokens, indexed by
//    position mod R) for the main compressor and, in CSA layers, the indexer's compressor;
//  - per sequence, in 256-token pages: compressed entries (one per `ratio` tokens) and indexer keys.
// Every piece is a function of the committed length alone, so rejected speculative tokens leave no trace:
// the next real tokens overwrite their rows, and entries past the committed length are never read.
#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace moeserve::cache {

struct LayerKvLayout {
  io::AttentionKind kind = io::AttentionKind::Sliding;
  int64_t ratio = 0;            // tokens per compressed entry (0: window-only)
  int64_t entries_per_page = 0;  // page_tokens / ratio
  int64_t compressed_layer = -1;  // index among compressed layers (pools), or -1
  int64_t indexer_layer = -1;     // index among CSA layers (indexer pools), or -1
  int64_t state_rows = 0;         // compressor ring rows R (0: none)
  int64_t state_width = 0;        // coff * head_dim
  int64_t index_state_width = 0;  // 2 * index_head_dim (CSA only)
};

struct KvLayout {
  int64_t page_tokens = 256;
  int64_t head_dim = 0, index_head_dim = 0;
  int64_t window = 0;           // sliding window W
  int64_t window_capacity = 0;  // ring entries per layer: W + speculative headroom
  int64_t speculative_tokens = 0;
  std::vector<LayerKvLayout> layers;  // main layers, then MTP layers (window-only)
  int64_t num_compressed_layers = 0, num_indexer_layers = 0;

  // speculative_tokens: the most tokens a verify step may add beyond the committed length (0: none).
  static KvLayout from_config(const io::ModelConfig& config, int64_t mtp_layers, int64_t speculative_tokens,
                              int64_t page_tokens = 256);
};

}  // namespace moeserve::cache
