// The printed block, label for label, and the JSON line's keys.
#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "bench/report.h"

namespace moeserve::bench {
namespace {

BenchmarkMetrics sample_metrics() {
  BenchmarkMetrics m;
  m.completed = 3;
  m.total_input = 160;
  m.total_output = 9;
  m.total_output_retokenized = 9;
  m.request_throughput = 1.5;
  m.input_throughput = 80;
  m.output_throughput = 4.5;
  m.total_throughput = 84.5;
  m.concurrency = 1.4375;
  m.mean_e2e_latency_ms = 958.333;
  m.median_e2e_latency_ms = 1250;
  m.p99_e2e_latency_ms = 1495;
  m.mean_ttft_ms = 291.6666;
  m.median_ttft_ms = 250;
  m.p99_ttft_ms = 495;
  m.mean_itl_ms = 333.3333;
  m.median_itl_ms = 250;
  m.p95_itl_ms = 500;
  m.p99_itl_ms = 500;
  m.max_itl_ms = 500;
  return m;
}

RunDescription sample_run() {
  RunDescription r;
  r.backend = "sglang-oai";
  r.dataset_name = "random";
  r.request_rate = std::numeric_limits<double>::infinity();
  r.random_input_len = 64;
  r.random_output_len = 8;
  r.random_range_ratio = 1.0;
  r.duration_s = 2.0;
  return r;
}

TEST(BenchReport, PrintsSglangsBlockExactly) {
  const std::string expected =
      "\n"
      "============ Serving Benchmark Result ============\n"
      "Backend:                                 sglang-oai\n"
      "Traffic request rate:                    inf       \n"
      "Max request concurrency:                 not set   \n"
      "Successful requests:                     3         \n"
      "Benchmark duration (s):                  2.00      \n"
      "Total input tokens:                      160       \n"
      "Total generated tokens:                  9         \n"
      "Total generated tokens (retokenized):    9         \n"
      "Request throughput (req/s):              1.50      \n"
      "Input token throughput (tok/s):          80.00     \n"
      "Output token throughput (tok/s):         4.50      \n"
      "Total token throughput (tok/s):          84.50     \n"
      "Concurrency:                             1.44      \n"
      "----------------End-to-End Latency----------------\n"
      "Mean E2E Latency (ms):                   958.33    \n"
      "Median E2E Latency (ms):                 1250.00   \n"
      "P99 E2E Latency (ms):                    1495.00   \n"
      "---------------Time to First Token----------------\n"
      "Mean TTFT (ms):                          291.67    \n"
      "Median TTFT (ms):                        250.00    \n"
      "P99 TTFT (ms):                           495.00    \n"
      "---------------Inter-Token Latency----------------\n"
      "Mean ITL (ms):                           333.33    \n"
      "Median ITL (ms):                         250.00    \n"
      "P95 ITL (ms):                            500.00    \n"
      "P99 ITL (ms):                            500.00    \n"
      "Max ITL (ms):                            500.00    \n"
      "==================================================\n";
  EXPECT_EQ(format_report(sample_metrics(), sample_run()), expected);
}

TEST(BenchReport, ExtraLinesOnlyWhenTheyCarryInformation) {
  BenchmarkMetrics m = sample_metrics();
  m.failed = 2;
  m.request_goodput = 0.5;
  m.accept_length = 2.75;
  m.total_output_retokenized.reset();
  RunDescription r = sample_run();
  r.request_rate = 4.0;
  r.max_concurrency = 16;
  r.interrupted = true;
  r.not_dispatched = 5;
  const std::string text = format_report(m, r);
  EXPECT_NE(text.find("Traffic request rate:                    4.0       \n"), std::string::npos);
  EXPECT_NE(text.find("Max request concurrency:                 16        \n"), std::string::npos);
  EXPECT_NE(text.find("Successful requests:                     3         \n"
                      "Failed requests:                         2         \n"
                      "Cancelled requests (Ctrl-C):             5         \n"),
            std::string::npos);
  EXPECT_NE(text.find("Total generated tokens (retokenized):    n/a       \n"), std::string::npos);
  EXPECT_NE(text.find("Request goodput (req/s):                 0.50      \n"), std::string::npos);
  EXPECT_NE(text.find("Concurrency:                             1.44      \n"
                      "Accept length:                           2.75      \n"),
            std::string::npos);
}

TEST(BenchReport, PythonFloatSpelling) {
  EXPECT_EQ(python_float(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(python_float(4.0), "4.0");
  EXPECT_EQ(python_float(2.5), "2.5");
  EXPECT_EQ(python_float(0.1), "0.1");
}

TEST(BenchReport, JsonLineHasSglangKeysInOrderThenArguments) {
  BenchmarkMetrics m = sample_metrics();
  m.accept_length = 1.5;
  nlohmann::ordered_json args = {{"model", "demo"}, {"num_prompts", 3}};
  SloConfig slo;
  slo.ttft_ms = 100;
  m.good_completed = 1;
  m.request_goodput = 0.5;
  const auto j = result_json(m, sample_run(), args, slo);
  const std::vector<std::string> sglang_keys = {
      "backend", "dataset_name", "request_rate", "max_concurrency", "sharegpt_output_len", "random_input_len",
      "random_output_len", "random_range_ratio", "duration", "completed", "total_input_tokens",
      "total_output_tokens", "total_output_tokens_retokenized", "request_throughput", "input_throughput",
      "output_throughput", "mean_e2e_latency_ms", "median_e2e_latency_ms", "std_e2e_latency_ms",
      "p99_e2e_latency_ms", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
      "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p95_itl_ms",
      "p99_itl_ms", "concurrency", "accept_length"};
  size_t i = 0;
  for (auto it = j.begin(); i < sglang_keys.size(); ++it, ++i) EXPECT_EQ(it.key(), sglang_keys[i]);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["max_concurrency"], nullptr);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["total_input_tokens"], 160);
  EXPECT_EQ(j["duration"], 2.0);
  EXPECT_EQ(j["accept_length"], 1.5);
  EXPECT_EQ(j["request_goodput"], 0.5);
  EXPECT_EQ(j["slo_ttft_ms"], 100.0);
  EXPECT_EQ(j["model"], "demo");
  EXPECT_EQ(j["failed"], 0);

  BenchmarkMetrics none;
  none.mean_e2e_latency_ms = std::nan("");
  EXPECT_EQ(result_json(none, sample_run(), {}, {})["mean_e2e_latency_ms"], nullptr);  // JSON has no NaN
}

}  // namespace
}  // namespace moeserve::bench
