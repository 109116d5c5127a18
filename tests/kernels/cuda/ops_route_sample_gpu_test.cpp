// Router and sampler on the GPU against the reference semantics (model/moe.cpp routing, engine/sampler.cpp).
// Routing: the scores are the same fp32 functions of the same logits (expf/log1pf/sqrtf within an ulp of the
// host's), the choice must match exactly (top-k of score + bias, ties to the lower id; hash: the table's order)
// and the weights to 1e-6 relative. Sampling: greedy must match exactly; the distribution to 1e-6 absolute and
// the drawn token exactly (same uniform).
#include <cmath>
#include <random>

#include "engine/sampler.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/ops.h"

namespace moeserve {
namespace {

using namespace gputest;

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

TEST(CudaMoe, RouteSqrtSoftplusBiasedTopKAndHash) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Case { int T, E, K; bool hash; };
  for (Case c : {Case{1, 256, 6, false}, Case{37, 256, 6, false}, Case{5, 384, 6, false}, Case{9, 8, 2, false},
                 Case{7, 256, 6, true}}) {
    auto logits = normal(size_t(c.T) * c.E, g, 2.0f);
    auto bias = normal(size_t(c.E), g, 0.1f);
    const int vocab = 50;
    std::vector<int> table(size_t(vocab) * c.K), ids(size_t(c.T));
    for (int v = 0; v < vocab; ++v)
      for (int k = 0; k < c.K; ++k) table[size_t(v) * c.K + k] = int((v * 13 + k * 29) % c.E);
    for (auto& i : ids) i = int(g() % vocab);
    auto dl = dev(logits);
    auto db = dev(bias);
    auto dt = dev(table);
    auto di = dev(ids);
    auto chosen = poisoned<int>(size_t(c.T) * c.K);
    auto weight = poisoned<float>(size_t(c.T) * c.K);
    MOESERVE_CUDA_CHECK(cuda::moe_route(dl.data(), c.T, c.E, c.K, 0, c.hash ? nullptr : db.data(),
                                        c.hash ? dt.data() : nullptr, di.data(), true, 1.5f, chosen.data(),
                                        weight.data(), nullptr));
    auto gc = host(chosen);
    auto gw = host(weight);
    std::vector<float> want_w;
    for (int t = 0; t < c.T; ++t) {
      std::vector<float> s(static_cast<size_t>(c.E)), biased(size_t(c.E));
      for (int e = 0; e < c.E; ++e) {
        s[size_t(e)] = std::sqrt(softplus(logits[size_t(t) * c.E + e]));
        biased[size_t(e)] = s[size_t(e)] + bias[size_t(e)];
      }
      std::vector<int32_t> pick;
      if (c.hash)
        for (int k = 0; k < c.K; ++k) pick.push_back(table[size_t(ids[size_t(t)]) * c.K + k]);
      else
        pick = kernels::cpu::top_k(biased.data(), c.E, c.K);
      float sum = 0;
      for (int k = 0; k < c.K; ++k) sum += s[size_t(pick[size_t(k)])];
      for (int k = 0; k < c.K; ++k) {
        ASSERT_EQ(gc[size_t(t) * c.K + k], pick[size_t(k)]) << "token " << t << " slot " << k;
        want_w.push_back(s[size_t(pick[size_t(k)])] / (sum + 1e-20f) * 1.5f);
      }
    }
    expect_close_rel(gw, want_w, 1e-6f, 0.0f, "routing weights E=" + std::to_string(c.E));
  }
}

// One token's routing and grouping in one launch against moe_route then moe_group: the same choice and weights
// bit for bit, the same groups; rows: the same where experts are distinct, and with a hash table's repeated
// experts each slot in its expert's rows (slot order there, moe_group's atomics in any order).
TEST(CudaMoe, RouteAndGroupOneTokenMatchRouteThenGroup) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Case { int E, K, func; bool hash; };
  for (Case c : {Case{256, 6, 0, false}, Case{384, 6, 1, false}, Case{64, 8, 2, false}, Case{8, 2, 0, false},
                 Case{256, 6, 0, true}}) {
    SCOPED_TRACE("E=" + std::to_string(c.E) + " K=" + std::to_string(c.K) + (c.hash ? " hash" : ""));
    auto dl = dev(normal(size_t(c.E), g, 2.0f));
    auto db = dev(normal(size_t(c.E), g, 0.1f));
    std::vector<int> table = {3, 3, 1, 200, 3, 1};  // token 0's row repeats experts 3 and 1
    auto dt = dev(table);
    auto di = dev(std::vector<int>{0});
    const float* bias = c.hash ? nullptr : db.data();
    const int* tid2eid = c.hash ? dt.data() : nullptr;
    struct Out {
      cuda::DeviceArray<int> chosen, ge, go, gc, ng, rows, toks;
      cuda::DeviceArray<float> weight, wrow;
    };
    auto make = [&] {
      return Out{poisoned<int>(size_t(c.K)), poisoned<int>(size_t(c.E)), poisoned<int>(size_t(c.E)),
                 poisoned<int>(size_t(c.E)), poisoned<int>(1), poisoned<int>(size_t(c.K)),
                 poisoned<int>(size_t(c.K)), poisoned<float>(size_t(c.K)), poisoned<float>(size_t(c.K))};
    };
    Out a = make(), b = make();
    MOESERVE_CUDA_CHECK(cuda::moe_route(dl.data(), 1, c.E, c.K, c.func, bias, tid2eid, di.data(), true, 2.5f,
                                        a.chosen.data(), a.weight.data(), nullptr));
    MOESERVE_CUDA_CHECK(cuda::moe_group(a.chosen.data(), a.weight.data(), 1, c.K, c.E, nullptr, a.ge.data(),
                                        a.go.data(), a.gc.data(), a.ng.data(), a.rows.data(), a.toks.data(),
                                        a.wrow.data(), nullptr));
    MOESERVE_CUDA_CHECK(cuda::moe_route_group_one_token(dl.data(), c.E, c.K, c.func, bias, tid2eid, di.data(), true,
                                                        2.5f, b.chosen.data(), b.weight.data(), b.ge.data(),
                                                        b.go.data(), b.gc.data(), b.ng.data(), b.rows.data(),
                                                        b.toks.data(), b.wrow.data(), nullptr));
    const auto chosen = host(a.chosen);
    ASSERT_EQ(host(b.chosen), chosen);
    expect_same_bits(host(b.weight), host(a.weight), "weights");
    const int groups = host(a.ng)[0];
    ASSERT_EQ(host(b.ng)[0], groups);
    for (auto [x, y] : {std::pair{&a.ge, &b.ge}, std::pair{&a.go, &b.go}, std::pair{&a.gc, &b.gc}}) {
      const auto hx = host(*x), hy = host(*y);
      ASSERT_EQ(std::vector<int>(hy.begin(), hy.begin() + groups), std::vector<int>(hx.begin(), hx.begin() + groups));
    }
    const auto ge = host(a.ge), go = host(a.go), gc = host(a.gc), rows = host(b.rows), toks = host(b.toks);
    const auto weight = host(a.weight), wrow = host(b.wrow);
    std::vector<int> seen(size_t(c.K), 0);
    for (int i = 0; i < c.K; ++i) {
      const int r = rows[size_t(i)];
      ASSERT_TRUE(r >= 0 && r < c.K) << "slot " << i;
      ++seen[size_t(r)];
      ASSERT_EQ(toks[size_t(r)], 0);
      ASSERT_EQ(wrow[size_t(r)], weight[size_t(i)]) << "slot " << i;
      int gi = 0;
      while (gi < groups && ge[size_t(gi)] != chosen[size_t(i)]) ++gi;
      ASSERT_LT(gi, groups) << "slot " << i;
      ASSERT_TRUE(r >= go[size_t(gi)] && r < go[size_t(gi)] + gc[size_t(gi)]) << "slot " << i;
    }
    for (int r = 0; r < c.K; ++r) ASSERT_EQ(seen[size_t(r)], 1) << "row " << r;
    if (!c.hash) EXPECT_EQ(rows, host(a.rows));  // distinct experts: one row each, the same
  }
}

TEST(CudaSampling, GreedyTopKTopPMatchTheReference) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  for (int vocab : {320, 8192, 129280}) {
    const int rows = 4;
    auto logits = normal(size_t(rows) * vocab, g, 3.0f);
    logits[7] = logits[9] = 50.0f;  // a tie for greedy in row 0: the lower id wins
    auto dl = dev(logits);
    cuda::DeviceBuffer work(cuda::sample_work_bytes(rows, vocab), "work");
    struct P { float temp, top_p; int top_k; };
    for (P p : {P{0.0f, 1.0f, 0}, P{1.0f, 1.0f, 0}, P{0.7f, 0.9f, 0}, P{1.3f, 1.0f, 50}, P{0.8f, 0.5f, 20},
                P{1.0f, 0.95f, 1}}) {
      engine::SamplingParams sp{p.temp, p.top_p, p.top_k};
      std::vector<double> u(static_cast<size_t>(rows));
      std::vector<int> want(static_cast<size_t>(rows));
      std::vector<float> want_p(size_t(rows) * vocab);
      for (int r = 0; r < rows; ++r) {
        const uint64_t seed = g();
        std::mt19937_64 a(seed), b(seed);
        want[size_t(r)] = engine::sample_token(logits.data() + size_t(r) * vocab, vocab, sp, a);
        u[size_t(r)] = sp.greedy() ? 0.0 : std::uniform_real_distribution<double>(0.0, 1.0)(b);
        engine::sampling_distribution(logits.data() + size_t(r) * vocab, vocab, sp, want_p.data() + size_t(r) * vocab);
      }
      auto du = dev(u);
      auto tok = poisoned<int>(size_t(rows));
      auto probs = poisoned<float>(size_t(rows) * vocab);
      MOESERVE_CUDA_CHECK(cuda::sample_rows(dl.data(), rows, vocab, p.temp, p.top_p, p.top_k, du.data(), tok.data(),
                                            probs.data(), work.data(), nullptr));
      EXPECT_EQ(host(tok), want) << "vocab " << vocab << " temperature " << p.temp << " top_p " << p.top_p << " top_k "
                                 << p.top_k;
      expect_close_rel(host(probs), want_p, 0.0f, 1e-6f, "sampling distribution vocab " + std::to_string(vocab));
    }
  }
}

}  // namespace
}  // namespace moeserve
