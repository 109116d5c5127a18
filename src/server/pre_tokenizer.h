#pragma once
// The pre-tokenizer of an HF tokenizer.json: cuts text into pieces that BPE encodes one by one.
// Supported: Split (Regex or String pattern; behaviors Isolated, Removed, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space, use_regex = the GPT-2 pattern),
// and Sequence of these with ByteLevel last. Anything else is rejected at load time.
#include <cstddef>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "server/regex.h"

namespace moeserve::server {

// A byte range [begin, end) of the text being pre-tokenized. ByteLevel's add_prefix_space puts a
// space before a piece that does not start with one; `prefix_space` marks that virtual byte.
struct Span {
  size_t begin = 0;
  size_t end = 0;
  bool prefix_space = false;
};

enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

class SplitRule {
 public:
  SplitRule(Regex regex, SplitBehavior behavior, bool invert);
  SplitRule(std::string literal, SplitBehavior behavior, bool invert);

  // Splits text[span] and appends the non-empty resulting spans to `out`.
  void split(std::string_view text, Span span, std::vector<Span>& out) const;

 private:
  std::variant<Regex, std::string> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class PreTokenizer {
 public:
  // `json` is the tokenizer.json "pre_tokenizer" value (null means: the whole text is one piece).
  static PreTokenizer from_json(const nlohmann::json& json);

  // Pieces of text[span], appended to `out` in order.
  void split(std::string_view text, Span span, std::vector<Span>& out) const;

  // Whether the pieces are mapped to the byte-level alphabet before BPE, and prefixed with a space.
  bool byte_level() const { return byte_level_; }
  bool add_prefix_space() const { return add_prefix_space_; }

 private:
  void add(const nlohmann::json& json, const std::string& where, bool last);

  void split_byte_level(std::string_view text, Span span, std::vector<Span>& out) const;

  std::vector<SplitRule> rules_;
  std::vector<SplitRule> byte_level_rule_;  // the GPT-2 pattern when ByteLevel has use_regex
  bool byte_level_ = false;
  bool add_prefix_space_ = false;
};

}  // namespace moeserve::server
