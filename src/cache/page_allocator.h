#pragma once
// Hands out fixed-size KV pages (256 tokens) and request slots. Admission asks `can_allocate` first, so an
// allocation that would not fit is refused up front instead of failing half way.
#include <cstdint>
#include <vector>

namespace moeserve::cache {

class IdAllocator {
 public:
  explicit IdAllocator(int64_t count = 0);
  int64_t capacity() const { return capacity_; }
  int64_t free_count() const { return int64_t(free_.size()); }
  int64_t used_count() const { return capacity_ - free_count(); }
  bool can_allocate(int64_t n) const { return n <= free_count(); }
  // Throws moeserve::Error when fewer than n ids are free.
  std::vector<int32_t> allocate(int64_t n);
  int32_t allocate_one();
  void release(const std::vector<int32_t>& ids);
  void release_one(int32_t id);

 private:
  int64_t capacity_ = 0;
  std::vector<int32_t> free_;
  std::vector<uint8_t> in_use_;
};

}  // namespace moeserve::cache
