// `moeserve convert` as a library: the layout it walks, exact round trips through fp8 and mxfp4-fp8, both
// output namings, sharding, MTP and unknown tensors, config.json and side files, and refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "engine/generate.h"
#include "kernels/cpu/quant.h"
#include "model/checkpoint_edit.h"
#include "model/fixture.h"
#include "model/model.h"
#include "temp_dir.h"

namespace moeserve {
namespace {

using model::NameDialect;
using model::ParamKind;
using model::WeightsTarget;
using testing::model_fixture;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

io::ModelConfig config_of(const std::string& dir) { return io::load_model_config(dir + "/config.json"); }

std::vector<int32_t> prompt_of(const std::string& fixture, size_t n = 40) {
  auto o = testing::load_oracle(fixture);
  return std::vector<int32_t>(o.ids.begin(), o.ids.begin() + int64_t(std::min(n, o.ids.size())));
}

Tensor logits(const std::string& dir, const std::vector<int32_t>& ids, const model::Numerics& numerics) {
  return engine::all_logits(*model::Model::load(dir), ids, 0, numerics);
}

TEST(CheckpointLayout, NamesExactlyTheFixtureTensors) {
  for (const char* fixture : {"tiny_hf", "tiny_yarn"}) {
    std::set<std::string> layout, stored;
    for (const auto& spec : model::checkpoint_layout(config_of(model_fixture(fixture)), 0))
      layout.insert(model::is_linear(spec.kind) ? spec.name + ".weight" : spec.name);
    auto ckpt = io::Checkpoint::open_dir(model_fixture(fixture));
    for (const auto& [name, entry] : ckpt.entries())
      if (std::filesystem::path(entry.file).filename() != "oracle.safetensors") stored.insert(name);
    EXPECT_EQ(layout, stored) << fixture;
  }
}

// The weight `quantize` then `dequantize` of a BF16 linear gives, as BF16 (exact: e4m3 and e2m1 times a power
// of two fit in BF16).
Tensor expected_round_trip(const Tensor& bf16, ParamKind kind, WeightsTarget target) {
  Tensor w = bf16.to_f32();
  const int64_t out = w.dim(0), in = w.dim(1);
  Tensor back = Tensor::empty(DType::F32, {out, in});
  if (kind == ParamKind::ExpertLinear && target == WeightsTarget::Mxfp4Fp8) {
    std::vector<uint8_t> q(size_t(out * in / 2)), s(size_t(out * in / 32));
    kernels::cpu::mxfp4_weight_quantize(w.f32(), out, in, q.data(), s.data());
    kernels::cpu::mxfp4_weight_dequantize(q.data(), s.data(), out, in, back.f32());
  } else {
    std::vector<uint8_t> q(size_t(out * in)), s(size_t(((out + 127) / 128) * ((in + 127) / 128)));
    kernels::cpu::fp8_weight_quantize(w.f32(), out, in, q.data(), s.data());
    kernels::cpu::fp8_weight_dequantize(q.data(), DType::F8_E8M0, s.data(), out, in, back.f32());
  }
  Tensor out16 = Tensor::empty(DType::BF16, {out, in});
  for (int64_t i = 0; i < back.numel(); ++i) {
    out16.data<uint16_t>()[i] = f32_to_bf16(back.f32()[i]);
    EXPECT_EQ(bf16_to_f32(out16.data<uint16_t>()[i]), back.f32()[i]) << "not exact in BF16";
  }
  return out16;
}

class RoundTrip : public ::testing::TestWithParam<WeightsTarget> {};

TEST_P(RoundTrip, Bf16ToQuantizedToBf16IsTheBlockQuantizedWeight) {
  const WeightsTarget target = GetParam();
  testing::TempDir dir;
  const std::string a = dir.file("bf16"), b = dir.file("quantized"), c = dir.file("back");
  testing::stage_model(model_fixture("tiny_hf"), model_fixture("tiny_hf"), dir.file("src"));
  testing::convert(dir.file("src"), a, WeightsTarget::Bf16);
  testing::convert(a, b, target);
  testing::convert(b, c, WeightsTarget::Bf16);
  auto ta = testing::read_tensors(a), tb = testing::read_tensors(b), tc = testing::read_tensors(c);
  const auto config = config_of(a);
  int64_t quantized = 0;
  for (const auto& spec : model::checkpoint_layout(config, 0)) {
    if (!model::is_linear(spec.kind)) {
      EXPECT_TRUE(same_bytes(tc.at(spec.name), ta.at(spec.name))) << spec.name;
      EXPECT_TRUE(same_bytes(tb.at(spec.name), ta.at(spec.name))) << spec.name;
      continue;
    }
    const std::string w = spec.name + ".weight", s = spec.name + ".scale";
    ASSERT_EQ(ta.at(w).dtype(), DType::BF16) << w;
    if (spec.kind == ParamKind::UnquantizedLinear) {
      EXPECT_EQ(tb.count(s), 0u) << s;
      EXPECT_TRUE(same_bytes(tc.at(w), ta.at(w))) << w;
      continue;
    }
    const bool fp4 = spec.kind == ParamKind::ExpertLinear && target == WeightsTarget::Mxfp4Fp8;
    EXPECT_EQ(tb.at(w).dtype(), fp4 ? DType::I8 : DType::F8_E4M3) << w;
    EXPECT_EQ(tb.at(s).dtype(), DType::F8_E8M0) << s;
    EXPECT_TRUE(same_bytes(tc.at(w), expected_round_trip(ta.at(w), spec.kind, target))) << w;
    ++quantized;
  }
  EXPECT_GT(quantized, 100);
  // Converting the quantized checkpoint into its own format again keeps every byte.
  const std::string again = dir.file("again");
  testing::convert(b, again, target);
  auto tb2 = testing::read_tensors(again);
  ASSERT_EQ(tb2.size(), tb.size());
  for (const auto& [name, t] : tb) EXPECT_TRUE(same_bytes(tb2.at(name), t)) << name;
}

INSTANTIATE_TEST_SUITE_P(Formats, RoundTrip, ::testing::Values(WeightsTarget::Fp8, WeightsTarget::Mxfp4Fp8),
                         [](const auto& info) { return info.param == WeightsTarget::Fp8 ? "fp8" : "mxfp4_fp8"; });

TEST(Convert, BothNamingsGiveIdenticalLogits) {
  const auto ids = prompt_of("tiny_hf");
  for (WeightsTarget target : {WeightsTarget::Bf16, WeightsTarget::Fp8, WeightsTarget::Mxfp4Fp8}) {
    testing::TempDir dir;
    // From the official names and from the transformers module names (stacked experts).
    testing::stage_model(model_fixture("tiny_hf"), model_fixture("tiny_hf"), dir.file("src_official"));
    testing::stage_model(model_fixture("tiny_hf/hf_modules"), model_fixture("tiny_hf"), dir.file("src_modules"));
    auto a = testing::convert(dir.file("src_official"), dir.file("official"), target, NameDialect::Official);
    auto b = testing::convert(dir.file("src_modules"), dir.file("hf"), target, NameDialect::HfSavePretrained);
    EXPECT_TRUE(a.passthrough.empty() && b.passthrough.empty());
    EXPECT_EQ(a.tensors, b.tensors);
    EXPECT_EQ(model::TensorSource(io::Checkpoint::open_dir(dir.file("hf"))).dialect(), NameDialect::HfSavePretrained);
    EXPECT_TRUE(io::Checkpoint::open_dir(dir.file("hf")).has("model.layers.1.attn.norm.weight"));  // the kv_norm quirk
    for (const auto& numerics : {model::Numerics::reference(), model::Numerics::checkpoint()})
      EXPECT_TRUE(same_bytes(logits(dir.file("official"), ids, numerics), logits(dir.file("hf"), ids, numerics)))
          << model::weights_target_name(target);
  }
}

TEST(Convert, ShardsWithAnIndexWhenLarge) {
  testing::TempDir dir;
  testing::stage_model(model_fixture("tiny_hf"), model_fixture("tiny_hf"), dir.file("src"));
  auto one = testing::convert(dir.file("src"), dir.file("one"), WeightsTarget::Fp8);
  auto many = testing::convert(dir.file("src"), dir.file("many"), WeightsTarget::Fp8, NameDialect::Official, 60000);
  EXPECT_EQ(one.files, std::vector<std::string>{"model.safetensors"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("one/model.safetensors.index.json")));
  ASSERT_GT(many.files.size(), 3u);
  EXPECT_EQ(many.files.front(), "model-00001-of-" + fmt::format("{:05d}", many.files.size()) + ".safetensors");
  auto index = nlohmann::json::parse(std::ifstream(dir.file("many/model.safetensors.index.json")));
  // A shard holds at most 60000 tensor bytes, unless one tensor (with its scale) is larger by itself.
  for (const auto& f : many.files) {
    auto shard = io::SafetensorsFile::open(dir.file("many/" + f));
    int64_t bytes = 0;
    for (const auto& [name, entry] : shard->tensors()) bytes += int64_t(entry.tensor.nbytes());
    EXPECT_TRUE(bytes <= 60000 || shard->tensors().size() <= 2) << f << ": " << bytes;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), one.bytes);
  EXPECT_EQ(int64_t(index["weight_map"].size()), one.tensors);
  // A linear's weight and scale share a shard.
  EXPECT_EQ(index["weight_map"]["layers.2.attn.wq_b.weight"], index["weight_map"]["layers.2.attn.wq_b.scale"]);
  const auto ids = prompt_of("tiny_hf");
  EXPECT_TRUE(same_bytes(logits(dir.file("one"), ids, model::Numerics::checkpoint()),
                         logits(dir.file("many"), ids, model::Numerics::checkpoint())));
}

TEST(Convert, MtpAndUnknownTensors) {
  testing::TempDir dir;
  const auto config = config_of(model_fixture("tiny_yarn"));
  ASSERT_EQ(config.num_mtp_layers, 1);
  testing::write_edited(model_fixture("tiny_yarn"), dir.file("src"), [&](testing::TensorMap& t) {
    testing::add_random_mtp(config, 1, t);
    t["extra.unknown"] = Tensor::from_f32({2}, {1.0f, 2.0f});
  });
  auto report = testing::convert(dir.file("src"), dir.file("fp8"), WeightsTarget::Fp8);
  EXPECT_EQ(report.mtp_layers, 1);
  EXPECT_EQ(report.passthrough, std::vector<std::string>{"extra.unknown"});
  auto out = testing::read_tensors(dir.file("fp8"));
  EXPECT_EQ(out.at("mtp.0.e_proj.weight").dtype(), DType::F8_E4M3);
  EXPECT_EQ(out.at("mtp.0.ffn.experts.3.w2.scale").dtype(), DType::F8_E8M0);
  EXPECT_EQ(out.at("mtp.0.attn.wq_a.scale").shape(), (Shape{1, 1}));
  EXPECT_EQ(out.at("mtp.0.hc_head_fn").dtype(), DType::F32);
  EXPECT_EQ(out.at("mtp.0.enorm.weight").dtype(), DType::BF16);
  EXPECT_EQ(out.at("extra.unknown").f32()[1], 2.0f);
  auto m = model::Model::load(dir.file("fp8"));
  ASSERT_TRUE(m->has_mtp());
  EXPECT_EQ(m->weights().mtp[0].block.attn.wq_a.format, model::WeightFormat::Fp8Block);
}

TEST(Convert, ConfigAndSideFiles) {
  testing::TempDir dir;
  testing::stage_model(model_fixture("tiny_hf"), model_fixture("tiny_hf"), dir.file("src"));
  std::ofstream(dir.file("src/tokenizer.json")) << "{}";
  std::ofstream(dir.file("src/tokenizer_config.json")) << "{}";
  for (WeightsTarget target : {WeightsTarget::Bf16, WeightsTarget::Fp8, WeightsTarget::Mxfp4Fp8}) {
    const std::string to = dir.file(model::weights_target_name(target));
    auto report = testing::convert(dir.file("src"), to, target);
    EXPECT_EQ(report.copied, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
    EXPECT_TRUE(std::filesystem::exists(to + "/tokenizer.json"));
    auto json = testing::read_config(to);
    EXPECT_EQ(json["torch_dtype"], "bfloat16");
    EXPECT_EQ(json["layer_types"], testing::read_config(model_fixture("tiny_hf"))["layer_types"]);  // form kept
    auto config = config_of(to);
    if (target == WeightsTarget::Bf16) {
      EXPECT_FALSE(config.quantization.has_value());
      EXPECT_EQ(config.expert_dtype, "");
      continue;
    }
    ASSERT_TRUE(config.quantization.has_value());
    EXPECT_EQ(config.quantization->scale_fmt, "ue8m0");
    EXPECT_EQ(config.quantization->block_rows, 128);
    EXPECT_EQ(config.expert_dtype, target == WeightsTarget::Fp8 ? "fp8" : "fp4");
  }
}

std::string convert_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Convert, Refusals) {
  testing::TempDir dir;
  std::string e = convert_error([&] { testing::convert(model_fixture("tiny_yarn"), dir.file("x"), WeightsTarget::Mxfp4Fp8); });
  EXPECT_NE(e.find("routed expert 'layers.0.ffn.experts.0.w2.weight' has input width 24"), std::string::npos) << e;
  EXPECT_NE(e.find("MXFP4 needs a multiple of 32"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));  // nothing written
  testing::stage_model(model_fixture("tiny_hf"), model_fixture("tiny_hf"), dir.file("src"));
  testing::convert(dir.file("src"), dir.file("y"), WeightsTarget::Fp8);
  e = convert_error([&] { testing::convert(dir.file("src"), dir.file("y"), WeightsTarget::Fp8); });
  EXPECT_NE(e.find("already holds a model"), std::string::npos) << e;
  e = convert_error([&] { testing::convert(dir.file("y"), dir.file("y"), WeightsTarget::Bf16); });
  EXPECT_NE(e.find("is the --from directory"), std::string::npos) << e;
  e = convert_error([&] { model::parse_weights_target("fp4", "--weights"); });
  EXPECT_EQ(e, "--weights 'fp4' (expected bf16, fp8 or mxfp4-fp8)");
}

}  // namespace
}  // namespace moeserve
