// The quantization semantics of DeepSeek-V4 (kernels/cpu/quant.h) on hand-computed cases and invariants:
// power-of-two scales exactly as the official kernels compute them, FP8/FP4 block simulation, the Hadamard
// rotation, and the checkpoint weight quantizers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/quant.h"

namespace moeserve::kernels::cpu {
namespace {

// 2^ceil(log2(x)) computed without floating-point logs: frexp gives x = m * 2^e with m in [0.5, 1).
float pow2_ceil_exact(float x) {
  int e;
  float m = std::frexp(x, &e);
  return m == 0.5f ? x : std::ldexp(1.0f, e);
}

TEST(Pow2Scale, CeilLog2IsExactNearPowersOfTwo) {
  for (int k = -60; k <= 60; ++k) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(pow2_ceil(p), p) << k;
    EXPECT_EQ(pow2_ceil(std::nextafter(p, INFINITY)), 2 * p) << k;  // std::ceil(std::log2(.)) says p here
    EXPECT_EQ(pow2_ceil(std::nextafter(p, 0.0f)), p) << k;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-40.0f, 40.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::exp2(exponent(rng));
    ASSERT_EQ(pow2_ceil(x), pow2_ceil_exact(x)) << x;
  }
}

TEST(Pow2Scale, FormatRulesAndFloors) {
  // amax = 448 * 2^k maps to 2^k (the reciprocal of 448 rounds up, but the product still rounds to 2^k);
  // one ulp more needs the next power.
  for (int k = -20; k <= 20; ++k) {
    const float amax = std::ldexp(448.0f, k);
    EXPECT_EQ(fp8_pow2_scale(amax), std::ldexp(1.0f, k)) << k;
    EXPECT_EQ(fp8_pow2_scale(std::nextafter(amax, INFINITY)), std::ldexp(1.0f, k + 1)) << k;
    EXPECT_EQ(fp4_pow2_scale(std::ldexp(6.0f, k)), std::ldexp(1.0f, k)) << k;
    EXPECT_EQ(fp4_pow2_scale(std::ldexp(std::nextafter(6.0f, INFINITY), k)), std::ldexp(1.0f, k + 1)) << k;
  }
  // FP8 floors amax at 1e-4: 1e-4 / 448 = 2.2e-7 -> 2^-22. FP4 floors at 6 * 2^-126 -> 2^-126.
  EXPECT_EQ(fp8_pow2_scale(0.0f), std::ldexp(1.0f, -22));
  EXPECT_EQ(fp8_pow2_scale(1e-6f), std::ldexp(1.0f, -22));
  EXPECT_EQ(fp4_pow2_scale(0.0f), std::ldexp(1.0f, -126));
  EXPECT_EQ(fp4_pow2_scale(1e-5f), std::ldexp(1.0f, -19));  // 1e-5/6 = 1.67e-6 <= 2^-19 = 1.91e-6
}

TEST(Pow2Scale, E8M0Encoding) {
  EXPECT_EQ(e8m0_from_pow2(1.0f), 127);
  EXPECT_EQ(e8m0_from_pow2(std::ldexp(1.0f, -22)), 105);
  EXPECT_EQ(e8m0_from_pow2(std::ldexp(1.0f, -127)), 0);
  EXPECT_EQ(e8m0_from_pow2(std::ldexp(1.0f, 127)), 254);
  EXPECT_THROW(e8m0_from_pow2(3.0f), moeserve::Error);
  EXPECT_THROW(e8m0_from_pow2(0.0f), moeserve::Error);
}

TEST(Fp8BlockSim, HandComputedBlock) {
  // amax 3.5 -> scale 3.5/448 = 2^-7; x/s = 128, 38.4, -8.96, 448 -> e4m3 128, 40, -9, 448.
  std::vector<float> x = {1.0f, 0.3f, -0.07f, 3.5f};
  fp8_block_sim(x.data(), 1, 4, 4, 4);
  EXPECT_EQ(x, (std::vector<float>{1.0f, 0.3125f, -0.0703125f, 3.5f}));
}

TEST(Fp8BlockSim, BlocksAreIndependentAndOnlyTheFirstWidthValuesChange) {
  // Two rows of 6 values, blocks of 2 over the first 4 (the KV layout: nope dims quantized, rope dims kept).
  std::vector<float> x = {100.0f, 1.1f, 0.01f, 0.0011f, 0.123456f, 7.654321f,
                          -3.0f,  3.1f, 1e-9f, 0.0f,    -0.5f,     0.25f};
  std::vector<float> y = x;
  fp8_block_sim(y.data(), 2, 6, 4, 2);
  for (int r = 0; r < 2; ++r) {
    for (int b = 0; b < 2; ++b) {
      const float* in = x.data() + r * 6 + b * 2;
      const float s = fp8_pow2_scale(std::fmax(std::fabs(in[0]), std::fabs(in[1])));
      for (int i = 0; i < 2; ++i) EXPECT_EQ(y[r * 6 + b * 2 + i], round_to_fp8_e4m3(in[i] / s) * s);
    }
    EXPECT_EQ(y[r * 6 + 4], x[r * 6 + 4]);
    EXPECT_EQ(y[r * 6 + 5], x[r * 6 + 5]);
  }
  EXPECT_EQ(y[1], 1.125f);  // 1.1 in the block of 100: scale 2^-2, 4.4 -> 4.5
}

TEST(Fp8BlockSim, RelativeErrorIsAtMostTwoToTheMinusFour) {
  // e4m3 keeps 3 mantissa bits: |error| <= 2^-4 |x| while x/s is normal (>= 2^-6), else half a subnormal
  // step, 2^-10 s.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(128 * 64);
  for (float& v : x) v = normal(rng) * std::exp2(normal(rng) * 3);
  std::vector<float> y = x;
  fp8_block_sim(y.data(), 64, 128, 128, 128);
  for (int64_t r = 0; r < 64; ++r) {
    float amax = 0;
    for (int64_t i = 0; i < 128; ++i) amax = std::fmax(amax, std::fabs(x[size_t(r * 128 + i)]));
    const float s = fp8_pow2_scale(amax);
    for (int64_t i = 0; i < 128; ++i) {
      const float v = x[size_t(r * 128 + i)], err = std::fabs(y[size_t(r * 128 + i)] - v);
      if (std::fabs(v) / s >= std::ldexp(1.0f, -6))
        ASSERT_LE(err, std::ldexp(std::fabs(v), -4)) << v;
      else
        ASSERT_LE(err, std::ldexp(s, -10)) << v;
    }
  }
}

TEST(Fp4BlockSim, HandComputedBlock) {
  // amax 5 -> 5/6 -> scale 1: ties go to the even code (2.5 -> 2, 5 -> 4, 1.25 -> 1, 1.75 -> 2, 0.25 -> 0).
  std::vector<float> x(32, 0.0f);
  const float in[] = {2.5f, 5.0f, 0.2f, 0.3f, 1.25f, 1.75f, -0.25f, -0.75f, 3.5f, -4.9f};
  const float want[] = {2.0f, 4.0f, 0.0f, 0.5f, 1.0f, 2.0f, -0.0f, -1.0f, 4.0f, -4.0f};
  for (int i = 0; i < 10; ++i) x[size_t(i)] = in[i];
  fp4_block_sim(x.data(), 1, 32, 32);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(x[size_t(i)], want[i]) << in[i];
}

TEST(Fp4BlockSim, TinyBlocksKeepTheirOwnScale) {
  // The official amax floor is 6 * 2^-126, not 1e-4: a block of magnitude 1e-5 keeps scale 2^-19.
  std::vector<float> x(32, 0.0f);
  x[0] = 1e-5f;
  x[1] = -2.5e-6f;
  fp4_block_sim(x.data(), 1, 32, 32);
  EXPECT_EQ(x[0], 6 * std::ldexp(1.0f, -19));      // 5.24 -> 6
  EXPECT_EQ(x[1], -1.5f * std::ldexp(1.0f, -19));  // -1.31 -> -1.5
}

TEST(Hadamard, SylvesterOrderAndOrthonormal) {
  const int d = 16;
  for (int j = 0; j < d; ++j) {
    std::vector<float> e(d, 0.0f);
    e[size_t(j)] = 1.0f;
    hadamard_rotate(e.data(), 1, d);
    for (int i = 0; i < d; ++i)
      EXPECT_EQ(e[size_t(i)], (__builtin_popcount(unsigned(i & j)) % 2 ? -0.25f : 0.25f)) << i << "," << j;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(128), y;
  for (float& v : x) v = normal(rng);
  y = x;
  hadamard_rotate(y.data(), 1, 128);
  double nx = 0, ny = 0;
  for (int i = 0; i < 128; ++i) nx += double(x[size_t(i)]) * x[size_t(i)], ny += double(y[size_t(i)]) * y[size_t(i)];
  EXPECT_NEAR(ny, nx, 1e-4 * nx);
  hadamard_rotate(y.data(), 1, 128);  // H is symmetric and orthonormal: H H = I
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)], 1e-5f);
  EXPECT_THROW(hadamard_rotate(y.data(), 1, 96), moeserve::Error);
}

std::vector<float> random_weight(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = normal(rng);
  return values;
}

TEST(WeightQuant, Fp8BlocksOf128By128) {
  const int64_t out = 200, in = 300;  // partial blocks on both axes: scales [2, 3]
  std::vector<float> w = random_weight(out * in, 11);
  w[5 * in + 290] = 3.0f;  // one large value: only block (0, 2) gets a coarse scale
  std::vector<uint8_t> q(size_t(out * in)), s(6);
  fp8_weight_quantize(w.data(), out, in, q.data(), s.data());
  std::vector<float> back(size_t(out * in));
  fp8_weight_dequantize(q.data(), DType::F8_E8M0, s.data(), out, in, back.data());
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 3; ++bc) {
      float amax = 0;
      for (int64_t r = br * 128; r < std::min(out, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min(in, bc * 128 + 128); ++c) amax = std::fmax(amax, std::fabs(w[size_t(r * in + c)]));
      const float scale = fp8_pow2_scale(amax);
      EXPECT_EQ(e8m0_to_f32(s[size_t(br * 3 + bc)]), scale);
      for (int64_t r = br * 128; r < std::min(out, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min(in, bc * 128 + 128); ++c)
          ASSERT_EQ(back[size_t(r * in + c)], round_to_fp8_e4m3(w[size_t(r * in + c)] / scale) * scale);
    }
  EXPECT_EQ(e8m0_to_f32(s[2]), std::ldexp(1.0f, -7));  // 3/448 -> 2^-7
  // Quantizing the dequantized weight reproduces it exactly (the scale may halve, the values cannot move).
  std::vector<uint8_t> q2(q.size()), s2(s.size());
  fp8_weight_quantize(back.data(), out, in, q2.data(), s2.data());
  std::vector<float> back2(back.size());
  fp8_weight_dequantize(q2.data(), DType::F8_E8M0, s2.data(), out, in, back2.data());
  EXPECT_EQ(back2, back);
  // F32 scales dequantize the same way.
  std::vector<float> sf(6);
  for (int i = 0; i < 6; ++i) sf[size_t(i)] = e8m0_to_f32(s[size_t(i)]);
  std::vector<float> back3(back.size());
  fp8_weight_dequantize(q.data(), DType::F32, sf.data(), out, in, back3.data());
  EXPECT_EQ(back3, back);
}

TEST(WeightQuant, Mxfp4NibbleOrderAndGroups) {
  const int64_t out = 3, in = 64;
  std::vector<float> w(size_t(out * in), 0.0f);
  w[0] = 1.0f;   // row 0, group 0: amax 6 -> scale 1
  w[1] = -2.0f;
  w[2] = 6.0f;
  w[32] = 0.75f;  // row 0, group 1: amax 0.75 -> 0.125 -> scale 2^-3; 0.75 / 2^-3 = 6
  w[33] = 0.1f;   // 0.8 -> 1.0 -> 0.125
  std::vector<uint8_t> packed(size_t(out * in / 2)), s(size_t(out * in / 32));
  mxfp4_weight_quantize(w.data(), out, in, packed.data(), s.data());
  EXPECT_EQ(packed[0], 0xC2);  // low nibble: element 0 (+1.0 = code 2); high nibble: element 1 (-2.0 = 0x8 | 4)
  EXPECT_EQ(packed[1], 0x07);  // element 2 (6.0 = code 7), element 3 (0)
  EXPECT_EQ(packed[16], 0x27);
  EXPECT_EQ(e8m0_to_f32(s[0]), 1.0f);
  EXPECT_EQ(e8m0_to_f32(s[1]), 0.125f);
  EXPECT_EQ(e8m0_to_f32(s[2]), std::ldexp(1.0f, -126));  // an all-zero group
  std::vector<float> back(w.size());
  mxfp4_weight_dequantize(packed.data(), s.data(), out, in, back.data());
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_EQ(back[2], 6.0f);
  EXPECT_EQ(back[32], 0.75f);
  EXPECT_EQ(back[33], 0.125f);
  // Dequantized values match the FP4 block simulation of each group of 32.
  std::vector<float> v = random_weight(8 * 96, 5), sim = v;
  std::vector<uint8_t> p2(8 * 48), s2(8 * 3);
  mxfp4_weight_quantize(v.data(), 8, 96, p2.data(), s2.data());
  fp4_block_sim(sim.data(), 8, 96, 32);
  std::vector<float> back2(v.size());
  mxfp4_weight_dequantize(p2.data(), s2.data(), 8, 96, back2.data());
  EXPECT_EQ(back2, sim);
  EXPECT_THROW(mxfp4_weight_quantize(v.data(), 8, 48, p2.data(), s2.data()), moeserve::Error);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
