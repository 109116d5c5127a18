#pragma once
// Sizing the engine from the capacity plan: the numbers `moeserve plan` prints are the numbers the engine
// allocates (request slots, KV pages, the chunked-prefill budget).
#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "planner/capacity.h"

namespace moeserve::engine {

struct StartupOptions {
  std::string profile = "cpu";
  int64_t memory_bytes = 0;  // the device's memory as the planner sees it (CPU: host RAM set aside)
  int64_t max_running_requests = 0;  // 0: the profile's
  int64_t max_batch_tokens = 0;      // 0: the profile's chunked_prefill_size
  int64_t max_model_len = 0;         // 0: the model's (capped by the KV capacity)
  model::Numerics numerics;
  int64_t speculative_steps = 0;     // MTP draft steps (0: off)
};

struct EnginePlan {
  planner::CapacityPlan plan;
  EngineOptions options;
};

// Plans the CPU reference engine's memory for `model` and derives the engine options from the plan.
EnginePlan plan_engine(const model::Model& model, const StartupOptions& options);

}  // namespace moeserve::engine
