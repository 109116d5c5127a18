#pragma once
// Test helpers: copy a model directory with its tensors and config.json edited, convert fixtures, read tensors.
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/checkpoint_layout.h"
#include "model/convert.h"

namespace moeserve::testing {

using TensorMap = std::map<std::string, Tensor>;

inline nlohmann::json read_config(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  return nlohmann::json::parse(in);
}

// Every tensor of a model directory (the fixtures' oracle.safetensors left out).
inline TensorMap read_tensors(const std::string& dir) {
  auto ckpt = io::Checkpoint::open_dir(dir);
  TensorMap tensors;
  for (const auto& [name, entry] : ckpt.entries())
    if (std::filesystem::path(entry.file).filename() != "oracle.safetensors") tensors[name] = entry.tensor.clone();
  return tensors;
}

// Writes `to` (one model.safetensors + config.json) from `from` after the edits.
inline void write_edited(const std::string& from, const std::string& to,
                         const std::function<void(TensorMap&)>& edit_tensors,
                         const std::function<void(nlohmann::json&)>& edit_config = {}) {
  std::filesystem::create_directories(to);
  TensorMap tensors = read_tensors(from);
  if (edit_tensors) edit_tensors(tensors);
  io::save_safetensors(to + "/model.safetensors", tensors);
  nlohmann::json config = read_config(from);
  if (edit_config) edit_config(config);
  std::ofstream(to + "/config.json") << config.dump(2);
}

// A model directory at `to` with the weights of `weights_dir` (its safetensors files and index, not the oracle
// fixtures' oracle.safetensors) and the config.json of `config_dir`.
inline void stage_model(const std::string& weights_dir, const std::string& config_dir, const std::string& to) {
  namespace fs = std::filesystem;
  fs::create_directories(to);
  for (const auto& entry : fs::directory_iterator(weights_dir)) {
    const std::string name = entry.path().filename().string();
    if ((entry.path().extension() == ".safetensors" && name != "oracle.safetensors") ||
        name == "model.safetensors.index.json")
      fs::copy_file(entry.path(), fs::path(to) / name);
  }
  fs::copy_file(fs::path(config_dir) / "config.json", fs::path(to) / "config.json");
}

inline model::ConvertReport convert(const std::string& from, const std::string& to, model::WeightsTarget weights,
                                    model::NameDialect names = model::NameDialect::Official,
                                    int64_t shard_bytes = 5000000000) {
  model::ConvertOptions o;
  o.weights = weights;
  o.names = names;
  o.max_shard_bytes = shard_bytes;
  return model::convert_checkpoint(from, to, o);
}

// Random MTP tensors (official names, the dtypes of an F32 checkpoint) for the first `layers` MTP blocks.
inline void add_random_mtp(const io::ModelConfig& config, int64_t layers, TensorMap& tensors, uint32_t seed = 9) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::uniform_int_distribution<int64_t> expert(0, config.n_routed_experts - 1);
  for (const model::ParamSpec& spec : model::checkpoint_layout(config, layers)) {
    if (spec.name.rfind("mtp.", 0) != 0) continue;
    const std::string name = model::is_linear(spec.kind) ? spec.name + ".weight" : spec.name;
    Tensor t = Tensor::empty(DType::F32, spec.shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.f32()[i] = spec.kind == model::ParamKind::Bf16Param ? 1.0f + normal(rng) : normal(rng);
    tensors[name] = t;
  }
}

}  // namespace moeserve::testing
