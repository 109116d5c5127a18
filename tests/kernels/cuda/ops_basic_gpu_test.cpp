// Elementwise / row-wise CUDA ops (kernels/cuda/ops.h) against their CPU reference ops.
// Tolerances: bit-exact where the GPU does the same fp32 operations in the same order (gathers, the
// quantization simulations: power-of-two scales and round-to-nearest-even make them exact); otherwise a few
// ulps of fp32 (1e-6 relative of the row's scale) where the only difference is FMA contraction or the
// summation order of a double-accumulated norm.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/ops.h"

namespace moeserve {
namespace {

using namespace gputest;
namespace ref = kernels::cpu;

TEST(CudaOps, EmbeddingGather) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  for (int D : {64, 4096, 7168}) {
    const int vocab = 1000, T = 7, hc = 4;
    auto table = uniform(size_t(vocab) * D, g);
    std::vector<uint16_t> tb(table.size());
    for (size_t i = 0; i < table.size(); ++i) tb[i] = f32_to_bf16(table[i]);
    std::vector<int> ids(T);
    for (auto& i : ids) i = int(g() % vocab);
    auto dt = dev(tb);
    auto di = dev(ids);
    auto out = poisoned<float>(size_t(T) * hc * D);
    MOESERVE_CUDA_CHECK(cuda::embed_gather(dt.data(), true, D, di.data(), T, hc, out.data(), nullptr));
    std::vector<float> want(size_t(T) * hc * D);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < hc; ++j)
        for (int d = 0; d < D; ++d) want[(size_t(t) * hc + j) * D + d] = bf16_to_f32(tb[size_t(ids[t]) * D + d]);
    expect_equal(host(out), want, "embedding D=" + std::to_string(D));
  }
}

TEST(CudaOps, RmsNormWeightedAndUnweighted) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  for (auto [rows, dim] : std::vector<std::pair<int, int>>{{3, 64}, {5, 4096}, {2, 7168}, {64, 512}, {7, 1024}, {2, 10240}}) {
    for (bool weighted : {true, false}) {
      auto x = normal(size_t(rows) * dim, g, 3.0f);
      auto w = uniform(size_t(dim), g, 0.5f, 1.5f);
      auto dx = dev(x);
      auto dw = dev(w);
      auto out = poisoned<float>(x.size());
      MOESERVE_CUDA_CHECK(cuda::rms_norm(dx.data(), rows, dim, dim, weighted ? dw.data() : nullptr, 1e-6f, out.data(),
                                         dim, nullptr));
      std::vector<float> want(x.size());
      ref::rms_norm(x.data(), rows, dim, weighted ? w.data() : nullptr, 1e-6f, want.data());
      expect_close_rel(host(out), want, 1e-6f, 1e-7f, "rms_norm " + std::to_string(rows) + "x" + std::to_string(dim));
      // In place (the decode step's q_norm): the same bits as out of place.
      MOESERVE_CUDA_CHECK(cuda::rms_norm(dx.data(), rows, dim, dim, weighted ? dw.data() : nullptr, 1e-6f, dx.data(),
                                         dim, nullptr));
      expect_equal(host(dx), host(out), "rms_norm in place " + std::to_string(rows) + "x" + std::to_string(dim));
    }
  }
}

// q path: per-head unweighted RMSNorm then RoPE (YaRN table); kv path: RoPE only; output path: inverse RoPE.
TEST(CudaOps, RopeYarnWithHeadNormAndInverse) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Case { int T, H, hd, rd; bool yarn; };
  for (Case c : {Case{1, 64, 512, 64, true}, Case{5, 128, 512, 64, true}, Case{9, 4, 64, 16, false},
                 Case{3, 64, 128, 64, true}}) {
    io::RopeSpec spec = c.yarn ? yarn_spec() : io::RopeSpec{};
    ref::RopeTable table(spec, c.rd);
    auto inv = dev(table.inv_freq());
    std::vector<int> pos(static_cast<size_t>(c.T));
    for (auto& p : pos) p = int(g() % 1000000);
    auto dpos = dev(pos);
    // 0: norm + rope, 1: rope, 2: inverse, 3: weighted norm (the kv head's kv_norm) + rope
    auto nw = uniform(size_t(c.hd), g, 0.5f, 1.5f);
    auto dnw = dev(nw);
    for (int mode = 0; mode < 4; ++mode) {
      const bool norm = mode == 0 || mode == 3;
      auto x = normal(size_t(c.T) * c.H * c.hd, g, 2.0f);
      auto dx = dev(x);
      MOESERVE_CUDA_CHECK(cuda::rope(dx.data(), c.T, c.H, c.hd, c.H * c.hd, c.rd, dpos.data(), inv.data(), 1.0f,
                                     mode == 2, norm ? 1e-6f : 0.0f, nullptr, mode == 3 ? dnw.data() : nullptr));
      std::vector<float> want = x;
      for (int t = 0; t < c.T; ++t) {
        float* row = want.data() + size_t(t) * c.H * c.hd;
        if (norm) ref::rms_norm(row, c.H, c.hd, mode == 3 ? nw.data() : nullptr, 1e-6f);
        table.apply(row, c.H, c.hd, pos[size_t(t)], mode == 2);
      }
      expect_close_rel(host(dx), want, 2e-6f, 2e-6f * (mode == 0 ? 3.0f : mode == 3 ? 4.5f : max_abs(x)),
                       "rope mode " + std::to_string(mode) + " H=" + std::to_string(c.H) + " hd=" + std::to_string(c.hd));
    }
  }
}

// The KV head's norm + rope with its FP8 storage simulation fused (fp8_block): bit for bit the same as rope then
// fp8_block_sim of the non-rope dims, every element. 128-wide blocks leave a trailing partial block (448 = 3.5
// blocks); 336 non-rope dims (384 - 48) end mid-way through one pass of the warp's 32 lanes.
TEST(CudaOps, RopeWithFusedKvFp8SimMatchesRopeThenSim) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Case { int hd, rd, block; };
  for (Case c : {Case{512, 64, 64}, Case{512, 64, 128}, Case{512, 64, 32}, Case{384, 48, 64}}) {
    ref::RopeTable table(yarn_spec(), c.rd);
    auto inv = dev(table.inv_freq());
    const int width = c.hd - c.rd;
    for (int T : {1, 3, 17}) {
      std::vector<int> pos(static_cast<size_t>(T));
      for (auto& p : pos) p = int(g() % 1000000);
      auto dpos = dev(pos);
      auto nw = uniform(size_t(c.hd), g, 0.5f, 1.5f);
      auto dnw = dev(nw);
      // Each simulated block of a row scaled by a different one of these (from a random start), 8x apart so the
      // blocks' amaxes land on different FP8 scales; 1e-7 puts a block under the amax floor after the norm.
      const float factors[] = {4.0f, 1.0f, 0x1p-3f, 0x1p-6f, 0x1p-9f, 0x1p-12f, 1e-7f};
      auto x = normal(size_t(T) * c.hd, g);
      for (int t = 0; t < T; ++t) {
        const int start = int(g() % 7);
        for (int i = 0; i < width; ++i) x[size_t(t) * c.hd + i] *= factors[(i / c.block + start) % 7];
      }
      for (bool weighted : {true, false}) {
        const std::string tag = " hd=" + std::to_string(c.hd) + " block=" + std::to_string(c.block) +
                                " T=" + std::to_string(T) + (weighted ? " weighted" : "");
        const float* w = weighted ? dnw.data() : nullptr;
        auto fused = dev(x), apart = dev(x), rope_only = dev(x);
        MOESERVE_CUDA_CHECK(cuda::rope(fused.data(), T, 1, c.hd, c.hd, c.rd, dpos.data(), inv.data(), 0.85f, false,
                                       1e-6f, nullptr, w, c.block));
        MOESERVE_CUDA_CHECK(cuda::rope(apart.data(), T, 1, c.hd, c.hd, c.rd, dpos.data(), inv.data(), 0.85f, false,
                                       1e-6f, nullptr, w));
        MOESERVE_CUDA_CHECK(cuda::rope(rope_only.data(), T, 1, c.hd, c.hd, c.rd, dpos.data(), inv.data(), 0.85f,
                                       false, 1e-6f, nullptr, w));
        MOESERVE_CUDA_CHECK(cuda::fp8_block_sim(apart.data(), T, c.hd, width, c.block, nullptr));
        const auto want = host(apart);
        expect_same_bits(host(fused), want, "rope+fp8_block_sim fused" + tag);
        // The inputs do what the comparison needs: the simulation changed values, with several scales per row.
        const auto plain = host(rope_only);
        size_t changed = 0;
        for (size_t i = 0; i < want.size(); ++i) changed += want[i] != plain[i];
        EXPECT_GT(changed, want.size() / 4) << tag;
        for (int t = 0; t < T; ++t) {
          std::vector<int> exps;
          for (int b0 = 0; b0 < width; b0 += c.block) {
            float amax = 0;
            for (int i = b0; i < std::min(b0 + c.block, width); ++i)
              amax = std::max(amax, std::fabs(plain[size_t(t) * c.hd + i]));
            exps.push_back(std::ilogb(std::max(amax, 1e-4f)));
          }
          std::sort(exps.begin(), exps.end());
          EXPECT_GE(std::unique(exps.begin(), exps.end()) - exps.begin(), 3) << "FP8 scales in row " << t << tag;
        }
      }
    }
  }
  // Only the register-held norm path fuses the simulation: other requests are refused, before any launch.
  std::vector<int> pos = {0};
  auto dpos = dev(pos);
  ref::RopeTable table(yarn_spec(), 64);
  auto inv = dev(table.inv_freq());
  auto x = dev(normal(1024, g));
  auto rope_fp8 = [&](int hd, float eps, int block) {
    return cuda::rope(x.data(), 1, 1, hd, hd, 64, dpos.data(), inv.data(), 1.0f, false, eps, nullptr, nullptr, block);
  };
  EXPECT_EQ(rope_fp8(512, 1e-6f, 48), cudaErrorInvalidValue) << "block not a multiple of 32";
  EXPECT_EQ(rope_fp8(512, 1e-6f, -64), cudaErrorInvalidValue) << "negative block";
  EXPECT_EQ(rope_fp8(1024, 1e-6f, 64), cudaErrorInvalidValue) << "row longer than the registers hold";
  EXPECT_EQ(rope_fp8(512, 0.0f, 64), cudaErrorInvalidValue) << "no norm";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// FP8 weights with per-row block scales to BF16 (the fast path's copy of an FP8 wo_a for its BF16 GEMM): every
// element equal to the host's bf16 rounding of e4m3 * scale; exact (no rounding) for the power-of-two scales.
// K % 8 == 0 takes the 8-a-thread kernel (rows crossing 128-blocks at 200 and 384); 100 and 130 the byte kernel.
TEST(CudaOps, Fp8WeightsToBf16) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  // Scales a copy per row (shift 0) or one row per 128 (the grid, shift 7; 130 and 256 rows span two of them).
  for (auto [N, K, pow2, shift] : std::vector<std::tuple<int, int, bool, int>>{{256, 384, true, 0},
                                                                              {3, 200, true, 0},
                                                                              {130, 128, false, 0},
                                                                              {7, 100, false, 0},
                                                                              {5, 130, true, 0},
                                                                              {256, 384, true, 7},
                                                                              {130, 128, false, 7}}) {
    const int scale_ld = (K + 127) / 128;
    std::vector<uint8_t> w(size_t(N) * K);
    for (auto& b : w) {
      b = uint8_t(g() & 0xff);
      if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
    }
    std::vector<float> rs(size_t(((N - 1) >> shift) + 1) * scale_ld);
    for (auto& v : rs) v = pow2 ? std::ldexp(1.0f, int(g() % 24) - 16) : 0.5f + float(g() % 1000) / 997.0f;
    cuda::DeviceArray<uint8_t> dw(w.size(), "w");
    cuda::copy_to_device(dw.data(), w.data(), w.size(), nullptr, "w");
    auto drs = dev(rs);
    cuda::DeviceArray<uint16_t> out(w.size(), "out");
    MOESERVE_CUDA_CHECK(cuda::fp8_weights_to_bf16(dw.data(), drs.data(), N, K, scale_ld, out.data(), nullptr, shift));
    std::vector<uint16_t> got(w.size());
    cuda::copy_to_host(got.data(), out.data(), got.size() * 2, nullptr, "out");
    std::vector<float> gotf(w.size()), want(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      const size_t n = i / size_t(K), k = i % size_t(K);
      const float exact = fp8_e4m3_to_f32(w[i]) * rs[(n >> shift) * size_t(scale_ld) + k / 128];
      want[i] = bf16_to_f32(f32_to_bf16(exact));
      gotf[i] = bf16_to_f32(got[i]);
      if (pow2) ASSERT_EQ(want[i], exact) << "power-of-two scales dequantize exactly";
    }
    expect_equal(gotf, want,
                 "fp8 -> bf16 N=" + std::to_string(N) + " K=" + std::to_string(K) + " shift=" + std::to_string(shift));
  }
}

// fp32 activations as bf16 terms (the fast path's stand-in for an fp32-input GEMM): hi, lo and lo2 are the host's
// bf16 roundings of x, x - hi and x - hi - lo; hi + lo is within 2^-16 |x| of x (two bf16 roundings: 2^-9 of 2^-8
// at most), hi + lo + lo2 within 2^-26 |x| (the remainders are exact in fp32).
// Rows of whole float4s (the four-per-thread kernel) and not (one value per thread).
TEST(CudaOps, Bf16SplitCarriesSixteenAndTwentyFourBits) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Shape { int M, K, ldx; };
  for (Shape sh : {Shape{37, 300, 304}, Shape{37, 301, 303}}) {
    const int M = sh.M, K = sh.K, ldx = sh.ldx;
    auto x = normal(size_t(M) * ldx, g, 3.0f);
    auto dx = dev(x);
    for (bool three : {false, true}) {
      cuda::DeviceArray<uint16_t> hi(size_t(M) * K, "hi"), lo(size_t(M) * K, "lo"), lo2(size_t(M) * K, "lo2");
      MOESERVE_CUDA_CHECK(
          cuda::to_bf16_split(dx.data(), M, K, ldx, hi.data(), lo.data(), nullptr, three ? lo2.data() : nullptr));
      std::vector<uint16_t> h(hi.size()), l(lo.size()), l2(lo2.size());
      cuda::copy_to_host(h.data(), hi.data(), h.size() * 2, nullptr, "hi");
      cuda::copy_to_host(l.data(), lo.data(), l.size() * 2, nullptr, "lo");
      if (three) cuda::copy_to_host(l2.data(), lo2.data(), l2.size() * 2, nullptr, "lo2");
      for (int m = 0; m < M; ++m)
        for (int k = 0; k < K; ++k) {
          const float v = x[size_t(m) * ldx + k];
          const size_t i = size_t(m) * K + k;
          ASSERT_EQ(h[i], f32_to_bf16(v)) << "hi at " << m << "," << k;
          const float r = v - bf16_to_f32(h[i]);
          ASSERT_EQ(l[i], f32_to_bf16(r)) << "lo at " << m << "," << k;
          ASSERT_LE(std::fabs(v - (bf16_to_f32(h[i]) + bf16_to_f32(l[i]))), std::ldexp(std::fabs(v), -16));
          if (!three) continue;
          ASSERT_EQ(l2[i], f32_to_bf16(r - bf16_to_f32(l[i]))) << "lo2 at " << m << "," << k;
          const double sum = double(bf16_to_f32(h[i])) + bf16_to_f32(l[i]) + bf16_to_f32(l2[i]);
          ASSERT_LE(std::fabs(double(v) - sum), std::ldexp(std::fabs(double(v)), -26)) << "at " << m << "," << k;
        }
    }
  }
}

TEST(CudaOps, QuantizationSimulationsAreExact) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  // FP8 per-128 of activations, per-64 of the KV's non-rope dims (448 = 7 blocks; 48 = one partial block).
  for (auto [rows, width, ld, block] : std::vector<std::tuple<int, int, int, int>>{
           {4, 4096, 4096, 128}, {3, 448, 512, 64}, {2, 48, 64, 64}, {5, 1000, 1000, 128}}) {
    auto x = normal(size_t(rows) * ld, g, 5.0f);
    x[3] = 1e-7f;  // amax floor territory in some blocks
    auto dx = dev(x);
    MOESERVE_CUDA_CHECK(cuda::fp8_block_sim(dx.data(), rows, ld, width, block, nullptr));
    std::vector<float> want = x;
    ref::fp8_block_sim(want.data(), rows, ld, width, block);
    expect_equal(host(dx), want, "fp8_block_sim width " + std::to_string(width));
    // Out of place into a packed copy (the skinny GEMM's input when the simulation is not fused).
    auto src = dev(x);
    auto packed = poisoned<float>(size_t(rows) * width);
    MOESERVE_CUDA_CHECK(cuda::fp8_block_sim_to(src.data(), ld, packed.data(), width, rows, width, block, nullptr));
    std::vector<float> want_packed(size_t(rows) * width);
    for (int r = 0; r < rows; ++r)
      std::copy_n(want.begin() + size_t(r) * ld, width, want_packed.begin() + size_t(r) * width);
    expect_equal(host(packed), want_packed, "fp8_block_sim_to width " + std::to_string(width));
    EXPECT_EQ(host(src), x) << "fp8_block_sim_to wrote its input";
  }
  // Hadamard + FP4 of the indexer (128) and other powers of two.
  for (int dim : {128, 32, 512}) {
    const int rows = 9;
    auto x = normal(size_t(rows) * dim, g, 2.0f);
    for (bool fp4 : {false, true}) {
      auto dx = dev(x);
      MOESERVE_CUDA_CHECK(cuda::hadamard_fp4_sim(dx.data(), rows, dim, fp4, nullptr));
      std::vector<float> want = x;
      ref::hadamard_rotate(want.data(), rows, dim);
      if (fp4) ref::fp4_block_sim(want.data(), rows, dim, 32);
      expect_equal(host(dx), want, "hadamard" + std::string(fp4 ? "+fp4 " : " ") + std::to_string(dim));
    }
  }
  // The indexer's fused rope + Hadamard (+ FP4): bit for bit the two ops in turn (same arithmetic, same order).
  {
    const int T = 5, H = 64, hd = 128, rd = 64;
    ref::RopeTable table(yarn_spec(), rd);
    auto inv = dev(table.inv_freq());
    std::vector<int> pos(static_cast<size_t>(T));
    for (auto& p : pos) p = int(g() % 1000000);
    auto dpos = dev(pos);
    auto x = normal(size_t(T) * H * hd, g, 2.0f);
    for (bool fp4 : {false, true}) {
      auto fused = dev(x), apart = dev(x);
      MOESERVE_CUDA_CHECK(cuda::rope_hadamard(fused.data(), T, H, hd, H * hd, rd, dpos.data(), inv.data(), 0.7f, fp4, nullptr));
      MOESERVE_CUDA_CHECK(cuda::rope(apart.data(), T, H, hd, H * hd, rd, dpos.data(), inv.data(), 0.7f, false, 0.0f, nullptr));
      MOESERVE_CUDA_CHECK(cuda::hadamard_fp4_sim(apart.data(), T * H, hd, fp4, nullptr));
      expect_equal(host(fused), host(apart), std::string("rope_hadamard") + (fp4 ? "+fp4" : ""));
    }
    EXPECT_EQ(cuda::rope_hadamard(nullptr, 1, 1, 64, 64, 32, dpos.data(), inv.data(), 1.0f, true, nullptr),
              cudaErrorInvalidValue);
  }
  // The FP8 activation quantizer (cuBLASLt layout of the scales).
  const int M = 6, K = 1024;
  auto x = normal(size_t(M) * K, g, 10.0f);
  fill_quantizer_extremes(x.data(), x.data() + K, K);  // rows 0 and 1
  auto dx = dev(x);
  auto q = poisoned<uint8_t>(size_t(M) * K);
  auto s = poisoned<float>(size_t(M) * (K / 128));
  MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(dx.data(), M, K, K, q.data(), s.data(), nullptr));
  std::vector<uint8_t> wq(size_t(M) * K);
  std::vector<float> ws(size_t(M) * (K / 128));
  ref::fp8_block_quantize(x.data(), M, K, 128, wq.data(), ws.data());
  auto gq = host(q);
  auto gs = host(s);
  for (int m = 0; m < M; ++m)
    for (int kb = 0; kb < K / 128; ++kb) ASSERT_EQ(gs[size_t(kb) * M + m], ws[size_t(m) * (K / 128) + kb]) << m << "," << kb;
  EXPECT_EQ(gq, wq) << "e4m3 bytes";
}

TEST(CudaOps, SwigluApeScaleGather) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  for (int I : {32, 2048, 3072}) {
    const int rows = 11;
    auto h = normal(size_t(rows) * 2 * I, g, 6.0f);
    auto w = uniform(size_t(rows), g, 0.0f, 2.0f);
    auto dh = dev(h);
    auto dw = dev(w);
    auto out = poisoned<float>(size_t(rows) * I);
    const float limit = 10.0f;
    MOESERVE_CUDA_CHECK(cuda::swiglu(dh.data(), rows, nullptr, I, limit, dw.data(), out.data(), nullptr));
    std::vector<float> want(size_t(rows) * I);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < I; ++i) {
        const float gg = std::fmin(h[size_t(r) * 2 * I + i], limit);
        const float u = std::fmax(-limit, std::fmin(h[size_t(r) * 2 * I + I + i], limit));
        want[size_t(r) * I + i] = gg / (1.0f + std::exp(-gg)) * u * w[size_t(r)];
      }
    expect_close_rel(host(out), want, 1e-6f, 1e-7f, "swiglu I=" + std::to_string(I));
  }
  for (int width : {1024, 100, 2048}) {  // held in registers (up to 4 a thread), a short row, the loop past them
    const int T = 5, ratio = 4;
    auto score = normal(size_t(T) * 2 * width, g);
    auto ape = normal(size_t(ratio) * width, g);
    std::vector<int> pos = {0, 1, 2, 7, 4097};
    auto ds = dev(score);
    auto da = dev(ape);
    auto dp = dev(pos);
    MOESERVE_CUDA_CHECK(cuda::add_ape(ds.data() + width, T, width, 2 * width, dp.data(), da.data(), ratio, nullptr));
    std::vector<float> want = score;
    for (int t = 0; t < T; ++t)
      for (int f = 0; f < width; ++f) want[size_t(t) * 2 * width + width + f] += ape[size_t(pos[t] % ratio) * width + f];
    expect_equal(host(ds), want, "add_ape width " + std::to_string(width));
  }
}

TEST(CudaErrors, OutOfMemoryNamesBytesAskedAndFree) {
  SKIP_WITHOUT_GPU();
  try {
    cuda::DeviceBuffer b(size_t(1) << 50, "a test buffer");
    FAIL() << "a petabyte allocation succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of GPU memory allocating a test buffer"), std::string::npos) << m;
    EXPECT_NE(m.find("asked"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
  }
}

TEST(CudaErrors, CudaErrorNamesTheCallSite) {
  SKIP_WITHOUT_GPU();
  try {
    MOESERVE_CUDA_CHECK(cuda::hadamard_fp4_sim(nullptr, 1, 100, false, nullptr));  // 100: not a power of two
    FAIL() << "an invalid argument was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda::hadamard_fp4_sim"), std::string::npos) << m;
    EXPECT_NE(m.find("invalid argument"), std::string::npos) << m;
    EXPECT_NE(m.find("ops_basic_gpu_test.cpp"), std::string::npos) << m;
  }
  cudaGetLastError();
}

}  // namespace
}  // namespace moeserve
