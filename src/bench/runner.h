#pragma once
// One timed run, as sglang.bench_serving's benchmark(): warmup requests (the first prompt, output
// capped at 32 tokens, all at once; the run stops if every one fails), a pause, then the timed part:
// requests are released at their arrival times and, with a concurrency limit, wait for a free slot
// (first come, first served); each request's clock starts when it is actually sent. The duration
// runs from the start of the timed part until the last request finishes.
// Each request in flight has its own thread and connection, as each of SGLang's has its own session.
#include <atomic>
#include <optional>
#include <vector>

#include "bench/endpoint.h"
#include "bench/metrics.h"
#include "bench/request_client.h"

namespace moeserve::bench {

struct RunConfig {
  Endpoint endpoint;
  RequestSettings settings;
  std::optional<int> max_concurrency;
  double request_rate = 0.0;  // +inf: all at once
  double burstiness = 1.0;
  int warmup_requests = 1;
  double warmup_pause_s = 1.0;  // SGLang sleeps 1 s between warmup and the timed run
  uint64_t seed = 1;
  bool progress = false;        // a progress line on stderr
  // Set asynchronously (the SIGINT handler): stop releasing requests, cancel those in flight and
  // return what finished so far.
  const std::atomic<bool>* interrupt = nullptr;
};

struct RunResult {
  std::vector<RequestOutput> outputs;  // one per dispatched request, in dataset order
  double duration_s = 0.0;
  bool interrupted = false;
  int not_dispatched = 0;  // requests never released because of an interrupt
};

// Throws moeserve::Error when warmup fails or the run is interrupted during warmup.
RunResult run_benchmark(const RunConfig& config, const std::vector<Prompt>& prompts);

}  // namespace moeserve::bench
