// CPU reference engine throughput: prefill and decode tokens/s (batch 1 and batched through the engine), and
// MTP speculative decoding (K = 1..4) against none on the demo model. A program, not a test: prints a table.
// Usage: cpu_engine [threads]
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
#include <string>

#include "core/threads.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "io/safetensors.h"
#include "model/model.h"

using namespace moeserve;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

static std::vector<int32_t> heldout(int64_t begin, int64_t n) {
  auto ckpt = io::Checkpoint::open_files({std::string(MOESERVE_SOURCE_DIR) + "/tests/fixtures/models/demo_heldout.safetensors"});
  const Tensor& ids = ckpt.get("heldout_ids").tensor;
  std::vector<int32_t> out;
  for (int64_t i = begin; i < begin + n; ++i) out.push_back(int32_t(ids.data<int64_t>()[i]));
  return out;
}

struct BatchResult {
  double seconds = 0;
  int64_t tokens = 0;
  double accept_length = 0;
};

// n requests of `prompt_len` held-out tokens, `out_len` greedy tokens each, all at once through the engine.
static BatchResult engine_run(std::shared_ptr<model::Model> m, int64_t n, int64_t prompt_len, int64_t out_len,
                              int64_t spec_steps) {
  engine::EngineOptions o;
  o.limits.max_running_requests = n;
  o.limits.max_batch_tokens = 1024;
  o.kv_pages = n * 4;
  o.speculative_steps = spec_steps;
  engine::Engine eng(m, nullptr, o);
  std::vector<std::future<void>> done;
  std::vector<std::shared_ptr<std::promise<void>>> promises;
  std::atomic<uint64_t> steps{0}, emitted{0};
  std::mutex lock_mutex;
  Clock::time_point first_token = Clock::time_point::max(), last_token{};
  auto start = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    auto p = std::make_shared<std::promise<void>>();
    done.push_back(p->get_future());
    promises.push_back(p);
    engine::GenerationParams params;
    params.sampling.temperature = 0;
    params.max_tokens = out_len;
    params.ignore_eos = true;
    eng.submit(heldout(1000 + i * 700, prompt_len), params, [&, p](const engine::RequestEvent& e) {
      {
        std::lock_guard<std::mutex> lock(lock_mutex);
        first_token = std::min(first_token, Clock::now());
        last_token = std::max(last_token, Clock::now());
      }
      if (e.finish == engine::FinishReason::None) return;
      steps += e.spec_verify_steps;
      emitted += uint64_t(e.completion_tokens);
      p->set_value();
    });
  }
  for (auto& f : done) f.wait();
  BatchResult r;
  // Decode throughput: tokens after each request's first, over the time from the first token to the last.
  r.seconds = std::chrono::duration<double>(last_token - first_token).count();
  r.tokens = n * (out_len - 1);
  (void)start;
  r.accept_length = steps ? double(emitted) / double(steps) : 1.0;
  return r;
}

int main(int argc, char** argv) {
  if (argc > 1) set_worker_count(std::atoi(argv[1]));
  std::printf("threads %d\n", worker_count());
  auto demo = model::Model::load(std::string(MOESERVE_SOURCE_DIR) + "/models/demo");

  // Prefill: one 512-token forward (the demo was trained on 512-token windows).
  auto ids = heldout(0, 512);
  engine::all_logits(*demo, ids, 0, model::Numerics::reference());  // warm-up
  auto t = Clock::now();
  engine::all_logits(*demo, ids, 0, model::Numerics::reference());
  double prefill = since(t);
  std::printf("%-44s %10.1f tok/s  (%.3f s for 512 tokens)\n", "prefill, demo, 512 tokens", 512 / prefill, prefill);

  // Decode, batch 1: 64 greedy tokens after a 64-token prompt.
  engine::GenerateOptions g;
  g.max_new_tokens = 64;
  auto prompt = heldout(0, 64);
  t = Clock::now();
  engine::generate(*demo, prompt, g);
  double with_prefill = since(t);
  t = Clock::now();
  engine::all_logits(*demo, prompt, 0, model::Numerics::reference());
  double prompt_only = since(t);
  std::printf("%-44s %10.1f tok/s\n", "decode, demo, batch 1 (64 tokens)", 63 / (with_prefill - prompt_only));

  std::printf("\ndecode through the engine (64-token prompts, 64 greedy tokens each; tokens/s after the first token)\n");
  std::printf("%-10s %-6s %12s %14s %12s\n", "requests", "spec", "tokens/s", "accept length", "speedup");
  for (int64_t n : {1, 8}) {
    double base = 0;
    for (int64_t k : {0, 1, 2, 3, 4}) {
      BatchResult r = engine_run(demo, n, 64, 64, k);
      double tps = double(r.tokens) / r.seconds;
      if (k == 0) base = tps;
      std::printf("%-10lld %-6s %12.1f %14.2f %11.2fx\n", (long long)n, k ? ("K=" + std::to_string(k)).c_str() : "off",
                  tps, r.accept_length, tps / base);
    }
  }
  return 0;
}
