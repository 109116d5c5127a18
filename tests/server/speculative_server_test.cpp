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

}  // namespace
}  // namespace moeserve
