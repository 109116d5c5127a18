#pragma once
// The BPE model of an HF tokenizer.json ("model": {"type": "BPE", ...}): a vocabulary of token
// strings and merges applied by rank. Words arrive already in the vocabulary's alphabet (byte-level
// mapped when the pre-tokenizer is ByteLevel). Encoded words are cached, since text repeats words a lot.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "server/bpe_tables.h"
#include "server/tokenizer_json.h"

namespace moeserve::server {

// Heterogeneous lookup for std::unordered_map, so string_view keys need no allocation.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringToId = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `json` is the tokenizer.json "model" value. Rejects everything but plain BPE (no dropout,
  // no byte_fallback, no subword prefix/suffix).
  // `vocab` and `merges` come from read_vocab / read_merges or straight from the file (see
  // tokenizer_json.h); they are consumed.
  static BpeModel from_json(const nlohmann::json& json, VocabList& vocab, MergeList& merges);
  static BpeModel from_json(const nlohmann::json& json);
  // Throws moeserve::Error unless `json` describes a model this class implements (checked before
  // the vocabulary is read, so an unsupported type is reported as such).
  static void check_supported(const nlohmann::json& json);
  // model.vocab / model.merges of a JSON document as lists; return `out`.
  static VocabList& read_vocab(const nlohmann::json& vocab, VocabList& out);
  static MergeList& read_merges(const nlohmann::json& merges, MergeList& out);

  BpeModel() = default;
  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&& other) noexcept;

  // Appends the ids of `word`. Characters outside the vocabulary become unk_token if there is one
  // and are dropped otherwise (HF's behaviour). Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr if the id has no token in the model vocabulary.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id of the model vocabulary.
  size_t vocab_size() const { return tokens_.size(); }

 private:
  void merge(std::vector<int32_t>& symbols) const;

  std::vector<std::string> tokens_;  // by id; gaps (ids without a token) are empty and not in index_
  TokenIndex index_;
  MergeTable merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;

  // word -> ids; bounded so adversarial input cannot grow it without limit.
  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace moeserve::server
