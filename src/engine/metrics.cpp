#include "engine/metrics.h"

#include <algorithm>

namespace moeserve::engine {

void Histogram::observe(double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bucket = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  counts_[bucket]++;
  sum_ += value;
  count_++;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Snapshot s;
  s.bounds = bounds_;
  uint64_t acc = 0;
  for (uint64_t c : counts_) s.cumulative.push_back(acc += c);
  s.sum = sum_;
  s.count = count_;
  return s;
}

}  // namespace moeserve::engine
