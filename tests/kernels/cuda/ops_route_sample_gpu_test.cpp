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

// The ties case has many equal scores (logits on a coarse grid, no bias): the warp's redux.sync argmax must break
// ties to the lower id, as the reference does. Up to 64 tokens a block routes one token (its threads score it
// together); past that, one a warp.
TEST(CudaMoe, RouteSqrtSoftplusBiasedTopKAndHash) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct Case { int T, E, K; bool hash, ties; };
  for (Case c : {Case{1, 256, 6, false, false}, Case{37, 256, 6, false, false}, Case{5, 384, 6, false, false},
                 Case{9, 8, 2, false, false}, Case{7, 256, 6, true, false}, Case{16, 256, 6, false, true},
                 Case{100, 256, 6, false, false}}) {  // 100: past the one-block-per-token sizes
    auto logits = normal(size_t(c.T) * c.E, g, 2.0f);
    auto bias = normal(size_t(c.E), g, 0.1f);
    if (c.ties) {
      for (float& v : logits) v = std::round(v * 2.0f) / 2.0f;
      for (float& v : bias) v = 0.0f;
    }
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
        ASSERT_EQ(gc[size_t(t) * c.K + k], pick[size_t(k)])
            << (c.ties ? "ties " : "") << "token " << t << " slot " << k;
        want_w.push_back(s[size_t(pick[size_t(k)])] / (sum + 1e-20f) * 1.5f);
      }
    }
    expect_close_rel(gw, want_w, 1e-6f, 0.0f, "routing weights E=" + std::to_string(c.E));
  }
}

TEST(CudaSampling, GreedyTopKTopPMatchTheReference) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  struct P { float temp, top_p; int top_k; };
  const std::vector<P> settings = {P{0.0f, 1.0f, 0},  P{1.0f, 1.0f, 0},   P{0.7f, 0.9f, 0},  P{1.3f, 1.0f, 50},
                                   P{0.8f, 0.5f, 20}, P{1.0f, 0.95f, 1},  P{0.7f, 0.01f, 0}, P{1.0f, 0.999f, 0},
                                   P{0.5f, 0.9f, 3000}};
  // Each launch: rows with one setting each (uniform: every row the same; mixed: row r takes setting r).
  // 8190: rows not 16-byte aligned, the scalar loads; 129280: 32 slices of 4096 ids; 152064: slices of 4864 ids,
  // more than one draw segment per thread in the walk.
  for (int vocab : {320, 8190, 8192, 129280, 152064}) {
    const int rows = int(settings.size());
    auto logits = normal(size_t(rows) * vocab, g, 3.0f);
    logits[7] = logits[9] = 50.0f;  // a tie for greedy in row 0: the lower id wins
    for (int i = 0; i < vocab / 4; ++i) logits[size_t(vocab) + 2 * i + 1] = logits[size_t(vocab) + 2 * i];  // row 1: pairs of ties
    auto dl = dev(logits);
    cuda::DeviceBuffer work(cuda::sample_work_bytes(rows, vocab), "work");
    for (int launch = -1; launch < rows; ++launch) {  // -1: mixed; else every row takes settings[launch]
      std::vector<cuda::SampleRow> params(static_cast<size_t>(rows));
      std::vector<int> want(static_cast<size_t>(rows));
      std::vector<float> want_p(size_t(rows) * vocab);
      for (int r = 0; r < rows; ++r) {
        const P p = settings[size_t(launch < 0 ? r : launch)];
        engine::SamplingParams sp{p.temp, p.top_p, p.top_k};
        const uint64_t seed = g();
        std::mt19937_64 a(seed), b(seed);
        want[size_t(r)] = engine::sample_token(logits.data() + size_t(r) * vocab, vocab, sp, a);
        cuda::SampleRow& row = params[size_t(r)];
        row.u = sp.greedy() ? 0.0 : std::uniform_real_distribution<double>(0.0, 1.0)(b);
        row.temperature = p.temp;
        row.top_p = p.top_p;
        row.top_k = p.top_k;
        engine::sampling_distribution(logits.data() + size_t(r) * vocab, vocab, sp, want_p.data() + size_t(r) * vocab);
      }
      auto dp = cuda::DeviceArray<cuda::SampleRow>::from(std::span<const cuda::SampleRow>(params), "rows");
      // Every phase launched, and only the phases these settings need (as the engine launches them).
      for (const cuda::SampleSteps steps : {cuda::SampleSteps{}, cuda::sample_steps(params.data(), params.size())}) {
        auto tok = poisoned<int>(size_t(rows));
        auto probs = poisoned<float>(size_t(rows) * vocab);
        MOESERVE_CUDA_CHECK(cuda::sample_rows(dl.data(), rows, vocab, dp.data(), tok.data(), probs.data(),
                                              work.data(), nullptr, steps));
        const std::string what = "vocab " + std::to_string(vocab) + " launch " + std::to_string(launch) +
                                 (steps.top_k && steps.top_p ? " all phases" : " needed phases");
        EXPECT_EQ(host(tok), want) << what;
        expect_close_rel(host(probs), want_p, 0.0f, 1e-6f, "sampling distribution " + what);
      }
    }
  }
}

// The draw's edges, where the answer does not hang on rounding: u = 0 takes the first id with mass, u just below 1
// the last (given a last id of large probability: otherwise the rounded running sum may pass u a few ids before
// it), with the kept ids in different slices of the row.
TEST(CudaSampling, DrawEdges) {
  SKIP_WITHOUT_GPU();
  auto g = seeded();
  const int vocab = 129280;
  const double below_one = std::nextafter(1.0, 0.0);
  struct Case { double u; float top_p; int top_k; bool last_high; int want; };
  const std::vector<Case> cases = {
      {below_one, 1.0f, 0, true, vocab - 1},  // every id has mass; the last one most of it
      {0.0, 1.0f, 0, false, 0},
      {below_one, 1.0f, 3, false, 129000},  // top-3: ids 100, 5000, 129000 (slices 0, 1, 31)
      {0.0, 1.0f, 3, false, 100},
      {below_one, 0.5f, 0, false, 100},  // id 100 alone holds ~0.66 of the mass
  };
  const int rows = int(cases.size());
  auto logits = normal(size_t(rows) * vocab, g, 3.0f);
  std::vector<cuda::SampleRow> params(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    float* l = logits.data() + size_t(r) * vocab;
    const Case& c = cases[size_t(r)];
    if (c.last_high) {
      l[vocab - 1] = 30.0f;
    } else {
      l[100] = 30.0f;
      l[5000] = 29.0f;
      l[129000] = 28.0f;
    }
    params[size_t(r)] = cuda::SampleRow{c.u, 1.0f, c.top_p, c.top_k, 0};
    const engine::SamplingParams sp{1.0f, c.top_p, c.top_k};
    ASSERT_EQ(engine::sample_token_at(l, vocab, sp, c.u), c.want) << "reference, case " << r;
  }
  auto dl = dev(logits);
  cuda::DeviceBuffer work(cuda::sample_work_bytes(rows, vocab), "work");
  auto dp = cuda::DeviceArray<cuda::SampleRow>::from(std::span<const cuda::SampleRow>(params), "rows");
  auto tok = poisoned<int>(size_t(rows));
  MOESERVE_CUDA_CHECK(cuda::sample_rows(dl.data(), rows, vocab, dp.data(), tok.data(), nullptr, work.data(), nullptr));
  const auto got = host(tok);
  for (int r = 0; r < rows; ++r) EXPECT_EQ(got[size_t(r)], cases[size_t(r)].want) << "case " << r;
}

}  // namespace
}  // namespace moeserve
