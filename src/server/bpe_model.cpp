#include "server/bpe_model.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/json_field.h"
#include "server/utf8.h"

namespace moeserve::server {
namespace {

// A merge that may apply at symbol `pos` (with the symbol after it); ordered by rank, then position,
// so the lowest-ranked pair merges first and ties go to the leftmost, as in HF.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t merged_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool alive;
};

}  // namespace

BpeModel::BpeModel(BpeModel&& other) noexcept { *this = std::move(other); }

BpeModel& BpeModel::operator=(BpeModel&& other) noexcept {
  if (this != &other) {
    tokens_ = std::move(other.tokens_);
    index_ = std::move(other.index_);
    merges_ = std::move(other.merges_);
    unk_id_ = other.unk_id_;
    fuse_unk_ = other.fuse_unk_;
    ignore_merges_ = other.ignore_merges_;
    std::lock_guard lock(other.cache_mutex_);
    cache_ = std::move(other.cache_);
  }
  return *this;
}

VocabList& BpeModel::read_vocab(const nlohmann::json& vocab, VocabList& out) {
  check(vocab.is_object(), "model.vocab: expected an object of token -> id");
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    check(id.is_number_integer(), "model.vocab[\"{}\"]: expected a non-negative integer id", token);
    out.emplace_back(token, id.get<int64_t>());
  }
  return out;
}

MergeList& BpeModel::read_merges(const nlohmann::json& merges, MergeList& out) {
  check(merges.is_array() || merges.is_null(), "model.merges: expected an array");
  for (size_t i = 0; i < merges.size(); ++i) out.push_back(split_merge(merges[i], i));
  return out;
}

BpeModel BpeModel::from_json(const nlohmann::json& json) {
  check_supported(json);
  VocabList vocab;
  MergeList merges;
  read_vocab(json_field(json, "vocab"), vocab);
  read_merges(json_field(json, "merges"), merges);
  return from_json(json, vocab, merges);
}

void BpeModel::check_supported(const nlohmann::json& json) {
  check(json.is_object(), "model: expected an object");
  const auto& type_field = json_field(json, "type");  // older files omit the type of a BPE model
  check(type_field.is_null() || type_field.is_string(), "model.type: expected a string");
  const std::string type = type_field.is_null() ? "BPE" : type_field.get<std::string>();
  check(type == "BPE", "model.type: unsupported '{}' (supported: BPE)", type);
  const auto& dropout = json_field(json, "dropout");
  check(dropout.is_null() || (dropout.is_number() && dropout.get<double>() == 0.0),
        "model.dropout: BPE dropout is not supported (expected null)");
  check(!json_bool(json, "byte_fallback", false, "model"),
        "model.byte_fallback: byte fallback is not supported (expected false)");
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto& value = json_field(json, field);
    check(value.is_null() || (value.is_string() && value.get<std::string>().empty()),
          "model.{}: not supported (expected null)", field);
  }
}

BpeModel BpeModel::from_json(const nlohmann::json& json, VocabList& vocab, MergeList& merges) {
  check_supported(json);
  BpeModel model;
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    check(id >= 0 && id < INT32_MAX, "model.vocab[\"{}\"]: expected a non-negative integer id", token);
    max_id = std::max(max_id, id);
  }
  model.tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  model.index_.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    check(model.tokens_[id].empty(), "model.vocab: id {} is used by two tokens", id);
    check(!token.empty(), "model.vocab: the token of id {} is empty", id);
    model.tokens_[id] = std::move(token);
    check(model.index_.insert(model.tokens_[id], static_cast<int32_t>(id), model.tokens_),
          "model.vocab: token \"{}\" appears twice", model.tokens_[id]);
  }
  vocab.clear();

  model.merges_.reserve(merges.size());
  std::string merged;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [left, right] = merges[i];
    merged.assign(left).append(right);
    const auto left_id = model.token_to_id(left);
    const auto right_id = model.token_to_id(right);
    const auto merged_id = model.token_to_id(merged);
    check(left_id && right_id && merged_id, "model.merges[{}]: \"{} {}\" uses a token missing from model.vocab", i,
          left, right);
    // A repeated pair keeps its last rank, as HF's map construction does.
    model.merges_.insert_or_assign(*left_id, *right_id, {static_cast<int32_t>(i), *merged_id});
  }
  merges.clear();

  const auto& unk = json_field(json, "unk_token");
  if (unk.is_string()) {
    model.unk_id_ = model.token_to_id(unk.get<std::string>());
    check(model.unk_id_.has_value(), "model.unk_token: \"{}\" is not in model.vocab", unk.get<std::string>());
  }
  model.fuse_unk_ = json_bool(json, "fuse_unk", false, "model");
  model.ignore_merges_ = json_bool(json, "ignore_merges", false, "model");
  return model;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const int32_t id = index_.find(token, tokens_);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || tokens_[id].empty()) return nullptr;
  return &tokens_[id];
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  if (const auto whole = ignore_merges_ ? token_to_id(word) : std::nullopt) {
    symbols.push_back(*whole);
  } else {
    bool previous_unk = false;
    for (size_t pos = 0; pos < word.size();) {
      size_t n = utf8::sequence_length(word, pos);
      if (n == 0) n = 1;  // not reachable for validated text; keeps the loop finite
      if (const auto id = token_to_id(word.substr(pos, n))) {
        symbols.push_back(*id);
        previous_unk = false;
      } else if (unk_id_ && !(fuse_unk_ && previous_unk)) {
        symbols.push_back(*unk_id_);
        previous_unk = true;
      }
      pos += n;
    }
    merge(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), symbols);
  }
}

void BpeModel::merge(std::vector<int32_t>& ids) const {
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.resize(n);
  heap.clear();
  const auto greater = [](const Candidate& a, const Candidate& b) { return a > b; };
  auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto* merge = merges_.find(symbols[pos].id, symbols[next].id);
    if (merge == nullptr) return;
    heap.push_back({merge->rank, pos, merge->merged_id});
    std::push_heap(heap.begin(), heap.end(), greater);
  };
  for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Skip stale candidates: the pair at this position changed since it was queued.
    const auto* merge = merges_.find(left.id, symbols[left.next].id);
    if (merge == nullptr || merge->merged_id != top.merged_id) continue;
    Symbol& right = symbols[left.next];
    left.id = top.merged_id;
    left.next = right.next;
    right.alive = false;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace moeserve::server
