// Speculative decoding with the MTP layer: greedy outputs identical with and without speculation (batched,
// concurrent), exact rollback of every pool and compressor after a rejection, stops respected exactly, and
// sampling with speculation distributed exactly as without.
#include "engine/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>

#include "engine/engine.h"
#include "engine/generate.h"
#include "model/model.h"
#include "test_paths.h"

namespace moeserve::engine {
namespace {

class Speculative : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = model::Model::load(testing::source_dir() + "/models/demo"); }
  static void TearDownTestSuite() { model_.reset(); }

  static std::unique_ptr<Engine> make_engine(int64_t steps) {
    EngineOptions o;
    o.limits.max_running_requests = 8;
    o.limits.max_batch_tokens = 256;
    o.kv_pages = 16;
    o.speculative_steps = steps;
    return std::make_unique<Engine>(model_, nullptr, o);
  }

  struct Out {
    std::vector<int32_t> tokens;
    FinishReason finish = FinishReason::None;
    uint64_t verify_steps = 0, accepted = 0;
  };

  static std::vector<Out> run(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                              const GenerationParams& params) {
    std::vector<std::shared_ptr<std::promise<Out>>> promises;
    std::vector<std::future<Out>> futures;
    for (const auto& p : prompts) {
      auto promise = std::make_shared<std::promise<Out>>();
      futures.push_back(promise->get_future());
      auto out = std::make_shared<Out>();
      engine.submit(p, params, [promise, out](const RequestEvent& e) {
        out->tokens.insert(out->tokens.end(), e.token_ids.begin(), e.token_ids.end());
        out->verify_steps = e.spec_verify_steps;
        out->accepted = e.spec_accepted_tokens;
        if (e.finish != FinishReason::None) {
          out->finish = e.finish;
          promise->set_value(*out);
        }
      });
      promises.push_back(promise);
    }
    std::vector<Out> results;
    for (auto& f : futures) results.push_back(f.get());
    return results;
  }

  static std::vector<std::vector<int32_t>> prompts() {
    // Held-out-like English from the demo tokenizer's range: fixed ids, BOS first.
    std::vector<std::vector<int32_t>> p;
    for (int i = 0; i < 5; ++i) {
      std::vector<int32_t> ids = {0};
      for (int j = 0; j < 20 + 37 * i; ++j) ids.push_back(int32_t(5 + (i * 131 + j * 977) % 8000));
      p.push_back(ids);
    }
    return p;
  }

  static std::shared_ptr<model::Model> model_;
};
std::shared_ptr<model::Model> Speculative::model_;

GenerationParams greedy(int64_t n) {
  GenerationParams p;
  p.sampling.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

TEST_F(Speculative, GreedyOutputsAreIdenticalWithAndWithoutSpeculation) {
  auto plain = make_engine(0);
  auto reference = run(*plain, prompts(), greedy(40));
  for (int64_t k : {1, 2, 3, 4}) {
    auto spec = make_engine(k);
    auto got = run(*spec, prompts(), greedy(40));
    uint64_t steps = 0, accepted = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, reference[i].tokens) << "k=" << k << " request " << i;
      EXPECT_EQ(got[i].finish, FinishReason::Length);
      steps += got[i].verify_steps;
      accepted += got[i].accepted;
    }
    EXPECT_GT(steps, 0u);
    EXPECT_GT(accepted, 0u) << "k=" << k << ": no draft was ever accepted";
    spec->wait_idle();
    auto s = spec->status();
    EXPECT_EQ(s.pages_free, s.pages_total);
    EXPECT_EQ(s.slots_free, s.slots_total);
  }
}

TEST_F(Speculative, NoTokenPastAStopOrMaxTokens) {
  auto plain = make_engine(0);
  auto reference = run(*plain, {prompts()[1]}, greedy(30))[0].tokens;
  auto spec = make_engine(4);
  GenerationParams p = greedy(30);
  p.stop_token_ids = {reference[11]};
  size_t first = std::find(reference.begin(), reference.end(), reference[11]) - reference.begin();
  auto got = run(*spec, {prompts()[1]}, p)[0];
  EXPECT_EQ(got.finish, FinishReason::Stop);
  EXPECT_EQ(got.tokens, std::vector<int32_t>(reference.begin(), reference.begin() + first + 1));
  for (int64_t n : {1, 5, 13}) {
    auto short_run = run(*spec, {prompts()[1]}, greedy(n))[0];
    EXPECT_EQ(short_run.tokens, std::vector<int32_t>(reference.begin(), reference.begin() + n));
    EXPECT_EQ(short_run.finish, FinishReason::Length);
  }
}

// Every piece of state that later tokens can read, for a sequence of committed length L.
std::vector<float> live_state(cache::KvCache& cache, const cache::SequenceKv& seq, int64_t L) {
  const cache::KvLayout& layout = cache.layout();
  std::vector<float> out;
  auto add = [&](const float* p, int64_t n) { out.insert(out.end(), p, p + n); };
  for (int64_t l = 0; l < int64_t(layout.layers.size()); ++l) {
    const auto& k = layout.layers[size_t(l)];
    for (int64_t p = std::max<int64_t>(0, L - layout.window); p < L; ++p) add(cache.window_entry(seq.slot, l, p), layout.head_dim);
    if (k.compressed_layer < 0) continue;
    for (int64_t i = 0; i < L / k.ratio; ++i) add(cache.compressed_entry(seq, l, i), layout.head_dim);
    // Rows a future entry can still read: the current partial block (and, with overlap, the previous block).
    const int64_t block_start = (L / k.ratio) * k.ratio;
    const int64_t from = k.kind == io::AttentionKind::CSA ? std::max<int64_t>(0, block_start - k.ratio) : block_start;
    for (int64_t p = from; p < L; ++p) {
      add(cache.state_kv(seq.slot, l, p), k.state_width);
      add(cache.state_score(seq.slot, l, p), k.state_width);
    }
    if (k.indexer_layer < 0) continue;
    for (int64_t i = 0; i < L / k.ratio; ++i) add(cache.index_key(seq, l, i), layout.index_head_dim);
    for (int64_t p = from; p < L; ++p) {
      add(cache.index_state_kv(seq.slot, l, p), k.index_state_width);
      add(cache.index_state_score(seq.slot, l, p), k.index_state_width);
    }
  }
  return out;
}

TEST_F(Speculative, StateAfterARejectionEqualsNeverSeeingTheRejectedTokens) {
  // Committed length chosen so the rejected tokens complete CSA blocks (ratio 4) and wrap the window ring.
  std::vector<int32_t> ids = prompts()[4];  // 169 tokens
  const int64_t L = 130, k = 6, accepted = 2;  // verify L..L+k, keep L..L+accepted
  auto layout = model_->kv_layout(k + 1);
  cache::KvCache a(layout, 1, 2), b(layout, 1, 2);
  auto sa = a.open_sequence(), sb = b.open_sequence();
  ASSERT_TRUE(a.reserve(sa, 256) && b.reserve(sb, 256));
  auto feed = [&](cache::KvCache& c, cache::SequenceKv& s, std::vector<int32_t> tokens) {
    model::ForwardRequest r;
    r.seq = &s;
    r.tokens = std::span<const int32_t>(tokens);
    r.all_logits = true;
    return model_->forward(c, {r}, model::Numerics::reference());
  };
  feed(a, sa, std::vector<int32_t>(ids.begin(), ids.begin() + L));
  sa.length = L;
  // A verify chunk whose last k - accepted tokens are wrong (rejected): they run through every layer.
  std::vector<int32_t> verify(ids.begin() + L, ids.begin() + L + accepted + 1);
  for (int64_t j = accepted + 1; j <= k; ++j) verify.push_back(int32_t(7 + 13 * j));
  feed(a, sa, verify);
  sa.length = L + accepted + 1;  // rollback: only the accepted prefix is committed
  feed(b, sb, std::vector<int32_t>(ids.begin(), ids.begin() + L + accepted + 1));
  sb.length = L + accepted + 1;
  auto state_a = live_state(a, sa, sa.length), state_b = live_state(b, sb, sb.length);
  ASSERT_EQ(state_a.size(), state_b.size());
  EXPECT_EQ(std::memcmp(state_a.data(), state_b.data(), state_a.size() * sizeof(float)), 0)
      << "live KV/compressor state differs after rollback";
  // And the next tokens see exactly the same model.
  std::vector<int32_t> next(ids.begin() + L + accepted + 1, ids.begin() + L + accepted + 9);
  auto la = feed(a, sa, next), lb = feed(b, sb, next);
  EXPECT_EQ(std::memcmp(la.logits.raw(), lb.logits.raw(), la.logits.nbytes()), 0);
}

TEST(SpeculativeSampling, AcceptOrReplaceReproducesTheTargetDistribution) {
  // Tiny vocabulary; every draft token in turn. The emitted token must follow p exactly.
  const std::vector<float> p = {0.1f, 0.4f, 0.25f, 0.0f, 0.25f};
  std::mt19937_64 rng(2026);
  const int trials = 200000;
  for (int32_t draft : {0, 1, 3, 4}) {
    std::vector<int> counts(p.size(), 0);
    for (int t = 0; t < trials; ++t) {
      bool accepted = false;
      counts[size_t(accept_or_replace(p, draft, rng, &accepted))]++;
    }
    double chi2 = 0;
    int dof = -1;
    for (size_t v = 0; v < p.size(); ++v) {
      if (p[v] == 0) {
        EXPECT_EQ(counts[v], 0) << "token with zero probability emitted (draft " << draft << ")";
        continue;
      }
      double expect = trials * p[v];
      chi2 += (counts[v] - expect) * (counts[v] - expect) / expect;
      ++dof;
    }
    // chi-square with 3 degrees of freedom: P(chi2 > 21.1) = 1e-4.
    EXPECT_LT(chi2, 21.1) << "draft " << draft << " dof " << dof;
  }
}

TEST(SpeculativeSampling, VerifyDraftsMatchesPlainSamplingOnATinyVocabulary) {
  // Two verify positions with fixed logits: the first emitted token must be distributed as sampling from the
  // first position's distribution, whatever the draft.
  const int64_t vocab = 4;
  std::vector<float> logits = {0.2f, 1.0f, -0.5f, 0.7f, /* second position */ 0.0f, 0.1f, 0.2f, 0.3f};
  SamplingParams sp{0.9f, 1.0f, 0};
  std::vector<float> p(vocab);
  sampling_distribution(logits.data(), vocab, sp, p.data());
  std::mt19937_64 rng(7);
  const int trials = 200000;
  std::vector<int> counts(vocab, 0);
  for (int t = 0; t < trials; ++t) counts[size_t(verify_drafts(logits.data(), vocab, {2}, sp, rng)[0])]++;
  double chi2 = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    double expect = trials * p[size_t(v)];
    chi2 += (counts[size_t(v)] - expect) * (counts[size_t(v)] - expect) / expect;
  }
  EXPECT_LT(chi2, 21.1);  // 3 dof, P = 1e-4
}

}  // namespace
}  // namespace moeserve::engine
