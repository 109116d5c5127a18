// The host-side packing of a layer's MXFP4 experts for the W4A8 GEMM (model/mxfp4_experts.h): the parallel
// batch equals packing each expert alone, unpacks to the checkpoint's bytes, and bad experts are named; the types
// random (dummy) weights of a config get.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "io/model_config.h"
#include "kernels/cpu/moe_w4a8_pack.h"
#include "model/mxfp4_experts.h"
#include "test_paths.h"

namespace moeserve::model {
namespace {

namespace pk = kernels::cpu;

LinearWeight random_mxfp4(std::mt19937& rng, const std::string& name, int64_t out, int64_t in) {
  LinearWeight w;
  w.name = name;
  w.format = WeightFormat::Mxfp4;
  w.out = out;
  w.in = in;
  w.weight = Tensor::empty(DType::I8, {out, in / 2});
  w.scale = Tensor::empty(DType::F8_E8M0, {out, in / 32});
  auto* wb = static_cast<uint8_t*>(w.weight.raw());
  auto* sb = static_cast<uint8_t*>(w.scale.raw());
  for (int64_t i = 0; i < out * in / 2; ++i) wb[i] = uint8_t(rng());
  for (int64_t r = 0; r < out; ++r) {
    const int base = 110 + int(rng() % 16);
    for (int64_t b = 0; b < in / 32; ++b) sb[r * (in / 32) + b] = uint8_t(base - int(rng() % 6));
  }
  if (out > 3) sb[3 * (in / 32) + 1] = uint8_t(sb[3 * (in / 32)] - 20);  // one block far below its row: a wide group
  return w;
}

std::vector<ExpertWeights> random_experts(int E, int D, int I, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<ExpertWeights> experts(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    const std::string p = "layers.0.ffn.experts." + std::to_string(e);
    experts[size_t(e)].w1 = random_mxfp4(rng, p + ".w1", I, D);
    experts[size_t(e)].w3 = random_mxfp4(rng, p + ".w3", I, D);
    experts[size_t(e)].w2 = random_mxfp4(rng, p + ".w2", D, I);
  }
  return experts;
}

TEST(Mxfp4Experts, ParallelBatchEqualsEachExpertAloneAndUnpacks) {
  const int E = 6, D = 256, I = 512;
  const auto experts = random_experts(E, D, I, 7);
  const PackedMxfp4Experts p = pack_mxfp4_experts(experts, 1, 4);
  ASSERT_EQ(p.count, 4);
  EXPECT_EQ(p.w13_bytes, pk::moe_w4a8_packed_expert_bytes(2 * I, D));
  EXPECT_EQ(p.w2_bytes, pk::moe_w4a8_packed_expert_bytes(D, I));
  EXPECT_GT(p.wide_groups, 0);
  for (int i = 0; i < 4; ++i) {
    const ExpertWeights& x = experts[size_t(1 + i)];
    // W13 alone: w1 rows then w3 rows.
    std::vector<uint8_t> w(size_t(2 * I) * (D / 2)), s(size_t(2 * I) * (D / 32));
    std::memcpy(w.data(), x.w1.weight.raw(), size_t(I) * (D / 2));
    std::memcpy(w.data() + size_t(I) * (D / 2), x.w3.weight.raw(), size_t(I) * (D / 2));
    std::memcpy(s.data(), x.w1.scale.raw(), size_t(I) * (D / 32));
    std::memcpy(s.data() + size_t(I) * (D / 32), x.w3.scale.raw(), size_t(I) * (D / 32));
    std::vector<uint8_t> alone(p.w13_bytes);
    std::vector<uint64_t> flags(p.w13_flag_words);
    pk::moe_w4a8_pack_expert(w.data(), s.data(), 2 * I, D, alone.data(), flags.data());
    EXPECT_EQ(0, std::memcmp(alone.data(), p.w13.data() + size_t(i) * p.w13_bytes, p.w13_bytes)) << "expert " << 1 + i;
    EXPECT_EQ(0, std::memcmp(flags.data(), p.w13_flags.data() + size_t(i) * p.w13_flag_words, flags.size() * 8));
    // W2 unpacks to the checkpoint's bytes (no all-zero blocks in random data, so no scale is normalised).
    std::vector<uint8_t> w2(size_t(D) * (I / 2)), s2(size_t(D) * (I / 32));
    pk::moe_w4a8_unpack_expert(p.w2.data() + size_t(i) * p.w2_bytes, D, I, w2.data(), s2.data());
    EXPECT_EQ(0, std::memcmp(w2.data(), x.w2.weight.raw(), w2.size())) << "expert " << 1 + i;
    EXPECT_EQ(0, std::memcmp(s2.data(), x.w2.scale.raw(), s2.size())) << "expert " << 1 + i;
  }
}

TEST(Mxfp4Experts, BadExpertsAreNamed) {
  auto experts = random_experts(3, 256, 256, 9);
  experts[2].w2.format = WeightFormat::Fp8Block;
  try {
    pack_mxfp4_experts(experts, 0, 3);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.ffn.experts.2.w2: expected MXFP4"), std::string::npos) << e.what();
  }
  auto narrow = random_experts(2, 192, 256, 9);
  try {
    pack_mxfp4_experts(narrow, 0, 2);
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("hidden 192 / expert width 256 do not fit the W4A8 GEMM"), std::string::npos)
        << e.what();
  }
}

TEST(Mxfp4Experts, DummyWeightTypesFollowTheConfig) {
  // V4-Flash: an FP8 checkpoint with FP4 experts. MXFP4 experts unless the GEMMs are the exact ones.
  io::ModelConfig flash = io::load_model_config(testing::source_dir() + "/presets/models/deepseek-v4-flash/config.json");
  DummyWeightTypes t = dummy_weight_types(flash, false);
  EXPECT_TRUE(t.fp8_linears);
  EXPECT_TRUE(t.mxfp4_experts);
  t = dummy_weight_types(flash, true);
  EXPECT_TRUE(t.fp8_linears);
  EXPECT_FALSE(t.mxfp4_experts);
  // FP8 experts when the config does not say FP4, or when the shapes do not fit the W4A8 GEMM.
  io::ModelConfig fp8 = flash;
  fp8.expert_dtype = "";
  EXPECT_FALSE(dummy_weight_types(fp8, false).mxfp4_experts);
  io::ModelConfig odd = flash;
  odd.moe_intermediate_size = 2048 + 128;
  EXPECT_FALSE(dummy_weight_types(odd, false).mxfp4_experts);
  // The demo model: BF16, no quantization_config.
  io::ModelConfig demo = io::load_model_config(testing::source_dir() + "/models/demo/config.json");
  t = dummy_weight_types(demo, false);
  EXPECT_FALSE(t.fp8_linears);
  EXPECT_FALSE(t.mxfp4_experts);
}

}  // namespace
}  // namespace moeserve::model
