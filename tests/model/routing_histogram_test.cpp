// The routing histogram (model/routing_histogram.h): recording from the reference engine, its JSON file and its
// validation, and the load shares the W4A8 tuner draws from.
#include "model/routing_histogram.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <string>

#include "core/error.h"
#include "engine/generate.h"
#include "model/fixture.h"
#include "model/model.h"

namespace moeserve {
namespace {

using model::RoutingHistogram;

TEST(RoutingHistogram, CountsRoundTripThroughTheFile) {
  RoutingHistogram h;
  h.model = "test";
  const int32_t a[] = {0, 3, 3, 1, 2, 3};  // three tokens, two experts each
  h.add(5, false, 4, a, 3, 2);
  h.add(5, false, 4, a, 1, 2);
  const int32_t b[] = {1, 0};
  h.add(7, true, 4, b, 1, 2);
  ASSERT_EQ(h.layers.size(), 2u);
  EXPECT_EQ(h.layers[0].counts, (std::vector<int64_t>{2, 1, 1, 4}));
  EXPECT_EQ(h.layers[0].tokens, 4);
  EXPECT_TRUE(h.layers[1].hash);
  const std::string path = ::testing::TempDir() + "/routing_histogram_test.json";
  h.save(path);
  const RoutingHistogram back = RoutingHistogram::load(path);
  std::remove(path.c_str());
  EXPECT_EQ(back.to_json(), h.to_json());
  const int32_t bad[] = {4, 0};
  EXPECT_THROW(h.add(5, false, 4, bad, 1, 2), Error);  // expert id outside [0, 4)
  EXPECT_THROW(h.add(5, false, 4, bad, 1, 1), Error);  // another experts-per-token count
}

TEST(RoutingHistogram, BadFilesNameTheField) {
  auto message = [](const std::string& text) {
    try {
      RoutingHistogram::from_json(nlohmann::json::parse(text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message(R"({"layers": [{"layer": 0, "tokens": 1, "counts": [1]}]})").find("experts_per_token"),
            std::string::npos);
  EXPECT_NE(message(R"({"experts_per_token": 1, "layers": []})").find("\"layers\""), std::string::npos);
  EXPECT_NE(message(R"({"experts_per_token": 2, "layers": [{"layer": 0, "tokens": 1, "counts": [1, 0]}]})")
                .find("layers[0].\"counts\" sum to 1, expected tokens * experts_per_token = 2"),
            std::string::npos);
  EXPECT_NE(message(R"({"experts_per_token": 1, "layers": [{"layer": 0, "tokens": 1, "counts": [2, -1]}]})")
                .find("layers[0].\"counts\" must hold integers >= 0"),
            std::string::npos);
  EXPECT_NE(message(R"({"experts_per_token": 1, "layers": [{"layer": "x", "tokens": 1, "counts": [1]}]})")
                .find("layers[0].\"layer\" must be an integer"),
            std::string::npos);
  EXPECT_NE(message(R"([1, 2])").find("expected a JSON object"), std::string::npos);
}

TEST(RoutingHistogram, LoadSharesResampleTheSortedCurve) {
  RoutingHistogram h;
  h.experts_per_token = 1;
  h.layers.push_back({0, false, 10, {1, 6, 0, 3}});   // sorted shares .6 .3 .1 0
  h.layers.push_back({1, false, 20, {4, 4, 8, 4}});   // .4 .2 .2 .2
  h.layers.push_back({2, true, 10, {10, 0, 0, 0}});   // hash routed: ignored
  const std::vector<double> same = model::expert_load_shares(h, 4);
  const double want[] = {0.5, 0.25, 0.15, 0.1};
  for (int e = 0; e < 4; ++e) EXPECT_NEAR(same[size_t(e)], want[e], 1e-12) << e;
  for (int64_t E : {3, 8, 256, 384}) {
    const std::vector<double> s = model::expert_load_shares(h, E);
    ASSERT_EQ(int64_t(s.size()), E);
    EXPECT_NEAR(std::accumulate(s.begin(), s.end(), 0.0), 1.0, 1e-12) << E;
    for (size_t e = 1; e < s.size(); ++e) EXPECT_LE(s[e], s[e - 1] + 1e-15) << E << " " << e;
  }
  // Doubling the experts splits each recorded share in two.
  const std::vector<double> eight = model::expert_load_shares(h, 8);
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(eight[size_t(e)], want[e / 2] / 2, 1e-12) << e;
  RoutingHistogram uniform;
  uniform.experts_per_token = 2;
  uniform.layers.push_back({0, false, 8, {4, 4, 4, 4}});
  for (double v : model::expert_load_shares(uniform, 384)) EXPECT_NEAR(v, 1.0 / 384, 1e-12);
  RoutingHistogram only_hash;
  only_hash.experts_per_token = 1;
  only_hash.layers.push_back({0, true, 1, {1}});
  EXPECT_THROW(model::expert_load_shares(only_hash, 8), Error);
}

// The reference engine records every MoE layer of every forward of a run (the demo model: 5 layers, two of them
// hash-routed, 8 experts, 2 per token).
TEST(RoutingHistogram, TheReferenceEngineRecordsEachLayer) {
  auto m = model::Model::load(testing::source_dir() + "/models/demo");
  RoutingHistogram h;
  m->record_routing(&h);
  engine::GenerateOptions o;
  o.max_new_tokens = 3;
  const std::vector<int32_t> prompt = {1, 40, 50, 60, 70};
  engine::generate(*m, prompt, o);
  m->record_routing(nullptr);
  const io::ModelConfig& c = m->config();
  ASSERT_EQ(int64_t(h.layers.size()), c.num_layers);
  EXPECT_EQ(h.experts_per_token, c.experts_per_token);
  int hash_layers = 0;
  for (const RoutingHistogram::Layer& l : h.layers) {
    EXPECT_EQ(l.tokens, int64_t(prompt.size()) + o.max_new_tokens - 1) << l.layer;  // the last token is not fed
    EXPECT_EQ(std::accumulate(l.counts.begin(), l.counts.end(), int64_t(0)), l.tokens * c.experts_per_token);
    EXPECT_EQ(l.hash, c.layers[size_t(l.layer)].hash_moe);
    hash_layers += l.hash;
  }
  EXPECT_EQ(hash_layers, 2);
  engine::generate(*m, prompt, o);  // recording stopped
  EXPECT_EQ(h.layers[0].tokens, int64_t(prompt.size()) + o.max_new_tokens - 1);
}

}  // namespace
}  // namespace moeserve
