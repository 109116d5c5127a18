#include "cache/kv_cache.h"

#include <cmath>

#include "core/error.h"

namespace moeserve::cache {

FloatBuffer::FloatBuffer(size_t count) : size_(count) {
  if (count == 0) return;
  data_.reset(static_cast<float*>(std::calloc(count, sizeof(float))));
  check(data_ != nullptr, "out of host memory for the KV cache ({} bytes)", count * sizeof(float));
}

KvCache::KvCache(KvLayout layout, int64_t slots, int64_t pages)
    : layout_(std::move(layout)), slots_(slots), pages_(pages) {
  check(slots > 0 && pages >= 0, "KV cache needs at least one request slot (got {} slots, {} pages)", slots, pages);
  const int64_t num_layers = int64_t(layout_.layers.size());
  window_ = FloatBuffer(size_t(slots * num_layers * layout_.window_capacity * layout_.head_dim));
  compressed_.resize(size_t(layout_.num_compressed_layers));
  index_keys_.resize(size_t(layout_.num_indexer_layers));
  state_.resize(size_t(layout_.num_compressed_layers));
  index_state_.resize(size_t(layout_.num_indexer_layers));
  for (const auto& l : layout_.layers) {
    if (l.compressed_layer < 0) continue;
    compressed_[size_t(l.compressed_layer)] = FloatBuffer(size_t(pages * l.entries_per_page * layout_.head_dim));
    state_[size_t(l.compressed_layer)] = FloatBuffer(size_t(slots * 2 * l.state_rows * l.state_width));
    if (l.indexer_layer >= 0) {
      index_keys_[size_t(l.indexer_layer)] = FloatBuffer(size_t(pages * l.entries_per_page * layout_.index_head_dim));
      index_state_[size_t(l.indexer_layer)] = FloatBuffer(size_t(slots * 2 * l.state_rows * l.index_state_width));
    }
  }
}

int64_t KvCache::bytes() const {
  size_t n = window_.size();
  for (const auto& v : compressed_) n += v.size();
  for (const auto& v : index_keys_) n += v.size();
  for (const auto& v : state_) n += v.size();
  for (const auto& v : index_state_) n += v.size();
  return int64_t(n * sizeof(float));
}

SequenceKv KvCache::open_sequence() {
  SequenceKv seq;
  seq.slot = slots_.allocate_one();
  return seq;
}

bool KvCache::reserve(SequenceKv& seq, int64_t tokens) {
  int64_t need = pages_for(tokens) - int64_t(seq.pages.size());
  if (need <= 0) return true;
  if (!pages_.can_allocate(need)) return false;
  for (int32_t p : pages_.allocate(need)) seq.pages.push_back(p);
  return true;
}

void KvCache::close_sequence(SequenceKv& seq) {
  if (seq.slot >= 0) slots_.release_one(seq.slot);
  pages_.release(seq.pages);
  seq = SequenceKv{};
}

float* KvCache::window_entry(int32_t slot, int64_t layer, int64_t position) {
  const int64_t cap = layout_.window_capacity, layers = int64_t(layout_.layers.size());
  return window_.data() + ((int64_t(slot) * layers + layer) * cap + position % cap) * layout_.head_dim;
}

int64_t KvCache::page_of(const SequenceKv& seq, int64_t layer, int64_t entry, int64_t* offset) const {
  const LayerKvLayout& l = layout_.layers[size_t(layer)];
  int64_t page_index = entry / l.entries_per_page;
  check(page_index < int64_t(seq.pages.size()), "KV entry {} of layer {} is beyond the sequence's {} pages", entry,
        layer, seq.pages.size());
  *offset = entry % l.entries_per_page;
  return seq.pages[size_t(page_index)];
}

float* KvCache::compressed_entry(const SequenceKv& seq, int64_t layer, int64_t entry) {
  const LayerKvLayout& l = layout_.layers[size_t(layer)];
  int64_t offset;
  int64_t page = page_of(seq, layer, entry, &offset);
  return compressed_[size_t(l.compressed_layer)].data() + (page * l.entries_per_page + offset) * layout_.head_dim;
}

float* KvCache::index_key(const SequenceKv& seq, int64_t layer, int64_t entry) {
  const LayerKvLayout& l = layout_.layers[size_t(layer)];
  int64_t offset;
  int64_t page = page_of(seq, layer, entry, &offset);
  return index_keys_[size_t(l.indexer_layer)].data() + (page * l.entries_per_page + offset) * layout_.index_head_dim;
}

namespace {
// Row of `position` in a slot's ring: [slots, 2 (kv, score), rows, width], row index position mod rows.
float* ring_row(const FloatBuffer& pool, int32_t slot, int which, int64_t rows, int64_t width, int64_t position) {
  return pool.data() + ((int64_t(slot) * 2 + which) * rows + position % rows) * width;
}
}  // namespace

float* KvCache::state_kv(int32_t slot, int64_t layer, int64_t position) {
  const LayerKvLayout& l = layout_.layers[size_t(layer)];
  return ring_row(state_[size_t(l.compressed_layer)], slot, 0, l.state_rows, l.state_width, position);
}

float* KvCache::state_score(int32_t slot, int64_t layer, int64_t position) {
  const LayerKvLayout& l = layout_.layers[size_t(layer)];
  return ring_row(state_[size_t(l.compressed_layer)], slot, 1, l.state_rows, l.state_width, position);
}

float* KvCache::index_state_kv(int32_t slot, int64_t layer, int64_t position) {
  const LayerKvLayout& l = layout_.layers[size_t(layer)];
  return ring_row(index_state_[size_t(l.indexer_layer)], slot, 0, l.state_rows, l.index_state_width, position);
}

float* KvCache::index_state_score(int32_t slot, int64_t layer, int64_t position) {
  const LayerKvLayout& l = layout_.layers[size_t(layer)];
  return ring_row(index_state_[size_t(l.indexer_layer)], slot, 1, l.state_rows, l.index_state_width, position);
}

}  // namespace moeserve::cache
