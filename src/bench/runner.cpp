#include "bench/runner.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "bench/arrivals.h"
#include "core/error.h"

namespace moeserve::bench {
namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(20);  // how quickly an interrupt is noticed

bool interrupted(const RunConfig& c) { return c.interrupt && c.interrupt->load(std::memory_order_relaxed); }

// Sleeps until `deadline` unless interrupted; returns false if interrupted.
bool sleep_until(const RunConfig& c, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    if (interrupted(c)) return false;
    std::this_thread::sleep_until(std::min(deadline, Clock::now() + kPoll));
  }
  return !interrupted(c);
}

void run_warmup(const RunConfig& c, const Prompt& first) {
  if (c.warmup_requests <= 0) return;
  std::fprintf(stderr, "Starting warmup with %d sequences...\n", c.warmup_requests);
  CancelSource cancel;
  std::vector<RequestOutput> outputs(static_cast<size_t>(c.warmup_requests));
  std::vector<std::thread> threads;
  std::atomic<int> remaining{c.warmup_requests};
  for (size_t i = 0; i < outputs.size(); ++i)
    threads.emplace_back([&, i] {
      outputs[i] = send_request(c.endpoint, c.settings, first, std::min(first.output_len, 32), &cancel);
      remaining.fetch_sub(1);
    });
  while (remaining.load() > 0) {
    if (interrupted(c)) cancel.cancel();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& t : threads) t.join();
  if (interrupted(c)) fail("interrupted during warmup; nothing was measured");
  bool any_success = false;
  for (const auto& o : outputs) any_success = any_success || o.success;
  if (!any_success)
    fail("warmup failed: none of the {} warmup requests succeeded; check --backend, --model and the server. "
         "Error: {}",
         c.warmup_requests, outputs[0].error);
  std::fprintf(stderr, "Warmup completed with %d sequences. Starting main benchmark run...\n", c.warmup_requests);
}

class Progress {
 public:
  Progress(bool enabled, size_t total) : enabled_(enabled && isatty(STDERR_FILENO)), total_(total) {}
  void update(size_t done, bool final = false) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    std::fprintf(stderr, "\r%zu/%zu requests done%s", done, total_, final ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  size_t total_;
  Clock::time_point last_{};
};
}  // namespace

RunResult run_benchmark(const RunConfig& c, const std::vector<Prompt>& prompts) {
  check(!prompts.empty(), "the benchmark needs at least one prompt");
  check(!c.max_concurrency || *c.max_concurrency >= 1, "max concurrency must be at least 1");
  run_warmup(c, prompts.front());
  if (c.warmup_requests > 0 && c.warmup_pause_s > 0 &&
      !sleep_until(c, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(c.warmup_pause_s))))
    fail("interrupted before the timed run; nothing was measured");

  std::mt19937_64 rng(c.seed);
  const auto arrivals = arrival_times(static_cast<int>(prompts.size()), c.request_rate, c.burstiness, rng);
  const size_t limit = c.max_concurrency ? static_cast<size_t>(*c.max_concurrency) : prompts.size();

  std::vector<RequestOutput> outputs(prompts.size());
  std::vector<std::thread> threads;
  threads.reserve(prompts.size());
  std::mutex mutex;
  std::condition_variable slot_freed;
  size_t in_flight = 0, finished = 0;
  CancelSource cancel;
  Progress progress(c.progress, prompts.size());

  RunResult result;
  const Clock::time_point start = Clock::now();
  Clock::time_point stop_time{};
  size_t dispatched = 0;
  for (; dispatched < prompts.size(); ++dispatched) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(arrivals[dispatched]));
    if (!sleep_until(c, due)) break;
    {
      std::unique_lock<std::mutex> lock(mutex);
      while (in_flight >= limit && !interrupted(c)) slot_freed.wait_for(lock, kPoll);
      if (interrupted(c)) break;
      ++in_flight;
    }
    const double released = std::chrono::duration<double>(Clock::now() - start).count();
    threads.emplace_back([&, i = dispatched, released] {
      RequestOutput out = send_request(c.endpoint, c.settings, prompts[i], prompts[i].output_len, &cancel);
      out.start = released;
      std::lock_guard<std::mutex> lock(mutex);
      outputs[i] = std::move(out);
      --in_flight;
      ++finished;
      slot_freed.notify_all();
    });
  }
  if (interrupted(c)) stop_time = Clock::now();
  // Wait for the requests in flight; on an interrupt, cancel them (repeatedly: a request may be
  // between registering its connection and opening it when the first cancel() runs).
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      progress.update(finished);
      if (in_flight == 0) break;
      slot_freed.wait_for(lock, kPoll);
      if (in_flight == 0) break;
    }
    if (interrupted(c)) {
      if (stop_time == Clock::time_point{}) stop_time = Clock::now();
      cancel.cancel();
    }
  }
  for (auto& t : threads) t.join();
  const Clock::time_point end = Clock::now();
  progress.update(finished, true);
  result.interrupted = interrupted(c);
  if (result.interrupted && stop_time == Clock::time_point{}) stop_time = end;
  result.duration_s = std::chrono::duration<double>((result.interrupted ? stop_time : end) - start).count();
  result.not_dispatched = static_cast<int>(prompts.size() - dispatched);
  outputs.resize(dispatched);
  result.outputs = std::move(outputs);
  return result;
}

}  // namespace moeserve::bench
