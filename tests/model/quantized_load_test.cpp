// Quantized checkpoints (made by convert from tiny_hf) load, and every damaged variant fails with one message
// naming the tensor or config field and what was expected.
#include <gtest/gtest.h>

#include <memory>

#include "model/checkpoint_edit.h"
#include "model/fixture.h"
#include "model/model.h"
#include "temp_dir.h"

namespace moeserve {
namespace {

using model::WeightsTarget;
using testing::TensorMap;

class QuantizedLoad : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<testing::TempDir>();
    testing::stage_model(testing::model_fixture("tiny_hf"), testing::model_fixture("tiny_hf"), dir_->file("src"));
    testing::convert(dir_->file("src"), dir_->file("bf16"), WeightsTarget::Bf16);
    testing::convert(dir_->file("src"), dir_->file("fp8"), WeightsTarget::Fp8);
    testing::convert(dir_->file("src"), dir_->file("mxfp4"), WeightsTarget::Mxfp4Fp8);
  }
  static void TearDownTestSuite() { dir_.reset(); }

  // The load error of `base` (bf16 | fp8 | mxfp4) after the edits, or "" when it loads.
  static std::string error_of(const std::string& base, const std::function<void(TensorMap&)>& edit_tensors,
                              const std::function<void(nlohmann::json&)>& edit_config = {}) {
    testing::TempDir variant;
    testing::write_edited(dir_->file(base), variant.file("m"), edit_tensors, edit_config);
    try {
      model::Model::load(variant.file("m"));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  static std::unique_ptr<testing::TempDir> dir_;
};
std::unique_ptr<testing::TempDir> QuantizedLoad::dir_;

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST_F(QuantizedLoad, ConvertedCheckpointsLoadWithTheirFormats) {
  auto fp8 = model::Model::load(dir_->file("fp8"));
  const auto& layer = fp8->weights().layers[1];
  EXPECT_EQ(layer.attn.wq_a.format, model::WeightFormat::Fp8Block);
  EXPECT_EQ(layer.attn.wo_a.format, model::WeightFormat::Fp8Block);
  EXPECT_EQ(layer.ffn.experts[3].w2.format, model::WeightFormat::Fp8Block);
  EXPECT_EQ(layer.ffn.shared.w1.format, model::WeightFormat::Fp8Block);
  EXPECT_EQ(layer.ffn.gate.format, model::WeightFormat::Dense);
  EXPECT_EQ(layer.attn.compressor->wkv.format, model::WeightFormat::Dense);
  EXPECT_EQ(layer.attn.indexer->weights_proj.format, model::WeightFormat::Dense);
  EXPECT_EQ(layer.attn.indexer->wq_b.format, model::WeightFormat::Fp8Block);
  auto fp4 = model::Model::load(dir_->file("mxfp4"));
  EXPECT_EQ(fp4->weights().layers[2].ffn.experts[0].w1.format, model::WeightFormat::Mxfp4);
  EXPECT_EQ(fp4->weights().layers[2].ffn.shared.w1.format, model::WeightFormat::Fp8Block);
  EXPECT_EQ(error_of("fp8", nullptr), "");
}

TEST_F(QuantizedLoad, ScaleOfTheWrongShapeOrDtype) {
  std::string e = error_of("fp8", [](TensorMap& t) { t["layers.1.attn.wq_b.scale"] = Tensor::zeros(DType::F8_E8M0, {1, 1}); });
  EXPECT_HAS(e, "scale 'layers.1.attn.wq_b.scale' has shape [1, 1]; FP8 128x128 block scales need [2, 1]");
  e = error_of("fp8", [](TensorMap& t) { t["layers.0.attn.wkv.scale"] = Tensor::zeros(DType::BF16, {1, 1}); });
  EXPECT_HAS(e, "scale 'layers.0.attn.wkv.scale' has dtype BF16 (expected F8_E8M0 or F32)");
  e = error_of("mxfp4", [](TensorMap& t) { t["layers.3.ffn.experts.2.w1.scale"] = Tensor::zeros(DType::F32, {32, 2}); });
  EXPECT_HAS(e, "scale 'layers.3.ffn.experts.2.w1.scale' has dtype F32 (expected F8_E8M0)");
  e = error_of("mxfp4", [](TensorMap& t) { t["layers.3.ffn.experts.2.w1.scale"] = Tensor::zeros(DType::F8_E8M0, {32, 1}); });
  EXPECT_HAS(e, "scale 'layers.3.ffn.experts.2.w1.scale' has shape [32, 1]; MXFP4 needs one scale per 32 inputs: [32, 2]");
  e = error_of("mxfp4", [](TensorMap& t) { t["layers.3.ffn.experts.2.w2.weight"] = Tensor::zeros(DType::I8, {64, 32}); });
  EXPECT_HAS(e, "packed FP4 tensor 'layers.3.ffn.experts.2.w2.weight' has shape [64, 32]; expected [64, 16]");
}

TEST_F(QuantizedLoad, ScaleValues) {
  std::string e = error_of("fp8", [](TensorMap& t) { t["layers.2.attn.wo_b.scale"].data<uint8_t>()[0] = 0xff; });
  EXPECT_HAS(e, "scale 'layers.2.attn.wo_b.scale' holds the E8M0 NaN byte 0xff at flat index 0");
  // F32 scales (the V4-Flash-Base form) load; a non-positive one does not.
  auto f32_scale = [](float v) {
    return [v](TensorMap& t) { t["layers.2.attn.wo_b.scale"] = Tensor::from_f32({1, 1}, {v}); };
  };
  EXPECT_EQ(error_of("fp8", f32_scale(0.001f)), "");
  EXPECT_HAS(error_of("fp8", f32_scale(-1.0f)), "scale 'layers.2.attn.wo_b.scale' holds -1 at flat index 0");
}

TEST_F(QuantizedLoad, MissingScale) {
  std::string e = error_of("fp8", [](TensorMap& t) { t.erase("layers.3.ffn.shared_experts.w2.scale"); });
  EXPECT_HAS(e, "FP8 tensor 'layers.3.ffn.shared_experts.w2.weight' has no scale tensor 'layers.3.ffn.shared_experts.w2.scale'");
  e = error_of("mxfp4", [](TensorMap& t) { t.erase("layers.1.ffn.experts.7.w3.scale"); });
  EXPECT_HAS(e, "FP4 tensor 'layers.1.ffn.experts.7.w3.weight' has no scale tensor 'layers.1.ffn.experts.7.w3.scale'");
}

TEST_F(QuantizedLoad, WeightDtypesTheFormatDoesNotAllow) {
  // FP4 outside the routed experts.
  std::string e = error_of("mxfp4", [](TensorMap& t) {
    t["layers.1.ffn.shared_experts.w1.weight"] = Tensor::zeros(DType::I8, {32, 32});
    t["layers.1.ffn.shared_experts.w1.scale"] = Tensor::zeros(DType::F8_E8M0, {32, 2});
  });
  EXPECT_HAS(e, "tensor 'layers.1.ffn.shared_experts.w1.weight' is packed FP4 (I8) but only routed experts may be FP4");
  // FP8 where DeepSeek-V4 keeps BF16.
  e = error_of("fp8", [](TensorMap& t) {
    t["layers.1.attn.compressor.wkv.weight"] = Tensor::zeros(DType::F8_E4M3, {128, 64});
    t["layers.1.attn.compressor.wkv.scale"] = Tensor::zeros(DType::F8_E8M0, {1, 1});
  });
  EXPECT_HAS(e, "tensor 'layers.1.attn.compressor.wkv.weight' is F8_E4M3 but DeepSeek-V4 keeps this linear unquantized");
  e = error_of("fp8", [](TensorMap& t) {
    t["head.weight"] = Tensor::zeros(DType::F8_E4M3, {320, 64});
    t["head.scale"] = Tensor::zeros(DType::F8_E8M0, {3, 1});
  });
  EXPECT_HAS(e, "tensor 'head.weight' is F8_E4M3 but DeepSeek-V4 keeps this linear unquantized");
  // Integer weights.
  e = error_of("fp8", [](TensorMap& t) { t["layers.0.attn.wq_a.weight"] = Tensor::zeros(DType::I64, {32, 64}); });
  EXPECT_HAS(e, "tensor 'layers.0.attn.wq_a.weight' has dtype I64, which a linear weight cannot have");
}

TEST_F(QuantizedLoad, ConfigDisagreeingWithTheTensors) {
  auto drop_quantization = [](nlohmann::json& c) {
    c.erase("quantization_config");
    c.erase("expert_dtype");
  };
  // FP8 tensors without quantization_config.
  std::string e = error_of("fp8", nullptr, drop_quantization);
  EXPECT_HAS(e, "tensor 'layers.0.attn.wq_a.weight' is F8_E4M3 but config.json has no quantization_config");
  e = error_of("mxfp4", nullptr, [](nlohmann::json& c) { c.erase("quantization_config"); });
  EXPECT_HAS(e, "tensor 'layers.0.attn.wq_a.weight' is F8_E4M3 but config.json has no quantization_config");
  // quantization_config but BF16 linears.
  auto fp8_config = testing::read_config(dir_->file("fp8"));
  e = error_of("bf16", nullptr, [&](nlohmann::json& c) { c["quantization_config"] = fp8_config["quantization_config"]; });
  EXPECT_HAS(e, "config.json has a quantization_config (an FP8 checkpoint) but tensor 'layers.0.attn.wq_a.weight' is "
                "BF16; an FP8 checkpoint stores this linear as F8_E4M3 with 128x128 block scales");
  // A BF16 expert in an otherwise FP8 checkpoint.
  e = error_of("fp8", [](TensorMap& t) {
    t["layers.2.ffn.experts.4.w3.weight"] = Tensor::zeros(DType::BF16, {32, 64});
    t.erase("layers.2.ffn.experts.4.w3.scale");
  });
  EXPECT_HAS(e, "config.json says expert_dtype 'fp8' but routed expert tensor 'layers.2.ffn.experts.4.w3.weight' is "
                "BF16; expected F8_E4M3 with 128x128 block scales");
  // expert_dtype fp4 but FP8 experts, and the other way round.
  e = error_of("fp8", nullptr, [](nlohmann::json& c) { c["expert_dtype"] = "fp4"; });
  EXPECT_HAS(e, "config.json says expert_dtype 'fp4' but routed expert tensor 'layers.0.ffn.experts.0.w1.weight' is "
                "F8_E4M3; expected packed FP4 (I8, two e2m1 per byte) with per-32 E8M0 scales");
  e = error_of("mxfp4", nullptr, [](nlohmann::json& c) { c["expert_dtype"] = "fp8"; });
  EXPECT_HAS(e, "config.json says expert_dtype 'fp8' but routed expert tensor 'layers.0.ffn.experts.0.w1.weight' is "
                "packed FP4 (I8); expected F8_E4M3 with 128x128 block scales");
  // Without expert_dtype either format loads, but not a mix.
  EXPECT_EQ(error_of("mxfp4", nullptr, [](nlohmann::json& c) { c.erase("expert_dtype"); }), "");
  auto fp8_tensors = testing::read_tensors(dir_->file("fp8"));
  e = error_of("mxfp4", [&](TensorMap& t) {
        for (const char* w : {"w1", "w2", "w3"})
          for (const char* part : {".weight", ".scale"}) {
            std::string name = std::string("layers.3.ffn.experts.5.") + w + part;
            t[name] = fp8_tensors.at(name);
          }
      },
      [](nlohmann::json& c) { c.erase("expert_dtype"); });
  EXPECT_HAS(e, "routed expert tensor 'layers.3.ffn.experts.5.w1.weight' is fp8 (128x128 block scales) but "
                "'layers.0.ffn.experts.0.w1.weight' is mxfp4 (e2m1, per-32 e8m0 scales); all routed experts must "
                "share one format");
}

}  // namespace
}  // namespace moeserve
