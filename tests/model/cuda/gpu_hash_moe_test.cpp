// Hash-routed MoE layers whose tid2eid table names one expert more than once for a token (GpuLayer::tid2eid_distinct
// false): an expert then has up to T x K rows of a step, not T, and the FP8 experts' grouped GEMMs and the W4A8
// chain must size their groups by that. Both expert formats against the CPU reference engine under checkpoint
// numerics, on a random checkpoint of tiny_hf's architecture widened for the kernels' tiles, one window-attention
// layer with hash routing: expert 0 in every token's first slot and again in even token ids' second, so it gets
// T + (even tokens) rows.
#include <gtest/gtest.h>

#include "kernels/cuda/device.h"
#include "model/fixture.h"
#include "model/gpu_model.h"
#include "model/model.h"
#include "random_checkpoint.h"
#include "temp_dir.h"
#include "gpu_skip.h"

namespace moeserve {
namespace {

void expect_repeated_hash_experts_track_cpu(model::WeightsTarget target, const char* what) {
  testing::TempDir dir;
  const nlohmann::json config = testing::one_layer_tiny_hf(256, 256, "sliding_attention", "hash_moe");
  testing::write_random_checkpoint(dir.file("f32"), config, 17, /*repeated_hash_experts=*/true);
  testing::convert(dir.file("f32"), dir.file("q"), target);
  auto model = model::Model::load(dir.file("q"));
  {
    auto fast = model::GpuModel::from_model(*model, {false, model::Numerics::checkpoint()});
    const model::GpuLayer& L = fast->weights().layers[0];
    ASSERT_FALSE(L.tid2eid_distinct) << "the table repeats experts";
    ASSERT_EQ(L.experts_mxfp4.defined(), target == model::WeightsTarget::Mxfp4Fp8);
  }
  // 32-token chunks take the paths past 8 rows (cuBLASLt for the router gate and head, the skinny wo_a), where
  // the fp32 inputs of the gate and wo_a go in as three bf16 terms: with wo_a on one and the gate on two, or both on
  // two, the FP8 roundings downstream flipped and moved the logits 0.049 or 0.014 against a bar of 0.016; three:
  // 0.0045 (docs/benchmarks/cuda-ops.md, tenth session).
  testing::expect_gpu_tracks_checkpoint_numerics(*model, 64, 3, 32, {32, 8, 3, 1}, what);
}

TEST(GpuHashMoe, RepeatedExpertsFp8TrackTheCpuReference) {
  SKIP_WITHOUT_GPU();
  expect_repeated_hash_experts_track_cpu(model::WeightsTarget::Fp8, "hash fp8");
}

TEST(GpuHashMoe, RepeatedExpertsMxfp4TrackTheCpuReference) {
  SKIP_WITHOUT_GPU();
  expect_repeated_hash_experts_track_cpu(model::WeightsTarget::Mxfp4Fp8, "hash mxfp4");
}

}  // namespace
}  // namespace moeserve
