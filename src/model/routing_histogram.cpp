#include "model/routing_histogram.h"

#include <algorithm>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "io/json_file.h"

namespace moeserve::model {

void RoutingHistogram::add(int64_t layer, bool hash, int64_t experts, const int32_t* chosen, int64_t tokens,
                           int64_t k) {
  check(experts > 0 && k > 0 && tokens >= 0, "routing histogram: {} experts, {} per token", experts, k);
  check(experts_per_token == 0 || experts_per_token == k, "routing histogram: {} experts per token, earlier {}", k,
        experts_per_token);
  experts_per_token = k;
  auto it = std::find_if(layers.begin(), layers.end(), [&](const Layer& l) { return l.layer == layer; });
  if (it == layers.end()) {
    layers.push_back(Layer{layer, hash, 0, std::vector<int64_t>(size_t(experts), 0)});
    it = layers.end() - 1;
  }
  check(int64_t(it->counts.size()) == experts, "routing histogram: layer {} has {} experts, earlier {}", layer, experts,
        it->counts.size());
  for (int64_t i = 0; i < tokens * k; ++i)  // every id checked before any is counted
    check(chosen[i] >= 0 && chosen[i] < experts, "routing histogram: expert id {} outside [0, {})", chosen[i], experts);
  for (int64_t i = 0; i < tokens * k; ++i) ++it->counts[size_t(chosen[i])];
  it->tokens += tokens;
}

nlohmann::json RoutingHistogram::to_json() const {
  nlohmann::json j;
  j["model"] = model;
  j["experts_per_token"] = experts_per_token;
  j["layers"] = nlohmann::json::array();
  for (const Layer& l : layers)
    j["layers"].push_back({{"layer", l.layer}, {"hash", l.hash}, {"tokens", l.tokens}, {"counts", l.counts}});
  return j;
}

RoutingHistogram RoutingHistogram::from_json(const nlohmann::json& j) {
  check(j.is_object(), "routing histogram: expected a JSON object");
  auto integer = [](const nlohmann::json& o, const char* key, const std::string& where) {
    check(o.contains(key) && o[key].is_number_integer(), "routing histogram: {}\"{}\" must be an integer", where, key);
    return o[key].get<int64_t>();
  };
  RoutingHistogram h;
  if (j.contains("model")) {
    check(j["model"].is_string(), "routing histogram: \"model\" must be a string");
    h.model = j["model"].get<std::string>();
  }
  h.experts_per_token = integer(j, "experts_per_token", "");
  check(h.experts_per_token > 0, "routing histogram: \"experts_per_token\" must be positive, got {}",
        h.experts_per_token);
  check(j.contains("layers") && j["layers"].is_array() && !j["layers"].empty(),
        "routing histogram: \"layers\" must be a non-empty array");
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const nlohmann::json& o = j["layers"][i];
    const std::string where = "layers[" + std::to_string(i) + "].";
    check(o.is_object(), "routing histogram: {} must be an object", where.substr(0, where.size() - 1));
    Layer l;
    l.layer = integer(o, "layer", where);
    l.tokens = integer(o, "tokens", where);
    check(l.tokens >= 0, "routing histogram: {}\"tokens\" must be >= 0", where);
    if (o.contains("hash")) {
      check(o["hash"].is_boolean(), "routing histogram: {}\"hash\" must be true or false", where);
      l.hash = o["hash"].get<bool>();
    }
    check(o.contains("counts") && o["counts"].is_array() && !o["counts"].empty(),
          "routing histogram: {}\"counts\" must be a non-empty array", where);
    int64_t sum = 0;
    for (const nlohmann::json& c : o["counts"]) {
      check(c.is_number_integer() && c.get<int64_t>() >= 0, "routing histogram: {}\"counts\" must hold integers >= 0",
            where);
      l.counts.push_back(c.get<int64_t>());
      sum += l.counts.back();
    }
    check(sum == l.tokens * h.experts_per_token,
          "routing histogram: {}\"counts\" sum to {}, expected tokens * experts_per_token = {}", where, sum,
          l.tokens * h.experts_per_token);
    h.layers.push_back(std::move(l));
  }
  return h;
}

void RoutingHistogram::save(const std::string& path) const {
  std::ofstream f(path);
  check(bool(f), "routing histogram: cannot write {}", path);
  f << to_json().dump(1) << "\n";
  check(bool(f), "routing histogram: writing {} failed", path);
}

RoutingHistogram RoutingHistogram::load(const std::string& path) { return from_json(io::read_json_file(path)); }

std::vector<double> expert_load_shares(const RoutingHistogram& h, int64_t E) {
  check(E > 0, "expert_load_shares: {} experts", E);
  std::vector<double> recorded;  // averaged sorted shares over the scored layers
  int64_t scored = 0;
  for (const RoutingHistogram::Layer& l : h.layers) {
    int64_t total = 0;
    for (int64_t c : l.counts) total += c;
    if (l.hash || total == 0) continue;
    if (recorded.empty()) recorded.assign(l.counts.size(), 0.0);
    check(recorded.size() == l.counts.size(), "expert_load_shares: layer {} has {} experts, others {}", l.layer,
          l.counts.size(), recorded.size());
    std::vector<int64_t> sorted = l.counts;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (size_t e = 0; e < sorted.size(); ++e) recorded[e] += double(sorted[e]) / double(total);
    ++scored;
  }
  check(scored > 0, "expert_load_shares: the histogram has no scored layer with tokens");
  for (double& s : recorded) s /= double(scored);
  // Cumulative share at x in [0, 1] (x = fraction of the experts, largest first), piecewise linear.
  const int64_t n = int64_t(recorded.size());
  std::vector<double> cum(size_t(n) + 1, 0.0);
  for (int64_t e = 0; e < n; ++e) cum[size_t(e) + 1] = cum[size_t(e)] + recorded[size_t(e)];
  auto F = [&](double x) {
    const double p = x * double(n);
    const int64_t i = std::min<int64_t>(n - 1, int64_t(p));
    return cum[size_t(i)] + (p - double(i)) * recorded[size_t(i)];
  };
  std::vector<double> shares(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) shares[size_t(e)] = F(double(e + 1) / double(E)) - F(double(e) / double(E));
  return shares;
}

}  // namespace moeserve::model
