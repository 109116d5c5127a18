#pragma once
// The tokenizer of a model directory: an HF tokenizer.json byte-level BPE (DeepSeek-V3's, or a
// GPT-2-style one trained with HF `tokenizers`) plus tokenizer_config.json for BOS/EOS and
// add_special_tokens. Encoding: added tokens are cut out first, the rest is pre-tokenized, mapped to
// the byte-level alphabet and BPE-encoded. Decoding follows HF: byte-level tokens become bytes,
// added tokens their text, invalid UTF-8 becomes U+FFFD. All const methods are thread-safe.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "server/added_tokens.h"
#include "server/bpe_model.h"
#include "server/post_processor.h"
#include "server/pre_tokenizer.h"

namespace moeserve::server {

class Tokenizer {
 public:
  // `path` is a directory holding tokenizer.json (and, optionally, tokenizer_config.json) or a
  // tokenizer.json file (read without a config). Errors name the file and the field.
  static Tokenizer load(const std::filesystem::path& path);
  static Tokenizer load_files(const std::filesystem::path& tokenizer_json,
                              const std::optional<std::filesystem::path>& tokenizer_config);
  // `config` may be null. Errors name fields relative to the tokenizer.json root.
  static Tokenizer from_json(const nlohmann::json& tokenizer, const nlohmann::json* config);

  // Throws moeserve::Error if `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Throws moeserve::Error naming the index of an id that is not a token.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as in tokenizer.json (byte-level alphabet for model tokens); nullopt if none.
  std::optional<std::string> id_to_token(int32_t id) const;
  // One past the largest token id (model vocabulary and added tokens).
  size_t vocab_size() const { return token_bytes_.size(); }
  bool is_token(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < vocab_size() && has_token_[id]; }
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const { return added_.find(id) != nullptr; }
  // The bytes a token decodes to (may be part of a UTF-8 sequence); empty for a non-token.
  std::string_view token_bytes(int32_t id) const {
    return is_token(id) ? std::string_view(token_bytes_[id]) : std::string_view();
  }

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // Token strings from tokenizer_config.json (empty without a config or the field).
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // The Jinja chat template from tokenizer_config.json, for reference (empty if none).
  const std::string& chat_template() const { return chat_template_; }

 private:
  static Tokenizer build(const nlohmann::json& tokenizer, const nlohmann::json* config, VocabList* vocab,
                         MergeList* merges);
  void encode_text(std::string_view text, size_t begin, size_t end, std::vector<int32_t>& out) const;

  AddedVocabulary added_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  PostProcessor post_processor_;
  std::vector<std::string> token_bytes_;
  std::vector<bool> has_token_;
  std::optional<int32_t> bos_id_, eos_id_;
  std::string bos_token_, eos_token_, chat_template_;
};

}  // namespace moeserve::server
