#pragma once
// KV pools and fixed per-request state of one pipeline stage (the layers one rank holds).
//
// Paged pools: 256-token pages shared by all layers of a kind; one page id addresses the same 256-token
// span in every pool, so every pool has the same page count. Per page and per layer:
//   CSA (ratio 4) layer:  256/4 KV entries + 256/4 indexer keys
//   HCA (ratio r) layer:  256/r KV entries
// Sliding-window (ratio 0) layers have no paged entries: every attention layer's window is a ring per
// request slot (fixed state, below).
//
// Entry formats (head_dim d, rope dims p, nope n = d - p, index_head_dim di):
//   KV entry   fp8: n + 2p + align8(ceil(n/64))  (584 B for d=512, p=64)   bf16: 2d   f32: 4d
//   index key  fp8: di + 4 ceil(di/128)          (132 B for di=128)        bf16: 2di  f32: 4di
//
// Fixed state per request slot (fp32 compressor state; w = sliding_window; s = speculative headroom, the
// tokens a verify writes past the committed length = draft steps + 1, 0 when speculation is off; the rings
// are position-indexed, so this headroom is all a rejected draft needs, see src/cache/kv_layout.h):
//   sliding-window ring   w + s entries per layer, all main layers of the stage (+ the MTP layer when spec)
//   CSA compressor        coff*r + s rows x (kv + score) x coff*d floats       coff = 2
//   CSA index compressor  coff*r + s rows x (kv + score) x coff*di floats
//   HCA state, offline    r + s rows x (kv + score) x d floats
//   HCA state, online     (running max, running sum, kv accumulator) x d floats (x2 under spec: a snapshot)
//   page table            ceil(max tokens per request on this rank / 256) int32 page ids
#include <cstdint>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "planner/formats.h"
#include "planner/layout.h"

namespace moeserve::planner {

constexpr int64_t kPageTokens = 256;

int64_t kv_entry_bytes(const io::ModelConfig& config, KvFormat format);
int64_t indexer_key_bytes(const io::ModelConfig& config, KvFormat format);

struct PoolPlan {
  std::string name;             // "csa_kv", "csa_index", "hca_kv" (or "hca<r>_kv" when HCA ratios differ)
  int64_t compress_ratio = 0;   // tokens per entry
  int64_t entry_bytes = 0;
  int64_t entries_per_page = 0; // per layer: kPageTokens / compress_ratio
  std::vector<int64_t> layers;  // main-layer ids whose entries live in this pool
  int64_t pages = 0;            // set by plan_capacity
  int64_t page_bytes() const { return entries_per_page * entry_bytes * int64_t(layers.size()); }
  int64_t bytes() const { return page_bytes() * pages; }
};

// The pools of one stage, in a fixed order: csa_kv, csa_index, then HCA pools by ratio.
std::vector<PoolPlan> kv_pools(const io::ModelConfig& config, const StageMap& stage, KvFormat format);

struct StateItem {
  std::string name;        // "swa_ring", "csa_compressor", "csa_index_compressor", "hca_state", "page_table"
  int64_t layers = 0;
  int64_t rows = 0;        // per layer
  int64_t row_bytes = 0;
  int64_t bytes() const { return layers * rows * row_bytes; }
};

struct SlotState {
  std::vector<StateItem> items;
  int64_t bytes_per_slot = 0;
};

// `speculative_tokens`: the verify headroom s (0: speculation off; the MTP layer's window ring is on the stage
// that holds the MTP layer). `max_tokens_per_request`: the longest request one rank holds tokens for.
SlotState slot_state(const io::ModelConfig& config, const StageMap& stage, KvFormat format, C128Mode c128,
                     int64_t speculative_tokens, int64_t max_tokens_per_request);

}  // namespace moeserve::planner
