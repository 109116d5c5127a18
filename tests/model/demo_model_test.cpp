// The trained demo model (models/demo) against its oracle: HF transformers' fp32 full forward of the
// exported weights (tests/fixtures/models/demo_oracle.safetensors, demo_heldout.safetensors).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generate.h"
#include "model/fixture.h"
#include "model/model.h"

namespace moeserve {
namespace {

std::vector<int32_t> ids_of(const Tensor& t, int64_t begin, int64_t end) {
  std::vector<int32_t> ids;
  for (int64_t i = begin; i < end; ++i) ids.push_back(int32_t(t.data<int64_t>()[i]));
  return ids;
}

// log softmax(row)[target], in double.
double log_prob(const float* row, int64_t vocab, int64_t target) {
  double mx = -INFINITY, sum = 0;
  for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, double(row[v]));
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - mx);
  return double(row[target]) - mx - std::log(sum);
}

class DemoModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = model::Model::load(testing::source_dir() + "/models/demo"); }
  static void TearDownTestSuite() { model_.reset(); }
  static std::shared_ptr<model::Model> model_;
};
std::shared_ptr<model::Model> DemoModel::model_;

TEST_F(DemoModel, LogitsMatchOracle) {
  auto oracle = io::Checkpoint::open_files({testing::fixture("models/demo_oracle.safetensors")});
  const Tensor& input = oracle.get("input_ids").tensor;
  const Tensor& positions = oracle.get("positions").tensor;
  const Tensor& logits = oracle.get("logits").tensor;
  const Tensor& logprob_next = oracle.get("logprob_next").tensor;
  const int64_t vocab = model_->config().vocab_size;
  auto ids = ids_of(input, 0, input.numel());
  Tensor got = engine::all_logits(*model_, ids, 0, model::Numerics::reference());
  float worst = 0;
  for (int64_t i = 0; i < positions.numel(); ++i) {
    int64_t p = positions.data<int64_t>()[i];
    for (int64_t v = 0; v < vocab; ++v)
      worst = std::max(worst, std::fabs(got.f32()[p * vocab + v] - logits.f32()[i * vocab + v]));
  }
  EXPECT_LE(worst, 1e-3f) << "max |logit - oracle| over the stored positions";
  double worst_lp = 0;
  for (int64_t t = 0; t + 1 < int64_t(ids.size()); ++t)
    worst_lp = std::max(worst_lp, std::fabs(log_prob(got.f32() + t * vocab, vocab, ids[size_t(t + 1)]) -
                                            double(logprob_next.f32()[t])));
  EXPECT_LE(worst_lp, 1e-3) << "max |log p(next) - oracle| over all 299 positions";
}

TEST_F(DemoModel, MtpLogitsMatchTheTrainingScriptsForward) {
  // The MTP layer at position t reads the main model's final hc streams at t and token t+1 (no HF oracle
  // exists for MTP; the reference is the training script's own forward, tools/train_demo_model.py).
  auto oracle = io::Checkpoint::open_files({testing::fixture("models/demo_oracle.safetensors")});
  const Tensor& input = oracle.get("input_ids").tensor;
  const Tensor& positions = oracle.get("mtp_positions").tensor;
  const Tensor& logits = oracle.get("mtp_logits").tensor;
  const Tensor& logprob = oracle.get("mtp_logprob").tensor;
  const int64_t vocab = model_->config().vocab_size, n = input.numel();
  auto ids = ids_of(input, 0, n);
  ASSERT_TRUE(model_->has_mtp());
  cache::KvCache cache(model_->kv_layout(/*speculative_tokens=*/4), 1, 4);
  auto seq = cache.open_sequence();
  ASSERT_TRUE(cache.reserve(seq, n));
  model::ForwardRequest main;
  main.seq = &seq;
  main.tokens = std::span<const int32_t>(ids);
  main.all_logits = true;
  main.keep_hidden = true;
  auto main_out = model_->forward(cache, {main}, model::Numerics::reference());
  seq.length = n;
  model::MtpRequest mtp;
  mtp.seq = &seq;
  mtp.start_pos = 0;
  mtp.next_tokens = std::span<const int32_t>(ids.data() + 1, size_t(n - 1));
  mtp.h = main_out.hidden.f32();
  auto out = model_->mtp_forward(cache, {mtp}, model::Numerics::reference());
  ASSERT_EQ(out.logits.dim(0), n - 1);
  float worst = 0;
  for (int64_t i = 0; i < positions.numel(); ++i) {
    int64_t p = positions.data<int64_t>()[i];
    for (int64_t v = 0; v < vocab; ++v)
      worst = std::max(worst, std::fabs(out.logits.f32()[p * vocab + v] - logits.f32()[i * vocab + v]));
  }
  EXPECT_LE(worst, 1e-3f) << "max |MTP logit - reference|";
  double worst_lp = 0;
  for (int64_t t = 0; t + 2 < n; ++t)
    worst_lp = std::max(worst_lp, std::fabs(log_prob(out.logits.f32() + t * vocab, vocab, ids[size_t(t + 2)]) -
                                            double(logprob.f32()[t])));
  EXPECT_LE(worst_lp, 1e-3) << "max |MTP log p(token t+2) - reference|";
}

TEST_F(DemoModel, HeldOutWindowNllMatchesOracle) {
  // Two 512-token windows of the held-out stream (the whole set is a benchmark: bench/demo_perplexity.cpp).
  auto heldout = io::Checkpoint::open_files({testing::fixture("models/demo_heldout.safetensors")});
  const Tensor& stream = heldout.get("heldout_ids").tensor;
  const Tensor& nll = heldout.get("window_nll").tensor;
  const int64_t vocab = model_->config().vocab_size;
  for (int64_t w : {0, 1}) {
    auto ids = ids_of(stream, w * 512, (w + 1) * 512);
    Tensor got = engine::all_logits(*model_, ids, 0, model::Numerics::reference());
    double sum = 0;
    for (int64_t t = 0; t + 1 < int64_t(ids.size()); ++t) sum -= log_prob(got.f32() + t * vocab, vocab, ids[size_t(t + 1)]);
    double want = nll.data<double>()[w];
    EXPECT_LE(std::fabs(sum - want) / want, 1e-5) << "window " << w << ": engine " << sum << " oracle " << want;
  }
}

}  // namespace
}  // namespace moeserve
