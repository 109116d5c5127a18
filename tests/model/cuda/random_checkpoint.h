#pragma once
// A random F32 checkpoint of a config in the official layout, for the GPU checkpoint-numerics tests (the committed
// fixtures are too narrow for the tensor-core kernels' tiles), and those tests' comparison with the CPU engine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <initializer_list>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/gpu_generate.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/checkpoint_edit.h"
#include "model/checkpoint_layout.h"
#include "model/fixture.h"
#include "model/model.h"

namespace moeserve::testing {

// tiny_hf's config cut to one layer (`layer_type` attention, `mlp_type` MLP) and widened to hidden `hidden`, expert
// width `moe_inter`: the tests' random checkpoints keep to one layer because more layers of a random model turn
// tiny differences into flipped top-k choices.
inline nlohmann::json one_layer_tiny_hf(int hidden, int moe_inter, const char* layer_type, const char* mlp_type) {
  nlohmann::json config = read_config(model_fixture("tiny_hf"));
  config["hidden_size"] = hidden;
  config["moe_intermediate_size"] = moe_inter;
  config["num_hidden_layers"] = 1;
  config["layer_types"] = {layer_type};
  config["mlp_layer_types"] = {mlp_type};
  return config;
}

// A random F32 checkpoint of `config` in the official layout: linears N(0, 1/in), norms 1 + noise, the
// embedding N(0, 1), other parameters small noise. Hash-routing tables name distinct experts per token, or with
// `repeated_hash_experts` expert 0 first for every token and again in every other slot of even token ids (odd
// ones: distinct others), so that expert 0 gets more rows than the step has tokens.
inline void write_random_checkpoint(const std::string& dir, const nlohmann::json& config_json, uint32_t seed,
                                    bool repeated_hash_experts = false) {
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
      for (int64_t i = 0; i < t.numel(); ++i) {
        const int64_t token = i / K, k = i % K, E = config.n_routed_experts;
        int64_t expert = (token * 3 + k) % E;
        if (repeated_hash_experts) expert = k == 0 || token % 2 == 0 ? 0 : 1 + (token + k) % (E - 1);
        t.data<int64_t>()[i] = expert;
      }
      tensors[spec.name] = t;
      continue;
    }
    const bool linear = model::is_linear(spec.kind);
    const std::string name = linear ? spec.name + ".weight" : spec.name;
    Tensor t = Tensor::empty(DType::F32, spec.shape);
    float scale = 0.05f, offset = 0.0f;
    if (linear) scale = 1.0f / std::sqrt(float(spec.shape[1]));
    if (name.ends_with("norm.weight")) offset = 1.0f;
    if (name == "embed.weight") scale = 1.0f;
    if (name.ends_with("_scale")) offset = 1.0f;
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = offset + scale * normal(rng);
    tensors[name] = t;
  }
  io::save_safetensors(dir + "/model.safetensors", tensors);
}

// Per position of [count][vocab] logits: the largest |a - b| over the vocabulary.
inline std::vector<float> position_diffs(const Tensor& a, const Tensor& b, int count) {
  const int64_t vocab = a.numel() / count;
  std::vector<float> d(static_cast<size_t>(count), 0.0f);
  for (int t = 0; t < count; ++t)
    for (int64_t v = 0; v < vocab; ++v) {
      const float e = std::fabs(a.f32()[t * vocab + v] - b.f32()[t * vocab + v]);
      if (!(e <= d[size_t(t)])) d[size_t(t)] = e;  // NaN propagates as a failure
    }
  return d;
}

// The fast GPU kernels against the CPU reference engine under checkpoint numerics, on `count` random tokens
// (`seed`), prefilled in each of `gpu_chunks`: the largest logit difference must stay within a tenth of what the
// formats themselves do to the logits (checkpoint against reference numerics on the CPU, in chunks of cpu_chunk).
//
// With `control` (an environment variable whose value 0 turns the kernels under test off), the same run with them
// off is the control: a position where the control too passes the bar is a discrete choice (a routing or indexer
// top-k within rounding of a tie) that the other GPU paths already decide differently from the CPU. Such
// positions are left out of the comparison, and there may be at most one in 32; everywhere else the kernels under
// test must keep the GPU within the bar.
inline void expect_gpu_tracks_checkpoint_numerics(const model::Model& model, int count, uint32_t seed,
                                                  int64_t cpu_chunk, std::initializer_list<int64_t> gpu_chunks,
                                                  const char* what, const char* control = nullptr) {
  std::vector<int32_t> ids(static_cast<size_t>(count));
  std::mt19937 rng(seed);
  for (auto& t : ids) t = int32_t(rng() % uint32_t(model.config().vocab_size));
  const model::Numerics ckpt = model::Numerics::checkpoint();
  const Tensor cpu_ckpt = engine::all_logits(model, ids, cpu_chunk, ckpt);
  const Tensor cpu_ref = engine::all_logits(model, ids, cpu_chunk, model::Numerics::reference());
  const float format_effect = max_abs_diff(cpu_ckpt, cpu_ref);
  ASSERT_GT(format_effect, 0.0f);
  const float bar = 0.1f * format_effect;
  // MOESERVE_TEST_CHUNKS (a comma list) replaces the chunk sizes: a diagnostic for runs by hand.
  std::vector<int64_t> chunks(gpu_chunks);
  if (const char* e = std::getenv("MOESERVE_TEST_CHUNKS")) {
    chunks.clear();
    std::stringstream list(e);
    for (std::string c; std::getline(list, c, ',');) chunks.push_back(std::stoll(c));
  }
  for (int64_t chunk : chunks) {
    const std::vector<float> diff = position_diffs(engine::all_logits_cuda(model, ids, chunk, ckpt, {false, false}),
                                                   cpu_ckpt, count);
    std::vector<bool> tie(diff.size(), false);
    std::string ties;
    int n_ties = 0;
    if (control) {
      const char* saved = std::getenv(control);
      const std::string saved_value = saved ? saved : "";
      setenv(control, "0", 1);
      const std::vector<float> off =
          position_diffs(engine::all_logits_cuda(model, ids, chunk, ckpt, {false, false}), cpu_ckpt, count);
      if (saved) setenv(control, saved_value.c_str(), 1); else unsetenv(control);
      for (size_t t = 0; t < off.size(); ++t)
        if (!(off[t] <= bar)) tie[t] = true, ++n_ties, ties += " " + std::to_string(t);
    }
    float worst = 0;
    int worst_pos = 0, over = 0;
    for (size_t t = 0; t < diff.size(); ++t) {
      if (tie[t]) continue;
      if (!(diff[t] <= bar)) ++over;
      if (!(diff[t] <= worst)) worst = diff[t], worst_pos = int(t);
    }
    std::printf("  %s chunk %lld: max |gpu - cpu (checkpoint numerics)| = %.3g at position %d; format effect %.3g "
                "(ratio %.3f); %d positions over a tenth%s%s\n",
                what, (long long)chunk, worst, worst_pos, format_effect, worst / format_effect, over,
                control ? "; control ties at:" : "", control ? (ties.empty() ? " none" : ties.c_str()) : "");
    EXPECT_LE(n_ties, count / 32) << what << " chunk " << chunk << ": the control differs from the CPU at" << ties;
    EXPECT_LE(worst, bar) << what << " chunk " << chunk << " position " << worst_pos;
  }
}

}  // namespace moeserve::testing
