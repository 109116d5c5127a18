// The reference engine against HF transformers' fp32 logits (full forward without cache), for every fixture:
// one forward, chunked prefill (1, 3, 7), prefill + token-by-token decode, and greedy generation.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generate.h"
#include "model/fixture.h"
#include "model/model.h"

namespace moeserve {
namespace {

constexpr float kTolerance = 1e-3f;  // the bar: fp32 logits within 1e-3 absolute

class Parity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = model::Model::load(testing::model_fixture(GetParam()));
    oracle_ = testing::load_oracle(GetParam());
    inputs_.assign(oracle_.ids.begin(), oracle_.ids.end() - 1);  // logits exist for all but the last id
  }
  void expect_close(const Tensor& got, const std::string& what) {
    ASSERT_EQ(got.shape(), oracle_.logits.shape()) << what;
    float diff = testing::max_abs_diff(got, oracle_.logits);
    EXPECT_LE(diff, kTolerance) << what << ": max |logit - oracle| = " << diff;
    RecordProperty(what, std::to_string(diff));
  }
  std::shared_ptr<model::Model> model_;
  testing::Oracle oracle_;
  std::vector<int32_t> inputs_;
};

TEST_P(Parity, FullForwardMatchesOracle) {
  expect_close(engine::all_logits(*model_, inputs_, 0, model::Numerics::reference()), "one forward");
}

TEST_P(Parity, ChunkedPrefillMatchesOracle) {
  for (int64_t chunk : {1, 3, 7})
    expect_close(engine::all_logits(*model_, inputs_, chunk, model::Numerics::reference()),
                 "chunk " + std::to_string(chunk));
}

TEST_P(Parity, PrefillThenDecodeMatchesOracle) {
  engine::GenerateOptions o;
  o.max_new_tokens = int64_t(oracle_.ids.size()) - oracle_.prompt_len;
  o.keep_logits = true;
  std::vector<int32_t> prompt(oracle_.ids.begin(), oracle_.ids.begin() + oracle_.prompt_len);
  auto result = engine::generate(*model_, prompt, o);
  expect_close(result.logits, "prefill + decode");
  std::vector<int32_t> want(oracle_.ids.begin() + oracle_.prompt_len, oracle_.ids.end());
  EXPECT_EQ(result.output_ids, want) << "greedy tokens differ from the oracle's";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::Values("tiny_hf", "tiny_yarn"));

}  // namespace
}  // namespace moeserve
