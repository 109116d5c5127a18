#pragma once
// A random F32 checkpoint of a config in the official layout, for the GPU checkpoint-numerics tests (the committed
// fixtures are too narrow for the tensor-core kernels' tiles).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "model/checkpoint_edit.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/checkpoint_layout.h"

namespace moeserve::testing {

inline bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A random F32 checkpoint of `config` in the official layout: linears N(0, 1/in), norms 1 + noise, the
// embedding N(0, 1), hash-routing tables with distinct experts per token, other parameters small noise.
inline void write_random_checkpoint(const std::string& dir, const nlohmann::json& config_json, uint32_t seed) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_json.dump(2);
  const io::ModelConfig config = io::load_model_config(dir + "/config.json");
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  TensorMap tensors;
  for (const model::ParamSpec& spec : model::checkpoint_layout(config, 0)) {
    if (spec.kind == model::ParamKind::IndexParam) {
      Tensor t = Tensor::empty(DType::I64, spec.shape);
      const int64_t K = spec.shape[1];
      for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = (i / K * 3 + i % K) % config.n_routed_experts;
      tensors[spec.name] = t;
      continue;
    }
    const bool linear = model::is_linear(spec.kind);
    const std::string name = linear ? spec.name + ".weight" : spec.name;
    Tensor t = Tensor::empty(DType::F32, spec.shape);
    float scale = 0.05f, offset = 0.0f;
    if (linear) scale = 1.0f / std::sqrt(float(spec.shape[1]));
    if (ends_with(name, "norm.weight")) offset = 1.0f;
    if (name == "embed.weight") scale = 1.0f;
    if (ends_with(name, "_scale")) offset = 1.0f;
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = offset + scale * normal(rng);
    tensors[name] = t;
  }
  io::save_safetensors(dir + "/model.safetensors", tensors);
}

}  // namespace moeserve::testing
