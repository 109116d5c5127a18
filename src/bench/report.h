#pragma once
// What a run prints and saves. The printed block is sglang.bench_serving's "Serving Benchmark Result",
// label for label ("{:<40} {:<10}" columns, values with two decimals), so results compare line by line.
// Lines SGLang does not have appear only when they carry information: "Failed requests" (some
// failed), "Cancelled requests" (Ctrl-C), "Request goodput (req/s)" (an SLO was given, vLLM's label),
// and "Accept length" as in SGLang (the server reported one).
// The JSON line has SGLang's keys, in SGLang's order, plus the arguments of the run and our extras.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/metrics.h"

namespace moeserve::bench {

struct RunDescription {
  std::string backend;
  std::string dataset_name;
  double request_rate = 0.0;  // +inf: all at once
  std::optional<int> max_concurrency;
  int random_input_len = 0;
  int random_output_len = 0;
  double random_range_ratio = 0.0;
  double duration_s = 0.0;
  bool interrupted = false;
  int not_dispatched = 0;
};

// Python's str(float): "inf", "4.0", "2.5".
std::string python_float(double value);

std::string format_report(const BenchmarkMetrics& metrics, const RunDescription& run);

// One JSON object for --output-file: arguments, SGLang's result keys, then our extras. `arguments` is
// merged after the SGLang argument keys (model, num_prompts, seed, ...).
nlohmann::ordered_json result_json(const BenchmarkMetrics& metrics, const RunDescription& run,
                                   const nlohmann::ordered_json& arguments, const SloConfig& slo);

// --output-details: per-request input/output lengths, TTFTs, ITLs, texts and errors (SGLang's keys).
void add_details(nlohmann::ordered_json& result, const std::vector<RequestOutput>& outputs);

// Appends `line` and a newline to `path` (created if missing). Throws moeserve::Error on failure.
void append_json_line(const std::string& path, const nlohmann::ordered_json& line);

}  // namespace moeserve::bench
