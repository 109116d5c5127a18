// The server on the CUDA backend: concurrent greedy and seeded sampled completions on the demo model give the
// CPU engine's text (the CUDA backend draws the tokens on the GPU from the same uniforms).
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/sampler.h"
#include "kernels/cuda/device.h"
#include "server/server_fixture.h"

namespace moeserve {
namespace {

using nlohmann::json;

TEST(ServeCuda, ConcurrentGreedyCompletionsMatchTheCpuEngine) {
  if (!cuda::available()) GTEST_SKIP() << cuda::device_info().reason;
  testing::LocalServer server(8, 1 << 20, 0, "cuda");
  EXPECT_NE(server.engine->backend_name().find("cuda"), std::string::npos);
  std::vector<std::string> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back("Chapter " + std::to_string(i) + ". The men who came to the house");
  std::vector<std::future<json>> futures;
  for (const auto& p : prompts)
    futures.push_back(std::async(std::launch::async, [&server, p] {
      json body = {{"prompt", p}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}};
      auto r = server.client().Post("/v1/completions", body.dump(), "application/json");
      return r && r->status == 200 ? json::parse(r->body) : json{{"error", r ? r->body : "no response"}};
    }));
  for (size_t i = 0; i < prompts.size(); ++i) {
    json r = futures[i].get();
    ASSERT_FALSE(r.contains("error")) << r.dump();
    engine::GenerateOptions o;
    o.max_new_tokens = 16;
    auto cpu = engine::generate(*server.model, server.tokenizer->encode(prompts[i], true), o);
    EXPECT_EQ(r["choices"][0]["text"], server.tokenizer->decode(cpu.output_ids, true)) << "request " << i;
    EXPECT_EQ(r["usage"]["completion_tokens"], 16);
  }
  server.engine->wait_idle();
  EXPECT_EQ(server.engine->status().pages_free, server.engine->status().pages_total);
}

TEST(ServeCuda, ConcurrentSampledCompletionsMatchTheCpuEngine) {
  if (!cuda::available()) GTEST_SKIP() << cuda::device_info().reason;
  testing::LocalServer server(8, 1 << 20, 0, "cuda");
  struct Setting { float temperature, top_p; int top_k; };
  const std::vector<Setting> settings = {{1.0f, 1.0f, 0}, {0.8f, 0.9f, 0}, {0.7f, 1.0f, 40}, {1.2f, 0.5f, 20}};
  std::vector<std::future<json>> futures;
  for (int i = 0; i < 8; ++i)
    futures.push_back(std::async(std::launch::async, [&server, &settings, i] {
      const Setting& s = settings[size_t(i) % settings.size()];
      json body = {{"prompt", "Chapter " + std::to_string(i) + ". The men who came to the house"},
                   {"max_tokens", 16}, {"temperature", s.temperature}, {"top_p", s.top_p}, {"top_k", s.top_k},
                   {"seed", 1000 + i}, {"ignore_eos", true}};
      auto r = server.client().Post("/v1/completions", body.dump(), "application/json");
      return r && r->status == 200 ? json::parse(r->body) : json{{"error", r ? r->body : "no response"}};
    }));
  for (int i = 0; i < 8; ++i) {
    json r = futures[size_t(i)].get();
    ASSERT_FALSE(r.contains("error")) << r.dump();
    const Setting& s = settings[size_t(i) % settings.size()];
    engine::GenerateOptions o;
    o.max_new_tokens = 16;
    o.sampling = {s.temperature, s.top_p, s.top_k};
    o.seed = uint64_t(1000 + i);
    auto cpu = engine::generate(*server.model,
                                server.tokenizer->encode("Chapter " + std::to_string(i) + ". The men who came to the house", true), o);
    EXPECT_EQ(r["choices"][0]["text"], server.tokenizer->decode(cpu.output_ids, true)) << "request " << i;
  }
  server.engine->wait_idle();
  EXPECT_EQ(server.engine->status().pages_free, server.engine->status().pages_total);
}

// A request with logprobs makes its batches bring the logits back and sample on the host (the same draws):
// the tokens are still the CPU engine's, and their logprobs the CPU forward's within the GPU path's rounding.
TEST(ServeCuda, LogprobsTrackTheCpuEngine) {
  if (!cuda::available()) GTEST_SKIP() << cuda::device_info().reason;
  testing::LocalServer server(4, 1 << 20, 0, "cuda");
  const std::string text = "Chapter 3. The men who came to the house";
  json body = {{"prompt", text}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 3}};
  auto r = server.client().Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  const json lp = json::parse(r->body)["choices"][0]["logprobs"];
  const auto prompt = server.tokenizer->encode(text, true);
  engine::GenerateOptions o;
  o.max_new_tokens = 8;
  o.keep_logits = true;
  const auto cpu = engine::generate(*server.model, prompt, o);
  const int64_t vocab = cpu.logits.shape()[1];
  ASSERT_EQ(lp["token_logprobs"].size(), 8u);
  for (size_t j = 0; j < 8; ++j) {
    const auto want = engine::token_logprobs(cpu.logits.f32() + (int64_t(prompt.size()) - 1 + int64_t(j)) * vocab,
                                             vocab, cpu.output_ids[j], 3);
    EXPECT_EQ(lp["tokens"][j], std::string(server.tokenizer->token_bytes(cpu.output_ids[j]))) << "token " << j;
    EXPECT_NEAR(lp["token_logprobs"][j].get<double>(), want.logprob, 2e-3) << "token " << j;
  }
  server.engine->wait_idle();
  EXPECT_EQ(server.engine->status().pages_free, server.engine->status().pages_total);
}

}  // namespace
}  // namespace moeserve
