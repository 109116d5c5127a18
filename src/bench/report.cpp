#include "bench/report.h"

#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "core/error.h"

namespace moeserve::bench {
namespace {
void line(std::string& out, std::string_view label, std::string_view value) {
  out += fmt::format("{:<40} {:<10}\n", label, value);
}
void line(std::string& out, std::string_view label, double value) {
  out += fmt::format("{:<40} {:<10.2f}\n", label, value);
}
void line(std::string& out, std::string_view label, long long value) {
  out += fmt::format("{:<40} {:<10}\n", label, value);
}
// Python's "{s:{c}^50}": the title centred in 50 columns of `fill`, the odd column on the right.
void rule(std::string& out, std::string_view title, char fill) {
  const size_t pad = title.size() < 50 ? 50 - title.size() : 0;
  out += std::string(pad / 2, fill) + std::string(title) + std::string(pad - pad / 2, fill) + "\n";
}

// JSON has no NaN/inf: such values become null.
nlohmann::ordered_json number(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }
template <typename T>
nlohmann::ordered_json optional(const std::optional<T>& v) {
  if (!v) return nullptr;
  if constexpr (std::is_floating_point_v<T>) return number(*v);
  return *v;
}
}  // namespace

std::string python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", value);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string format_report(const BenchmarkMetrics& m, const RunDescription& run) {
  std::string out = "\n";
  rule(out, " Serving Benchmark Result ", '=');
  line(out, "Backend:", run.backend);
  line(out, "Traffic request rate:", python_float(run.request_rate));
  line(out, "Max request concurrency:",
       run.max_concurrency ? std::to_string(*run.max_concurrency) : std::string("not set"));
  line(out, "Successful requests:", static_cast<long long>(m.completed));
  if (m.failed > 0) line(out, "Failed requests:", static_cast<long long>(m.failed));
  if (run.interrupted)
    line(out, "Cancelled requests (Ctrl-C):", static_cast<long long>(m.cancelled + run.not_dispatched));
  line(out, "Benchmark duration (s):", run.duration_s);
  line(out, "Total input tokens:", m.total_input);
  line(out, "Total generated tokens:", m.total_output);
  if (m.total_output_retokenized)
    line(out, "Total generated tokens (retokenized):", *m.total_output_retokenized);
  else
    line(out, "Total generated tokens (retokenized):", "n/a");
  line(out, "Request throughput (req/s):", m.request_throughput);
  if (m.request_goodput) line(out, "Request goodput (req/s):", *m.request_goodput);
  line(out, "Input token throughput (tok/s):", m.input_throughput);
  line(out, "Output token throughput (tok/s):", m.output_throughput);
  line(out, "Total token throughput (tok/s):", m.total_throughput);
  line(out, "Concurrency:", m.concurrency);
  if (m.accept_length && *m.accept_length != 0.0) line(out, "Accept length:", *m.accept_length);
  rule(out, "End-to-End Latency", '-');
  line(out, "Mean E2E Latency (ms):", m.mean_e2e_latency_ms);
  line(out, "Median E2E Latency (ms):", m.median_e2e_latency_ms);
  line(out, "P99 E2E Latency (ms):", m.p99_e2e_latency_ms);
  rule(out, "Time to First Token", '-');
  line(out, "Mean TTFT (ms):", m.mean_ttft_ms);
  line(out, "Median TTFT (ms):", m.median_ttft_ms);
  line(out, "P99 TTFT (ms):", m.p99_ttft_ms);
  rule(out, "Inter-Token Latency", '-');
  line(out, "Mean ITL (ms):", m.mean_itl_ms);
  line(out, "Median ITL (ms):", m.median_itl_ms);
  line(out, "P95 ITL (ms):", m.p95_itl_ms);
  line(out, "P99 ITL (ms):", m.p99_itl_ms);
  line(out, "Max ITL (ms):", m.max_itl_ms);
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::ordered_json result_json(const BenchmarkMetrics& m, const RunDescription& run,
                                   const nlohmann::ordered_json& arguments, const SloConfig& slo) {
  nlohmann::ordered_json j;
  // Arguments, as SGLang writes them (request_rate: "inf" as a string, JSON having no infinity).
  j["backend"] = run.backend;
  j["dataset_name"] = run.dataset_name;
  j["request_rate"] = std::isinf(run.request_rate) ? nlohmann::ordered_json("inf") : number(run.request_rate);
  j["max_concurrency"] = optional(run.max_concurrency);
  j["sharegpt_output_len"] = nullptr;
  j["random_input_len"] = run.random_input_len;
  j["random_output_len"] = run.random_output_len;
  j["random_range_ratio"] = run.random_range_ratio;
  // Results, SGLang's keys and order.
  j["duration"] = number(run.duration_s);
  j["completed"] = m.completed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["total_output_tokens_retokenized"] = optional(m.total_output_retokenized);
  j["request_throughput"] = number(m.request_throughput);
  j["input_throughput"] = number(m.input_throughput);
  j["output_throughput"] = number(m.output_throughput);
  j["mean_e2e_latency_ms"] = number(m.mean_e2e_latency_ms);
  j["median_e2e_latency_ms"] = number(m.median_e2e_latency_ms);
  j["std_e2e_latency_ms"] = number(m.std_e2e_latency_ms);
  j["p99_e2e_latency_ms"] = number(m.p99_e2e_latency_ms);
  j["mean_ttft_ms"] = number(m.mean_ttft_ms);
  j["median_ttft_ms"] = number(m.median_ttft_ms);
  j["std_ttft_ms"] = number(m.std_ttft_ms);
  j["p99_ttft_ms"] = number(m.p99_ttft_ms);
  j["mean_tpot_ms"] = number(m.mean_tpot_ms);
  j["median_tpot_ms"] = number(m.median_tpot_ms);
  j["std_tpot_ms"] = number(m.std_tpot_ms);
  j["p99_tpot_ms"] = number(m.p99_tpot_ms);
  j["mean_itl_ms"] = number(m.mean_itl_ms);
  j["median_itl_ms"] = number(m.median_itl_ms);
  j["std_itl_ms"] = number(m.std_itl_ms);
  j["p95_itl_ms"] = number(m.p95_itl_ms);
  j["p99_itl_ms"] = number(m.p99_itl_ms);
  j["concurrency"] = number(m.concurrency);
  j["accept_length"] = optional(m.accept_length);
  // Ours: what SGLang computes but does not save, and what it does not have.
  j["max_itl_ms"] = number(m.max_itl_ms);
  j["total_throughput"] = number(m.total_throughput);
  j["failed"] = m.failed;
  j["cancelled"] = m.cancelled + run.not_dispatched;
  j["interrupted"] = run.interrupted;
  if (slo.any()) {
    j["slo_ttft_ms"] = optional(slo.ttft_ms);
    j["slo_tpot_ms"] = optional(slo.tpot_ms);
    j["slo_e2e_ms"] = optional(slo.e2e_ms);
    j["good_completed"] = optional(m.good_completed);
    j["request_goodput"] = optional(m.request_goodput);
  }
  for (const auto& [key, value] : arguments.items()) j[key] = value;
  return j;
}

void add_details(nlohmann::ordered_json& result, const std::vector<RequestOutput>& outputs) {
  auto input_lens = nlohmann::ordered_json::array(), output_lens = nlohmann::ordered_json::array(),
       ttfts = nlohmann::ordered_json::array(), itls = nlohmann::ordered_json::array(),
       texts = nlohmann::ordered_json::array(), errors = nlohmann::ordered_json::array();
  for (const auto& o : outputs) {
    input_lens.push_back(o.prompt_len);
    output_lens.push_back(o.success ? o.output_len : 0);  // SGLang records 0 for a failed request
    ttfts.push_back(o.ttft);
    itls.push_back(o.itl);
    texts.push_back(o.generated_text);
    errors.push_back(o.error);
  }
  result["input_lens"] = std::move(input_lens);
  result["output_lens"] = std::move(output_lens);
  result["ttfts"] = std::move(ttfts);
  result["itls"] = std::move(itls);
  result["generated_texts"] = std::move(texts);
  result["errors"] = std::move(errors);
}

void append_json_line(const std::string& path, const nlohmann::ordered_json& line) {
  std::ofstream file(path, std::ios::app);
  check(file.good(), "--output-file: cannot open '{}' for appending", path);
  // Replace invalid UTF-8 from a generated text instead of failing the whole run.
  file << line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  check(file.good(), "--output-file: cannot write to '{}'", path);
}

}  // namespace moeserve::bench
