#pragma once
// The KV state of all running sequences on the CPU (fp32, the reference layout; the GPU pools use the same
// indexing with the 584-byte FP8 entry). Page ids index every per-layer pool at once: page p of a sequence
// holds the compressed entries and indexer keys of its tokens [256p, 256p + 256).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "cache/kv_layout.h"
#include "cache/page_allocator.h"

namespace moeserve::cache {

struct SequenceKv {
  int32_t slot = -1;
  std::vector<int32_t> pages;
  int64_t length = 0;  // committed tokens
  bool open() const { return slot >= 0; }
};

// Zeroed float storage from calloc: large pools come straight from mmap, so untouched pages cost no memory.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  explicit FloatBuffer(size_t count);
  float* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  size_t size_ = 0;
};

class KvCache {
 public:
  KvCache(KvLayout layout, int64_t slots, int64_t pages);

  const KvLayout& layout() const { return layout_; }
  int64_t slots_total() const { return slots_.capacity(); }
  int64_t slots_free() const { return slots_.free_count(); }
  int64_t pages_total() const { return pages_.capacity(); }
  int64_t pages_free() const { return pages_.free_count(); }
  int64_t pages_for(int64_t tokens) const { return (tokens + layout_.page_tokens - 1) / layout_.page_tokens; }
  int64_t bytes() const;

  // True when a new sequence of `tokens` total tokens fits now (a slot and its pages).
  bool can_admit(int64_t tokens) const { return slots_.free_count() > 0 && pages_.can_allocate(pages_for(tokens)); }
  // Takes a slot (throws when none is free). The sequence starts empty.
  SequenceKv open_sequence();
  // Grows the sequence's pages to hold `tokens` tokens; false (nothing allocated) when they do not fit.
  bool reserve(SequenceKv& seq, int64_t tokens);
  // Returns the slot and every page.
  void close_sequence(SequenceKv& seq);

  float* window_entry(int32_t slot, int64_t layer, int64_t position);
  float* compressed_entry(const SequenceKv& seq, int64_t layer, int64_t entry);
  float* index_key(const SequenceKv& seq, int64_t layer, int64_t entry);
  // Compressor rows of the token at `position` (ring of state_rows): kv and gate score, state_width wide.
  float* state_kv(int32_t slot, int64_t layer, int64_t position);
  float* state_score(int32_t slot, int64_t layer, int64_t position);
  float* index_state_kv(int32_t slot, int64_t layer, int64_t position);
  float* index_state_score(int32_t slot, int64_t layer, int64_t position);

 private:
  int64_t page_of(const SequenceKv& seq, int64_t layer, int64_t entry, int64_t* offset) const;

  KvLayout layout_;
  IdAllocator slots_, pages_;
  FloatBuffer window_;                      // [slots, layers, capacity, head_dim]
  std::vector<FloatBuffer> compressed_;     // per compressed layer: [pages, entries_per_page, head_dim]
  std::vector<FloatBuffer> index_keys_;     // per CSA layer: [pages, entries_per_page, index_head_dim]
  std::vector<FloatBuffer> state_;          // per compressed layer: [slots, 2 (kv, score), rows, width]
  std::vector<FloatBuffer> index_state_;    // per CSA layer: [slots, 2, rows, index width]
};

}  // namespace moeserve::cache
