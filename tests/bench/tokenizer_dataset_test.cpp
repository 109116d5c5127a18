// Text prompts built with a real tokenizer (the demo model's byte-level BPE): they re-encode to
// exactly their stated length, and the BOS the server adds is left out of it, as SGLang does.
#include <random>

#include <gtest/gtest.h>

#include "bench/tokenizer_codec.h"
#include "core/error.h"
#include "test_paths.h"

namespace moeserve::bench {
namespace {

TEST(BenchTokenizerDataset, DemoTokenizerPromptsHaveExactLengths) {
  const auto codec = load_token_codec(moeserve::testing::source_dir() + "/models/demo");
  EXPECT_GE(codec->vocab_size(), 8192u);  // model vocabulary plus added tokens
  EXPECT_EQ(codec->num_special_tokens_to_add(), 1u);  // BOS
  const auto ordinary = codec->ordinary_ids();
  EXPECT_GT(ordinary.size(), 7000u);  // whole-character tokens
  std::mt19937_64 rng(1);
  TextDatasetStats stats;
  const auto prompts = random_text_dataset({64, 256, 32, 0.5}, *codec, rng, &stats);
  EXPECT_EQ(stats.inexact, 0);
  for (const Prompt& p : prompts) {
    EXPECT_EQ(static_cast<int>(codec->encode(p.text).size()), p.prompt_len);
    EXPECT_GE(p.prompt_len, 127);  // [128, 256] minus BOS
    EXPECT_LE(p.prompt_len, 255);
  }
}

TEST(BenchTokenizerDataset, MissingTokenizerIsAClearError) {
  EXPECT_THROW(load_token_codec("/nonexistent/tokenizer.json"), Error);
}

}  // namespace
}  // namespace moeserve::bench
