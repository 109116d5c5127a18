#pragma once
// Continuous batching with chunked prefill. Each step:
//  1. admit waiting requests in arrival order while a request slot and the KV pages for the request's
//     whole length (prompt + max_tokens) are free — reserved up front, so a running request never runs out
//     of pages and nothing is preempted; the first request that does not fit waits (FIFO, no overtaking);
//  2. batch every decoding request (one token each), then prefill chunks of the others in arrival order,
//     within the per-step token budget.
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/request.h"

namespace moeserve::engine {

struct SchedulerLimits {
  int64_t max_running_requests = 16;
  int64_t max_batch_tokens = 512;  // per step (the chunked-prefill budget)
};

struct BatchItem {
  Request* request;
  int64_t begin;  // for prefill: first prompt token of the chunk; for decode: -1
  int64_t count;
};

class Scheduler {
 public:
  // headroom: tokens a step may write past a request's last position (speculative verify), reserved too.
  Scheduler(cache::KvCache& cache, SchedulerLimits limits, int64_t headroom = 0)
      : cache_(cache), limits_(limits), headroom_(headroom) {}

  void add(std::unique_ptr<Request> request) { waiting_.push_back(std::move(request)); }
  // Moves admissible requests to running (opens their sequences and reserves pages).
  void admit();
  std::vector<BatchItem> next_batch() const;
  // Removes a finished/aborted request and returns its slot and pages. Returns the request.
  std::unique_ptr<Request> remove(uint64_t id);

  const std::deque<std::unique_ptr<Request>>& waiting() const { return waiting_; }
  const std::vector<std::unique_ptr<Request>>& running() const { return running_; }
  const SchedulerLimits& limits() const { return limits_; }

 private:
  cache::KvCache& cache_;
  SchedulerLimits limits_;
  int64_t headroom_ = 0;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
};

}  // namespace moeserve::engine
