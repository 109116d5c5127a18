#include "cache/page_allocator.h"

#include "core/error.h"

namespace moeserve::cache {

IdAllocator::IdAllocator(int64_t count) : capacity_(count), in_use_(size_t(count), 0) {
  free_.reserve(static_cast<size_t>(count));
  for (int64_t i = count - 1; i >= 0; --i) free_.push_back(int32_t(i));  // hand out low ids first
}

std::vector<int32_t> IdAllocator::allocate(int64_t n) {
  check(can_allocate(n), "out of KV pages: {} requested, {} free of {}", n, free_count(), capacity_);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids.push_back(allocate_one());
  return ids;
}

int32_t IdAllocator::allocate_one() {
  check(!free_.empty(), "allocator exhausted ({} ids)", capacity_);
  int32_t id = free_.back();
  free_.pop_back();
  in_use_[size_t(id)] = 1;
  return id;
}

void IdAllocator::release_one(int32_t id) {
  check(id >= 0 && id < capacity_ && in_use_[size_t(id)], "release of id {} that is not allocated", id);
  in_use_[size_t(id)] = 0;
  free_.push_back(id);
}

void IdAllocator::release(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) release_one(id);
}

}  // namespace moeserve::cache
