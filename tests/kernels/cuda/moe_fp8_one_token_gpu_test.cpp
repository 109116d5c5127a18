// The routed FP8 experts at batch 1 in one launch (kernels/cuda/moe_fp8_one_token.h):
// - against double references: W13 -> SwiGLU (the act rows, within the bound the GEMV's fp32 sums carry through
//   SwiGLU) and W2 over the kernel's own act rows (with the FP8 activation simulation on the host);
// - bit for bit against the chain it replaces (moe_group, the grouped streaming GEMV over W13, swiglu, the grouped
//   streaming GEMV over W2), where that chain gives every warp its own quads as the kernel does;
// - launched three times on one barrier (each launch must leave it ready for the next).
#include <cmath>

#include "kernels/cuda/fp8_test_weights.h"
#include "kernels/cuda/gemv_stream.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/moe_fp8_one_token.h"

namespace moeserve {
namespace {

using namespace gputest;

constexpr double kSkinnyTol = 64.0 / 16777216.0;  // ops_gemm_gpu_test.cpp's bound on the GEMV's fp32 sums

// The stacked experts as the gemv fields describe them (DeviceWeights::set).
cuda::Fp8ExpertWeights expert_view(const DeviceWeights& dw, const Weights& w) {
  cuda::GemvArgs a;
  dw.set(a, w);
  return {a.w, a.row_scale, a.scale_ld, a.w_stride, a.scale_stride};
}

// Row n of expert e times x, in double, and the sum of the products' magnitudes.
double dot(const Weights& w, int e, int n, const std::vector<float>& x, size_t x0, double* abs_sum) {
  const float* row = w.deq.data() + (size_t(e) * w.N + n) * w.K;
  double s = 0, a = 0;
  for (int k = 0; k < w.K; ++k) {
    const double p = double(x[x0 + size_t(k)]) * double(row[k]);
    s += p;
    a += std::fabs(p);
  }
  *abs_sum = a;
  return s;
}

TEST(CudaMoeFp8OneToken, MatchesReferencesAndTheGroupedChain) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Case {
    int E, K, D, I;
    bool act8, repeat;
    float limit;
    const char* name;
  };
  const Case cases[] = {
      {6, 6, 4096, 2048, true, false, 10.0f, "V4-Flash shapes, FP8 activation simulation"},
      {8, 6, 2048, 1024, false, false, 1.5f, "exact activations, clamped SwiGLU"},
      {4, 6, 2048, 1024, true, true, 10.0f, "repeated experts (a hash layer's table)"},
      {2, 2, 7168, 3072, true, false, 10.0f, "V4-Pro shapes, two slots"},  // two experts: the host work stays small
      {3, 1, 1024, 1024, true, false, 10.0f, "one slot"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Weights w13 = make_weights(true, 2 * c.I, c.D, c.E, g), w2 = make_weights(true, c.D, c.I, c.E, g);
    const DeviceWeights d13(w13), d2(w2);
    std::vector<int> chosen(size_t(c.K));
    std::vector<float> weight(size_t(c.K));
    for (int k = 0; k < c.K; ++k) {
      chosen[size_t(k)] = c.repeat ? int(g() % 2) : (k + int(g() % 997)) % c.E;
      if (!c.repeat)  // distinct experts per token: the next one not yet taken
        for (int q = 0; q < k; ++q)
          if (chosen[size_t(q)] == chosen[size_t(k)]) chosen[size_t(k)] = (chosen[size_t(k)] + 1) % c.E, q = -1;
      weight[size_t(k)] = float(g() % 1000) / 1000.0f;
    }
    auto x = normal(size_t(c.D), g);
    auto dx = dev(x), dweight = dev(weight);
    auto dchosen = dev(chosen);
    cuda::DeviceArray<unsigned> barrier(2, "barrier");
    barrier.fill_bytes(0);

    cuda::MoeFp8OneTokenArgs f;
    f.w13 = expert_view(d13, w13);
    f.w2 = expert_view(d2, w2);
    f.D = c.D;
    f.I = c.I;
    f.K = c.K;
    f.x = dx.data();
    f.chosen = dchosen.data();
    f.weight = dweight.data();
    f.limit = c.limit;
    f.act_fp8 = c.act8;
    f.barrier = barrier.data();
    std::vector<float> act, y;
    for (int launch = 0; launch < 3; ++launch) {
      auto dact = poisoned<float>(size_t(c.K) * c.I), dy = poisoned<float>(size_t(c.K) * c.D);
      auto rows = poisoned<int>(size_t(c.K));
      f.act = dact.data();
      f.y = dy.data();
      f.row_of_slot = rows.data();
      ASSERT_TRUE(cuda::moe_fp8_one_token_fits(f));
      MOESERVE_CUDA_CHECK(cuda::moe_fp8_one_token(f, nullptr));
      const auto got_act = host(dact), got_y = host(dy);
      const auto got_rows = host(rows);
      for (int k = 0; k < c.K; ++k) ASSERT_EQ(got_rows[size_t(k)], k);
      if (launch == 0) {
        act = got_act;
        y = got_y;
      } else {  // the same again: the barrier was left ready and nothing depends on earlier launches
        expect_same_bits(got_act, act, "act, launch " + std::to_string(launch));
        expect_same_bits(got_y, y, "y, launch " + std::to_string(launch));
      }
    }

    // References. W13 and SwiGLU: g and u each within kSkinnyTol * sum |x w|, carried through silu(g) * u * w
    // (|silu'| <= 1.1) plus the fp32 rounding of SwiGLU's own few operations.
    std::vector<float> xs = x;
    if (c.act8) kernels::cpu::fp8_block_sim(xs.data(), 1, c.D, c.D, 128);
    std::vector<float> want_act, tol_act;
    for (int k = 0; k < c.K; ++k)
      for (int j = 0; j < c.I; ++j) {
        double ag, au;
        const double hg = dot(w13, chosen[size_t(k)], j, xs, 0, &ag);
        const double hu = dot(w13, chosen[size_t(k)], c.I + j, xs, 0, &au);
        const double gc = std::min(hg, double(c.limit)), uc = std::max(-double(c.limit), std::min(hu, double(c.limit)));
        const double silu = gc / (1.0 + std::exp(-gc)), wk = weight[size_t(k)];
        const double a = silu * uc * wk;
        want_act.push_back(float(a));
        tol_act.push_back(float(wk * (1.1 * std::fabs(uc) * kSkinnyTol * ag + std::fabs(silu) * kSkinnyTol * au) +
                                8.0 / 16777216.0 * std::fabs(a) + 1e-30));
      }
    expect_close(act, want_act, tol_act, std::string(c.name) + ": act");
    // W2 over the kernel's act rows, simulated as the kernel stages them.
    std::vector<float> xa = act;
    if (c.act8) kernels::cpu::fp8_block_sim(xa.data(), c.K, c.I, c.I, 128);
    std::vector<float> want_y, tol_y;
    for (int k = 0; k < c.K; ++k)
      for (int d = 0; d < c.D; ++d) {
        double as;
        want_y.push_back(float(dot(w2, chosen[size_t(k)], d, xa, size_t(k) * c.I, &as)));
        tol_y.push_back(float(kSkinnyTol * as));
      }
    expect_close(y, want_y, tol_y, std::string(c.name) + ": y");

    // The chain, where the streaming GEMV gives each warp whole quads (no team sums: at least as many quads as its
    // 2 blocks x 8 warps per SM) and each group one row (no repeated expert): bit for bit.
    int sms = 0;
    MOESERVE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const long long warp_slots = 2LL * sms * 8;
    if (c.repeat || (long long)c.K * (2 * c.I / 4) < warp_slots || (long long)c.K * (c.D / 4) < warp_slots) continue;
    cuda::DeviceArray<int> ge(size_t(c.E), "g"), go(size_t(c.E), "g"), gc(size_t(c.E), "g"), ng(1, "g");
    auto ros = poisoned<int>(size_t(c.K)), tor = poisoned<int>(size_t(c.K));
    auto wor = poisoned<float>(size_t(c.K));
    MOESERVE_CUDA_CHECK(cuda::moe_group(dchosen.data(), dweight.data(), 1, c.K, c.E, nullptr, ge.data(), go.data(),
                                        gc.data(), ng.data(), ros.data(), tor.data(), wor.data(), nullptr));
    auto h13 = poisoned<float>(size_t(c.K) * 2 * c.I), cact = poisoned<float>(size_t(c.K) * c.I);
    auto cy = poisoned<float>(size_t(c.K) * c.D);
    cuda::GemvArgs a = d13.args(w13, dx.data(), c.D, h13.data(), 2 * c.I, 0);
    a.problems = c.K;
    a.group_expert = ge.data();
    a.group_offset = go.data();
    a.group_count = gc.data();
    a.num_groups = ng.data();
    a.x_rows = tor.data();
    a.max_group_rows = 1;
    a.act_fp8 = c.act8;
    MOESERVE_CUDA_CHECK(cuda::gemv_stream(a, nullptr));
    MOESERVE_CUDA_CHECK(cuda::swiglu(h13.data(), c.K, nullptr, c.I, c.limit, wor.data(), cact.data(), nullptr));
    cuda::GemvArgs b = a;
    d2.set(b, w2);
    b.x = cact.data();
    b.ldx = c.I;
    b.y = cy.data();
    b.ldy = c.D;
    b.x_rows = nullptr;
    MOESERVE_CUDA_CHECK(cuda::gemv_stream(b, nullptr));
    const auto rows = host(ros);
    const auto chain_act = host(cact), chain_y = host(cy);
    std::vector<float> by_slot_act, by_slot_y;
    for (int k = 0; k < c.K; ++k) {
      const size_t r = size_t(rows[size_t(k)]);
      by_slot_act.insert(by_slot_act.end(), chain_act.begin() + r * c.I, chain_act.begin() + (r + 1) * c.I);
      by_slot_y.insert(by_slot_y.end(), chain_y.begin() + r * c.D, chain_y.begin() + (r + 1) * c.D);
    }
    expect_same_bits(act, by_slot_act, std::string(c.name) + ": act against the chain");
    expect_same_bits(y, by_slot_y, std::string(c.name) + ": y against the chain");
  }
}

}  // namespace
}  // namespace moeserve
