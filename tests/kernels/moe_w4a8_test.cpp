// CPU reference of the W4A8 MoE (kernels/cpu/moe_w4a8.h) and the MXFP4 repack (kernels/cpu/moe_w4a8_pack.h):
// hand-checked values on small shapes, plus a pack/unpack round trip on random data.
#include "kernels/cpu/moe_w4a8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/moe_w4a8_pack.h"

namespace moeserve::kernels::cpu {
namespace {

uint8_t e4m3(float x) { return f32_to_fp8_e4m3(x); }

TEST(MoeW4A8Ref, ActQuantScaleIsOfficialPowerOfTwo) {
  EXPECT_EQ(act_quant_scale(448.0f), 1.0f);
  EXPECT_EQ(act_quant_scale(449.0f), 2.0f);
  EXPECT_EQ(act_quant_scale(224.0f), 0.5f);
  EXPECT_EQ(act_quant_scale(0.0f), std::ldexp(1.0f, -22));  // amax floored at 1e-4: 1e-4/448 = 2.2e-7 <= 2^-22
  EXPECT_EQ(act_quant_scale(50.0f), 0.125f);                 // 50/448 = 0.112 -> 2^-3
}

TEST(MoeW4A8Ref, ActQuantRoundsToNearestEven) {
  std::vector<float> x(128, 0.0f);
  x[0] = 50.0f;  // amax 50 -> s = 1/8 -> 400, a tie between 384 and 416 -> 384 (even mantissa)
  x[1] = -3.0f;  // -24 exactly
  x[2] = 0.01f;  // 0.08 -> e4m3 0.078125 (2^-4 * 1.25)
  std::vector<uint8_t> q(128);
  float s = 0;
  act_quant_fp8(x.data(), 128, q.data(), &s, 1);
  EXPECT_EQ(s, 0.125f);
  EXPECT_EQ(fp8_e4m3_to_f32(q[0]), 384.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(q[1]), -24.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(q[2]), 0.078125f);
  EXPECT_EQ(q[3], 0);
}

// One expert, N = 2, K = 256, two token rows; values chosen so every sum is checkable by hand.
TEST(MoeW4A8Ref, GroupedGemmHandChecked) {
  const int E = 1, N = 2, K = 256;
  std::vector<uint8_t> w(size_t(E) * N * K / 2), sw(size_t(E) * N * K / 32);
  // Row 0: every weight 1.5 (code 3) with scale 2^1 -> 3.0.
  // Row 1: k < 128: -6 (code 0xF) with scale 2^-2 -> -1.5; k >= 128: 0.5 (code 1) with scale 2^3 -> 4.
  for (int k = 0; k < K; k += 2) {
    w[k / 2] = 0x33;
    w[K / 2 + k / 2] = k < 128 ? 0xFF : 0x11;
  }
  for (int b = 0; b < K / 32; ++b) {
    sw[b] = 128;
    sw[K / 32 + b] = b < 4 ? 125 : 130;
  }
  // Token rows (contiguous layout, counts = {2}): row 0 all 1.0 with scales {0.5, 2}; row 1: +2 on even k, -2 on
  // odd k (sums cancel) with scale 1.
  std::vector<uint8_t> a(2 * K);
  for (int k = 0; k < K; ++k) {
    a[k] = e4m3(1.0f);
    a[K + k] = e4m3(k % 2 ? -2.0f : 2.0f);
  }
  const int sa_ld = 4;
  std::vector<float> sa(2 * sa_ld, 0.0f);
  sa[0 * sa_ld + 0] = 0.5f;
  sa[1 * sa_ld + 0] = 2.0f;
  sa[0 * sa_ld + 1] = 1.0f;
  sa[1 * sa_ld + 1] = 1.0f;
  const int counts[1] = {2};
  for (int r = 0; r < 2; ++r) moe_w4a8_order_activations(a.data() + r * K, K);  // (both rows are unchanged by it)
  std::vector<float> y(2 * N, -7.0f);
  moe_grouped_gemm_w4a8(a.data(), sa.data(), sa_ld, w.data(), sw.data(), counts, E, N, K, 0, y.data());
  // row 0, n 0: 128 * 0.5 * 3 + 128 * 2 * 3 = 192 + 768 = 960
  EXPECT_EQ(y[0 * N + 0], 960.0f);
  // row 0, n 1: 128 * 0.5 * -1.5 + 128 * 2 * 4 = -96 + 1024 = 928
  EXPECT_EQ(y[0 * N + 1], 928.0f);
  // row 1: alternating +-2 against a constant weight in each 128 half: 0.
  EXPECT_EQ(y[1 * N + 0], 0.0f);
  EXPECT_EQ(y[1 * N + 1], 0.0f);

  // Masked layout: the same expert rows at e * cap; rows past the count stay untouched.
  std::vector<uint8_t> am(4 * K, 0);
  std::copy(a.begin(), a.end(), am.begin());
  std::vector<float> sam(2 * sa_ld, 0.0f);
  for (int g = 0; g < 2; ++g)
    for (int r = 0; r < 2; ++r) sam[g * sa_ld + r] = sa[g * sa_ld + r];
  std::vector<float> ym(4 * N, -7.0f);
  moe_grouped_gemm_w4a8(am.data(), sam.data(), sa_ld, w.data(), sw.data(), counts, E, N, K, 4, ym.data());
  EXPECT_EQ(ym[0], 960.0f);
  EXPECT_EQ(ym[1], 928.0f);
  EXPECT_EQ(ym[2 * N], -7.0f);
}

TEST(MoeW4A8Ref, RouteRowsContiguousAndMasked) {
  const int T = 3, topk = 2, E = 4;
  const int ids[T * topk] = {1, 3, 1, 0, 3, 1};
  int counts[E], row_of_slot[T * topk], slot_of_row[E * 2];
  moe_route_rows(ids, T, topk, E, 0, counts, row_of_slot, slot_of_row);
  EXPECT_EQ(std::vector<int>(counts, counts + E), (std::vector<int>{1, 3, 0, 2}));
  EXPECT_EQ(std::vector<int>(row_of_slot, row_of_slot + 6), (std::vector<int>{1, 4, 2, 0, 5, 3}));
  EXPECT_EQ(std::vector<int>(slot_of_row, slot_of_row + 6), (std::vector<int>{3, 0, 2, 5, 1, 4}));
  moe_route_rows(ids, T, topk, E, 2, counts, row_of_slot, slot_of_row);
  EXPECT_EQ(std::vector<int>(counts, counts + E), (std::vector<int>{1, 2, 0, 2}));
  EXPECT_EQ(std::vector<int>(row_of_slot, row_of_slot + 6), (std::vector<int>{2, 6, 3, 0, 7, -1}));
  EXPECT_EQ(std::vector<int>(slot_of_row, slot_of_row + 8), (std::vector<int>{3, -1, 0, 2, -1, -1, 1, 4}));
}

TEST(MoeW4A8Ref, SwigluClampWeightBeforeW2) {
  const int I = 128;
  std::vector<uint16_t> h(2 * I, f32_to_bf16(0.0f));
  h[0] = f32_to_bf16(20.0f);       // gate clamped to 10 from above
  h[I + 0] = f32_to_bf16(20.0f);   // up clamped to 10
  h[1] = f32_to_bf16(-20.0f);      // gate below: silu(-20) ~ -4e-8, not clamped from below
  h[I + 1] = f32_to_bf16(-20.0f);  // up clamped to -10
  const int slot_of_row[1] = {0};
  const float weights[1] = {0.5f};
  std::vector<uint8_t> q(I);
  float s = 0;
  moe_swiglu_quant(h.data(), I, slot_of_row, 1, weights, 10.0f, true, q.data(), &s, 1);
  // x0 = 0.5 * silu(10) * 10 = 49.9977 -> bf16 50 -> s = 2^-3 -> 400 -> e4m3 384 (tie to even) -> 48 dequantized.
  EXPECT_EQ(s, 0.125f);
  EXPECT_EQ(fp8_e4m3_to_f32(q[moe_w4a8_act_pos(0)]) * s, 48.0f);
  // x1 = 0.5 * silu(-20) * -10 = 1.03e-8 * 20... tiny positive: quantizes to 0 at this scale.
  EXPECT_EQ(fp8_e4m3_to_f32(q[moe_w4a8_act_pos(1)]), 0.0f);
  EXPECT_EQ(q[moe_w4a8_act_pos(5)], 0);
}

TEST(MoeW4A8Ref, CombineSumsInExpertOrder) {
  const int T = 1, topk = 4, D = 8;
  const int ids[4] = {7, 2, 5, 9};
  const int row_of_slot[4] = {0, 1, 2, -1};  // the expert-9 slot was dropped
  const float big = 134217728.0f;            // 2^27: its fp32 ulp is 16
  std::vector<uint16_t> y2(3 * D);
  for (int d = 0; d < D; ++d) {
    y2[0 * D + d] = f32_to_bf16(d == 0 ? -big : 1.0f);  // expert 7
    y2[1 * D + d] = f32_to_bf16(d == 0 ? big : 2.0f);   // expert 2
    y2[2 * D + d] = f32_to_bf16(d == 0 ? 4.0f : 3.0f);  // expert 5
  }
  std::vector<float> out(D);
  moe_combine(y2.data(), D, row_of_slot, ids, T, topk, out.data());
  // Expert order 2, 5, 7: (2^27 + 4) rounds to 2^27, minus 2^27 = 0 (slot order would give 4).
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 6.0f);
}

TEST(MoeW4A8Ref, GatherQuantMatchesActQuantOfTheToken) {
  const int D = 256, topk = 2;
  std::vector<uint16_t> x(2 * D);
  for (int d = 0; d < 2 * D; ++d) x[d] = f32_to_bf16(float(d % 37) - 18.0f);
  const int slot_of_row[3] = {3, -1, 0};  // row 0 <- token 1, row 2 <- token 0
  std::vector<uint8_t> a(3 * D, 0xAA);
  std::vector<float> sa(2 * 4, -1.0f);
  moe_gather_quant(x.data(), D, slot_of_row, 3, topk, a.data(), sa.data(), 4);
  std::vector<float> xf(D);
  for (int d = 0; d < D; ++d) xf[d] = bf16_to_f32(x[D + d]);
  std::vector<uint8_t> q(D);
  float s[2];
  act_quant_fp8(xf.data(), D, q.data(), s, 1);
  for (int d = 0; d < D; ++d) EXPECT_EQ(a[moe_w4a8_act_pos(d)], q[d]) << d;
  EXPECT_EQ(sa[0], s[0]);
  EXPECT_EQ(sa[4], s[1]);
  EXPECT_EQ(a[D], 0xAA);    // unused row untouched
  EXPECT_EQ(sa[1], -1.0f);
}

// The activation channel order is a permutation of each 128-channel group that puts channel 32t + 8ks + 4hh + c at
// wgmma k position 32ks + 16hh + 4t + c, and moe_w4a8_order_activations stores channel k at moe_w4a8_act_pos(k).
TEST(MoeW4A8Pack, ActivationOrderPlacesEachChannel) {
  std::vector<int> seen(128, 0);
  for (int t = 0; t < 4; ++t)
    for (int ks = 0; ks < 4; ++ks)
      for (int hh = 0; hh < 2; ++hh)
        for (int c = 0; c < 4; ++c) {
          const int p = moe_w4a8_act_pos(32 * t + 8 * ks + 4 * hh + c);
          EXPECT_EQ(p, 32 * ks + 16 * hh + 4 * t + c);
          ++seen[p];
        }
  for (int p = 0; p < 128; ++p) EXPECT_EQ(seen[p], 1) << p;
  const int K = 256;
  std::vector<uint8_t> row(K);
  for (int k = 0; k < K; ++k) row[k] = uint8_t(k * 7 + 3);
  std::vector<uint8_t> ordered = row;
  moe_w4a8_order_activations(ordered.data(), K);
  for (int k = 0; k < K; ++k) EXPECT_EQ(ordered[moe_w4a8_act_pos(k)], row[k]) << k;
  EXPECT_EQ(moe_w4a8_act_pos(128 + 37), 128 + moe_w4a8_act_pos(37));
}

// The packed words read as the kernel's wgmma A fragments (thread i, word j: row r, k-step ks, positions
// 32ks + 4t + c and 32ks + 16 + 4t + c) against activations in the channel order give each row's dot product with
// the activations in natural order; and a thread's values of a row in a group all come from the row's block t.
TEST(MoeW4A8Pack, FragmentsMatchTheActivationOrder) {
  std::mt19937 rng(7);
  const int N = 64, K = 128;
  std::vector<uint8_t> w(size_t(N) * K / 2), sw(size_t(N) * K / 32, 127);
  for (auto& b : w) b = uint8_t(rng());
  std::vector<int> x(K);
  for (int k = 0; k < K; ++k) x[k] = int(rng() % 9) - 4;
  std::vector<int> x_ordered(K);
  for (int k = 0; k < K; ++k) x_ordered[moe_w4a8_act_pos(k)] = x[k];
  auto code_value2 = [](int code) {  // 2 * e2m1 value (an integer)
    static const int mag2[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    return (code & 8 ? -1 : 1) * mag2[code & 7];
  };
  std::vector<uint8_t> packed(moe_w4a8_packed_expert_bytes(N, K));
  std::vector<uint64_t> flags(moe_w4a8_flag_expert_words(N, K));
  moe_w4a8_pack_expert(w.data(), sw.data(), N, K, packed.data(), flags.data());
  std::vector<long> got(N, 0), want(N, 0);
  for (int r = 0; r < N; ++r)
    for (int k = 0; k < K; ++k) want[r] += long(code_value2((w[r * (K / 2) + k / 2] >> ((k & 1) * 4)) & 0xf)) * x[k];
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 128; ++i)
      for (int j = 0; j < 4; ++j) {
        const int r = 16 * (i / 32) + (i % 32) / 4 + 8 * (j % 2), ks = 2 * h + j / 2, t = i % 4;
        uint32_t word;
        std::memcpy(&word, packed.data() + h * 2048 + i * 16 + j * 4, 4);
        for (int c = 0; c < 4; ++c) {
          const int lo = int(((word >> (4 * c)) & 7) | (((word >> (8 * c + 7)) & 1) << 3));
          const int hi = int(((word >> (4 * (c + 4))) & 7) | (((word >> (8 * c + 3)) & 1) << 3));
          got[r] += long(code_value2(lo)) * x_ordered[32 * ks + 4 * t + c];
          got[r] += long(code_value2(hi)) * x_ordered[32 * ks + 16 + 4 * t + c];
          // Both positions hold channels of block t.
          EXPECT_EQ(moe_w4a8_act_pos(32 * t + 8 * ks + c), 32 * ks + 4 * t + c);
          EXPECT_EQ(moe_w4a8_act_pos(32 * t + 8 * ks + 4 + c), 32 * ks + 16 + 4 * t + c);
        }
      }
  for (int r = 0; r < N; ++r) EXPECT_EQ(got[r], want[r]) << r;
}

TEST(MoeW4A8Pack, RoundTripAndWideFlags) {
  const unsigned seed = std::random_device{}();
  std::printf("MoeW4A8Pack seed %u\n", seed);
  std::mt19937 rng(seed);
  const int N = 128, K = 512;
  std::vector<uint8_t> w(size_t(N) * K / 2), sw(size_t(N) * K / 32);
  for (auto& b : w) b = uint8_t(rng());
  for (auto& s : sw) s = uint8_t(118 + rng() % 8);  // spread <= 7
  // Row 5, group 1: one block 15 below the others -> wide for rows 0..63, group 1.
  sw[5 * (K / 32) + 4 + 2] = uint8_t(sw[5 * (K / 32) + 4 + 0] - 15);
  // Row 70, group 2: an all-zero block with a tiny scale -> normalized, not wide.
  for (int k = 0; k < 32; ++k) {
    int kk = 2 * 128 + 32 + k;
    w[70 * (K / 2) + kk / 2] &= uint8_t(kk % 2 ? 0x0f : 0xf0);
    w[70 * (K / 2) + kk / 2] |= uint8_t(kk % 2 ? 0x80 : 0x08);  // -0: magnitude 0
  }
  sw[70 * (K / 32) + 8 + 1] = 3;
  std::vector<uint8_t> packed(moe_w4a8_packed_expert_bytes(N, K));
  std::vector<uint64_t> flags(moe_w4a8_flag_expert_words(N, K));
  EXPECT_EQ(moe_w4a8_pack_expert(w.data(), sw.data(), N, K, packed.data(), flags.data()), 1);
  EXPECT_EQ(flags[0], uint64_t(1) << 1);
  EXPECT_EQ(flags[1], 0u);
  std::vector<uint8_t> w2(w.size()), sw2(sw.size());
  moe_w4a8_unpack_expert(packed.data(), N, K, w2.data(), sw2.data());
  EXPECT_EQ(w2, w);
  for (size_t i = 0; i < sw.size(); ++i) {
    if (i == size_t(70 * (K / 32) + 8 + 1)) {
      EXPECT_GE(sw2[i], 118);  // the all-zero block took its row's largest exponent
      continue;
    }
    EXPECT_EQ(sw2[i], sw[i]) << i;
  }
  // Position check of one value: a "hi" value (c = 1) of quad t = 2 at k-step 3 of group 1, row 17, which holds
  // channel 32t + 8ks + 4 + c of the group (the activation channel order).
  const int r = 17, k = 128 + 32 * 2 + 8 * 3 + 4 + 1;
  const uint8_t want = (w[r * (K / 2) + k / 2] >> ((k & 1) * 4)) & 0xf;
  // thread i: warp 1 (rows 16..31), lane = 4 * (r - 16 - 0) + t  with r0 = 17 -> g8 = 1; t = 2; ks = 3 -> h = 1, j = 2
  const int i = 32 + 4 * 1 + 2, h = 1, j = 2;
  uint32_t word;
  std::memcpy(&word, packed.data() + size_t(0 * (K / 128) + 1) * kChunkBytes + h * 2048 + i * 16 + j * 4, 4);
  const int c = 1;
  const uint8_t got = uint8_t(((word >> (4 * (c + 4))) & 7) | (((word >> (8 * c + 3)) & 1) << 3));
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
