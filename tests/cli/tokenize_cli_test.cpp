// `moeserve tokenize` / `moeserve detokenize` per the CLI contract, on the DeepSeek-V3 tokenizer.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace moeserve {
namespace {

using testing::run_moeserve;

std::string deepseek_dir() { return testing::source_dir() + "/data/deepseek-v3"; }

// Single-quotes an argument for /bin/sh.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void expect_failure(const testing::CommandResult& r, const std::string& message) {
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(r.out.empty()) << "partial output: " << r.out;
  EXPECT_NE(r.err.find(message), std::string::npos) << "stderr: " << r.err;
}

TEST(TokenizeCli, TextAndFileGiveTheGoldenIds) {
  auto r = run_moeserve("tokenize --model " + deepseek_dir() + " --text " + quote("Hello, my dog is cute"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json::parse(R"({"ids": [19923, 14, 1026, 6397, 344, 33125]})"));

  testing::TempDir dir;
  const std::string text = "中文测试：你好，世界！\n<｜User｜>  tabs\tand 👍🏽\n";
  std::ofstream(dir.file("in.txt"), std::ios::binary) << text;
  r = run_moeserve("tokenize --tokenizer " + deepseek_dir() + "/tokenizer.json --input-file " + dir.file("in.txt"));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto ids = nlohmann::json::parse(r.out)["ids"].get<std::vector<int32_t>>();
  EXPECT_NE(std::find(ids.begin(), ids.end(), 128803), ids.end());  // <｜User｜> is one token
  EXPECT_NE(ids.front(), 0);                                        // no BOS added

  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) joined += (i ? "," : "") + std::to_string(ids[i]);
  r = run_moeserve("detokenize --model " + deepseek_dir() + " --ids " + joined);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["text"].get<std::string>(), text);
}

TEST(TokenizeCli, DetokenizeSkipsSpecialTokensOnRequest) {
  auto r = run_moeserve("detokenize --model " + deepseek_dir() + " --ids 0,19923,14,1026,1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["text"], "<｜begin▁of▁sentence｜>Hello, my<｜end▁of▁sentence｜>");
  r = run_moeserve("detokenize --model " + deepseek_dir() + " --ids 0,19923,14,1026,1 --skip-special-tokens");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["text"], "Hello, my");
}

TEST(TokenizeCli, BadInputGivesOneClearMessage) {
  testing::TempDir dir;
  const std::string model = " --model " + deepseek_dir();
  expect_failure(run_moeserve("tokenize --model " + dir.path().string() + " --text hi"),
                 dir.file("tokenizer.json") + ": cannot open file");
  expect_failure(run_moeserve("tokenize --tokenizer " + dir.file("nope.json") + " --text hi"),
                 dir.file("nope.json") + ": cannot open file");
  expect_failure(run_moeserve("tokenize --model " + dir.file("nope") + " --text hi"),
                 "--model: " + dir.file("nope") + " is not a directory");
  expect_failure(run_moeserve("tokenize --text hi"), "one of --model DIR or --tokenizer FILE is required");
  expect_failure(run_moeserve("tokenize" + model), "exactly one of --text TEXT or --input-file FILE is required");
  expect_failure(run_moeserve("tokenize" + model + " --input-file " + dir.file("missing.txt")),
                 "--input-file: cannot open " + dir.file("missing.txt"));

  std::ofstream(dir.file("broken.json")) << "{\"model\": {\"vocab\": {\"a\": 0}";
  expect_failure(run_moeserve("tokenize --tokenizer " + dir.file("broken.json") + " --text hi"),
                 dir.file("broken.json") + ": invalid JSON:");
  std::ofstream(dir.file("unigram.json")) << R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]},
                                                  "decoder": {"type": "ByteLevel"}})";
  expect_failure(run_moeserve("tokenize --tokenizer " + dir.file("unigram.json") + " --text hi"),
                 dir.file("unigram.json") + ": model.type: unsupported 'Unigram' (supported: BPE)");

  expect_failure(run_moeserve("tokenize" + model + " --text \"$(printf 'ok\\377')\""), "--text: invalid UTF-8 at byte 2");
  std::ofstream(dir.file("latin1.txt"), std::ios::binary) << "caf\xe9";
  expect_failure(run_moeserve("tokenize" + model + " --input-file " + dir.file("latin1.txt")),
                 dir.file("latin1.txt") + ": invalid UTF-8 at byte 3");

  expect_failure(run_moeserve("detokenize" + model + " --ids 1,128815"),
                 "--ids: 128815 at index 1 is not a token id (vocabulary size 128815)");
  expect_failure(run_moeserve("detokenize" + model + " --ids 1,-2"), "--ids: '-2' is not a token id");
  expect_failure(run_moeserve("detokenize" + model + " --ids 1,x"), "--ids: 'x' is not a token id");
}

}  // namespace
}  // namespace moeserve
