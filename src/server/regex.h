#pragma once
// A compiled PCRE2 pattern (UTF + UCP so \p{..}, \s and \w are Unicode-aware, JIT-compiled) used by
// the Split pre-tokenizers. HF `tokenizers` uses Oniguruma; the patterns in tokenizer.json files use
// the common subset of both syntaxes.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace moeserve::server {

class Regex {
 public:
  // Throws moeserve::Error naming `where` (e.g. "pre_tokenizer.pretokenizers[0].pattern.Regex") on a bad pattern.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) for each non-overlapping, non-empty match in text[begin, end), left to right.
  // `text` must be valid UTF-8 (checked once at the tokenizer boundary, not here). Thread-safe.
  template <typename F>
  void for_each_match(std::string_view text, size_t begin, size_t end, F&& on_match) const {
    // HF matches each split as a string of its own: no lookaround past its edges.
    const std::string_view piece = text.substr(begin, end - begin);
    size_t pos = 0;
    size_t match_begin = 0, match_end = 0;
    while (pos < piece.size() && find(piece, pos, &match_begin, &match_end)) {
      if (match_end > match_begin) {
        on_match(begin + match_begin, begin + match_end);
        pos = match_end;
      } else {
        pos = next_char(piece, match_begin);  // empty match: step over one character
      }
    }
  }

  const std::string& pattern() const { return pattern_; }

 private:
  bool find(std::string_view subject, size_t start, size_t* match_begin, size_t* match_end) const;
  static size_t next_char(std::string_view subject, size_t pos);

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so the PCRE2 header stays in regex.cpp
};

}  // namespace moeserve::server
