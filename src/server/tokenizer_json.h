#pragma once
// Reading tokenizer.json fast: a SAX pass that streams model.vocab and model.merges (the bulk of a
// large vocabulary's file) straight into flat lists and builds a JSON document for everything else.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace moeserve::server {

using VocabList = std::vector<std::pair<std::string, int64_t>>;
using MergeList = std::vector<std::pair<std::string, std::string>>;

struct TokenizerJson {
  nlohmann::json document;  // model.vocab / model.merges are null here when streamed below
  std::optional<VocabList> vocab;
  std::optional<MergeList> merges;
};

// Throws moeserve::Error: "invalid JSON: ..." or a field error such as "model.merges[3]: ...".
TokenizerJson parse_tokenizer_json(std::string_view text);

// Splits one merges entry: a "left right" string or a [left, right] array; `index` is for errors.
std::pair<std::string, std::string> split_merge(const nlohmann::json& entry, size_t index);
std::pair<std::string, std::string> split_merge(const std::string& line, size_t index);

}  // namespace moeserve::server
