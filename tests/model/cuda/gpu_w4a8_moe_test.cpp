// MXFP4 routed experts on the GPU through the W4A8 grouped GEMM (GpuModel::moe_mxfp4), against the CPU
// reference engine under the same checkpoint numerics. The committed fixtures are too narrow for the GEMM's
// tiles (hidden 64-192), so the test writes a random checkpoint of tiny_hf's architecture widened to hidden
// 256 / expert width 256 and converts it with `moeserve convert`'s mxfp4-fp8 target. One layer (CSA attention,
// top-k MoE): with more layers of a random model, a tiny difference in one layer's output can flip a later
// layer's expert or indexer top-k choice, and the logits then differ by as much as the formats' own effect.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/moe_w4a8.h"
#include "model/checkpoint_edit.h"
#include "model/fixture.h"
#include "model/gpu_model.h"
#include "model/model.h"
#include "random_checkpoint.h"
#include "temp_dir.h"
#include "gpu_skip.h"

namespace moeserve {
namespace {

TEST(GpuW4A8Moe, CheckpointNumericsTrackTheCpuReference) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  const nlohmann::json config = testing::one_layer_tiny_hf(256, 256, "compressed_sparse_attention", "moe");
  testing::write_random_checkpoint(dir.file("f32"), config, 11);
  testing::convert(dir.file("f32"), dir.file("mxfp4"), model::WeightsTarget::Mxfp4Fp8);
  auto model = model::Model::load(dir.file("mxfp4"));
  ASSERT_EQ(model->weights().layers[0].ffn.experts[0].w1.format, model::WeightFormat::Mxfp4);

  // The fast numerics keep the experts MXFP4 (no BF16 copy); the exact ones expand them.
  const model::Numerics ckpt = model::Numerics::checkpoint();
  auto fast = model::GpuModel::from_model(*model, {false, ckpt});
  auto exact = model::GpuModel::from_model(*model, {true, ckpt});
  for (const model::GpuLayer& L : fast->weights().layers) {
    EXPECT_TRUE(L.experts_mxfp4.defined());
    EXPECT_FALSE(L.experts_w13.defined());
  }
  for (const model::GpuLayer& L : exact->weights().layers) EXPECT_FALSE(L.experts_mxfp4.defined());
  EXPECT_LT(fast->weights().bytes, exact->weights().bytes);
  fast.reset();
  exact.reset();

  // The GPU error must be small next to what the format itself does to the logits (checkpoint vs reference
  // numerics on the same weights): the W4A8 path differs from the CPU's only by summation order, the tensor
  // cores' accumulation inside a 128-k group, and activations that land within rounding of an FP8 boundary.
  // Chunks of at most 8 tokens keep every other linear on the fp32-activation skinny GEMM, so the comparison
  // isolates the MoE; the W4A8 chain runs at every chunk size. Chunks of 16 and 32 take cuBLASLt for the other
  // linears: FP8 ones quantize their inputs as the checkpoint numerics do, BF16 ones on an fp32 input (router
  // gate, compressors, indexer weights, head, wo_a) take it as three bf16 terms (0.0026 on the H200; two terms:
  // 0.011; wo_a on one and the rest on two: 0.039; docs/benchmarks/cuda-ops.md, tenth session).
  testing::expect_gpu_tracks_checkpoint_numerics(*model, 48, 5, 16, {32, 16, 8, 3, 1}, "w4a8");
}

// Without a GPU: what the model says at load about the W4A8 dispatch table. A V4 model's shapes on a GPU the table
// was not tuned on are a warning naming the GPUs it was tuned on; a tuned one says nothing; shapes nobody tuned (the
// test models) are a quiet notice.
TEST(GpuW4A8Moe, DispatchTableNoticeAtLoad) {
  const std::vector<std::string> gpus = cuda::moe_w4a8_table_gpus();
  ASSERT_FALSE(gpus.empty());
  bool warn = true;
  for (const auto& [D, I] : {std::pair{4096, 2048}, std::pair{7168, 3072}}) {  // V4-Flash, V4-Pro
    const int E = D == 4096 ? 256 : 384;
    EXPECT_EQ(model::w4a8_table_notice(gpus[0], E, D, I, &warn), "");
    EXPECT_FALSE(warn);
    const std::string text = model::w4a8_table_notice("untuned GPU", E, D, I, &warn);
    EXPECT_TRUE(warn) << text;
    EXPECT_NE(text.find("'untuned GPU'"), std::string::npos) << text;
    EXPECT_NE(text.find(gpus[0]), std::string::npos) << text;
  }
  const std::string text = model::w4a8_table_notice(gpus[0], 8, 256, 256, &warn);
  EXPECT_FALSE(warn);
  EXPECT_NE(text.find("heuristic"), std::string::npos) << text;
}

}  // namespace
}  // namespace moeserve
