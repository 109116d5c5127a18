#pragma once
// Per-request measurements and the aggregates over a run, defined exactly as sglang.bench_serving
// defines them (python/sglang/benchmark/metrics.py::do_calculate_metrics), plus vLLM's goodput.
//   TTFT   time from just before the POST to the first chunk carrying text
//   ITL    gaps between text-bearing chunks; a chunk carrying k tokens contributes k entries of gap/k
//   E2E    time to the last SSE event (the [DONE] line included)
//   TPOT   (e2e - ttft) / (output_len - 1), only for output_len > 1
// Aggregates run over successful requests only; failed requests are counted and excluded.
#include <optional>
#include <string>
#include <vector>

namespace moeserve::bench {

struct RequestOutput {
  bool success = false;
  bool cancelled = false;  // stopped by Ctrl-C before it finished: neither success nor failure
  std::string error;       // why it failed (HTTP status and body, transport error, bad stream)
  double ttft = 0.0;       // seconds
  double latency = 0.0;    // seconds, end to end
  std::vector<double> itl; // seconds, one entry per token after the first chunk
  int prompt_len = 0;      // the dataset's input length (not server-counted), as SGLang
  int output_len = 0;      // usage.completion_tokens when the server sends it, else the requested length
  bool output_len_from_usage = false;
  std::string generated_text;
  double start = 0.0;      // seconds since the benchmark started (dispatch time), for reporting
};

// vLLM's goodput (--goodput ttft:MS tpot:MS e2el:MS): a request is good when every given SLO holds;
// TPOT counts as 0 for output_len <= 1.
struct SloConfig {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2e_ms;
  bool any() const { return ttft_ms || tpot_ms || e2e_ms; }
};

struct BenchmarkMetrics {
  int completed = 0;
  int failed = 0;     // not counting cancelled requests
  int cancelled = 0;
  long long total_input = 0;
  long long total_output = 0;
  std::optional<long long> total_output_retokenized;  // needs a tokenizer
  double request_throughput = 0.0;
  double input_throughput = 0.0;
  double output_throughput = 0.0;
  double total_throughput = 0.0;
  std::optional<double> output_throughput_retokenized;
  std::optional<double> total_throughput_retokenized;
  double mean_ttft_ms = 0.0, median_ttft_ms = 0.0, std_ttft_ms = 0.0, p99_ttft_ms = 0.0;
  double mean_tpot_ms = 0.0, median_tpot_ms = 0.0, std_tpot_ms = 0.0, p99_tpot_ms = 0.0;
  double mean_itl_ms = 0.0, median_itl_ms = 0.0, std_itl_ms = 0.0, p95_itl_ms = 0.0, p99_itl_ms = 0.0,
         max_itl_ms = 0.0;
  double mean_e2e_latency_ms = 0.0, median_e2e_latency_ms = 0.0, std_e2e_latency_ms = 0.0,
         p99_e2e_latency_ms = 0.0;
  double concurrency = 0.0;  // Σ e2e / duration (Little's law)
  std::optional<double> accept_length;
  std::optional<int> good_completed;  // set when an SLO is given
  std::optional<double> request_goodput;
};

// `retokenized_lens[i]` (optional, same size as outputs) is the tokenizer's count of outputs[i]'s text.
BenchmarkMetrics compute_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                 const SloConfig& slo = {},
                                 const std::vector<long long>* retokenized_lens = nullptr);

// TPOT of one request as vLLM's goodput sees it (0 when output_len <= 1), in seconds.
double request_tpot(const RequestOutput& output);

}  // namespace moeserve::bench
