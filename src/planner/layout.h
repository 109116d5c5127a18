#pragma once
// A profile's parallel layout resolved against one model: which main layers each pipeline stage holds,
// and how many heads, o-groups, indexer heads, experts, intermediate columns and vocabulary rows one rank
// holds. Every split is checked here; an error names the constraint and the numbers.
#include <cstdint>
#include <vector>

#include "io/model_config.h"
#include "planner/formats.h"
#include "planner/profile.h"

namespace moeserve::planner {

struct StageMap {
  int64_t stage = 0;
  int64_t first_layer = 0, num_layers = 0;  // main layers [first_layer, first_layer + num_layers)
  bool has_embedding = false;  // stage 0
  bool has_head = false;       // the last stage: final norm, hc_head, lm_head
  bool has_mtp = false;        // the last stage, when speculative decoding (MTP) is on
};

struct Layout {
  ParallelSpec spec;
  std::vector<StageMap> stages;
  int64_t heads_per_rank = 0;           // num_attention_heads / attention tp
  int64_t o_groups_per_rank = 0;        // o_groups / attention tp
  int64_t index_heads_per_rank = 0;     // index_n_heads / attention tp
  int64_t experts_per_rank = 0;         // (n_routed_experts + redundant) / moe ep
  int64_t moe_intermediate_per_rank = 0;  // moe_intermediate_size / moe tp (routed and shared experts)
  int64_t vocab_per_rank = 0;           // vocab_size / vocab_parallel
};

// `mtp`: speculative decoding with the model's MTP layer is on (the config must have one).
Layout resolve_layout(const io::ModelConfig& config, const ParallelSpec& spec, WeightFormat weights, bool mtp);

// The main layers of each stage when the profile gives no pp_layers: as even as possible, earlier stages
// take the remainder (the last stage also holds the head and the MTP layer).
std::vector<int64_t> balanced_stage_layers(int64_t num_layers, int64_t pp);

}  // namespace moeserve::planner
