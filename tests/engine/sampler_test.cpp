#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"

namespace moeserve::engine {
namespace {

TEST(Sampler, GreedyTakesTheLowestIdOnTies) {
  std::vector<float> logits = {0.1f, 2.0f, 2.0f, -1.0f};
  std::mt19937_64 rng(1);
  EXPECT_EQ(sample_token(logits.data(), 4, {0.0f, 1.0f, 0}, rng), 1);
}

TEST(Sampler, TopKThenTopPDistribution) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  std::vector<float> p(4);
  sampling_distribution(logits.data(), 4, {1.0f, 1.0f, 0}, p.data());
  EXPECT_NEAR(p[0], 0.5f, 1e-6);
  EXPECT_NEAR(p[3], 0.05f, 1e-6);
  sampling_distribution(logits.data(), 4, {1.0f, 1.0f, 2}, p.data());  // top-2: 0.5, 0.3 renormalised
  EXPECT_NEAR(p[0], 0.625f, 1e-6);
  EXPECT_NEAR(p[1], 0.375f, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  sampling_distribution(logits.data(), 4, {1.0f, 0.7f, 0}, p.data());  // smallest prefix with mass >= 0.7
  EXPECT_NEAR(p[0], 0.625f, 1e-6);
  EXPECT_NEAR(p[1], 0.375f, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  sampling_distribution(logits.data(), 4, {2.0f, 1.0f, 0}, p.data());  // temperature flattens
  EXPECT_NEAR(p[0] / p[1], std::sqrt(0.5f / 0.3f), 1e-5);
}

TEST(Sampler, EmpiricalFrequenciesFollowTheDistribution) {
  std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f)};  // 1/6, 2/6, 3/6
  std::mt19937_64 rng(42);
  std::vector<int> counts(3, 0);
  const int n = 60000;
  for (int i = 0; i < n; ++i) counts[size_t(sample_token(logits.data(), 3, {1.0f, 1.0f, 0}, rng))]++;
  // 5 standard deviations of a binomial count: fails by chance with probability < 1e-6.
  for (int k = 0; k < 3; ++k) {
    double p = (k + 1) / 6.0, sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(counts[size_t(k)], n * p, 5 * sd) << "token " << k;
  }
}

// The straightforward algorithm, as the reference: sort every id (logit descending, then lower id), weights
// and their sum in that order, the top-p prefix, normalise.
std::vector<float> full_sort_distribution(const std::vector<float>& logits, const SamplingParams& p) {
  const int64_t vocab = int64_t(logits.size());
  std::vector<float> probs(logits.size(), 0.0f);
  if (p.greedy()) {
    probs[size_t(std::max_element(logits.begin(), logits.end()) - logits.begin())] = 1.0f;
    return probs;
  }
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  int64_t keep = (p.top_k > 0) ? std::min(p.top_k, vocab) : vocab;
  const float mx = logits[size_t(order[0])];
  std::vector<double> w(static_cast<size_t>(keep));
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    sum += (w[size_t(i)] = std::exp(double(logits[size_t(order[size_t(i)])] - mx) / p.temperature));
  }
  if (p.top_p < 1.0f) {
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
  for (int64_t i = 0; i < keep; ++i) probs[size_t(order[size_t(i)])] = float(w[size_t(i)] / sum);
  return probs;
}

// Normal logits; with ties, rounded to a grid of 0.5 (many equal logits) and every fifth id masked to -inf.
std::vector<float> random_logits(int64_t vocab, float sd, bool ties, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = normal(rng);
    if (ties) logits[i] = (i % 5 == 4) ? -std::numeric_limits<float>::infinity() : std::round(2 * logits[i]) / 2;
  }
  return logits;
}

// Same kept set, probabilities within 1e-6 relative, and sample_token draws what the reference would for the
// same random stream (one uniform double per draw, none when greedy).
void expect_matches_full_sort(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "vocab " << logits.size() << " temperature " << p.temperature << " top_p "
                                    << p.top_p << " top_k " << p.top_k << " seed " << seed);
  const int64_t vocab = int64_t(logits.size());
  const std::vector<float> want = full_sort_distribution(logits, p);
  std::vector<float> got(logits.size());
  sampling_distribution(logits.data(), vocab, p, got.data());
  int64_t kept_mismatches = 0, prob_mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    kept_mismatches += (got[i] > 0.0f) != (want[i] > 0.0f);
    prob_mismatches += !(std::abs(got[i] - want[i]) <= 1e-6 * want[i]);
  }
  EXPECT_EQ(kept_mismatches, 0);
  EXPECT_EQ(prob_mismatches, 0);
  std::mt19937_64 rng(seed), ref_rng(seed);
  for (int draw = 0; draw < 16; ++draw) {
    int32_t want_token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (!p.greedy()) {
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(ref_rng);
      double acc = 0;
      for (int64_t i = 0; i < vocab; ++i) {
        if (want[size_t(i)] <= 0.0f) continue;
        acc += want[size_t(i)];
        want_token = int32_t(i);
        if (u < acc) break;
      }
    }
    EXPECT_EQ(sample_token(logits.data(), vocab, p, rng), want_token) << "draw " << draw;
    EXPECT_TRUE(rng == ref_rng) << "draw " << draw;
  }
}

TEST(Sampler, MatchesAFullSortOnRandomLogits) {
  std::mt19937_64 rng(2024);
  for (int64_t vocab : {7, 320})
    for (bool ties : {false, true})
      for (float temperature : {0.0f, 0.7f, 1.0f, 1.5f})
        for (float top_p : {1.0f, 0.95f, 0.5f, 0.01f})
          for (int64_t top_k : {0, 1, 50})
            for (float sd : {0.3f, 3.0f}) {
              const std::vector<float> logits = random_logits(vocab, sd, ties, rng);
              expect_matches_full_sort(logits, {temperature, top_p, top_k}, rng());
            }
}

TEST(Sampler, MatchesAFullSortOnTheDeepSeekVocabulary) {
  const int64_t vocab = 129280;
  std::mt19937_64 rng(99);
  expect_matches_full_sort(random_logits(vocab, 3.0f, false, rng), {1.0f, 0.95f, 0}, rng());
  expect_matches_full_sort(random_logits(vocab, 3.0f, true, rng), {0.7f, 1.0f, 0}, rng());
  // Nearly flat: the top-p prefix spans most of the vocabulary.
  expect_matches_full_sort(random_logits(vocab, 0.5f, true, rng), {1.0f, 0.5f, 0}, rng());
}

TEST(Sampler, TokenLogprobsAreTheLogSoftmaxOfTheRawLogits) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(1000);
  for (float& x : logits) x = normal(rng);
  logits[17] = logits[18] = 30.0f;  // a tie at the top: the lower id first
  logits[3] = -std::numeric_limits<float>::infinity();
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - 30.0);
  const TokenLogprobs lp = token_logprobs(logits.data(), 1000, 500, 5);
  EXPECT_EQ(lp.token, 500);
  EXPECT_NEAR(lp.logprob, double(logits[500]) - 30.0 - std::log(sum), 1e-4);
  ASSERT_EQ(lp.top.size(), 5u);
  EXPECT_EQ(lp.top[0].first, 17);
  EXPECT_EQ(lp.top[1].first, 18);
  EXPECT_FLOAT_EQ(lp.top[0].second, lp.top[1].second);
  EXPECT_NEAR(lp.top[0].second, -std::log(sum), 1e-5);
  std::vector<int32_t> ids(1000);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(lp.top[i].first, ids[i]);
    EXPECT_NEAR(lp.top[i].second, double(logits[ids[i]]) - 30.0 - std::log(sum), 1e-4);
  }
  // A zero probability is carried as kMinLogprob (JSON has no -inf); no alternatives when none are asked.
  const TokenLogprobs impossible = token_logprobs(logits.data(), 1000, 3, 0);
  EXPECT_EQ(impossible.logprob, kMinLogprob);
  EXPECT_TRUE(impossible.top.empty());
  EXPECT_THROW(token_logprobs(logits.data(), 1000, 1000, 0), Error);
  EXPECT_THROW(token_logprobs(logits.data(), 1000, 0, kMaxTopLogprobs + 1), Error);
}

TEST(Sampler, ValidatesRanges) {
  EXPECT_THROW(validate({-1.0f, 1.0f, 0}), Error);
  EXPECT_THROW(validate({1.0f, 1.5f, 0}), Error);
  EXPECT_THROW(validate({1.0f, 1.0f, -2}), Error);
  EXPECT_NO_THROW(validate({0.0f, 1.0f, -1}));
}

}  // namespace
}  // namespace moeserve::engine
