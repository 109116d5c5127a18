// The routed FP8 experts at batch 1 in one launch (kernels/cuda/moe_fp8_one_token.h):
// - against double references: W13 -> SwiGLU (the act rows, within the bound the GEMV's fp32 sums carry through
//   SwiGLU) and W2 over the kernel's own act rows (with the FP8 activation simulation on the host);
// - bit for bit against the chain it replaces (moe_group, the grouped streaming GEMV over W13, swiglu, the grouped
//   streaming GEMV over W2), where that chain gives every warp its own quads as the kernel does;
// - launched three times on one barrier (each launch must leave it ready for the next);
// - with the shared expert as one more slot: that slot against the same references, the routed slots bit for bit
//   the launch without it.
#include <cmath>

#include "kernels/cuda/fp8_test_weights.h"
#include "kernels/cuda/gemv_stream.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/moe_fp8_one_token.h"

namespace moeserve {
namespace {

using namespace gputest;

constexpr double kSkinnyTol = 64.0 / 16777216.0;  // ops_gemm_gpu_test.cpp's bound on the GEMV's fp32 sums

// The stacked experts as the gemv fields describe them (DeviceWeights::set): scales as a copy per row, or the grid.
cuda::Fp8ExpertWeights expert_view(const DeviceWeights& dw, const Weights& w, bool block_scales = false) {
  cuda::GemvArgs a;
  dw.set(a, w, block_scales);
  return {a.w, a.row_scale, a.scale_ld, a.scale_row_shift, a.w_stride, a.scale_stride};
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

// Slot rows of act against the double reference: W13 of the slot's expert on xs (x as the kernel stages it), then
// SwiGLU with the clamp and the routing weight wk. g and u are each within kSkinnyTol * sum |x w|, carried through
// silu(g) * u * wk (|silu'| <= 1.1), plus the fp32 rounding of SwiGLU's own few operations.
void expect_act_row(const Weights& w13, int e, double wk, float limit, const std::vector<float>& xs, const float* got,
                    const std::string& what) {
  const int I = w13.N / 2;
  std::vector<float> want, tol;
  for (int j = 0; j < I; ++j) {
    double ag, au;
    const double hg = dot(w13, e, j, xs, 0, &ag), hu = dot(w13, e, I + j, xs, 0, &au);
    const double gc = std::min(hg, double(limit)), uc = std::max(-double(limit), std::min(hu, double(limit)));
    const double silu = gc / (1.0 + std::exp(-gc)), a = silu * uc * wk;
    want.push_back(float(a));
    tol.push_back(float(wk * (1.1 * std::fabs(uc) * kSkinnyTol * ag + std::fabs(silu) * kSkinnyTol * au) +
                        8.0 / 16777216.0 * std::fabs(a) + 1e-30));
  }
  expect_close(std::vector<float>(got, got + I), want, tol, what);
}

// A slot's output row against the double product of W2 (the slot's expert) over the kernel's own act row, staged
// as the kernel stages it (FP8-simulated when act8).
void expect_y_row(const Weights& w2, int e, const float* act_row, bool act8, const float* got, const std::string& what) {
  std::vector<float> xa(act_row, act_row + w2.K);
  if (act8) kernels::cpu::fp8_block_sim(xa.data(), 1, w2.K, w2.K, 128);
  std::vector<float> want, tol;
  for (int d = 0; d < w2.N; ++d) {
    double as;
    want.push_back(float(dot(w2, e, d, xa, 0, &as)));
    tol.push_back(float(kSkinnyTol * as));
  }
  expect_close(std::vector<float>(got, got + w2.N), want, tol, what);
}

// K distinct experts of E (or, with repeat, drawn from two), and routing weights in [0, 1).
void draw_routing(int E, int K, bool repeat, std::mt19937_64& g, std::vector<int>* chosen, std::vector<float>* weight) {
  chosen->assign(size_t(K), 0);
  weight->assign(size_t(K), 0.0f);
  for (int k = 0; k < K; ++k) {
    (*chosen)[size_t(k)] = repeat ? int(g() % 2) : (k + int(g() % 997)) % E;
    if (!repeat)  // distinct experts per token: the next one not yet taken
      for (int q = 0; q < k; ++q)
        if ((*chosen)[size_t(q)] == (*chosen)[size_t(k)]) (*chosen)[size_t(k)] = ((*chosen)[size_t(k)] + 1) % E, q = -1;
    (*weight)[size_t(k)] = float(g() % 1000) / 1000.0f;
  }
}

// One token's problem on the device: E stacked experts (W13 [2I][D], W2 [D][I]), K slots' routing, x, a barrier;
// args() the launch's fields over them (act, y and row_of_slot left to the caller).
struct OneToken {
  Weights w13, w2;
  DeviceWeights d13, d2;
  std::vector<int> chosen;
  std::vector<float> weight, x;
  cuda::DeviceArray<int> dchosen;
  cuda::DeviceArray<float> dweight, dx;
  cuda::DeviceArray<unsigned> barrier{2, "barrier"};
  int D, I, K;
  OneToken(int E, int K_, int D_, int I_, bool repeat, std::mt19937_64& g)
      : w13(make_weights(true, 2 * I_, D_, E, g)), w2(make_weights(true, D_, I_, E, g)), d13(w13), d2(w2), D(D_),
        I(I_), K(K_) {
    draw_routing(E, K, repeat, g, &chosen, &weight);
    x = normal(size_t(D), g);
    dchosen = dev(chosen);
    dweight = dev(weight);
    dx = dev(x);
    barrier.fill_bytes(0);
  }
  cuda::MoeFp8OneTokenArgs args(float limit, bool act8, bool block_scales = false) const {
    cuda::MoeFp8OneTokenArgs f;
    f.w13 = expert_view(d13, w13, block_scales);
    f.w2 = expert_view(d2, w2, block_scales);
    f.D = D;
    f.I = I;
    f.K = K;
    f.x = dx.data();
    f.chosen = dchosen.data();
    f.weight = dweight.data();
    f.limit = limit;
    f.act_fp8 = act8;
    f.barrier = barrier.data();
    return f;
  }
};

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
    const OneToken p(c.E, c.K, c.D, c.I, c.repeat, g);
    const Weights &w13 = p.w13, &w2 = p.w2;
    const DeviceWeights &d13 = p.d13, &d2 = p.d2;
    const std::vector<int>& chosen = p.chosen;
    const std::vector<float>& x = p.x;
    cuda::MoeFp8OneTokenArgs f = p.args(c.limit, c.act8);
    std::vector<float> act, y;
    // Three launches with the scales as copies per row, then one with them as the 128 x 128 grid (the engine's
    // layout): the same values, so the same bits.
    for (int launch = 0; launch < 4; ++launch) {
      if (launch == 3) f = p.args(c.limit, c.act8, /*block_scales=*/true);
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
        const std::string what = launch == 3 ? "block scales" : "launch " + std::to_string(launch);
        expect_same_bits(got_act, act, "act, " + what);
        expect_same_bits(got_y, y, "y, " + what);
      }
    }

    // References: act from x (simulated as the kernel stages it), y from the kernel's own act rows.
    std::vector<float> xs = x;
    if (c.act8) kernels::cpu::fp8_block_sim(xs.data(), 1, c.D, c.D, 128);
    for (int k = 0; k < c.K; ++k) {
      const std::string slot = std::string(c.name) + ", slot " + std::to_string(k);
      expect_act_row(w13, chosen[size_t(k)], p.weight[size_t(k)], c.limit, xs, act.data() + size_t(k) * c.I, slot + ": act");
      expect_y_row(w2, chosen[size_t(k)], act.data() + size_t(k) * c.I, c.act8, y.data() + size_t(k) * c.D, slot + ": y");
    }

    // The chain, where the streaming GEMV gives each warp whole quads (no team sums: at least as many quads as its
    // 2 blocks x 8 warps per SM) and each group one row (no repeated expert): bit for bit.
    int sms = 0;
    MOESERVE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const long long warp_slots = 2LL * sms * 8;
    if (c.repeat || (long long)c.K * (2 * c.I / 4) < warp_slots || (long long)c.K * (c.D / 4) < warp_slots) continue;
    cuda::DeviceArray<int> ge(size_t(c.E), "g"), go(size_t(c.E), "g"), gc(size_t(c.E), "g"), ng(1, "g");
    auto ros = poisoned<int>(size_t(c.K)), tor = poisoned<int>(size_t(c.K));
    auto wor = poisoned<float>(size_t(c.K));
    MOESERVE_CUDA_CHECK(cuda::moe_group(p.dchosen.data(), p.dweight.data(), 1, c.K, c.E, nullptr, ge.data(), go.data(),
                                        gc.data(), ng.data(), ros.data(), tor.data(), wor.data(), nullptr));
    auto h13 = poisoned<float>(size_t(c.K) * 2 * c.I), cact = poisoned<float>(size_t(c.K) * c.I);
    auto cy = poisoned<float>(size_t(c.K) * c.D);
    cuda::GemvArgs a = d13.args(w13, p.dx.data(), c.D, h13.data(), 2 * c.I, 0);
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

TEST(CudaMoeFp8OneToken, SharedExpertAsOneMoreSlot) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Case {
    int E, K, D, I;
    bool act8;
    float limit;
    const char* name;
  };
  const Case cases[] = {
      {6, 6, 4096, 2048, true, 10.0f, "V4-Flash shapes, FP8 activation simulation"},
      {8, 6, 2048, 1024, false, 1.5f, "exact activations, clamped SwiGLU"},
      {3, 1, 1024, 1024, true, 10.0f, "one routed slot"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const OneToken p(c.E, c.K, c.D, c.I, false, g);
    const Weights s13 = make_weights(true, 2 * c.I, c.D, 1, g), s2 = make_weights(true, c.D, c.I, 1, g);
    const DeviceWeights ds13(s13), ds2(s2);
    const std::vector<float>& x = p.x;
    cuda::MoeFp8OneTokenArgs f = p.args(c.limit, c.act8);
    // With the shared expert (act has one more row), then without it.
    auto dact = poisoned<float>(size_t(c.K + 1) * c.I), dy = poisoned<float>(size_t(c.K) * c.D);
    auto dout = poisoned<float>(size_t(c.D));
    auto rows = poisoned<int>(size_t(c.K));
    f.act = dact.data();
    f.y = dy.data();
    f.row_of_slot = rows.data();
    f.shared_w13 = expert_view(ds13, s13);
    f.shared_w2 = expert_view(ds2, s2);
    f.shared_out = dout.data();
    ASSERT_TRUE(cuda::moe_fp8_one_token_fits(f));
    MOESERVE_CUDA_CHECK(cuda::moe_fp8_one_token(f, nullptr));
    const auto act = host(dact), y = host(dy), out = host(dout);
    const auto got_rows = host(rows);
    for (int k = 0; k < c.K; ++k) ASSERT_EQ(got_rows[size_t(k)], k);

    auto dact0 = poisoned<float>(size_t(c.K) * c.I), dy0 = poisoned<float>(size_t(c.K) * c.D);
    f.act = dact0.data();
    f.y = dy0.data();
    f.shared_out = nullptr;
    MOESERVE_CUDA_CHECK(cuda::moe_fp8_one_token(f, nullptr));
    expect_same_bits(std::vector<float>(act.begin(), act.begin() + size_t(c.K) * c.I), host(dact0),
                     std::string(c.name) + ": routed act with and without the shared slot");
    expect_same_bits(y, host(dy0), std::string(c.name) + ": routed y with and without the shared slot");

    // The shared slot (index K, weight 1) against the references.
    std::vector<float> xs = x;
    if (c.act8) kernels::cpu::fp8_block_sim(xs.data(), 1, c.D, c.D, 128);
    const float* shared_act = act.data() + size_t(c.K) * c.I;
    expect_act_row(s13, 0, 1.0, c.limit, xs, shared_act, std::string(c.name) + ": shared act");
    expect_y_row(s2, 0, shared_act, c.act8, out.data(), std::string(c.name) + ": shared out");

    // The shared expert's scales as the 128 x 128 grid beside routed ones as copies per row: each slot reads its own
    // layout, so the same bits.
    f.shared_w13 = expert_view(ds13, s13, /*block_scales=*/true);
    f.shared_w2 = expert_view(ds2, s2, /*block_scales=*/true);
    auto dact1 = poisoned<float>(size_t(c.K + 1) * c.I), dy1 = poisoned<float>(size_t(c.K) * c.D);
    auto dout1 = poisoned<float>(size_t(c.D));
    f.act = dact1.data();
    f.y = dy1.data();
    f.shared_out = dout1.data();
    MOESERVE_CUDA_CHECK(cuda::moe_fp8_one_token(f, nullptr));
    expect_same_bits(host(dact1), act, std::string(c.name) + ": act, the shared expert's scales as the grid");
    expect_same_bits(host(dy1), y, std::string(c.name) + ": y, the shared expert's scales as the grid");
    expect_same_bits(host(dout1), out, std::string(c.name) + ": shared out, its scales as the grid");
  }
}

}  // namespace
}  // namespace moeserve
