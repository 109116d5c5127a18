#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace moeserve::engine {

void Scheduler::admit() {
  while (!waiting_.empty() && int64_t(running_.size()) < limits_.max_running_requests) {
    Request& r = *waiting_.front();
    const int64_t tokens = r.total_tokens() + headroom_;
    if (!cache_.can_admit(tokens)) break;
    r.seq = cache_.open_sequence();
    check(cache_.reserve(r.seq, tokens), "internal: admitted request {} but its pages did not fit", r.id);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

std::vector<BatchItem> Scheduler::next_batch() const {
  std::vector<BatchItem> batch;
  int64_t budget = limits_.max_batch_tokens;
  for (const auto& r : running_)
    if (!r->prefilling() && r->pending && budget > 0) {
      batch.push_back({r.get(), -1, 1});
      --budget;
    }
  for (const auto& r : running_) {
    if (!r->prefilling() || budget <= 0) continue;
    int64_t count = std::min<int64_t>(budget, int64_t(r->prompt.size()) - r->prefilled);
    batch.push_back({r.get(), r->prefilled, count});
    budget -= count;
  }
  return batch;
}

std::unique_ptr<Request> Scheduler::remove(uint64_t id) {
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if ((*it)->id == id) {
      std::unique_ptr<Request> r = std::move(*it);
      running_.erase(it);
      cache_.close_sequence(r->seq);
      return r;
    }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) {
      std::unique_ptr<Request> r = std::move(*it);
      waiting_.erase(it);
      return r;
    }
  return nullptr;
}

}  // namespace moeserve::engine
