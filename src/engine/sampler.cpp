#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
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
  // The order is logit descending, then lower id first: a strict total order, so sorting just a prefix
  // gives exactly that prefix of a full sort. A full sort of a 129k vocabulary costs ~26 ms per token, so
  // sort only what top-k / top-p need (nothing at all for plain temperature sampling).
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  thread_local std::vector<int32_t> order;  // scratch reused across calls: fresh pages would fault every token
  order.resize(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = vocab, sorted = 0;  // candidates order[0, keep); order[0, sorted) is in the order
  if (p.top_k > 0 && p.top_k < vocab) {
    keep = sorted = p.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  }
  const float mx = sorted ? logits[order[0]] : std::ranges::max(std::span(logits, size_t(vocab)));
  thread_local std::vector<double> w;  // weights by id (scratch, like order)
  w.resize(static_cast<size_t>(vocab));
  // Top-p band of an id: floor((max - logit) / T), i.e. weight about in (e^-(b+1), e^-b]. It is monotone in
  // the logit, so the ids of bands [0, b] are exactly a prefix of the order; the bands' masses tell how
  // many bands the top-p prefix needs, so only those ids get sorted.
  auto band = [&](int32_t id) { return int(std::min(63.0f, (mx - logits[id]) / p.temperature)); };
  double band_mass[64] = {};
  double sum = 0;  // summed in order[] order: in id order when top-k is off (it needs no sorted order)
  for (int64_t i = 0; i < keep; ++i) {
    const int32_t id = order[size_t(i)];
    sum += (w[size_t(id)] = std::exp(double(logits[id] - mx) / p.temperature));
    if (p.top_p < 1.0f) band_mass[band(id)] += w[size_t(id)];
  }
  if (p.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p (always at least one token)
    int limit = 0;  // bands [0, limit] hold top_p of the mass (but for rounding: then the loop takes the rest)
    for (double m = band_mass[0]; m < double(p.top_p) * sum && limit < 63;) m += band_mass[++limit];
    double mass = 0;
    int64_t n = 0;
    while (n < keep) {
      if (n == sorted) {  // top-k off: sort bands [0, limit] (holding the max); if that falls short, the rest
        auto in_bands = [&](int32_t id) { return band(id) <= limit; };
        auto end = std::partition(order.begin() + sorted, order.begin() + keep, in_bands);
        std::sort(order.begin() + sorted, end, before);
        sorted = end - order.begin();
        limit = 63;  // every band
      }
      mass += w[size_t(order[size_t(n)])] / sum;
      ++n;
      if (mass >= double(p.top_p)) break;
    }
    keep = n;
    sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += w[size_t(order[size_t(i)])];
  }
  for (int64_t i = 0; i < keep; ++i) {
    const int32_t id = order[size_t(i)];
    probs[id] = float(w[size_t(id)] / sum);
  }
}

double sampling_uniform(const SamplingParams& p, std::mt19937_64& rng) {
  return p.greedy() ? 0.0 : std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

int32_t sample_token_at(const float* logits, int64_t vocab, const SamplingParams& p, double u) {
  if (p.greedy()) return int32_t(std::max_element(logits, logits + vocab) - logits);
  thread_local std::vector<float> probs;  // scratch reused across calls, as in sampling_distribution
  probs.resize(static_cast<size_t>(vocab));
  sampling_distribution(logits, vocab, p, probs.data());
  double acc = 0;
  int32_t last = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (probs[size_t(i)] <= 0.0f) continue;
    acc += probs[size_t(i)];
    last = int32_t(i);
    if (u < acc) return last;
  }
  return last;  // rounding: the last token with mass
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p, std::mt19937_64& rng) {
  return sample_token_at(logits, vocab, p, sampling_uniform(p, rng));
}

TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int top) {
  check(token >= 0 && token < vocab, "internal: token {} outside the vocabulary of {}", token, vocab);
  check(top >= 0 && top <= kMaxTopLogprobs, "internal: {} top logprobs asked (0 to {})", top, kMaxTopLogprobs);
  const float mx = std::ranges::max(std::span(logits, size_t(vocab)));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - double(mx));
  const double log_norm = double(mx) + std::log(sum);
  auto logprob = [&](int32_t id) {
    const double v = double(logits[id]) - log_norm;
    return std::isfinite(v) ? std::max(float(v), kMinLogprob) : kMinLogprob;
  };
  TokenLogprobs out;
  out.token = token;
  out.logprob = logprob(token);
  if (top > 0) {
    thread_local std::vector<int32_t> order;
    order.resize(size_t(vocab));
    std::iota(order.begin(), order.end(), 0);
    const int64_t n = std::min<int64_t>(top, vocab);
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int64_t i = 0; i < n; ++i) out.top.emplace_back(order[size_t(i)], logprob(order[size_t(i)]));
  }
  return out;
}

}  // namespace moeserve::engine
