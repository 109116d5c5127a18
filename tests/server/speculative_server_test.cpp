// Speculative decoding through the server under concurrent load: greedy outputs equal the plain server's,
// usage reports the accept length, /metrics and /get_server_info expose the acceptance statistics.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "server/server_fixture.h"

namespace moeserve {
namespace {

using nlohmann::json;

std::vector<json> complete_all(const testing::LocalServer& server, int n) {
  std::vector<std::future<json>> futures;
  for (int i = 0; i < n; ++i)
    futures.push_back(std::async(std::launch::async, [&server, i] {
      json body = {{"prompt", "Chapter " + std::to_string(i) + ". The men who came"}, {"max_tokens", 20},
                   {"temperature", 0}, {"ignore_eos", true}};
      auto r = server.client().Post("/v1/completions", body.dump(), "application/json");
      return r && r->status == 200 ? json::parse(r->body) : json();
    }));
  std::vector<json> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

TEST(SpeculativeServer, GreedyOutputsEqualThePlainServerUnderLoad) {
  std::vector<json> plain, spec;
  {
    testing::LocalServer server(8);
    plain = complete_all(server, 12);
  }
  testing::LocalServer server(8, 1 << 20, /*speculative_steps=*/3);
  spec = complete_all(server, 12);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_FALSE(spec[i].is_null()) << "request " << i << " failed";
    EXPECT_EQ(spec[i]["choices"][0]["text"], plain[i]["choices"][0]["text"]) << "request " << i;
    EXPECT_EQ(spec[i]["usage"]["completion_tokens"], 20);
    EXPECT_GE(spec[i]["usage"]["spec_accept_length"].get<double>(), 1.0);
    EXPECT_FALSE(plain[i]["usage"].contains("spec_accept_length"));
  }
  auto metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("moeserve_spec_mean_accept_length{model_name=\"demo\"}"), std::string::npos);
  EXPECT_NE(metrics->body.find("moeserve_spec_accept_length_count{model_name=\"demo\",accepted=\"3\"}"),
            std::string::npos);
  auto info = server.client().Get("/get_server_info");
  ASSERT_TRUE(info);
  json j = json::parse(info->body);
  EXPECT_GE(j["internal_states"][0]["avg_spec_accept_length"].get<double>(), 1.0);
  server.engine->wait_idle();
  EXPECT_EQ(server.engine->status().pages_free, server.engine->status().pages_total);
}

// Logprobs of verified tokens come from the target's rows at their positions: the plain server's values.
TEST(SpeculativeServer, LogprobsEqualThePlainServers) {
  const json body = {{"prompt", "The men who came to the house"}, {"max_tokens", 12}, {"temperature", 0},
                     {"ignore_eos", true}, {"logprobs", 2}};
  json plain;
  {
    testing::LocalServer server(2);
    plain = json::parse(server.client().Post("/v1/completions", body.dump(), "application/json")->body);
  }
  testing::LocalServer server(2, 1 << 20, /*speculative_steps=*/3);
  const json spec = json::parse(server.client().Post("/v1/completions", body.dump(), "application/json")->body);
  ASSERT_GT(spec["usage"]["spec_accept_length"].get<double>(), 1.0) << "no draft was accepted: nothing is tested";
  const json& a = plain["choices"][0]["logprobs"];
  const json& b = spec["choices"][0]["logprobs"];
  ASSERT_EQ(b["tokens"], a["tokens"]);
  ASSERT_EQ(b["token_logprobs"].size(), 12u);
  for (size_t j = 0; j < 12; ++j) {
    EXPECT_NEAR(b["token_logprobs"][j].get<double>(), a["token_logprobs"][j].get<double>(), 1e-4) << "token " << j;
    EXPECT_EQ(b["top_logprobs"][j].size(), a["top_logprobs"][j].size());
    for (const auto& [token, value] : a["top_logprobs"][j].items())
      EXPECT_NEAR(b["top_logprobs"][j][token].get<double>(), value.get<double>(), 1e-4) << "token " << j;
  }
}

// min_tokens under speculative decoding: each verify row masks the stop tokens it must, as the plain engine's
// draw does, so the greedy outputs still match.
TEST(SpeculativeServer, MinTokensGivesThePlainServersOutput) {
  json body = {{"prompt", "The men who came to the house"}, {"max_tokens", 12}, {"temperature", 0}};
  std::string plain_text;
  json stop_ids;
  {
    testing::LocalServer server(2);
    json free_run = json::parse(server.client().Post("/v1/completions", body.dump(), "application/json")->body);
    // Stop on the second generated token: without min_tokens the output would end at once.
    const auto ids = server.tokenizer->encode(free_run["choices"][0]["text"].get<std::string>(), false);
    ASSERT_GE(ids.size(), 2u);
    stop_ids = {ids[1]};
    body["stop_token_ids"] = stop_ids;
    body["min_tokens"] = 8;
    plain_text = json::parse(server.client().Post("/v1/completions", body.dump(), "application/json")->body)
                     ["choices"][0]["text"];
  }
  testing::LocalServer server(2, 1 << 20, /*speculative_steps=*/3);
  const json spec = json::parse(server.client().Post("/v1/completions", body.dump(), "application/json")->body);
  EXPECT_EQ(spec["choices"][0]["text"], plain_text);
  EXPECT_GE(spec["usage"]["completion_tokens"].get<int>(), 8);
}

}  // namespace
}  // namespace moeserve
