// The whole model on the GPU: the committed fixtures' HF oracle logits (within 1e-3, as the reference engine's
// parity tests), the demo model's oracle, and a V4-Flash-shaped dummy model (random weights created on the GPU)
// through prefill, eager decode and CUDA-graph decode.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generate.h"
#include "engine/gpu_generate.h"
#include "io/model_config.h"
#include "kernels/cuda/device.h"
#include "model/fixture.h"
#include "model/gpu_model.h"
#include "model/model.h"
#include "gpu_skip.h"

namespace moeserve {
namespace {

constexpr float kTolerance = 1e-3f;

class GpuParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    model_ = model::Model::load(testing::model_fixture(GetParam()));
    oracle_ = testing::load_oracle(GetParam());
    inputs_.assign(oracle_.ids.begin(), oracle_.ids.end() - 1);
  }
  void expect_close(const Tensor& got, const std::string& what) {
    ASSERT_EQ(got.shape(), oracle_.logits.shape()) << what;
    const float diff = testing::max_abs_diff(got, oracle_.logits);
    EXPECT_LE(diff, kTolerance) << what << ": max |logit - oracle| = " << diff;
    std::printf("  %s %s: max |logit - oracle| = %.3g\n", GetParam().c_str(), what.c_str(), diff);
  }
  std::shared_ptr<model::Model> model_;
  testing::Oracle oracle_;
  std::vector<int32_t> inputs_;
};

TEST_P(GpuParity, FullForwardMatchesOracle) {
  expect_close(engine::all_logits_cuda(*model_, inputs_, 0, model::Numerics::reference()), "one forward");
}

TEST_P(GpuParity, ChunkedPrefillMatchesOracle) {
  for (int64_t chunk : {1, 3, 7})
    expect_close(engine::all_logits_cuda(*model_, inputs_, chunk, model::Numerics::reference()),
                 "chunk " + std::to_string(chunk));
}

TEST_P(GpuParity, PrefillThenDecodeMatchesOracle) {
  for (bool graphs : {false, true}) {
    engine::GenerateOptions o;
    o.max_new_tokens = int64_t(oracle_.ids.size()) - oracle_.prompt_len;
    o.keep_logits = true;
    std::vector<int32_t> prompt(oracle_.ids.begin(), oracle_.ids.begin() + oracle_.prompt_len);
    auto result = engine::generate_cuda(*model_, prompt, o, {true, graphs});
    expect_close(result.logits, graphs ? "prefill + decode (CUDA graphs)" : "prefill + decode");
    std::vector<int32_t> want(oracle_.ids.begin() + oracle_.prompt_len, oracle_.ids.end());
    EXPECT_EQ(result.output_ids, want) << "greedy tokens differ from the oracle's";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuParity, ::testing::Values("tiny_hf", "tiny_yarn"));

TEST(GpuDemo, LogitsMatchOracleAndCheckpointNumericsTrackTheReference) {
  SKIP_WITHOUT_GPU();
  auto model = model::Model::load(testing::source_dir() + "/models/demo");
  auto oracle = io::Checkpoint::open_files({testing::fixture("models/demo_oracle.safetensors")});
  const Tensor& input = oracle.get("input_ids").tensor;
  const Tensor& positions = oracle.get("positions").tensor;
  const Tensor& logits = oracle.get("logits").tensor;
  const int64_t vocab = model->config().vocab_size;
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < input.numel(); ++i) ids.push_back(int32_t(input.data<int64_t>()[i]));
  Tensor got = engine::all_logits_cuda(*model, ids, 0, model::Numerics::reference());
  float worst = 0;
  for (int64_t i = 0; i < positions.numel(); ++i) {
    const int64_t p = positions.data<int64_t>()[i];
    for (int64_t v = 0; v < vocab; ++v)
      worst = std::max(worst, std::fabs(got.f32()[p * vocab + v] - logits.f32()[i * vocab + v]));
  }
  EXPECT_LE(worst, kTolerance) << "demo: max |logit - oracle| over the stored positions";
  std::printf("  demo: max |logit - oracle| = %.3g\n", worst);
  // Checkpoint numerics (FP8 activations, KV FP8, indexer FP4 simulations): the GPU against the CPU reference
  // engine. A value within fp32 rounding of a quantization boundary may round the other way, so this is a
  // closeness check (reported), not bit-equality.
  const std::vector<int32_t> head(ids.begin(), ids.begin() + 160);
  Tensor cpu = engine::all_logits(*model, head, 64, model::Numerics::checkpoint());
  Tensor gpu = engine::all_logits_cuda(*model, head, 64, model::Numerics::checkpoint());
  const float diff = testing::max_abs_diff(gpu, cpu);
  std::printf("  demo checkpoint numerics: max |gpu - cpu| = %.3g\n", diff);
  EXPECT_LE(diff, 5e-2f);
}

TEST(GpuDummy, FlashShapedPrefillDecodeAndGraphs) {
  SKIP_WITHOUT_GPU();
  io::ModelConfig config =
      io::load_model_config(testing::source_dir() + "/presets/models/deepseek-v4-flash/config.json");
  // Layers 0-3: window-only (hash MoE), window-only, C4 (indexer), C128. Routed experts FP8 (the skinny GEMM /
  // cuBLASLt) or MXFP4 (the W4A8 grouped GEMM).
  for (cuda::WeightType experts : {cuda::WeightType::FP8, cuda::WeightType::MXFP4}) {
    const char* name = experts == cuda::WeightType::FP8 ? "fp8" : "mxfp4";
    auto m = model::GpuModel::dummy(config, 4, cuda::WeightType::FP8, experts, 7, {true, {}});
    const int64_t max_len = 1024, prompt = 300, vocab = config.vocab_size;
    std::vector<int32_t> ids(static_cast<size_t>(prompt));
    for (int64_t i = 0; i < prompt; ++i) ids[size_t(i)] = int32_t((i * 7919) % vocab);
    std::vector<std::vector<float>> logits(2);
    for (int graphs = 0; graphs < 2; ++graphs) {
      model::GpuKvCache cache(m->kv_layout(), 3, 3 * (max_len / 256 + 1));
      std::vector<cache::SequenceKv> seqs(3);
      for (auto& s : seqs) {
        s = cache.host().open_sequence();
        ASSERT_TRUE(cache.host().reserve(s, max_len));
      }
      // Prefill: sequence 0 in one chunk, sequences 1 and 2 batched in chunks.
      std::vector<int64_t> first, count;
      m->forward_async(cache, {{&seqs[0], ids, false, false}}, &first, &count);
      seqs[0].length += prompt;
      for (int64_t b = 0; b < 64; b += 32) {
        std::span<const int32_t> chunk(ids.data() + b, 32);
        m->forward_async(cache, {{&seqs[1], chunk, false, false}, {&seqs[2], chunk, false, false}}, &first, &count);
        seqs[1].length += 32;
        seqs[2].length += 32;
      }
      // Decode: 6 steps of a batch of 3.
      for (int step = 0; step < 6; ++step) {
        std::vector<int32_t> toks = {int32_t(11 + step), int32_t(22 + step), int32_t(33 + step)};
        std::vector<model::ForwardRequest> reqs;
        for (int s = 0; s < 3; ++s) reqs.push_back({&seqs[size_t(s)], std::span<const int32_t>(&toks[size_t(s)], 1), false, false});
        m->forward_async(cache, reqs, &first, &count, graphs == 1, max_len);
        for (auto& s : seqs) s.length += 1;
        std::vector<float> host(static_cast<size_t>(3 * vocab));
        cuda::copy_to_host(host.data(), m->logits_device(), host.size() * sizeof(float), m->stream(), "logits");
        logits[size_t(graphs)].insert(logits[size_t(graphs)].end(), host.begin(), host.end());
      }
      if (graphs) EXPECT_EQ(m->graphs_captured(), 1);
    }
    float mx = 0, diff = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) {
      ASSERT_TRUE(std::isfinite(logits[0][i]) && std::isfinite(logits[1][i])) << i;
      mx = std::max(mx, std::fabs(logits[0][i]));
      diff = std::max(diff, std::fabs(logits[0][i] - logits[1][i]));
    }
    std::printf("  dummy V4-Flash 4 layers, %s experts: max |logit| %.3g, max |graph - eager| %.3g\n", name, mx, diff);
    EXPECT_GT(mx, 0.0f) << name;
    EXPECT_LE(diff, 1e-3f * mx) << name;
  }
}

}  // namespace
}  // namespace moeserve
