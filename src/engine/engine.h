#pragma once
// The serving engine: one thread runs the step loop (admit, batch, forward, sample, stream) over the
// model and its KV cache; requests come in from any thread and stream events back through their sinks
// (called on the engine thread). A request that fails validation is refused at submit (an Error for the
// caller to turn into a 4xx); an abort (client gone) frees everything the request held at the next step.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/forward_backend.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace moeserve::engine {

struct EngineOptions {
  SchedulerLimits limits;
  int64_t kv_pages = 0;     // from the capacity plan
  int64_t max_model_len = 0;  // prompt + max_tokens limit (0: the model's max_position_embeddings)
  model::Numerics numerics;
  int64_t speculative_steps = 0;  // MTP draft steps per verify (0: no speculative decoding)
  bool cuda_exact = true;         // CUDA backend: the exact parity GEMMs, or the fast ones (model/gpu_model.h)
  bool cuda_graphs = true;        // CUDA backend: decode steps replay a captured graph per batch size
};

class Engine {
 public:
  // The reference model on the CPU.
  Engine(std::shared_ptr<const model::Model> model, std::shared_ptr<const TextDecoderFactory> decoder,
         EngineOptions options);
  // Any backend (its cache must have options.limits.max_running_requests slots and options.kv_pages pages).
  Engine(std::unique_ptr<ForwardBackend> backend, std::shared_ptr<const TextDecoderFactory> decoder,
         EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues; throws moeserve::Error (bad request) naming the field. Returns the request id.
  uint64_t submit(std::vector<int32_t> prompt, GenerationParams params, EventSink sink);
  // Stops a request (no further events); its slot and pages are freed at the next step.
  void abort(uint64_t id);
  // Blocks until the queue and running set are empty (tests, shutdown).
  void wait_idle();

  EngineStatus status() const;
  const EngineMetrics& metrics() const { return metrics_; }
  std::string backend_name() const { return backend_->name(); }
  const EngineOptions& options() const { return options_; }
  int64_t max_model_len() const { return max_model_len_; }
  int64_t kv_cache_bytes() const { return backend_->kv_bytes(); }

 private:
  EngineStatus compute_status() const;  // engine thread only
  void loop();
  void step();
  void emit(Request& r, std::vector<int32_t> tokens, FinishReason finish, std::vector<TokenLogprobs> logprobs = {});
  // Appends a sampled token, checks stop tokens/strings and max_tokens; returns why the request ends, if it does.
  FinishReason accept_token(Request& r, int32_t token);
  // One speculative round (MTP drafts + one target verify) for decoding requests.
  void speculative_step(const std::vector<Request*>& requests, std::vector<uint64_t>& finished);
  void finish(uint64_t id);

  std::unique_ptr<ForwardBackend> backend_;
  std::shared_ptr<const TextDecoderFactory> decoder_;
  EngineOptions options_;
  int64_t max_model_len_ = 0;
  cache::KvCache& cache_;  // the backend's
  Scheduler scheduler_;
  EngineMetrics metrics_;

  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::vector<std::unique_ptr<Request>> incoming_;
  std::vector<uint64_t> aborts_;
  std::atomic<uint64_t> next_id_{1};
  bool stop_ = false;
  bool busy_ = false;
  EngineStatus status_;
  std::thread thread_;
};

}  // namespace moeserve::engine
