#pragma once
// Runtime buffers of one rank, estimated from the model's shapes and the profile's token budgets:
//  - activations: the peak live temporaries of one forward over the chunked-prefill budget (eager);
//  - CUDA-graph pool: the same peak for the largest captured decode batch (the graphs share one pool);
//  - communication: symmetric all-reduce / all-gather / reduce-scatter staging, EP dispatch and combine,
//    pipeline send/receive and the CP all-gather, sized for the larger of the two token budgets.
// Every item carries its formula so the report and docs can show it. Tokens per rank:
//   t  = chunked_prefill_size / attention cp          (prefill)  or  max graph batch x tokens per request
//   g  = t x attention dp x attention cp               (tokens the MoE of one stage group sees)
//   p  = g x experts_per_token / moe ep                (token-expert pairs per rank, balanced routing)
#include <cstdint>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "planner/formats.h"
#include "planner/layout.h"
#include "planner/profile.h"

namespace moeserve::planner {

// Width of one tile of indexer scores (compressed entries scored at a time per query, fp32).
constexpr int64_t kIndexScoreTile = 4096;

struct BufferItem {
  std::string name;
  int64_t bytes = 0;
  std::string formula;
};

struct BufferGroup {
  std::vector<BufferItem> items;
  int64_t bytes = 0;  // the group's total (for activations: the peak, see peak_of)
  std::string peak_of;  // activations: which sub-block sets the peak ("attention", "moe", "head")
};

struct RuntimeBuffers {
  int64_t prefill_tokens = 0;  // t for prefill
  int64_t decode_tokens = 0;   // t for the largest CUDA graph (0 when no graphs)
  BufferGroup activations;     // peak for prefill
  BufferGroup cuda_graphs;     // peak for decode, captured
  BufferGroup communication;
  int64_t total() const { return activations.bytes + cuda_graphs.bytes + communication.bytes; }
};

// The live temporaries of one forward over `tokens` tokens per rank with `logits_rows` rows of logits.
BufferGroup forward_activations(const io::ModelConfig& config, const Layout& layout, const StageMap& stage,
                                WeightFormat weights, int64_t tokens, int64_t logits_rows);

RuntimeBuffers runtime_buffers(const io::ModelConfig& config, const Layout& layout, const StageMap& stage,
                               const Profile& profile);

}  // namespace moeserve::planner
