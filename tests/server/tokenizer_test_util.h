#pragma once
// Shared helpers for the tokenizer tests: the DeepSeek-V3 tokenizer (fetched by scripts/setup.sh;
// the tests fail, not skip, without it) and the HF goldens.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/tokenizer.h"
#include "test_paths.h"

namespace moeserve::server::testing {

inline std::string deepseek_dir() { return moeserve::testing::source_dir() + "/data/deepseek-v3"; }

// Loaded once per test binary: parsing 7.8 MB of JSON is the slow part.
inline const Tokenizer& deepseek_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(deepseek_dir());
  return tokenizer;
}

inline nlohmann::json read_json_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file.good()) << "cannot open " << path;
  std::stringstream buffer;
  buffer << file.rdbuf();
  return nlohmann::json::parse(buffer.str());
}

inline const nlohmann::json& goldens() {
  static const nlohmann::json json = read_json_file(moeserve::testing::fixture("tokenizer/tokenizer_goldens.json"));
  return json;
}

}  // namespace moeserve::server::testing
