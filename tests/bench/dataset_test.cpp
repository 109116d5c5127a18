// Random datasets: SGLang's length ranges, random-ids content, exact text lengths.
#include <algorithm>
#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "bench/arrivals.h"
#include "bench/dataset.h"
#include "core/error.h"

namespace moeserve::bench {
namespace {

// A small tokenizer with merges, so decode → encode does not round-trip: ids 0..25 are the letters
// a..z, 26 is "ab" (greedy longest match when encoding), 27 is a special token that the server's
// encode adds in front (like BOS).
class MergingCodec final : public TokenCodec {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size();) {
      if (text.substr(i, 2) == "ab") {
        ids.push_back(26);
        i += 2;
      } else {
        ids.push_back(text[i] - 'a');
        i += 1;
      }
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids) text += id == 26 ? std::string("ab") : std::string(1, static_cast<char>('a' + id));
    return text;
  }
  size_t vocab_size() const override { return 28; }
  size_t num_special_tokens_to_add() const override { return 1; }
  std::vector<int32_t> ordinary_ids() const override {
    std::vector<int32_t> ids(27);
    for (int32_t i = 0; i < 27; ++i) ids[i] = i;
    return ids;
  }
};

TEST(BenchDataset, RandomLengthsFollowSglangsRange) {
  std::mt19937_64 rng(1);
  for (int l : random_lengths(100, 1.0, 50, rng)) EXPECT_EQ(l, 100);
  std::map<int, int> seen;
  for (int l : random_lengths(10, 0.5, 2000, rng)) ++seen[l];
  EXPECT_EQ(seen.begin()->first, 5);  // [max(⌊10·0.5⌋,1), 10]
  EXPECT_EQ(seen.rbegin()->first, 10);
  EXPECT_EQ(seen.size(), 6u);
  seen.clear();
  for (int l : random_lengths(4, 0.0, 2000, rng)) ++seen[l];
  EXPECT_EQ(seen.begin()->first, 1);  // ratio 0: [1, L]
  EXPECT_EQ(seen.rbegin()->first, 4);
  EXPECT_THROW(random_lengths(0, 0.0, 1, rng), Error);
}

TEST(BenchDataset, RandomIdsAreConsecutiveIdsFromARandomOffset) {
  std::mt19937_64 rng(3);
  const auto prompts = random_ids_dataset({5, 12, 7, 1.0}, 10, rng);
  ASSERT_EQ(prompts.size(), 5u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Prompt& p = prompts[i];
    EXPECT_TRUE(p.as_ids);
    EXPECT_EQ(p.prompt_len, 12);
    EXPECT_EQ(p.output_len, 7);
    ASSERT_EQ(p.ids.size(), 12u);
    for (size_t j = 1; j < p.ids.size(); ++j) EXPECT_EQ(p.ids[j], (p.ids[j - 1] + 1) % 10);
  }
  // Same seed, same dataset.
  std::mt19937_64 again(3);
  EXPECT_EQ(random_ids_dataset({5, 12, 7, 1.0}, 10, again)[4].ids, prompts[4].ids);
}

TEST(BenchDataset, RandomTextReencodesToTheExactLength) {
  MergingCodec codec;
  std::mt19937_64 rng(11);
  TextDatasetStats stats;
  const auto prompts = random_text_dataset({40, 64, 16, 0.5}, codec, rng, &stats);
  ASSERT_EQ(prompts.size(), 40u);
  EXPECT_EQ(stats.inexact, 0);
  for (const Prompt& p : prompts) {
    EXPECT_FALSE(p.as_ids);
    EXPECT_EQ(static_cast<int>(codec.encode(p.text).size()), p.prompt_len);
    // Target lengths are [32, 64] minus the one special token the server adds.
    EXPECT_GE(p.prompt_len, 31);
    EXPECT_LE(p.prompt_len, 63);
    EXPECT_GE(p.output_len, 8);
    EXPECT_LE(p.output_len, 16);
  }
}

TEST(BenchArrivals, InfiniteRateReleasesAllAtOnceOtherwiseMeanIntervalIsOneOverRate) {
  std::mt19937_64 rng(5);
  for (double t : arrival_times(10, std::numeric_limits<double>::infinity(), 1.0, rng)) EXPECT_EQ(t, 0.0);
  const int n = 20000;
  for (double burstiness : {1.0, 0.25, 4.0}) {
    const auto times = arrival_times(n, 8.0, burstiness, rng);
    EXPECT_EQ(times[0], 0.0);
    EXPECT_TRUE(std::is_sorted(times.begin(), times.end()));
    const double mean_interval = times.back() / (n - 1);
    // Gamma intervals: mean 1/rate, coefficient of variation 1/sqrt(burstiness); 6 standard errors.
    const double tolerance = 6.0 * (1.0 / 8.0) / std::sqrt(burstiness) / std::sqrt(n - 1.0);
    EXPECT_NEAR(mean_interval, 1.0 / 8.0, tolerance) << "burstiness " << burstiness;
  }
}

}  // namespace
}  // namespace moeserve::bench
