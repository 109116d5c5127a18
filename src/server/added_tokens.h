#pragma once
// Added tokens of an HF tokenizer.json ("added_tokens"): strings matched in the raw text before any
// pre-tokenization and mapped straight to their ids (special tokens like <｜User｜> and also plain
// added words). Matching is leftmost-longest like HF's Aho-Corasick pass; tokens with
// normalized=false are matched first, the others in a second pass over what remains (the same
// order HF uses; with an identity normalizer both passes see the same text).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "server/bpe_model.h"

namespace moeserve::server {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;       // swallow whitespace to the left of a match
  bool rstrip = false;       // swallow whitespace to the right of a match
  bool single_word = false;  // match only when not inside a word
  bool normalized = false;
};

// A piece of the text: either an added token (token_id >= 0) or text for the pre-tokenizer.
struct Segment {
  size_t begin = 0;
  size_t end = 0;
  int32_t token_id = -1;
};

class AddedVocabulary {
 public:
  static AddedVocabulary from_json(const nlohmann::json& added_tokens);

  // Splits text into segments; consecutive text segments are not merged.
  void split(std::string_view text, std::vector<Segment>& out) const;

  const AddedToken* find(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over token contents for leftmost-longest matching.
  struct Trie {
    struct Node {
      std::unordered_map<unsigned char, int32_t> children;
      int32_t token = -1;  // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    bool empty() const { return nodes.size() == 1; }
    void insert(std::string_view content, int32_t token);
    // Longest token starting at text[pos]: returns its index and sets *length, or -1.
    int32_t longest_at(std::string_view text, size_t pos, size_t* length) const;
  };

  void split_pass(const Trie& trie, std::string_view text, Segment text_segment, std::vector<Segment>& out) const;
  bool is_single_word_match(std::string_view text, size_t begin, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  StringToId by_content_;
  Trie raw_trie_;         // normalized == false
  Trie normalized_trie_;  // normalized == true
};

}  // namespace moeserve::server
