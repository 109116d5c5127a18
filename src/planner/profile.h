#pragma once
// A serving profile: one deployment recipe as data (profiles/<name>.json). It names the parallel layout,
// the weight and KV formats, the C128 mode, speculative decoding, CUDA-graph batch sizes and the scheduler
// limits. Model-independent checks happen here; checks against a model (does tp divide the heads?) happen
// in layout.h when a plan is made.
//
// Layout vocabulary (per pipeline stage; every stage has the same rank count):
//   attention: tp (heads split), dp (independent replicas, each with its own requests), cp (context
//              parallel: a sequence's tokens split across ranks, weights replicated)
//   moe:       tp (each expert's intermediate dimension split), ep (experts sharded), plus optional
//              redundant experts (extra replicas of hot experts, EPLB)
//   attention.tp * attention.dp * attention.cp == moe.tp * moe.ep == ranks per stage; world = pp * that.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/formats.h"

namespace moeserve::planner {

enum class SpecMethod { None, MTP };

struct SpeculativeSpec {
  SpecMethod method = SpecMethod::None;
  int64_t num_steps = 0;         // draft steps per round
  int64_t topk = 1;              // branching per step
  int64_t num_draft_tokens = 0;  // tokens the target verifies per request per round (root included)
  bool enabled() const { return method != SpecMethod::None; }
  // Tokens one decoding request puts through the target per step.
  int64_t tokens_per_request() const { return enabled() ? num_draft_tokens : 1; }
};

struct ParallelSpec {
  int64_t pp = 1;
  std::vector<int64_t> pp_layers;  // main layers per stage, in order; empty = split as evenly as possible
  int64_t attn_tp = 1, attn_dp = 1, attn_cp = 1;
  int64_t moe_tp = 1, moe_ep = 1;
  int64_t redundant_experts = 0;   // extra expert replicas over the whole EP group
  int64_t vocab_parallel = 1;      // ranks the embedding and lm_head rows are split over (1 = replicated)
  int64_t ranks_per_stage() const { return attn_tp * attn_dp * attn_cp; }
  int64_t world_size() const { return pp * ranks_per_stage(); }
};

struct Profile {
  std::string name;         // lower-case, the file's stem
  std::string description;
  std::string role;         // decode | prefill | mixed
  std::string gpu;          // the GPU preset the profile is written for (the plan's default --gpu)
  ParallelSpec parallel;
  WeightFormat weights = WeightFormat::MXFP4_FP8;
  KvFormat kv_format = KvFormat::FP8;
  C128Mode c128 = C128Mode::Online;
  SpeculativeSpec speculative;
  std::vector<int64_t> cuda_graph_batch_sizes;  // decode batch sizes captured as CUDA graphs (requests)
  int64_t max_running_requests = 0;  // request slots per attention-DP rank
  int64_t chunked_prefill_size = 0;  // prefill tokens per forward per attention-DP rank (split over cp)
  double mem_fraction = 0.9;         // fraction of device memory the engine may use
  std::string source;                // file it came from
};

Profile parse_profile(const nlohmann::json& json, const std::string& source);
// `name_or_path`: a profile name (lower-case, profiles/<name>.json) or a path to a profile JSON file.
Profile load_profile(const std::string& name_or_path);
std::vector<std::string> profile_names();

}  // namespace moeserve::planner
