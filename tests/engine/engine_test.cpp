// The batched engine: requests running together get the same tokens as alone; chunked prefill under a
// token budget; FIFO admission when pages are short; aborts, stop strings and lengths; everything freed.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>

#include "engine/forward_backend.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "model/fixture.h"

namespace moeserve::engine {
namespace {

// Token id t decodes to "<t>" so stop strings can be tested without a tokenizer.
class AngleDecoder : public IncrementalTextDecoder {
 public:
  std::string push(int32_t id) override { return "<" + std::to_string(id) + ">"; }
  std::string flush() override { return ""; }
};
class AngleDecoderFactory : public TextDecoderFactory {
 public:
  std::unique_ptr<IncrementalTextDecoder> start(bool) const override { return std::make_unique<AngleDecoder>(); }
};

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs, prompt_logprobs;
  int events_with_prompt_logprobs = 0;
  std::string text;
  FinishReason finish = FinishReason::None;
  int64_t completion_tokens = 0;
  std::promise<void> done;
};

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = model::Model::load(testing::model_fixture("tiny_yarn")); }
  static void TearDownTestSuite() { model_.reset(); }

  std::unique_ptr<Engine> make_engine(int64_t slots, int64_t pages, int64_t budget) {
    EngineOptions o;
    o.limits.max_running_requests = slots;
    o.limits.max_batch_tokens = budget;
    o.kv_pages = pages;
    return std::make_unique<Engine>(model_, std::make_shared<AngleDecoderFactory>(), o);
  }

  std::shared_ptr<Collected> submit(Engine& engine, std::vector<int32_t> prompt, GenerationParams params) {
    auto c = std::make_shared<Collected>();
    engine.submit(std::move(prompt), std::move(params), [c](const RequestEvent& e) {
      c->tokens.insert(c->tokens.end(), e.token_ids.begin(), e.token_ids.end());
      c->logprobs.insert(c->logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      c->prompt_logprobs.insert(c->prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
      c->events_with_prompt_logprobs += !e.prompt_logprobs.empty();
      c->text += e.text;
      c->completion_tokens = e.completion_tokens;
      if (e.finish != FinishReason::None) {
        c->finish = e.finish;
        c->done.set_value();
      }
    });
    return c;
  }

  static std::vector<int32_t> prompt(int64_t n, int32_t seed) {
    std::vector<int32_t> p;
    for (int64_t i = 0; i < n; ++i) p.push_back(int32_t(2 + (seed * 7919 + i * 104729) % 280));
    return p;
  }

  static std::vector<int32_t> alone(const std::vector<int32_t>& p, int64_t n) {
    GenerateOptions o;
    o.max_new_tokens = n;
    return generate(*model_, p, o).output_ids;
  }

  static std::shared_ptr<model::Model> model_;
};
std::shared_ptr<model::Model> EngineTest::model_;

GenerationParams greedy(int64_t max_tokens) {
  GenerationParams p;
  p.sampling.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

TEST_F(EngineTest, BatchedRequestsGetTheSameTokensAsAlone) {
  auto engine = make_engine(8, 16, 64);  // small budget: prompts are prefilled in chunks alongside decodes
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<Collected>> results;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(prompt(10 + 23 * i, i));
    results.push_back(submit(*engine, prompts.back(), greedy(12 + i)));
  }
  for (int i = 0; i < 6; ++i) {
    results[size_t(i)]->done.get_future().wait();
    EXPECT_EQ(results[size_t(i)]->tokens, alone(prompts[size_t(i)], 12 + i)) << "request " << i;
    EXPECT_EQ(results[size_t(i)]->finish, FinishReason::Length);
  }
  engine->wait_idle();
  auto s = engine->status();
  EXPECT_EQ(s.pages_free, s.pages_total);
  EXPECT_EQ(s.slots_free, s.slots_total);
  EXPECT_EQ(s.running + s.waiting, 0);
}

TEST_F(EngineTest, QueuesWhenPagesAreShortAndServesInOrder) {
  auto engine = make_engine(4, 1, 512);  // one page: the three requests must run one after another
  std::mutex m;
  std::vector<int> order;
  std::vector<std::shared_ptr<Collected>> results;
  for (int i = 0; i < 3; ++i) {
    auto c = std::make_shared<Collected>();
    engine->submit(prompt(200 - 60 * i, i), greedy(10), [c, i, &m, &order](const RequestEvent& e) {
      c->tokens.insert(c->tokens.end(), e.token_ids.begin(), e.token_ids.end());
      if (e.finish != FinishReason::None) {
        std::lock_guard<std::mutex> lock(m);
        order.push_back(i);
        c->done.set_value();
      }
    });
    results.push_back(c);
    EXPECT_LE(engine->status().running, 1);
  }
  for (int i = 0; i < 3; ++i) {
    results[size_t(i)]->done.get_future().wait();
    EXPECT_EQ(results[size_t(i)]->tokens, alone(prompt(200 - 60 * i, i), 10)) << "request " << i;
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));  // FIFO: a shorter later request does not overtake
  engine->wait_idle();
  EXPECT_EQ(engine->status().pages_free, 1);
}

TEST_F(EngineTest, AbortFreesEverything) {
  auto engine = make_engine(2, 4, 512);
  std::promise<uint64_t> started;
  auto c = std::make_shared<Collected>();
  uint64_t id = engine->submit(prompt(30, 5), greedy(200), [c](const RequestEvent& e) {
    c->tokens.insert(c->tokens.end(), e.token_ids.begin(), e.token_ids.end());
  });
  while (true) {  // wait for the first tokens, then abort mid-generation
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (engine->status().running == 1) break;
  }
  engine->abort(id);
  engine->wait_idle();
  auto s = engine->status();
  EXPECT_EQ(s.pages_free, s.pages_total);
  EXPECT_EQ(s.slots_free, s.slots_total);
  EXPECT_EQ(engine->metrics().requests_aborted.load(), 1u);
  // And the engine still serves.
  auto d = submit(*engine, prompt(8, 6), greedy(3));
  d->done.get_future().wait();
  EXPECT_EQ(d->tokens, alone(prompt(8, 6), 3));
}

TEST_F(EngineTest, StopStringsEndTheOutputBeforeTheMatch) {
  auto engine = make_engine(2, 4, 512);
  auto p = prompt(16, 7);
  auto full = alone(p, 8);
  // Stop on the text of the 4th generated token: the output keeps the first 3 tokens' text.
  GenerationParams params = greedy(8);
  params.stop_strings = {"<" + std::to_string(full[3]) + ">"};
  auto c = submit(*engine, p, params);
  c->done.get_future().wait();
  std::string want;
  for (int i = 0; i < 3; ++i) want += "<" + std::to_string(full[size_t(i)]) + ">";
  if (std::find(full.begin(), full.begin() + 3, full[3]) == full.begin() + 3) {
    EXPECT_EQ(c->text, want);
    EXPECT_EQ(c->tokens.size(), 4u);  // no token past the one that completed the stop string
  }
  EXPECT_EQ(c->finish, FinishReason::Stop);
}

TEST_F(EngineTest, StopTokenIdsAndLength) {
  auto engine = make_engine(2, 4, 512);
  auto p = prompt(12, 8);
  auto full = alone(p, 6);
  GenerationParams params = greedy(6);
  params.stop_token_ids = {full[2]};
  auto c = submit(*engine, p, params);
  c->done.get_future().wait();
  EXPECT_EQ(c->finish, FinishReason::Stop);
  EXPECT_EQ(c->tokens.back(), full[2]);
  auto d = submit(*engine, p, greedy(4));
  d->done.get_future().wait();
  EXPECT_EQ(d->finish, FinishReason::Length);
  EXPECT_EQ(d->completion_tokens, 4);
}

TEST_F(EngineTest, RefusesWhatCanNeverRun) {
  auto engine = make_engine(2, 1, 512);  // 256 tokens of KV
  auto expect_error = [&](std::vector<int32_t> p, GenerationParams params, const std::string& want) {
    try {
      engine->submit(p, params, nullptr);
      ADD_FAILURE() << "accepted; wanted " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  expect_error(prompt(250, 1), greedy(10), "maximum context length is 256 tokens");
  expect_error({}, greedy(1), "the prompt is empty");
  expect_error({1, 2, 288}, greedy(1), "prompt token 288 at index 2 is outside the vocabulary");
  expect_error({1}, greedy(0), "max_tokens must be at least 1");
  GenerationParams bad = greedy(1);
  bad.sampling.top_p = 0;
  expect_error({1}, bad, "top_p must be in (0, 1]");
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
  auto engine = make_engine(4, 8, 512);
  GenerationParams params;
  params.sampling = {0.8f, 0.9f, 20};
  params.seed = 1234;
  params.max_tokens = 10;
  params.ignore_eos = true;
  auto a = submit(*engine, prompt(20, 9), params);
  auto b = submit(*engine, prompt(20, 9), params);
  a->done.get_future().wait();
  b->done.get_future().wait();
  EXPECT_EQ(a->tokens, b->tokens);
}

// Samples "on the device" as the CUDA backend does, over the CPU backend's logits: the engine's device-sampling
// path (settings and uniforms passed with the forward, tokens back, no logits) runs without a GPU.
class DeviceSamplingBackend : public ForwardBackend {
 public:
  explicit DeviceSamplingBackend(std::unique_ptr<ForwardBackend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "device-sampling " + inner_->name(); }
  const io::ModelConfig& config() const override { return inner_->config(); }
  bool has_mtp() const override { return false; }
  cache::KvCache& cache() override { return inner_->cache(); }
  int64_t kv_bytes() const override { return inner_->kv_bytes(); }
  bool samples_on_device() const override { return true; }
  model::ForwardResult forward(const std::vector<model::ForwardRequest>& requests,
                               const model::Numerics& numerics) override {
    model::ForwardResult r = inner_->forward(requests, numerics);
    // As on the GPU (GpuModel::forward): with no request to sample, the logits come back.
    if (std::none_of(requests.begin(), requests.end(), [](const model::ForwardRequest& f) { return f.sample; }))
      return r;
    const int64_t vocab = config().vocab_size;
    r.tokens.assign(requests.size(), -1);
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!requests[i].sample) continue;
      const model::RowSampling& s = requests[i].sampling;
      const float* row = r.logits.f32() + (r.first_row[i] + r.row_count[i] - 1) * vocab;
      r.tokens[i] = sample_token_at(row, vocab, {s.temperature, s.top_p, s.top_k}, s.u);
      ++*sampled_;
    }
    r.logits = Tensor();  // as on the GPU: only the tokens come back
    return r;
  }
  model::ForwardResult mtp_forward(const std::vector<model::MtpRequest>&, const model::Numerics&) override {
    fail("no MTP here");
  }
  std::shared_ptr<std::atomic<int64_t>> sampled_ = std::make_shared<std::atomic<int64_t>>(0);

 private:
  std::unique_ptr<ForwardBackend> inner_;
};

TEST_F(EngineTest, DeviceSamplingBackendGetsTheSameTokensAsHostSampling) {
  EngineOptions o;
  o.limits.max_running_requests = 4;
  o.limits.max_batch_tokens = 16;  // prompts prefilled in chunks: only a prompt's last chunk draws
  o.kv_pages = 16;
  auto backend = std::make_unique<DeviceSamplingBackend>(make_cpu_backend(model_, 0, 4, 16));
  auto sampled = backend->sampled_;
  Engine device(std::move(backend), std::make_shared<AngleDecoderFactory>(), o);
  auto host = make_engine(4, 16, 16);
  const std::vector<SamplingParams> settings = {{0.0f, 1.0f, 0}, {0.8f, 0.9f, 20}, {1.0f, 1.0f, 0}, {0.7f, 0.5f, 0}};
  std::vector<std::shared_ptr<Collected>> on_device, on_host;
  for (size_t i = 0; i < settings.size(); ++i) {
    GenerationParams params;
    params.sampling = settings[i];
    params.seed = 77 + i;
    params.max_tokens = 9;
    params.ignore_eos = true;
    on_device.push_back(submit(device, prompt(30 + 5 * int64_t(i), int32_t(i)), params));
    on_host.push_back(submit(*host, prompt(30 + 5 * int64_t(i), int32_t(i)), params));
  }
  for (size_t i = 0; i < settings.size(); ++i) {
    on_device[i]->done.get_future().wait();
    on_host[i]->done.get_future().wait();
    EXPECT_EQ(on_device[i]->tokens, on_host[i]->tokens) << "request " << i;
    EXPECT_EQ(on_device[i]->tokens.size(), 9u);
  }
  EXPECT_EQ(sampled->load(), int64_t(settings.size()) * 9);  // every token drawn by the backend, none on the host
  device.wait_idle();
  EXPECT_EQ(device.status().pages_free, device.status().pages_total);
}

// Logprobs: per generated token, the log-softmax of the logits at its position, as the reference forward over
// prompt + output computes them; on a backend that samples on the device, the batches with such a request
// sample on the host, drawing the same tokens.
TEST_F(EngineTest, LogprobsAreTheReferenceLogSoftmaxAtEachPosition) {
  EngineOptions o;
  o.limits.max_running_requests = 4;
  o.limits.max_batch_tokens = 16;
  o.kv_pages = 16;
  auto backend = std::make_unique<DeviceSamplingBackend>(make_cpu_backend(model_, 0, 4, 16));
  auto sampled = backend->sampled_;
  Engine device(std::move(backend), std::make_shared<AngleDecoderFactory>(), o);
  auto host = make_engine(4, 16, 16);
  GenerationParams with = greedy(6), sampled_with;
  with.logprobs = 3;
  sampled_with.sampling = {0.8f, 0.9f, 20};
  sampled_with.seed = 5;
  sampled_with.max_tokens = 6;
  sampled_with.ignore_eos = true;
  sampled_with.logprobs = 0;
  GenerationParams sampled_without = sampled_with;
  sampled_without.logprobs = -1;
  const auto p0 = prompt(30, 1), p1 = prompt(25, 2);
  auto a = submit(device, p0, with), b = submit(device, p1, sampled_with);
  auto a_host = submit(*host, p0, greedy(6)), b_host = submit(*host, p1, sampled_without);
  for (auto* c : {&a, &b, &a_host, &b_host}) (*c)->done.get_future().wait();
  EXPECT_EQ(a->tokens, a_host->tokens);
  EXPECT_EQ(b->tokens, b_host->tokens);  // the same draws whether the device or the host samples
  EXPECT_EQ(sampled->load(), 0);         // every batch had a logprobs request: all sampled on the host
  ASSERT_EQ(a->logprobs.size(), 6u);
  ASSERT_EQ(b->logprobs.size(), 6u);
  for (const auto& [req, p] : {std::pair{a, p0}, std::pair{b, p1}}) {
    std::vector<int32_t> ids = p;
    ids.insert(ids.end(), req->tokens.begin(), req->tokens.end() - 1);
    const Tensor ref = all_logits(*model_, ids, 0, model::Numerics{});
    const int64_t vocab = ref.shape()[1];
    for (size_t j = 0; j < req->tokens.size(); ++j) {
      const float* row = ref.f32() + (int64_t(p.size()) - 1 + int64_t(j)) * vocab;
      const TokenLogprobs want = token_logprobs(row, vocab, req->tokens[j], req == a ? 3 : 0);
      const TokenLogprobs& got = req->logprobs[j];
      EXPECT_EQ(got.token, req->tokens[j]);
      EXPECT_NEAR(got.logprob, want.logprob, 1e-4) << "token " << j;
      ASSERT_EQ(got.top.size(), want.top.size());
      for (size_t k = 0; k < got.top.size(); ++k) {
        EXPECT_EQ(got.top[k].first, want.top[k].first);
        EXPECT_NEAR(got.top[k].second, want.top[k].second, 1e-4);
      }
      if (req == a) EXPECT_EQ(got.top[0].first, got.token);  // greedy: the most likely token
    }
  }
  EXPECT_TRUE(a_host->logprobs.empty());
  GenerationParams too_many = greedy(2);
  too_many.logprobs = kMaxTopLogprobs + 1;
  EXPECT_THROW(device.submit(p0, too_many, nullptr), Error);
}

// Prompt logprobs: every prompt token after the first, from the logits of the position before it, gathered
// over the prompt's chunks and sent once, with the first generated token.
TEST_F(EngineTest, PromptLogprobsCoverThePromptAcrossItsChunks) {
  EngineOptions o;
  o.limits.max_running_requests = 2;
  o.limits.max_batch_tokens = 16;  // a 40-token prompt in three chunks
  o.kv_pages = 16;
  auto backend = std::make_unique<DeviceSamplingBackend>(make_cpu_backend(model_, 0, 2, 16));
  auto sampled = backend->sampled_;
  Engine device(std::move(backend), std::make_shared<AngleDecoderFactory>(), o);
  GenerationParams params = greedy(3);
  params.prompt_logprobs = 2;
  const auto p = prompt(40, 3);
  auto c = submit(device, p, params);
  c->done.get_future().wait();
  EXPECT_EQ(c->tokens, alone(p, 3));
  EXPECT_TRUE(c->logprobs.empty());  // none asked for the output
  EXPECT_EQ(c->events_with_prompt_logprobs, 1);
  // The prefill's steps (the first token drawn with its last chunk) ran on the host; the two decode steps, which
  // need no logits here, drew on the device.
  EXPECT_EQ(sampled->load(), 2);
  ASSERT_EQ(c->prompt_logprobs.size(), p.size() - 1);
  const Tensor ref = all_logits(*model_, p, 0, model::Numerics{});
  const int64_t vocab = ref.shape()[1];
  for (size_t j = 1; j < p.size(); ++j) {
    const TokenLogprobs want = token_logprobs(ref.f32() + int64_t(j - 1) * vocab, vocab, p[j], 2);
    const TokenLogprobs& got = c->prompt_logprobs[j - 1];
    EXPECT_EQ(got.token, p[j]);
    EXPECT_NEAR(got.logprob, want.logprob, 1e-4) << "prompt token " << j;
    ASSERT_EQ(got.top.size(), 2u);
    EXPECT_EQ(got.top[0].first, want.top[0].first);
  }
}

// min_tokens: a stop token cannot be drawn before it (the next likeliest is), and is drawn after; the same on a
// backend that samples on the device (those draws move to the host); logprobs stay those of the raw logits.
TEST_F(EngineTest, MinTokensKeepsStopTokensOutUntilThen) {
  const auto p = prompt(20, 4);
  const auto full = alone(p, 8);
  const int32_t stop = full[1];
  ASSERT_NE(full[0], stop);
  GenerationParams plain = greedy(8);
  plain.stop_token_ids = {stop};
  GenerationParams held = plain;
  held.min_tokens = 5;
  held.logprobs = 0;
  EngineOptions o;
  o.limits.max_running_requests = 2;
  o.limits.max_batch_tokens = 512;
  o.kv_pages = 8;
  auto backend = std::make_unique<DeviceSamplingBackend>(make_cpu_backend(model_, 0, 2, 8));
  Engine device(std::move(backend), std::make_shared<AngleDecoderFactory>(), o);
  auto host = make_engine(2, 8, 512);
  auto a = submit(*host, p, plain);
  auto b = submit(*host, p, held);
  auto b_device = submit(device, p, held);
  for (auto* c : {&a, &b, &b_device}) (*c)->done.get_future().wait();
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{full[0], stop}));  // without min_tokens it stops at once
  EXPECT_EQ(a->finish, FinishReason::Stop);
  ASSERT_GE(b->tokens.size(), 5u);
  for (size_t j = 0; j < 5; ++j) EXPECT_NE(b->tokens[j], stop) << "token " << j;
  EXPECT_EQ(b->tokens[0], full[0]);
  // Token 1 is the likeliest other than the stop token, and its logprob is the raw one.
  std::vector<int32_t> ids = p;
  ids.push_back(full[0]);
  const Tensor ref = all_logits(*model_, ids, 0, model::Numerics{});
  const int64_t vocab = ref.shape()[1];
  const float* row = ref.f32() + int64_t(p.size()) * vocab;
  int32_t second = -1;
  for (int32_t v = 0; v < vocab; ++v)
    if (v != stop && (second < 0 || row[v] > row[second])) second = v;
  EXPECT_EQ(b->tokens[1], second);
  EXPECT_NEAR(b->logprobs[1].logprob, token_logprobs(row, vocab, second, 0).logprob, 1e-4);
  EXPECT_EQ(b_device->tokens, b->tokens);
  if (b->tokens.size() < 8) {  // it ended on the stop token, after min_tokens
    EXPECT_EQ(b->tokens.back(), stop);
    EXPECT_EQ(b->finish, FinishReason::Stop);
  }
  GenerationParams bad = greedy(3);
  bad.min_tokens = 4;
  EXPECT_THROW(host->submit(p, bad, nullptr), Error);
}

}  // namespace
}  // namespace moeserve::engine
