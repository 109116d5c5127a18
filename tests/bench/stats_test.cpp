// numpy semantics of the summary statistics (values checked against numpy 1.26 by hand).
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "bench/stats.h"
#include "core/error.h"

namespace moeserve::bench {
namespace {

TEST(BenchStats, PercentileInterpolatesLinearlyLikeNumpy) {
  const std::vector<double> v = {4, 1, 3, 2};  // unsorted on purpose
  EXPECT_EQ(percentile(v, 0), 1.0);
  EXPECT_EQ(percentile(v, 50), 2.5);  // virtual index 1.5
  EXPECT_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);  // 3 + 0.97·(4-3)
  const std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(percentile(ten, 99), 9.91);  // np.percentile(range(1, 11), 99)
  EXPECT_DOUBLE_EQ(percentile(ten, 95), 9.55);
  const std::vector<double> five = {0, 10, 20, 30, 40};
  EXPECT_EQ(percentile(five, 25), 10.0);
  EXPECT_EQ(percentile(std::vector<double>{7.0}, 99), 7.0);
}

TEST(BenchStats, MedianMeanAndPopulationStd) {
  EXPECT_EQ(median(std::vector<double>{3, 1, 2}), 2.0);
  EXPECT_EQ(median(std::vector<double>{4, 1, 3, 2}), 2.5);
  const std::vector<double> v = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_EQ(mean(v), 5.0);
  EXPECT_EQ(stddev(v), 2.0);  // ddof = 0
  EXPECT_EQ(sum(v), 40.0);
  EXPECT_EQ(max_value(v), 9.0);
  EXPECT_EQ(stddev(std::vector<double>{3.0}), 0.0);
}

TEST(BenchStats, PairwiseSumOverManyValues) {
  std::vector<double> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  EXPECT_EQ(sum(v), 499500.0);
  EXPECT_EQ(mean(v), 499.5);
}

TEST(BenchStats, EmptySampleIsNaNAndBadPercentileThrows) {
  const std::vector<double> empty;
  EXPECT_TRUE(std::isnan(mean(empty)));
  EXPECT_TRUE(std::isnan(median(empty)));
  EXPECT_TRUE(std::isnan(stddev(empty)));
  EXPECT_TRUE(std::isnan(percentile(empty, 99)));
  EXPECT_TRUE(std::isnan(max_value(empty)));
  EXPECT_THROW(percentile(std::vector<double>{1.0}, 101), Error);
}

}  // namespace
}  // namespace moeserve::bench
