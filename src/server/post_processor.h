#pragma once
// What encode(text, add_special_tokens=true) wraps around a single sequence: the ids before and
// after it. Taken from tokenizer_config.json's add_bos_token / add_eos_token when present (that is
// how transformers configures Llama-style tokenizers such as DeepSeek's, overriding tokenizer.json),
// otherwise from tokenizer.json's post_processor (TemplateProcessing, BertProcessing,
// RobertaProcessing, ByteLevel, Sequence of these).
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace moeserve::server {

struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;

  // `config` may be null (no tokenizer_config.json). `bos` / `eos` are the config's tokens, if any.
  static PostProcessor from_json(const nlohmann::json& post_processor, const nlohmann::json* config,
                                 std::optional<int32_t> bos, std::optional<int32_t> eos);
};

}  // namespace moeserve::server
