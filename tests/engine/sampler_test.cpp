#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

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

TEST(Sampler, ValidatesRanges) {
  EXPECT_THROW(validate({-1.0f, 1.0f, 0}), Error);
  EXPECT_THROW(validate({1.0f, 1.5f, 0}), Error);
  EXPECT_THROW(validate({1.0f, 1.0f, -2}), Error);
  EXPECT_NO_THROW(validate({0.0f, 1.0f, -1}));
}

}  // namespace
}  // namespace moeserve::engine
