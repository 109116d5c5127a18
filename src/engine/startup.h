#pragma once
// Sizing the engine from the capacity plan: the numbers `moeserve plan` prints are the numbers the engine
// allocates (request slots, KV pages, the chunked-prefill budget).
#include <cstdint>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "planner/capacity.h"

namespace moeserve::engine {

struct StartupOptions {
  std::string device = "cpu";  // cpu | cuda
  std::string profile;         // default: "cpu" on the CPU, "h200-reference" on CUDA
  int64_t memory_bytes = 0;    // CPU: host RAM set aside; CUDA: 0 = the GPU's total memory
  int64_t max_running_requests = 0;  // 0: the profile's
  int64_t max_batch_tokens = 0;      // 0: the profile's chunked_prefill_size
  int64_t max_model_len = 0;         // 0: the model's (capped by the KV capacity)
  model::Numerics numerics;
  int64_t speculative_steps = 0;     // MTP draft steps (0: off)
  bool cuda_exact = true;            // --cuda-kernels exact|fast
  bool cuda_graphs = true;           // decode steps replay captured CUDA graphs (--disable-cuda-graph)
  std::optional<double> mem_fraction;  // of the device's memory the engine may plan with (default: the profile's)
  bool dummy_weights = false;          // plan for the weights --load-format dummy makes (model::GpuModel::dummy)
};

struct EnginePlan {
  planner::CapacityPlan plan;
  EngineOptions options;
};

// Plans the engine's memory for `model` (or a model of `config`'s shapes) on its device and derives the engine
// options from the plan.
EnginePlan plan_engine(const model::Model& model, const StartupOptions& options);
EnginePlan plan_engine(const io::ModelConfig& config, const StartupOptions& options);

// The engine on its device: the CPU reference backend, or the model uploaded to the GPU.
std::shared_ptr<Engine> start_engine(std::shared_ptr<const model::Model> model, const EnginePlan& plan,
                                     const std::string& device, std::shared_ptr<const TextDecoderFactory> decoder);
// The engine on the GPU over random weights of `config`'s shapes (--load-format dummy; seed: the weights').
std::shared_ptr<Engine> start_dummy_engine(const io::ModelConfig& config, uint64_t seed, const EnginePlan& plan,
                                           std::shared_ptr<const TextDecoderFactory> decoder);

}  // namespace moeserve::engine
