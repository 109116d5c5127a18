// The aggregates on synthetic per-request records, computed by hand. Times are binary fractions so
// every expected value is exact.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "bench/metrics.h"
#include "core/error.h"

namespace moeserve::bench {
namespace {

RequestOutput ok(double ttft, double latency, int output_len, std::vector<double> itl, int prompt_len) {
  RequestOutput o;
  o.success = true;
  o.ttft = ttft;
  o.latency = latency;
  o.output_len = output_len;
  o.itl = std::move(itl);
  o.prompt_len = prompt_len;
  return o;
}

std::vector<RequestOutput> records() {
  RequestOutput failed;
  failed.success = false;
  failed.error = "HTTP 500";
  failed.ttft = 9.0;
  failed.latency = 9.0;
  failed.output_len = 64;
  failed.prompt_len = 1000;
  failed.itl = {9.0};
  RequestOutput cancelled = failed;
  cancelled.cancelled = true;
  return {ok(0.25, 1.25, 5, {0.25, 0.25, 0.25, 0.25}, 100), failed, ok(0.5, 1.5, 3, {0.5, 0.5}, 50),
          ok(0.125, 0.125, 1, {}, 10), cancelled};
}

TEST(BenchMetrics, AggregatesAsSglangOverSuccessfulRequests) {
  const BenchmarkMetrics m = compute_metrics(records(), 2.0);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.cancelled, 1);
  EXPECT_EQ(m.total_input, 160);
  EXPECT_EQ(m.total_output, 9);
  EXPECT_FALSE(m.total_output_retokenized.has_value());
  EXPECT_EQ(m.request_throughput, 1.5);
  EXPECT_EQ(m.input_throughput, 80.0);
  EXPECT_EQ(m.output_throughput, 4.5);
  EXPECT_EQ(m.total_throughput, 84.5);
  // TTFT over [0.25, 0.5, 0.125] s.
  EXPECT_DOUBLE_EQ(m.mean_ttft_ms, 875.0 / 3.0);
  EXPECT_EQ(m.median_ttft_ms, 250.0);
  EXPECT_DOUBLE_EQ(m.p99_ttft_ms, (0.25 + 0.25 * 0.98) * 1000);  // virtual index 1.98
  // TPOT only for output_len > 1: (1.25-0.25)/4 = 0.25, (1.5-0.5)/2 = 0.5.
  EXPECT_EQ(m.mean_tpot_ms, 375.0);
  EXPECT_EQ(m.median_tpot_ms, 375.0);
  EXPECT_EQ(m.std_tpot_ms, 125.0);
  EXPECT_DOUBLE_EQ(m.p99_tpot_ms, 497.5);
  // ITL pooled: four 0.25 and two 0.5.
  EXPECT_DOUBLE_EQ(m.mean_itl_ms, 1000.0 / 3.0);
  EXPECT_EQ(m.median_itl_ms, 250.0);
  EXPECT_EQ(m.p95_itl_ms, 500.0);
  EXPECT_EQ(m.p99_itl_ms, 500.0);
  EXPECT_EQ(m.max_itl_ms, 500.0);
  // E2E over [1.25, 1.5, 0.125]; concurrency = Σ e2e / duration.
  EXPECT_DOUBLE_EQ(m.mean_e2e_latency_ms, 2875.0 / 3.0);
  EXPECT_EQ(m.median_e2e_latency_ms, 1250.0);
  EXPECT_EQ(m.concurrency, 1.4375);
  EXPECT_FALSE(m.request_goodput.has_value());
}

TEST(BenchMetrics, GoodputCountsRequestsMeetingEverySlo) {
  SloConfig slo;
  slo.ttft_ms = 300;
  slo.tpot_ms = 300;
  // Request 1 meets both; request 3 misses TTFT; request 4 has one token, so TPOT counts as 0.
  const BenchmarkMetrics m = compute_metrics(records(), 2.0, slo);
  ASSERT_TRUE(m.good_completed.has_value());
  EXPECT_EQ(*m.good_completed, 2);
  EXPECT_EQ(*m.request_goodput, 1.0);
  slo.e2e_ms = 1000;  // now request 1 (1250 ms) misses
  EXPECT_EQ(*compute_metrics(records(), 2.0, slo).good_completed, 1);
  SloConfig at_limit;
  at_limit.ttft_ms = 500;  // an SLO equal to the value is met (vLLM: slo >= value)
  EXPECT_EQ(*compute_metrics(records(), 2.0, at_limit).good_completed, 3);
}

TEST(BenchMetrics, RetokenizedCountsAndEmptyGuards) {
  const std::vector<long long> retok = {6, 99, 2, 1, 99};  // failed/cancelled entries are ignored
  const BenchmarkMetrics m = compute_metrics(records(), 2.0, {}, &retok);
  EXPECT_EQ(*m.total_output_retokenized, 9);
  EXPECT_EQ(*m.output_throughput_retokenized, 4.5);

  // A run where only one-token requests succeed: no TPOT and no ITL samples → 0 (SGLang's `or 0`).
  const BenchmarkMetrics one = compute_metrics({ok(0.125, 0.125, 1, {}, 10)}, 1.0);
  EXPECT_EQ(one.mean_tpot_ms, 0.0);
  EXPECT_EQ(one.p99_itl_ms, 0.0);
  EXPECT_EQ(one.max_itl_ms, 0.0);

  // Every request failed: counts are zero, E2E statistics are NaN (numpy on an empty list).
  RequestOutput failed;
  failed.error = "x";
  const BenchmarkMetrics none = compute_metrics({failed, failed}, 1.0);
  EXPECT_EQ(none.completed, 0);
  EXPECT_EQ(none.failed, 2);
  EXPECT_EQ(none.mean_ttft_ms, 0.0);
  EXPECT_TRUE(std::isnan(none.mean_e2e_latency_ms));
  EXPECT_EQ(none.concurrency, 0.0);

  EXPECT_THROW(compute_metrics(records(), 0.0), Error);
}

TEST(BenchMetrics, RequestTpotIsZeroForSingleTokenOutputs) {
  EXPECT_EQ(request_tpot(ok(0.25, 1.25, 5, {}, 1)), 0.25);
  EXPECT_EQ(request_tpot(ok(0.25, 1.25, 1, {}, 1)), 0.0);
}

}  // namespace
}  // namespace moeserve::bench
