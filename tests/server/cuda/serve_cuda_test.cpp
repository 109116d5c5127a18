// The server on the CUDA backend: concurrent greedy and seeded sampled completions on the demo model give the
// CPU engine's text (the CUDA backend draws the tokens on the GPU from the same uniforms).
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
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

}  // namespace
}  // namespace moeserve
