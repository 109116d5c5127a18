// A damaged checkpoint fails to load with one message naming the tensor and what was expected.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>

#include "model/fixture.h"
#include "model/model.h"
#include "temp_dir.h"

namespace moeserve {
namespace {

// Copies tiny_hf (official names) into `dir` after `edit` changes its tensor map.
void write_variant(const testing::TempDir& dir, const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  auto ckpt = io::Checkpoint::open_dir(testing::model_fixture("tiny_hf"));
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, entry] : ckpt.entries()) tensors[name] = entry.tensor.clone();
  edit(tensors);
  io::save_safetensors(dir.file("model.safetensors"), tensors);
  std::filesystem::copy_file(testing::model_fixture("tiny_hf") + "/config.json", dir.file("config.json"));
}

std::string load_error(const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  testing::TempDir dir;
  write_variant(dir, edit);
  try {
    model::Model::load(dir.path().string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WeightErrors, ShapeDisagreeingWithConfig) {
  std::string e = load_error([](auto& t) { t["layers.1.attn.wq_a.weight"] = Tensor::zeros(DType::BF16, {31, 64}); });
  EXPECT_NE(e.find("tensor 'layers.1.attn.wq_a.weight' has shape [31, 64] but the config implies [32, 64]"),
            std::string::npos) << e;
  e = load_error([](auto& t) { t["layers.2.attn.compressor.ape"] = Tensor::zeros(DType::F32, {4, 64}); });
  EXPECT_NE(e.find("'layers.2.attn.compressor.ape' has shape [4, 64] but the config implies [16, 64]"),
            std::string::npos) << e;
}

TEST(WeightErrors, MissingTensor) {
  std::string e = load_error([](auto& t) { t.erase("layers.2.ffn.gate.bias"); });
  EXPECT_NE(e.find("missing tensor 'layers.2.ffn.gate.bias'"), std::string::npos) << e;
  e = load_error([](auto& t) { t.erase("layers.3.ffn.experts.7.w2.weight"); });
  EXPECT_NE(e.find("missing tensor 'layers.3.ffn.experts.7.w2.weight'"), std::string::npos) << e;
}

TEST(WeightErrors, DtypesALinearCannotHave) {
  std::string e = load_error([](auto& t) { t["layers.0.attn.wkv.weight"] = Tensor::zeros(DType::I64, {64, 64}); });
  EXPECT_NE(e.find("'layers.0.attn.wkv.weight' has dtype I64, which a linear weight cannot have"), std::string::npos)
      << e;
  e = load_error([](auto& t) { t["layers.0.attn.wkv.weight"] = Tensor::zeros(DType::I8, {64, 32}); });
  EXPECT_NE(e.find("only routed experts may be FP4"), std::string::npos) << e;
  e = load_error([](auto& t) { t["layers.0.attn.wkv.weight"] = Tensor::zeros(DType::F8_E4M3, {64, 64}); });
  EXPECT_NE(e.find("is F8_E4M3 but config.json has no quantization_config"), std::string::npos) << e;
}

TEST(WeightErrors, HashTableOutOfRange) {
  std::string e = load_error([](auto& t) {
    Tensor table = t["layers.0.ffn.gate.tid2eid"];
    table.data<int64_t>()[5] = 99;
  });
  EXPECT_NE(e.find("'layers.0.ffn.gate.tid2eid' holds expert 99 (expected 0..7)"), std::string::npos) << e;
}

}  // namespace
}  // namespace moeserve
