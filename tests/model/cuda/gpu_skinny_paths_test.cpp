// The tensor-core paths of checkpoint numerics at 2-64 rows inside the model (GpuModel::linear's gemm_fp8_skinny,
// the grouped wo_a's gemm_bf16_fp8w_skinny, FP8 routed experts' gemm_fp8_skinny_grouped), against the CPU reference
// engine under the same numerics. The kernels have their own differential tests (ops_gemm_gpu_test.cpp); this one
// checks how the engine feeds them: scratch per stream, the groups, the scale strides, the wo_a layout. A random
// checkpoint of tiny_hf's architecture, widened so that the shapes fit the kernels' tiles and chunks of 16-32
// rows pass skinny_fp8_preferred's threshold, converted with `moeserve convert`'s fp8 target (FP8 experts). One
// layer, as in gpu_w4a8_moe_test.cpp: more layers of a random model turn tiny differences into flipped top-k
// choices. Also the exact kernels' tensor-core linears (three bf16 terms of the input).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "engine/generate.h"
#include "engine/gpu_generate.h"
#include "kernels/cuda/device.h"
#include "model/fixture.h"
#include "model/gpu_model.h"
#include "model/model.h"
#include "random_checkpoint.h"
#include "temp_dir.h"
#include "gpu_skip.h"

namespace moeserve {
namespace {

// Hidden 1024, 8 heads of 128, q rank 512, wo_a 2 groups of 128 x 512, experts 512 wide: every FP8 linear but
// wkv passes 8M row x weight elements at 32 rows, the shared w13 at 16.
std::shared_ptr<model::Model> widened_fp8_model(const testing::TempDir& dir) {
  nlohmann::json config = testing::one_layer_tiny_hf(1024, 512, "compressed_sparse_attention", "moe");
  config["num_attention_heads"] = 8;
  config["head_dim"] = 128;
  config["q_lora_rank"] = 512;
  config["o_groups"] = 2;
  config["o_lora_rank"] = 128;
  config["index_head_dim"] = 128;
  testing::write_random_checkpoint(dir.file("f32"), config, 13);
  testing::convert(dir.file("f32"), dir.file("fp8"), model::WeightsTarget::Fp8);
  return model::Model::load(dir.file("fp8"));
}

TEST(GpuSkinnyPaths, CheckpointNumericsTrackTheCpuReference) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  auto model = widened_fp8_model(dir);

  // The fast numerics take the paths under test: FP8 weights with block scales, FP8 experts, an FP8 wo_a.
  const model::Numerics ckpt = model::Numerics::checkpoint();
  {
    auto fast = model::GpuModel::from_model(*model, {false, ckpt});
    const model::GpuLayer& L = fast->weights().layers[0];
    ASSERT_EQ(L.experts_w13.type, cuda::WeightType::FP8);
    ASSERT_NE(L.experts_w13.view().blk_scale, nullptr);
    ASSERT_NE(L.experts_w2.view().blk_scale, nullptr);
    ASSERT_EQ(L.wo_a.type, cuda::WeightType::FP8);
    ASSERT_NE(L.wo_a.view().blk_scale, nullptr);
    ASSERT_NE(L.wq_b.view().blk_scale, nullptr);
  }

  // As in the W4A8 test: the GPU's error must be small next to what the formats do to the logits (checkpoint
  // against reference numerics on the CPU). The paths differ from the CPU's arithmetic by summation order, the
  // tensor cores' accumulation inside each 128-k block, activations within rounding of an FP8 boundary, and wo_a's
  // input rounded to bf16 as the reference's einsum does (the CPU engine keeps it fp32).
  // Past 8 rows the other linears take cuBLASLt: this seed's position 35 routes or selects differently there with
  // the skinny kernels off too (max |dlogit| 0.44, H200), so the run with them off is the control.
  // Chunks of one row take the one-row paths instead: the streaming GEMV, FP8 experts as groups of one row with
  // the activation simulation in its staging.
  testing::expect_gpu_tracks_checkpoint_numerics(*model, 64, 7, 32, {32, 16, 8, 3, 1}, "skinny paths",
                                                 "MOESERVE_FP8_SKINNY");
}

// The exact kernels' tensor-core linears with the fp32 input as three bf16 terms (GpuModel::linear): FP8 weights at
// 2-64 rows (gemm_bf16_fp8w_skinny), BF16 weights (gate, compressors, indexer weights, head) past 8 rows (cuBLASLt).
// Chunks of 32, 8 and 3 rows against the CPU reference engine under the reference numerics, within the parity
// tests' 1e-3, and beside the fp32 GEMV's run (MOESERVE_EXACT_SKINNY=0), which is held to the same bar; one-row
// chunks take the GEMV either way.
TEST(GpuSkinnyPaths, ExactKernelsTensorCoreLinearsTrackTheCpuReference) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  auto model = widened_fp8_model(dir);
  const int count = 64;
  std::vector<int32_t> ids(static_cast<size_t>(count));
  std::mt19937 rng(11);
  for (auto& t : ids) t = int32_t(rng() % uint32_t(model->config().vocab_size));
  const model::Numerics ref = model::Numerics::reference();
  const Tensor cpu = engine::all_logits(*model, ids, 32, ref);
  for (int64_t chunk : {32, 8, 3}) {
    const Tensor tc = engine::all_logits_cuda(*model, ids, chunk, ref, {true, false});
    setenv("MOESERVE_EXACT_SKINNY", "0", 1);
    const Tensor gemv = engine::all_logits_cuda(*model, ids, chunk, ref, {true, false});
    unsetenv("MOESERVE_EXACT_SKINNY");
    const float d_tc = testing::max_abs_diff(tc, cpu), d_gemv = testing::max_abs_diff(gemv, cpu);
    const float between = testing::max_abs_diff(tc, gemv);
    std::printf("  exact kernels, chunk %lld: max |gpu - cpu| = %.3g on tensor cores, %.3g on the GEMV; "
                "max |tensor cores - GEMV| = %.3g\n",
                (long long)chunk, d_tc, d_gemv, between);
    EXPECT_LE(d_tc, 1e-3f) << "chunk " << chunk;
    EXPECT_LE(d_gemv, 1e-3f) << "chunk " << chunk;
    // The two runs sum in different orders, so some logit differs: the tensor-core path did run.
    EXPECT_GT(between, 0.0f) << "chunk " << chunk << ": the exact skinny path did not run";
    if (chunk > 8) continue;
    // BF16 linears of 2-8 rows take cuBLASLt where rows x weights reach 32M (the head); this model's are smaller,
    // so MOESERVE_BF16_LT_ROWS=2 sends them all there.
    setenv("MOESERVE_BF16_LT_ROWS", "2", 1);
    const Tensor lt = engine::all_logits_cuda(*model, ids, chunk, ref, {true, false});
    unsetenv("MOESERVE_BF16_LT_ROWS");
    const float d_lt = testing::max_abs_diff(lt, cpu), lt_between = testing::max_abs_diff(lt, tc);
    std::printf("  exact kernels, chunk %lld, BF16 linears on cuBLASLt: max |gpu - cpu| = %.3g; against the GEMV's "
                "BF16 linears %.3g\n",
                (long long)chunk, d_lt, lt_between);
    EXPECT_LE(d_lt, 1e-3f) << "chunk " << chunk;
    EXPECT_GT(lt_between, 0.0f) << "chunk " << chunk << ": the BF16 linears did not take cuBLASLt";
  }
}

// The fast kernels' BF16 linears (gate, compressors, indexer weights) of 2-8 rows on cuBLASLt, as the head and the
// compressors of the real models take them (bf16_lt_preferred), forced here for the test model's smaller ones by
// MOESERVE_BF16_LT_ROWS=2. Decode-sized chunks run the compressors and the indexer weights concurrently on side
// streams, each with its own scratch and cuBLASLt workspace. The control is the GEMV (MOESERVE_BF16_LT=0).
TEST(GpuSkinnyPaths, Bf16LinearsOfFewRowsOnCuBlasLtTrackTheCpuReference) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  auto model = widened_fp8_model(dir);
  setenv("MOESERVE_BF16_LT_ROWS", "2", 1);
  testing::expect_gpu_tracks_checkpoint_numerics(*model, 64, 7, 32, {8, 3}, "BF16 linears on cuBLASLt",
                                                 "MOESERVE_BF16_LT");
  unsetenv("MOESERVE_BF16_LT_ROWS");
}

}  // namespace
}  // namespace moeserve
