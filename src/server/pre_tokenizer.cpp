#include "server/pre_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/json_field.h"

namespace moeserve::server {
namespace {

// The pattern HF's ByteLevel pre-tokenizer uses when use_regex is true (GPT-2's).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Piece {
  size_t begin, end;
  bool is_match;
};

SplitBehavior parse_behavior(const nlohmann::json& json, const std::string& where) {
  check(json.is_string(), "{}.behavior: expected a string", where);
  const auto name = json.get<std::string>();
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  fail("{}.behavior: unsupported '{}' (expected Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous)",
       where, name);
}

// Applies a behavior to the alternating match / non-match pieces, as HF's NormalizedString::split does.
void apply_behavior(SplitBehavior behavior, const std::vector<Piece>& pieces, std::vector<Span>& out) {
  const size_t first = out.size();
  auto push = [&](size_t begin, size_t end) { out.push_back({begin, end, false}); };
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const auto& p : pieces) push(p.begin, p.end);
      break;
    case SplitBehavior::Removed:
      for (const auto& p : pieces)
        if (!p.is_match) push(p.begin, p.end);
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const auto& p : pieces) {
        if (p.is_match && !previous_match && out.size() > first) {
          out.back().end = p.end;
        } else {
          push(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      // A match joins the piece after it: walk backwards, extending the following piece's start.
      for (size_t i = pieces.size(); i-- > 0;) {
        const auto& p = pieces[i];
        if (p.is_match && !previous_match && out.size() > first) {
          out.back().begin = p.begin;
        } else {
          push(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
      break;
    case SplitBehavior::Contiguous:
      for (const auto& p : pieces) {
        if (p.is_match == previous_match && out.size() > first) {
          out.back().end = p.end;
        } else {
          push(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
  }
  // Empty pieces are dropped, as HF drops empty splits.
  size_t kept = first;
  for (size_t i = first; i < out.size(); ++i)
    if (out[i].end > out[i].begin) out[kept++] = out[i];
  out.resize(kept);
}

}  // namespace

SplitRule::SplitRule(Regex regex, SplitBehavior behavior, bool invert)
    : pattern_(std::move(regex)), behavior_(behavior), invert_(invert) {}

SplitRule::SplitRule(std::string literal, SplitBehavior behavior, bool invert)
    : pattern_(std::move(literal)), behavior_(behavior), invert_(invert) {}

void SplitRule::split(std::string_view text, Span span, std::vector<Span>& out) const {
  if (span.end <= span.begin) return;
  thread_local std::vector<Piece> pieces;
  pieces.clear();
  size_t previous = span.begin;
  auto on_match = [&](size_t begin, size_t end) {
    if (begin > previous) pieces.push_back({previous, begin, invert_});
    pieces.push_back({begin, end, !invert_});
    previous = end;
  };
  if (const auto* regex = std::get_if<Regex>(&pattern_)) {
    regex->for_each_match(text, span.begin, span.end, on_match);
  } else {
    const auto& literal = std::get<std::string>(pattern_);
    const std::string_view piece = text.substr(0, span.end);
    for (size_t pos = piece.find(literal, span.begin); !literal.empty() && pos != std::string_view::npos;
         pos = piece.find(literal, pos + literal.size())) {
      on_match(pos, pos + literal.size());
    }
  }
  if (previous < span.end) pieces.push_back({previous, span.end, invert_});
  apply_behavior(behavior_, pieces, out);
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& json) {
  PreTokenizer result;
  if (!json.is_null()) result.add(json, "pre_tokenizer", true);
  return result;
}

void PreTokenizer::add(const nlohmann::json& json, const std::string& where, bool last) {
  check(json.is_object() && json.contains("type") && json["type"].is_string(),
        "{}: expected an object with a string \"type\"", where);
  const auto type = json["type"].get<std::string>();
  if (type == "Sequence") {
    const auto& list = json_field(json, "pretokenizers");
    check(list.is_array(), "{}.pretokenizers: expected an array", where);
    for (size_t i = 0; i < list.size(); ++i)
      add(list[i], fmt::format("{}.pretokenizers[{}]", where, i), last && i + 1 == list.size());
  } else if (type == "Split") {
    check(!byte_level_, "{}: a Split after ByteLevel is not supported (ByteLevel must come last)", where);
    const auto behavior = parse_behavior(json_field(json, "behavior"), where);
    const bool invert = json_bool(json, "invert", false, where);
    const auto& pattern = json_field(json, "pattern");
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      rules_.emplace_back(Regex(pattern["Regex"].get<std::string>(), where + ".pattern.Regex"), behavior, invert);
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      rules_.emplace_back(pattern["String"].get<std::string>(), behavior, invert);
    } else {
      fail("{}.pattern: expected {{\"Regex\": string}} or {{\"String\": string}}", where);
    }
  } else if (type == "ByteLevel") {
    check(last, "{}: ByteLevel must be the last pre-tokenizer (others after it are not supported)", where);
    byte_level_ = true;
    add_prefix_space_ = json_bool(json, "add_prefix_space", false, where);
    if (json_bool(json, "use_regex", true, where))
      byte_level_rule_.emplace_back(Regex(kGpt2Pattern, where + " (GPT-2 pattern)"), SplitBehavior::Isolated, false);
  } else {
    fail("{}.type: unsupported pre-tokenizer '{}' (supported: Sequence, Split, ByteLevel)", where, type);
  }
}

void PreTokenizer::split(std::string_view text, Span span, std::vector<Span>& out) const {
  thread_local std::vector<Span> current, next;
  current.assign(1, span);
  for (const auto& rule : rules_) {
    next.clear();
    for (const auto& s : current) rule.split(text, s, next);
    current.swap(next);
  }
  if (!byte_level_) {
    out.insert(out.end(), current.begin(), current.end());
    return;
  }
  for (const auto& s : current) split_byte_level(text, s, out);
}

void PreTokenizer::split_byte_level(std::string_view text, Span span, std::vector<Span>& out) const {
  const bool prefix = add_prefix_space_ && text[span.begin] != ' ';
  if (byte_level_rule_.empty()) {
    out.push_back({span.begin, span.end, prefix});
    return;
  }
  if (!prefix) {
    byte_level_rule_[0].split(text, span, out);
    return;
  }
  // The space is prepended before the GPT-2 split, so the split runs on " " + piece;
  // offsets are then mapped back with the space as a virtual byte before the first piece.
  thread_local std::string spaced;
  thread_local std::vector<Span> pieces;
  spaced.clear();
  spaced.push_back(' ');
  spaced.append(text.substr(span.begin, span.end - span.begin));
  pieces.clear();
  byte_level_rule_[0].split(spaced, {0, spaced.size(), false}, pieces);
  for (const auto& p : pieces) {
    if (p.begin == 0) {
      out.push_back({span.begin, span.begin + p.end - 1, true});
    } else {
      out.push_back({span.begin + p.begin - 1, span.begin + p.end - 1, false});
    }
  }
}

}  // namespace moeserve::server
