#include "planner/profile.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"
#include "planner/presets.h"

namespace moeserve::planner {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void check_keys(const json& j, const std::set<std::string>& known, const std::string& source, const std::string& where) {
  check(j.is_object(), "{}: {} must be a JSON object", source, where);
  for (auto it = j.begin(); it != j.end(); ++it)
    check(known.count(it.key()), "{}: unknown field '{}{}' (known: {})", source, where.empty() ? "" : where + ".",
          it.key(), fmt::join(known, ", "));
}

int64_t positive(const json& j, const char* key, const std::string& source, const std::string& where,
                 std::optional<int64_t> fallback = std::nullopt, int64_t min = 1) {
  std::string field = where.empty() ? key : where + "." + key;
  if (!j.contains(key)) {
    check(fallback.has_value(), "{}: missing field '{}' (expected an integer >= {})", source, field, min);
    return *fallback;
  }
  check(j[key].is_number_integer(), "{}: field '{}' must be an integer, got {}", source, field, j[key].dump());
  int64_t v = j[key].get<int64_t>();
  check(v >= min, "{}: field '{}' = {} must be >= {}", source, field, v, min);
  return v;
}

std::string text(const json& j, const char* key, const std::string& source, std::optional<std::string> fallback = {}) {
  if (!j.contains(key)) {
    check(fallback.has_value(), "{}: missing field '{}' (expected a string)", source, key);
    return *fallback;
  }
  check(j[key].is_string(), "{}: field '{}' must be a string, got {}", source, key, j[key].dump());
  return j[key].get<std::string>();
}

bool valid_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

}  // namespace

Profile parse_profile(const json& j, const std::string& source) {
  check_keys(j,
             {"name", "description", "role", "gpu", "parallel", "weights", "kv_format", "c128", "speculative",
              "cuda_graph_batch_sizes", "max_running_requests", "chunked_prefill_size", "mem_fraction"},
             source, "");
  Profile p;
  p.source = source;
  p.name = text(j, "name", source);
  check(valid_name(p.name), "{}: profile name '{}' must be lower-case letters, digits and '-'", source, p.name);
  p.description = text(j, "description", source, "");
  p.role = text(j, "role", source);
  check(p.role == "decode" || p.role == "prefill" || p.role == "mixed",
        "{}: field 'role' = '{}' (expected decode, prefill or mixed)", source, p.role);
  p.gpu = text(j, "gpu", source);
  p.weights = parse_weight_format(text(j, "weights", source), source + ": field 'weights'");
  p.kv_format = parse_kv_format(text(j, "kv_format", source), source + ": field 'kv_format'");
  p.c128 = parse_c128_mode(text(j, "c128", source), source + ": field 'c128'");

  // Parallel layout.
  check(j.contains("parallel"), "{}: missing field 'parallel'", source);
  const json& par = j["parallel"];
  check_keys(par, {"pp", "pp_layers", "attention", "moe", "vocab_parallel"}, source, "parallel");
  ParallelSpec& l = p.parallel;
  l.pp = positive(par, "pp", source, "parallel", 1);
  check(par.contains("attention") && par.contains("moe"), "{}: 'parallel' needs 'attention' and 'moe'", source);
  const json& att = par["attention"];
  check_keys(att, {"tp", "dp", "cp"}, source, "parallel.attention");
  l.attn_tp = positive(att, "tp", source, "parallel.attention", 1);
  l.attn_dp = positive(att, "dp", source, "parallel.attention", 1);
  l.attn_cp = positive(att, "cp", source, "parallel.attention", 1);
  const json& moe = par["moe"];
  check_keys(moe, {"tp", "ep", "redundant_experts"}, source, "parallel.moe");
  l.moe_tp = positive(moe, "tp", source, "parallel.moe", 1);
  l.moe_ep = positive(moe, "ep", source, "parallel.moe", 1);
  l.redundant_experts = positive(moe, "redundant_experts", source, "parallel.moe", 0, 0);
  check(l.redundant_experts == 0 || l.moe_ep > 1,
        "{}: parallel.moe.redundant_experts = {} needs expert parallelism (moe.ep > 1)", source, l.redundant_experts);
  check(l.attn_tp * l.attn_dp * l.attn_cp == l.moe_tp * l.moe_ep,
        "{}: attention ranks per stage (tp {} x dp {} x cp {} = {}) must equal MoE ranks per stage (tp {} x ep {} "
        "= {})",
        source, l.attn_tp, l.attn_dp, l.attn_cp, l.attn_tp * l.attn_dp * l.attn_cp, l.moe_tp, l.moe_ep,
        l.moe_tp * l.moe_ep);
  l.vocab_parallel = positive(par, "vocab_parallel", source, "parallel", l.ranks_per_stage());
  check(l.ranks_per_stage() % l.vocab_parallel == 0,
        "{}: parallel.vocab_parallel = {} must divide the {} ranks of a stage", source, l.vocab_parallel,
        l.ranks_per_stage());
  if (par.contains("pp_layers")) {
    check(par["pp_layers"].is_array() && int64_t(par["pp_layers"].size()) == l.pp,
          "{}: parallel.pp_layers must list the main-layer count of each of the {} stages", source, l.pp);
    for (const auto& n : par["pp_layers"]) {
      check(n.is_number_integer() && n.get<int64_t>() >= 1, "{}: parallel.pp_layers entries must be integers >= 1",
            source);
      l.pp_layers.push_back(n.get<int64_t>());
    }
  }

  // Speculative decoding.
  if (j.contains("speculative")) {
    const json& s = j["speculative"];
    check_keys(s, {"method", "num_steps", "topk", "num_draft_tokens"}, source, "speculative");
    std::string method = text(s, "method", source);
    if (method == "none") {
      check(s.size() == 1, "{}: speculative.method 'none' takes no other fields", source);
    } else {
      check(method == "mtp", "{}: speculative.method = '{}' (expected none or mtp)", source, method);
      SpeculativeSpec& sp = p.speculative;
      sp.method = SpecMethod::MTP;
      sp.num_steps = positive(s, "num_steps", source, "speculative");
      sp.topk = positive(s, "topk", source, "speculative", 1);
      sp.num_draft_tokens = positive(s, "num_draft_tokens", source, "speculative", std::nullopt, 2);
      check(sp.num_draft_tokens <= sp.num_steps * sp.topk + 1,
            "{}: speculative.num_draft_tokens = {} exceeds num_steps x topk + 1 = {}", source, sp.num_draft_tokens,
            sp.num_steps * sp.topk + 1);
    }
  }

  // Scheduler limits.
  p.max_running_requests = positive(j, "max_running_requests", source, "");
  p.chunked_prefill_size = positive(j, "chunked_prefill_size", source, "");
  check(p.chunked_prefill_size % l.attn_cp == 0,
        "{}: chunked_prefill_size = {} must be divisible by attention cp = {} (each CP rank takes an equal share)",
        source, p.chunked_prefill_size, l.attn_cp);
  check(j.contains("cuda_graph_batch_sizes") && j["cuda_graph_batch_sizes"].is_array(),
        "{}: field 'cuda_graph_batch_sizes' must be an array of batch sizes ([] for none)", source);
  int64_t previous = 0;
  for (const auto& b : j["cuda_graph_batch_sizes"]) {
    check(b.is_number_integer() && b.get<int64_t>() > previous,
          "{}: cuda_graph_batch_sizes must be strictly increasing positive integers, got {}", source, b.dump());
    previous = b.get<int64_t>();
    p.cuda_graph_batch_sizes.push_back(previous);
  }
  check(previous <= p.max_running_requests,
        "{}: the largest CUDA-graph batch size {} exceeds max_running_requests = {}", source, previous,
        p.max_running_requests);
  check(j.contains("mem_fraction") && j["mem_fraction"].is_number(), "{}: field 'mem_fraction' must be a number",
        source);
  p.mem_fraction = j["mem_fraction"].get<double>();
  check(p.mem_fraction > 0 && p.mem_fraction <= 1, "{}: mem_fraction = {} must be in (0, 1]", source, p.mem_fraction);
  return p;
}

std::vector<std::string> profile_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(data_root()) / "profiles", ec))
    if (entry.is_regular_file() && entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Profile load_profile(const std::string& name_or_path) {
  fs::path path(name_or_path);
  bool is_file = name_or_path.find('/') != std::string::npos || path.extension() == ".json";
  if (!is_file) {
    check(valid_name(name_or_path), "--profile '{}': profile names are lower-case (profiles: {})", name_or_path,
          fmt::join(profile_names(), ", "));
    path = fs::path(data_root()) / "profiles" / (name_or_path + ".json");
    check(fs::exists(path), "--profile '{}' is not a profile (profiles: {})", name_or_path,
          fmt::join(profile_names(), ", "));
  }
  Profile p = parse_profile(io::read_json_file(path.string(), "profile"), path.string());
  check(p.name == path.stem().string(), "{}: field 'name' = '{}' must equal the file name '{}'", path.string(), p.name,
        path.stem().string());
  return p;
}

}  // namespace moeserve::planner
