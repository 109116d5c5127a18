#pragma once
// Per-layer counts of the experts a router chose over a run (`moeserve generate --routing-histogram FILE`, the
// reference engine): the routing statistics the W4A8 tuner draws per-expert row counts from
// (`bench_gpu_moe_w4a8 --routing FILE`) instead of a synthetic distribution.
//
// File (JSON): {"model": text, "experts_per_token": K, "layers": [{"layer": l, "hash": bool, "tokens": n,
//               "counts": [E integers]}, ...]}; counts of a layer sum to tokens * K.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moeserve::model {

struct RoutingHistogram {
  struct Layer {
    int64_t layer = 0;
    bool hash = false;  // hash-routed (the token id picks the experts): not a router's choice
    int64_t tokens = 0;
    std::vector<int64_t> counts;  // [experts]
  };
  std::string model;
  int64_t experts_per_token = 0;
  std::vector<Layer> layers;

  // Adds `tokens` rows of `k` chosen experts (ids in [0, experts)) of one layer.
  void add(int64_t layer, bool hash, int64_t experts, const int32_t* chosen, int64_t tokens, int64_t k);

  nlohmann::json to_json() const;
  // Validates the layout above; errors name the field and what was expected.
  static RoutingHistogram from_json(const nlohmann::json& j);
  void save(const std::string& path) const;
  static RoutingHistogram load(const std::string& path);
};

// The routers' load shares for E experts, largest first: each scored (not hash) layer's counts sorted and
// normalized, averaged over those layers, then resampled to E experts through the cumulative share curve, so that
// the shares sum to 1, stay sorted, and equal the recorded ones when E is the recorded expert count.
std::vector<double> expert_load_shares(const RoutingHistogram& h, int64_t E);

}  // namespace moeserve::model
