#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace moeserve::engine {

void validate(const SamplingParams& p) {
  check(std::isfinite(p.temperature) && p.temperature >= 0.0f, "temperature must be >= 0, got {}", p.temperature);
  check(std::isfinite(p.top_p) && p.top_p > 0.0f && p.top_p <= 1.0f, "top_p must be in (0, 1], got {}", p.top_p);
  check(p.top_k >= -1, "top_k must be -1, 0 (off) or positive, got {}", p.top_k);
}

void sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& p, float* probs) {
  std::fill(probs, probs + vocab, 0.0f);
  if (p.greedy()) {
    probs[std::max_element(logits, logits + vocab) - logits] = 1.0f;
    return;
  }
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = (p.top_k > 0) ? std::min(p.top_k, vocab) : vocab;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  order.resize(static_cast<size_t>(keep));
  const float mx = logits[order[0]];
  std::vector<double> w(static_cast<size_t>(keep));
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += (w[size_t(i)] = std::exp(double(logits[order[size_t(i)]] - mx) / p.temperature));
  if (p.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p (always at least one token)
    double mass = 0;
    int64_t n = 0;
    while (n < keep) {
      mass += w[size_t(n)] / sum;
      ++n;
      if (mass >= double(p.top_p)) break;
    }
    keep = n;
    sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += w[size_t(i)];
  }
  for (int64_t i = 0; i < keep; ++i) probs[order[size_t(i)]] = float(w[size_t(i)] / sum);
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p, std::mt19937_64& rng) {
  if (p.greedy()) return int32_t(std::max_element(logits, logits + vocab) - logits);
  std::vector<float> probs(static_cast<size_t>(vocab));
  sampling_distribution(logits, vocab, p, probs.data());
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng), acc = 0;
  int32_t last = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (probs[size_t(i)] <= 0.0f) continue;
    acc += probs[size_t(i)];
    last = int32_t(i);
    if (u < acc) return last;
  }
  return last;  // rounding: the last token with mass
}

}  // namespace moeserve::engine
