#pragma once
// Streaming decode: token ids arrive one at a time and only complete UTF-8 text comes out. Bytes of
// a character split across tokens are held back until the character completes (an emoji is often
// 3-4 byte-level tokens). The concatenated output of push() and flush() equals
// Tokenizer::decode(all ids): invalid bytes become U+FFFD exactly where decode would put them.
// Per-token and allocation-light; never throws (ids that are not tokens, e.g. from a model whose
// embedding is padded past the tokenizer's vocabulary, are ignored).
#include <cstdint>
#include <string>

#include "server/tokenizer.h"

namespace moeserve::server {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Appends the text that `id` completes to `out` (possibly nothing).
  void push(int32_t id, std::string& out);
  std::string push(int32_t id) {
    std::string out;
    push(id, out);
    return out;
  }

  // End of stream: appends held-back bytes (an unfinished character) as U+FFFD.
  void flush(std::string& out);
  std::string flush() {
    std::string out;
    flush(out);
    return out;
  }

  // Bytes held back, waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace moeserve::server
