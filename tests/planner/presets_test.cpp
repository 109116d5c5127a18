// Model and GPU presets: V4-Pro / V4-Flash parameter counts against deepseek-v4.md §1, GPU preset files.
#include <algorithm>

#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/layout.h"
#include "planner/presets.h"
#include "planner/weights.h"

namespace moeserve::planner {
namespace {

constexpr double kB = 1e9;

TEST(PlannerPresets, ModelPresetsLoadByNameAndDirectory) {
  EXPECT_EQ(model_preset_names(), (std::vector<std::string>{"deepseek-v4-flash", "deepseek-v4-pro"}));
  io::ModelConfig pro = load_model("deepseek-v4-pro");
  EXPECT_EQ(pro.num_layers, 61);
  EXPECT_EQ(pro.num_mtp_layers, 1);
  io::ModelConfig dir = load_model(data_root() + "/presets/models/deepseek-v4-pro");
  EXPECT_EQ(dir.hidden_size, 7168);
  EXPECT_THROW(load_model("deepseek-v5"), Error);
  try {
    load_model("deepseek-v5");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deepseek-v4-pro"), std::string::npos) << e.what();
  }
}

TEST(PlannerPresets, ProLayerScheduleAndShapes) {
  io::ModelConfig c = load_model("deepseek-v4-pro");
  int csa = 0, hca = 0, hash = 0;
  for (const auto& l : c.layers) {
    csa += l.attention == io::AttentionKind::CSA;
    hca += l.attention == io::AttentionKind::HCA && l.compress_ratio == 128;
    hash += l.hash_moe;
  }
  EXPECT_EQ(csa, 30);
  EXPECT_EQ(hca, 31);
  EXPECT_EQ(hash, 3);
  EXPECT_EQ(c.layers[2].attention, io::AttentionKind::CSA);
  EXPECT_EQ(c.layers[0].attention, io::AttentionKind::HCA);
  ASSERT_TRUE(c.quantization.has_value());
  EXPECT_EQ(c.quantization->scale_fmt, "ue8m0");
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_TRUE(c.rope_compress.yarn);
}

TEST(PlannerPresets, ProParameterCounts) {
  io::ModelConfig c = load_model("deepseek-v4-pro");
  // Per layer (deepseek-v4.md §1): attention ~300M, routed experts 384 x 66.06M, shared 66.1M, gate 2.75M.
  int64_t attention = 0, routed = 0, shared = 0, compressor = 0, indexer = 0;
  for (const auto& t : layer_tensors(c, 2)) {  // a CSA layer
    if (t.kind == WeightKind::Attention && t.name.find("norm") == std::string::npos &&
        t.name.find("sink") == std::string::npos)
      attention += t.params();
    if (t.kind == WeightKind::RoutedExperts) routed += t.params();
    if (t.kind == WeightKind::SharedExpert) shared += t.params();
    if (t.kind == WeightKind::Compressor && t.cols == c.hidden_size)  // wkv, wgate
      compressor += t.params();
    if (t.kind == WeightKind::Indexer) indexer += t.params();
  }
  EXPECT_NEAR(double(attention) / 1e6, 300.0, 1.0);
  EXPECT_EQ(routed, 384LL * 3 * 3072 * 7168);
  EXPECT_NEAR(double(routed) / 384 / 1e6, 66.06, 0.01);
  EXPECT_NEAR(double(shared) / 1e6, 66.1, 0.1);
  EXPECT_NEAR(double(compressor) / 1e6, 14.7, 0.1);
  EXPECT_NEAR(double(indexer) / 1e6, 16.7, 0.1);

  ParameterCounts p = count_parameters(c);
  EXPECT_NEAR(double(p.total) / 1e12, 1.573, 0.01);  // "about 1.573T, plus MTP"; the model card says 1.6T
  EXPECT_NEAR(double(p.by_kind[int(WeightKind::RoutedExperts)]) / kB, 1547, 1);
  EXPECT_NEAR(double(p.by_kind[int(WeightKind::Embedding)] + p.by_kind[int(WeightKind::Head)]) / kB, 1.85, 0.01);
  EXPECT_NEAR(double(p.mtp) / kB, 25.9, 0.3);
  EXPECT_NEAR(double(p.active) / kB, 49, 1.5);  // 49B active
}

TEST(PlannerPresets, FlashParameterCounts) {
  io::ModelConfig c = load_model("deepseek-v4-flash");
  EXPECT_EQ(c.num_layers, 43);
  int window = 0;
  for (const auto& l : c.layers) window += l.attention == io::AttentionKind::Sliding;
  EXPECT_EQ(window, 2);
  ParameterCounts p = count_parameters(c);
  EXPECT_NEAR(double(p.by_kind[int(WeightKind::RoutedExperts)]) / kB, 277, 1);  // 6.44B x 43
  EXPECT_NEAR(double(p.total) / kB, 284, 3);
  EXPECT_NEAR(double(p.active) / kB, 13, 1);
}

TEST(PlannerPresets, ProCheckpointBytesMatchTheReference) {
  // §1: one layer's routed experts in MXFP4 + E8M0 are 13.48 GB.
  io::ModelConfig c = load_model("deepseek-v4-pro");
  ParallelSpec one;
  Layout l = resolve_layout(c, one, WeightFormat::MXFP4_FP8, false);
  int64_t experts = 0;
  for (const auto& t : layer_tensors(c, 5))
    if (t.kind == WeightKind::RoutedExperts) experts += tensor_bytes(t, l, WeightFormat::MXFP4_FP8);
  EXPECT_EQ(experts, 384LL * 3 * (3072LL * 7168 / 2 + 3072LL * 7168 / 32));
  EXPECT_NEAR(double(experts) / kB, 13.48, 0.01);
}

TEST(PlannerPresets, GpuPresets) {
  std::vector<std::string> names = gpu_preset_names();
  for (const char* name : {"h20-96gb", "h20-141gb", "h100", "h200", "b200", "b300", "gb10"}) {
    ASSERT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    DeviceSpec d = load_gpu_preset(name);
    EXPECT_EQ(d.name, name);
    EXPECT_GT(d.memory_bytes, 64LL << 30);
    EXPECT_GT(d.hbm_bandwidth_gbs, 0);
    EXPECT_GT(d.fp8_tflops, 0);
    EXPECT_FALSE(d.sources.empty()) << name;
  }
  EXPECT_EQ(load_gpu_preset("h200").memory_bytes, 143156LL << 20);  // cudaMemGetInfo total, 139.80 GiB
  EXPECT_EQ(load_gpu_preset("h200").fp4_tflops, 0);                 // Hopper: no FP4 tensor cores
  EXPECT_GT(load_gpu_preset("b200").fp4_tflops, 0);
  try {
    load_gpu_preset("h300");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu 'h300' is not a GPU preset"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("h20-141gb"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_gpu_preset("cpu"), Error);  // the CPU device takes its memory from an option
  EXPECT_EQ(cpu_device(1LL << 30).memory_bytes, 1LL << 30);
  EXPECT_TRUE(cpu_device(1).is_cpu);
  EXPECT_THROW(cpu_device(0), Error);
  EXPECT_THROW(parse_gpu_preset(R"({"name": "x", "memory_bytes": 1, "bogus": 2})", "x.json"), Error);
}

}  // namespace
}  // namespace moeserve::planner
