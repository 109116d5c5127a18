#pragma once
// Engine counters and latency histograms (thread-safe), read by the server's /metrics endpoint.
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace moeserve::engine {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double value);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct EngineMetrics {
  std::atomic<uint64_t> prompt_tokens{0}, generation_tokens{0};
  std::atomic<uint64_t> requests_finished_stop{0}, requests_finished_length{0}, requests_aborted{0},
      requests_failed{0};
  std::atomic<uint64_t> steps{0};
  // Speculative decoding: verify steps, drafts proposed / accepted, and accepted drafts per verify (0..k).
  std::atomic<uint64_t> spec_verify_steps{0}, spec_draft_tokens{0}, spec_accepted_tokens{0};
  std::array<std::atomic<uint64_t>, 17> spec_accept_histogram{};
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram tpot{{0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  Histogram e2e{{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
};

// A consistent view of the engine's state for /metrics and /health.
struct EngineStatus {
  int64_t running = 0, waiting = 0;
  int64_t slots_total = 0, slots_free = 0;
  int64_t pages_total = 0, pages_free = 0;
  int64_t page_tokens = 256;
  int64_t speculative_steps = 0;
  bool alive = true;
};

}  // namespace moeserve::engine
