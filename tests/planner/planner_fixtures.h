#pragma once
// Shared helpers for the planner tests: the tiny fixture configs and a profile built in code.
#include <string>

#include <nlohmann/json.hpp>

#include "io/model_config.h"
#include "planner/profile.h"
#include "test_paths.h"

namespace moeserve::planner::testing {

// tiny_hf: vocab 320, hidden 64, layers [window, CSA 4, HCA 16, CSA 4], heads 4 x 64 (rope 16), q_lora 32,
// o_groups 2 x o_lora 16, 8 experts x inter 32 (top-2), index 4 heads x 32, window 8, hc 4, no MTP.
inline io::ModelConfig tiny() {
  return io::load_model_config(moeserve::testing::fixture("models/tiny_hf/config.json"));
}

// A one-rank profile with the given overrides merged into its JSON.
inline Profile profile_with(const nlohmann::json& patch = nlohmann::json::object()) {
  nlohmann::json j = {{"name", "test"},
                      {"role", "mixed"},
                      {"gpu", "cpu"},
                      {"parallel",
                       {{"pp", 1},
                        {"attention", {{"tp", 1}, {"dp", 1}, {"cp", 1}}},
                        {"moe", {{"tp", 1}, {"ep", 1}}},
                        {"vocab_parallel", 1}}},
                      {"weights", "bf16"},
                      {"kv_format", "f32"},
                      {"c128", "offline"},
                      {"speculative", {{"method", "none"}}},
                      {"cuda_graph_batch_sizes", nlohmann::json::array()},
                      {"max_running_requests", 4},
                      {"chunked_prefill_size", 512},
                      {"mem_fraction", 0.5}};
  j.merge_patch(patch);
  return parse_profile(j, "test profile");
}

}  // namespace moeserve::planner::testing
