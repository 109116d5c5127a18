// `moeserve generate` per the CLI contract: one JSON object with output_ids; --dump-logits; clean failures.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/fixture.h"
#include "run_command.h"

namespace moeserve {
namespace {

using testing::run_moeserve;

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

TEST(GenerateCli, GreedyMatchesOracleAndDumpsLogits) {
  auto oracle = testing::load_oracle("tiny_yarn");
  std::vector<int32_t> prompt(oracle.ids.begin(), oracle.ids.begin() + oracle.prompt_len);
  const int64_t n = int64_t(oracle.ids.size()) - oracle.prompt_len;
  testing::TempDir dir;
  auto r = run_moeserve("generate --model " + testing::model_fixture("tiny_yarn") + " --prompt-ids " + join(prompt) +
              " --max-new-tokens " + std::to_string(n) + " --temperature 0 --ignore-eos --dump-logits " +
              dir.file("logits.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  auto json = nlohmann::json::parse(r.out);
  std::vector<int32_t> want(oracle.ids.begin() + oracle.prompt_len, oracle.ids.end());
  EXPECT_EQ(json["output_ids"].get<std::vector<int32_t>>(), want);
  auto dump = io::Checkpoint::open_files({dir.file("logits.safetensors")});
  const Tensor& logits = dump.get("logits").tensor;
  ASSERT_EQ(logits.shape(), oracle.logits.shape());  // [P + N - 1, vocab]
  EXPECT_LE(testing::max_abs_diff(logits, oracle.logits), 1e-3f);
}

TEST(GenerateCli, PromptIdsOutsideTheVocabulary) {
  auto r = run_moeserve("generate --model " + testing::model_fixture("tiny_hf") + " --prompt-ids 1,2,320 --max-new-tokens 2");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(r.out.empty()) << "partial output: " << r.out;
  EXPECT_NE(r.err.find("id 320 at index 2 is outside the vocabulary [0, 320)"), std::string::npos) << r.err;
  r = run_moeserve("generate --model " + testing::model_fixture("tiny_hf") + " --prompt-ids 1,x --max-new-tokens 2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--prompt-ids: 'x' is not a token id"), std::string::npos) << r.err;
}

TEST(GenerateCli, BadModelDirectory) {
  testing::TempDir dir;
  auto r = run_moeserve("generate --model " + dir.path().string() + " --prompt-ids 1 --max-new-tokens 1");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("config.json: cannot open config"), std::string::npos) << r.err;
  std::ofstream(dir.file("config.json")) << "{\"model_type\": \"deepseek_v4\"}";
  r = run_moeserve("generate --model " + dir.path().string() + " --prompt-ids 1 --max-new-tokens 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("missing config field 'vocab_size'"), std::string::npos) << r.err;
}

TEST(GenerateCli, CudaOnlyFlagsNamedOnTheCpu) {
  const std::string base = "generate --model " + testing::model_fixture("tiny_hf") + " --prompt-ids 1,2 --max-new-tokens 1";
  for (const char* flag : {" --cuda-kernels fast", " --cuda-kernels exact", " --cuda-graph"}) {
    auto r = run_moeserve(base + flag);
    EXPECT_NE(r.status, 0) << flag;
    EXPECT_TRUE(r.out.empty()) << flag;
    EXPECT_NE(r.err.find("apply to --device cuda only"), std::string::npos) << flag << ": " << r.err;
  }
  auto r = run_moeserve(base + " --device cuda --cuda-kernels quick");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--cuda-kernels"), std::string::npos) << r.err;
  r = run_moeserve("serve --cuda-kernels fast --port 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--cuda-kernels applies to --device cuda only"), std::string::npos) << r.err;
}

// --routing-histogram: the run's expert counts per MoE layer, in the file the W4A8 tuner reads; CPU only.
TEST(GenerateCli, RoutingHistogramOfTheRun) {
  testing::TempDir dir;
  const std::string base = "generate --model " + testing::model_fixture("tiny_hf") + " --prompt-ids 1,2,3 --max-new-tokens 2";
  auto r = run_moeserve(base + " --routing-histogram " + dir.file("routing.json"));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json h = nlohmann::json::parse(std::ifstream(dir.file("routing.json")));
  ASSERT_TRUE(h["layers"].is_array());
  ASSERT_FALSE(h["layers"].empty());
  const int64_t k = h["experts_per_token"].get<int64_t>();
  for (const nlohmann::json& l : h["layers"]) {
    EXPECT_EQ(l["tokens"].get<int64_t>(), 4);  // 3 prompt tokens, then 1 generated token fed back
    int64_t sum = 0;
    for (const nlohmann::json& c : l["counts"]) sum += c.get<int64_t>();
    EXPECT_EQ(sum, 4 * k);
  }
  r = run_moeserve(base + " --device cuda --routing-histogram " + dir.file("x.json"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--routing-histogram records in the reference engine: use it with --device cpu"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace moeserve
