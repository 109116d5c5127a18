// config.json in both forms: parsing, defaults, and a clear error for each missing or contradictory field.
#include "io/model_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_paths.h"

namespace moeserve::io {
namespace {

nlohmann::json fixture_json(const std::string& name, const std::string& file = "config.json") {
  std::ifstream in(testing::fixture("models/" + name + "/" + file));
  return nlohmann::json::parse(in);
}

std::string error_of(const nlohmann::json& j) {
  try {
    parse_model_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ParsesOfficialFormWithYarnAndMtpEntry) {
  ModelConfig c = parse_model_config(fixture_json("tiny_yarn"), "tiny_yarn");
  ASSERT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.layers[0].attention, AttentionKind::HCA);
  EXPECT_EQ(c.layers[0].compress_ratio, 32);
  EXPECT_EQ(c.layers[1].attention, AttentionKind::CSA);
  EXPECT_EQ(c.layers[4].attention, AttentionKind::Sliding);
  EXPECT_TRUE(c.layers[1].hash_moe);
  EXPECT_FALSE(c.layers[2].hash_moe);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.factor, 4.0);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_EQ(c.num_mtp_layers, 1);
}

TEST(ModelConfig, ParsesHfForm) {
  ModelConfig c = parse_model_config(fixture_json("tiny_hf"), "tiny_hf");
  EXPECT_EQ(c.layers[2].attention, AttentionKind::HCA);
  EXPECT_EQ(c.layers[2].compress_ratio, 16);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_FALSE(c.rope_compress.yarn);
}

TEST(ModelConfig, KeepFirstLayersCutsTheScheduleToAPrefix) {
  const ModelConfig full = parse_model_config(fixture_json("tiny_yarn"), "tiny_yarn");
  ModelConfig c = full;
  keep_first_layers(c, 2);
  ASSERT_EQ(c.num_layers, 2);
  ASSERT_EQ(c.layers.size(), 2u);
  EXPECT_EQ(c.layers[0].attention, AttentionKind::HCA);
  EXPECT_EQ(c.layers[1].attention, AttentionKind::CSA);
  EXPECT_EQ(c.num_mtp_layers, full.num_mtp_layers);
  for (int64_t n : {int64_t(0), int64_t(-1), full.num_layers, full.num_layers + 3}) {  // all layers
    ModelConfig same = full;
    keep_first_layers(same, n);
    EXPECT_EQ(same.num_layers, full.num_layers) << n;
    EXPECT_EQ(same.layers.size(), full.layers.size()) << n;
  }
}

TEST(ModelConfig, OfficialJsonRoundTrips) {
  ModelConfig a = parse_model_config(fixture_json("tiny_yarn"), "a");
  ModelConfig b = parse_model_config(model_config_to_official_json(a), "b");
  EXPECT_EQ(b.layers.size(), a.layers.size());
  EXPECT_EQ(b.rope_compress.original_max_position, a.rope_compress.original_max_position);
  EXPECT_EQ(b.num_mtp_layers, a.num_mtp_layers);
}

TEST(ModelConfig, MissingFieldsAreNamed) {
  for (const char* field : {"hidden_size", "vocab_size", "num_hidden_layers", "head_dim", "q_lora_rank", "o_groups",
                            "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"}) {
    auto j = fixture_json("tiny_yarn");
    j.erase(field);
    std::string e = error_of(j);
    EXPECT_NE(e.find(std::string("missing config field '") + field + "'"), std::string::npos) << e;
  }
  auto j = fixture_json("tiny_yarn");
  j.erase("compress_ratios");
  EXPECT_NE(error_of(j).find("layer_types"), std::string::npos) << error_of(j);
}

TEST(ModelConfig, ContradictionsAreNamed) {
  auto j = fixture_json("tiny_yarn");
  j["layer_types"] = {"sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                      "compressed_sparse_attention", "sliding_attention"};  // layer 0 contradicts compress_ratios
  j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 32}};
  EXPECT_NE(error_of(j).find("layer 0: layer_types says sliding_attention"), std::string::npos) << error_of(j);

  j = fixture_json("tiny_yarn");
  j["partial_rotary_factor"] = 0.25;  // head_dim 128 * 0.25 = 32, but qk_rope_head_dim = 64
  EXPECT_NE(error_of(j).find("qk_rope_head_dim = 64 contradicts partial_rotary_factor"), std::string::npos)
      << error_of(j);

  j = fixture_json("tiny_hf");
  j["num_hash_layers"] = 2;  // mlp_layer_types has one hash layer
  EXPECT_NE(error_of(j).find("mlp_layer_types contradicts num_hash_layers = 2"), std::string::npos) << error_of(j);
}

TEST(ModelConfig, BadValuesAreNamed) {
  auto expect_error = [](nlohmann::json j, const std::string& want) {
    std::string e = error_of(j);
    EXPECT_NE(e.find(want), std::string::npos) << "got: " << e;
  };
  auto j = fixture_json("tiny_yarn");
  j["hidden_size"] = "96";
  expect_error(j, "'hidden_size' must be an integer");
  j = fixture_json("tiny_yarn");
  j["num_key_value_heads"] = 2;
  expect_error(j, "num_key_value_heads = 2");
  j = fixture_json("tiny_yarn");
  j["o_groups"] = 3;
  expect_error(j, "not divisible by o_groups = 3");
  j = fixture_json("tiny_yarn");
  j["scoring_func"] = "relu";
  expect_error(j, "scoring_func 'relu'");
  j = fixture_json("tiny_yarn");
  j["model_type"] = "llama";
  expect_error(j, "model_type is 'llama'");
  j = fixture_json("tiny_yarn");
  j["compress_ratios"] = {32, 4};
  expect_error(j, "compress_ratios must be an array of at least num_hidden_layers = 5");
  j = fixture_json("tiny_yarn");
  j["rope_scaling"].erase("original_max_position_embeddings");
  expect_error(j, "yarn needs 'original_max_position_embeddings'");
  j = fixture_json("tiny_yarn");
  j["num_experts_per_tok"] = 17;
  expect_error(j, "num_experts_per_tok = 17 exceeds n_routed_experts = 16");
}

// Sizes past what the engine's 64-bit arithmetic can multiply are refused at the boundary, not wrapped later.
TEST(ModelConfig, OutOfRangeSizesAreNamed) {
  auto expect_error = [](nlohmann::json j, const std::string& want) {
    std::string e = error_of(j);
    EXPECT_NE(e.find(want), std::string::npos) << "got: " << e;
  };
  auto j = fixture_json("tiny_yarn");
  j["hidden_size"] = 0;
  expect_error(j, "config field 'hidden_size' = 0 must be between 1 and 16777216");
  j = fixture_json("tiny_yarn");
  j["vocab_size"] = 1e300;  // a float form of an integer, far past int64
  expect_error(j, "config field 'vocab_size' = 1e+300 must be between 1 and 16777216");
  j = fixture_json("tiny_yarn");
  j["moe_intermediate_size"] = uint64_t(1) << 63;
  expect_error(j, "config field 'moe_intermediate_size' = 9223372036854775808 must be between 1 and 16777216");
  j = fixture_json("tiny_yarn");
  j["num_hidden_layers"] = 100000;
  expect_error(j, "config field 'num_hidden_layers' = 100000 must be between 1 and 4096");
  j = fixture_json("tiny_yarn");
  j["compress_ratios"][0] = int64_t(1) << 40;
  expect_error(j, "compress_ratios[0] = 1099511627776 (expected 0 or an integer from 2 to 16777216)");
  j = fixture_json("tiny_hf");
  j["partial_rotary_factor"] = 1e300;  // would have been converted to int64 through head_dim * factor
  expect_error(j, "partial_rotary_factor = 1e+300 must be in (0, 1]");
  j = fixture_json("tiny_yarn");
  j["eos_token_id"] = nlohmann::json::array({1, -2});
  expect_error(j, "eos_token_id -2 must be in [0, vocab_size = ");
  j = fixture_json("tiny_yarn");
  j["eos_token_id"] = j["vocab_size"];  // one past the last logit: a stop that never fires
  expect_error(j, "must be in [0, vocab_size = ");
  j = fixture_json("tiny_yarn");
  j["bos_token_id"] = j["vocab_size"];
  expect_error(j, "bos_token_id = ");
  // Each field in range, their product not: 2^24 experts of 2^20 x 2^20 weights.
  j = fixture_json("tiny_yarn");
  j["n_routed_experts"] = 1 << 24;
  j["moe_intermediate_size"] = 1 << 20;
  j["hidden_size"] = 1 << 20;
  expect_error(j, "weights; at most 2^48 (~2.8e14) are supported");
  // The real V4-Pro shapes pass.
  j = fixture_json("tiny_yarn");
  for (auto [key, value] : {std::pair{"hidden_size", 7168}, {"moe_intermediate_size", 3072}, {"n_routed_experts", 384},
                            {"vocab_size", 129280}, {"q_lora_rank", 1536}, {"o_lora_rank", 1024}})
    j[key] = value;
  EXPECT_EQ(error_of(j), "");
}

}  // namespace
}  // namespace moeserve::io
