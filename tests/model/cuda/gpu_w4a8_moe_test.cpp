// MXFP4 routed experts on the GPU through the W4A8 grouped GEMM (GpuModel::moe_mxfp4), against the CPU
// reference engine under the same checkpoint numerics. The committed fixtures are too narrow for the GEMM's
// tiles (hidden 64-192), so the test writes a random checkpoint of tiny_hf's architecture widened to hidden
// 256 / expert width 256 and converts it with `moeserve convert`'s mxfp4-fp8 target. One layer (CSA attention,
// top-k MoE): with more layers of a random model, a tiny difference in one layer's output can flip a later
// layer's expert or indexer top-k choice, and the logits then differ by as much as the formats' own effect.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "engine/generate.h"
#include "engine/gpu_generate.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "kernels/cuda/device.h"
#include "model/checkpoint_edit.h"
#include "model/checkpoint_layout.h"
#include "model/fixture.h"
#include "model/gpu_model.h"
#include "model/model.h"
#include "random_checkpoint.h"
#include "temp_dir.h"

namespace moeserve {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!::moeserve::cuda::available()) GTEST_SKIP() << "no GPU: " << ::moeserve::cuda::device_info().reason

TEST(GpuW4A8Moe, CheckpointNumericsTrackTheCpuReference) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  nlohmann::json config = testing::read_config(testing::model_fixture("tiny_hf"));
  config["hidden_size"] = 256;
  config["moe_intermediate_size"] = 256;
  config["num_hidden_layers"] = 1;
  config["layer_types"] = {"compressed_sparse_attention"};
  config["mlp_layer_types"] = {"moe"};
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

  std::vector<int32_t> ids(48);
  std::mt19937 rng(5);
  for (auto& t : ids) t = int32_t(rng() % uint32_t(model->config().vocab_size));
  // The GPU error must be small next to what the format itself does to the logits (checkpoint vs reference
  // numerics on the same weights): the W4A8 path differs from the CPU's only by summation order, the tensor
  // cores' accumulation inside a 128-k group, and activations that land within rounding of an FP8 boundary.
  const Tensor cpu_ckpt = engine::all_logits(*model, ids, 16, ckpt);
  const Tensor cpu_ref = engine::all_logits(*model, ids, 16, model::Numerics::reference());
  const float format_effect = testing::max_abs_diff(cpu_ckpt, cpu_ref);
  ASSERT_GT(format_effect, 0.0f);
  // Chunks of at most 8 tokens keep every other linear on the fp32-activation skinny GEMM, so the comparison
  // isolates the MoE; the W4A8 chain runs at every chunk size. Chunks of 16 take cuBLASLt for the other linears:
  // FP8 ones quantize their inputs as the checkpoint numerics do, BF16 ones (the head, the FP8 wo_a dequantized
  // to BF16 as the reference's einsum) round theirs to bf16, which stays well inside the same bar.
  for (int64_t chunk : {int64_t(16), int64_t(8), int64_t(3), int64_t(1)}) {
    const Tensor gpu = engine::all_logits_cuda(*model, ids, chunk, ckpt, {false, false});
    const float diff = testing::max_abs_diff(gpu, cpu_ckpt);
    std::printf("  w4a8 chunk %lld: max |gpu - cpu (checkpoint numerics)| = %.3g; format effect %.3g (ratio %.3f)\n",
                (long long)chunk, diff, format_effect, diff / format_effect);
    EXPECT_LE(diff, 0.1f * format_effect) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace moeserve
