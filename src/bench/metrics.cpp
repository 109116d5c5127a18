#include "bench/metrics.h"

#include "bench/stats.h"
#include "core/error.h"

namespace moeserve::bench {
namespace {
// SGLang evaluates np.mean(x or 0): an empty list becomes the scalar 0 (so 0, not nan). E2E has no guard.
std::vector<double> or_zero(const std::vector<double>& values) {
  return values.empty() ? std::vector<double>{0.0} : values;
}
}  // namespace

double request_tpot(const RequestOutput& output) {
  return output.output_len > 1 ? (output.latency - output.ttft) / (output.output_len - 1) : 0.0;
}

BenchmarkMetrics compute_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                 const SloConfig& slo, const std::vector<long long>* retokenized_lens) {
  check(duration_s > 0.0, "benchmark duration must be positive, got {}", duration_s);
  check(retokenized_lens == nullptr || retokenized_lens->size() == outputs.size(),
        "retokenized lengths: {} entries for {} outputs", retokenized_lens ? retokenized_lens->size() : 0,
        outputs.size());
  BenchmarkMetrics m;
  std::vector<double> ttfts, tpots, itls, e2e;
  long long retokenized = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const RequestOutput& o = outputs[i];
    if (o.cancelled) {
      ++m.cancelled;
      continue;
    }
    if (!o.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input += o.prompt_len;
    m.total_output += o.output_len;
    if (retokenized_lens) retokenized += (*retokenized_lens)[i];
    if (o.output_len > 1) tpots.push_back((o.latency - o.ttft) / (o.output_len - 1));
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2e.push_back(o.latency);
    if (slo.any()) {
      bool good = true;
      if (slo.ttft_ms && o.ttft * 1000.0 > *slo.ttft_ms) good = false;
      if (slo.tpot_ms && request_tpot(o) * 1000.0 > *slo.tpot_ms) good = false;
      if (slo.e2e_ms && o.latency * 1000.0 > *slo.e2e_ms) good = false;
      m.good_completed = m.good_completed.value_or(0) + (good ? 1 : 0);
    }
  }
  const double d = duration_s;
  m.request_throughput = m.completed / d;
  m.input_throughput = static_cast<double>(m.total_input) / d;
  m.output_throughput = static_cast<double>(m.total_output) / d;
  m.total_throughput = static_cast<double>(m.total_input + m.total_output) / d;
  if (retokenized_lens) {
    m.total_output_retokenized = retokenized;
    m.output_throughput_retokenized = static_cast<double>(retokenized) / d;
    m.total_throughput_retokenized = static_cast<double>(m.total_input + retokenized) / d;
  }
  const auto t = or_zero(ttfts), p = or_zero(tpots), l = or_zero(itls);
  m.mean_ttft_ms = mean(t) * 1000;
  m.median_ttft_ms = median(t) * 1000;
  m.std_ttft_ms = stddev(t) * 1000;
  m.p99_ttft_ms = percentile(t, 99) * 1000;
  m.mean_tpot_ms = mean(p) * 1000;
  m.median_tpot_ms = median(p) * 1000;
  m.std_tpot_ms = stddev(p) * 1000;
  m.p99_tpot_ms = percentile(p, 99) * 1000;
  m.mean_itl_ms = mean(l) * 1000;
  m.median_itl_ms = median(l) * 1000;
  m.std_itl_ms = stddev(l) * 1000;
  m.p95_itl_ms = percentile(l, 95) * 1000;
  m.p99_itl_ms = percentile(l, 99) * 1000;
  m.max_itl_ms = max_value(l) * 1000;
  m.mean_e2e_latency_ms = mean(e2e) * 1000;
  m.median_e2e_latency_ms = median(e2e) * 1000;
  m.std_e2e_latency_ms = stddev(e2e) * 1000;
  m.p99_e2e_latency_ms = percentile(e2e, 99) * 1000;
  m.concurrency = sum(e2e) / d;
  if (slo.any()) {
    m.good_completed = m.good_completed.value_or(0);
    m.request_goodput = *m.good_completed / d;
  }
  return m;
}

}  // namespace moeserve::bench
