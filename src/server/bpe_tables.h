#pragma once
// Open-addressing hash tables for the BPE model's hot lookups (token string -> id, id pair -> merge).
// Flat arrays instead of node-based std::unordered_map: loading DeepSeek's 128K-token vocabulary and
// 128K merges, and encoding, are dominated by these lookups and their cache misses.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::server {

// Token string -> id over a by-id token array that the owner keeps (passed to each call).
class TokenIndex {
 public:
  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2) capacity *= 2;
    slots_.assign(capacity, Slot{0, -1});
  }

  // Returns false (and changes nothing) if the token is already present.
  bool insert(std::string_view token, int32_t id, const std::vector<std::string>& tokens) {
    const uint64_t h = hash(token);
    for (size_t i = h & mask();; i = (i + 1) & mask()) {
      Slot& slot = slots_[i];
      if (slot.id < 0) {
        slot = {static_cast<uint32_t>(h >> 32), id};
        return true;
      }
      if (slot.tag == static_cast<uint32_t>(h >> 32) && tokens[slot.id] == token) return false;
    }
  }

  // -1 if absent.
  int32_t find(std::string_view token, const std::vector<std::string>& tokens) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(token);
    for (size_t i = h & mask();; i = (i + 1) & mask()) {
      const Slot& slot = slots_[i];
      if (slot.id < 0) return -1;
      if (slot.tag == static_cast<uint32_t>(h >> 32) && tokens[slot.id] == token) return slot.id;
    }
  }

 private:
  struct Slot {
    uint32_t tag;  // high hash bits, to skip most string compares
    int32_t id;    // -1: empty
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  size_t mask() const { return slots_.size() - 1; }
  std::vector<Slot> slots_;
};

// (left id, right id) -> (rank, merged id).
class MergeTable {
 public:
  struct Merge {
    int32_t rank = -1;
    int32_t merged_id = -1;
  };

  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2) capacity *= 2;
    slots_.assign(capacity, Slot{kEmpty, {}});
  }

  // Overwrites an existing pair (a repeated merge keeps its last rank, as in HF).
  void insert_or_assign(int32_t left, int32_t right, Merge merge) {
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask();; i = (i + 1) & mask()) {
      if (slots_[i].key == kEmpty || slots_[i].key == key) {
        slots_[i] = {key, merge};
        return;
      }
    }
  }

  // nullptr if the pair does not merge.
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask();; i = (i + 1) & mask()) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are < 2^31, so no real pair packs to this
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static uint64_t pack(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  static uint64_t hash(uint64_t key) {
    const uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
  }
  size_t mask() const { return slots_.size() - 1; }
  std::vector<Slot> slots_;
};

}  // namespace moeserve::server
