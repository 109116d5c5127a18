#include "server/added_tokens.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/json_field.h"
#include "server/regex.h"
#include "server/utf8.h"

namespace moeserve::server {
namespace {

// Code point starting at pos, or before `end` scanning backwards; length via *length.
char32_t code_point_at(std::string_view text, size_t pos, size_t* length) {
  size_t n = utf8::sequence_length(text, pos);
  if (n == 0) n = 1;
  *length = n;
  return utf8::decode(text.data() + pos, n);
}

size_t previous_char_start(std::string_view text, size_t pos) {
  do {
    --pos;
  } while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80);
  return pos;
}

// Unicode \w (letters, marks, digits, connector punctuation), as the single_word boundary test needs.
bool is_word_char(std::string_view text, size_t pos, size_t length) {
  static const Regex word(R"(^\w$)", "single_word boundary");
  bool found = false;
  word.for_each_match(text, pos, pos + length, [&](size_t, size_t) { found = true; });
  return found;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view content, int32_t token) {
  int32_t node = 0;
  for (unsigned char byte : content) {
    const auto it = nodes[node].children.find(byte);
    if (it != nodes[node].children.end()) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace(byte, child);
      nodes.emplace_back();
      node = child;
    }
  }
  if (nodes[node].token < 0) nodes[node].token = token;  // the first of duplicate contents wins
  first_byte[static_cast<unsigned char>(content[0])] = true;
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos, size_t* length) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto it = nodes[node].children.find(static_cast<unsigned char>(text[i]));
    if (it == nodes[node].children.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      *length = i + 1 - pos;
    }
  }
  return best;
}

AddedVocabulary AddedVocabulary::from_json(const nlohmann::json& added_tokens) {
  AddedVocabulary vocab;
  if (added_tokens.is_null()) return vocab;
  check(added_tokens.is_array(), "added_tokens: expected an array");
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const auto& entry = added_tokens[i];
    const auto where = fmt::format("added_tokens[{}]", i);
    check(entry.is_object(), "{}: expected an object", where);
    check(entry.contains("id") && entry["id"].is_number_integer() && entry["id"].get<int64_t>() >= 0 &&
              entry["id"].get<int64_t>() < INT32_MAX,
          "{}.id: expected a non-negative integer", where);
    check(entry.contains("content") && entry["content"].is_string() &&
              !entry["content"].get_ref<const std::string&>().empty(),
          "{}.content: expected a non-empty string", where);
    AddedToken token;
    token.id = static_cast<int32_t>(entry["id"].get<int64_t>());
    token.content = entry["content"].get<std::string>();
    check(utf8::is_valid(token.content), "{}.content: invalid UTF-8", where);
    token.special = json_bool(entry, "special", false, where);
    token.lstrip = json_bool(entry, "lstrip", false, where);
    token.rstrip = json_bool(entry, "rstrip", false, where);
    token.single_word = json_bool(entry, "single_word", false, where);
    token.normalized = json_bool(entry, "normalized", !token.special, where);
    check(!vocab.by_id_.contains(token.id), "{}.id: id {} is used by two added tokens", where, token.id);
    vocab.by_id_.emplace(token.id, vocab.tokens_.size());
    vocab.by_content_.emplace(token.content, token.id);
    vocab.tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    auto& trie = vocab.tokens_[i].normalized ? vocab.normalized_trie_ : vocab.raw_trie_;
    trie.insert(vocab.tokens_[i].content, static_cast<int32_t>(i));
  }
  return vocab;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

void AddedVocabulary::split(std::string_view text, std::vector<Segment>& out) const {
  if (raw_trie_.empty() && normalized_trie_.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  thread_local std::vector<Segment> first;
  first.clear();
  split_pass(raw_trie_, text, {0, text.size(), -1}, first);
  for (const auto& segment : first) {
    if (segment.token_id >= 0) {
      out.push_back(segment);
    } else {
      split_pass(normalized_trie_, text, segment, out);
    }
  }
}

bool AddedVocabulary::is_single_word_match(std::string_view text, size_t begin, size_t end) const {
  size_t length = 0;
  if (begin > 0) {
    const size_t before = previous_char_start(text, begin);
    if (is_word_char(text, before, begin - before)) return false;
  }
  if (end < text.size()) {
    code_point_at(text, end, &length);
    if (is_word_char(text, end, length)) return false;
  }
  return true;
}

void AddedVocabulary::split_pass(const Trie& trie, std::string_view text, Segment segment,
                                 std::vector<Segment>& out) const {
  if (segment.end <= segment.begin) return;
  const std::string_view scope = text.substr(0, segment.end);
  size_t emitted = segment.begin;  // end of the last segment pushed
  size_t pos = segment.begin;
  while (pos < segment.end) {
    if (!trie.first_byte[static_cast<unsigned char>(scope[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    const int32_t index = trie.longest_at(scope, pos, &length);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t begin = pos, end = pos + length;
    pos = end;  // like HF's match iterator, a rejected match is consumed, not retried shorter
    if (token.single_word &&
        !is_single_word_match(text.substr(segment.begin, segment.end - segment.begin), begin - segment.begin,
                              end - segment.begin))
      continue;
    size_t cp_length = 0;
    if (token.lstrip) {
      while (begin > emitted) {
        const size_t before = previous_char_start(scope, begin);
        if (!utf8::is_whitespace(code_point_at(scope, before, &cp_length))) break;
        begin = before;
      }
    }
    if (token.rstrip) {
      while (end < segment.end && utf8::is_whitespace(code_point_at(scope, end, &cp_length))) end += cp_length;
      pos = end;
    }
    if (begin > emitted) out.push_back({emitted, begin, -1});
    out.push_back({begin, end, token.id});
    emitted = end;
  }
  if (emitted < segment.end) out.push_back({emitted, segment.end, -1});
}

}  // namespace moeserve::server
