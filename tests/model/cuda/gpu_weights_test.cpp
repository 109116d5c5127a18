// GpuLinear's FP8 scales: the 128 x 128 grid, and the per-row copies only where a GEMV cannot read the grid (rows or
// inputs not 128-aligned, grouped problems not on 128-row blocks). The copies are 1/32 of the weight bytes (8.7 GB of
// V4-Flash's FP8 experts), so keeping them everywhere would take capacity the planner does not count.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gpu_skip.h"
#include "kernels/cuda/device.h"
#include "model/gpu_weights.h"

namespace moeserve {
namespace {

using cuda::WeightType;

model::GpuLinear fp8(int out, int in, int group_rows = 0) {
  return model::GpuLinear::random(WeightType::FP8, out, in, 2, 0.05f, 7, nullptr, "test linear", group_rows);
}

TEST(GpuWeights, Fp8ScaleCopiesOnlyWhereTheGridDoesNotServe) {
  SKIP_WITHOUT_GPU();
  if (!model::gemv_reads_block_scales()) GTEST_SKIP() << "MOESERVE_GEMV_BLOCK_SCALES=0 keeps every copy";
  // Aligned: the grid alone, 2 matrices x 2 block rows x 4 floats (3 blocks of K padded to 16 bytes).
  const model::GpuLinear aligned = fp8(256, 384);
  EXPECT_EQ(aligned.row_scale.size(), 0u);
  EXPECT_EQ(aligned.blk_scale.size(), size_t(2 * 2 * 4));
  EXPECT_EQ(aligned.bytes(), size_t(2 * 256 * 384) + 2 * 2 * 4 * 4);
  const model::GemmView v = aligned.view(1);
  EXPECT_EQ(v.row_scale, nullptr);
  EXPECT_EQ(v.blk_scale, aligned.blk_scale.data() + 2 * 4);
  EXPECT_EQ(v.blk_ld, 4);

  // Rows not on 128-row blocks, inputs not a multiple of 128: no grid, copies per row.
  for (const model::GpuLinear& l : {fp8(200, 384), fp8(256, 200)}) {
    EXPECT_EQ(l.blk_scale.size(), 0u) << l.out << " x " << l.in;
    EXPECT_EQ(l.row_scale.size(), size_t(2) * l.out * ((l.in + 127) / 128)) << l.out << " x " << l.in;
    EXPECT_NE(l.view().row_scale, nullptr);
  }

  // Grouped problems of 64 rows (a wo_a of o_lora_rank 64): the grid for the other kernels, copies for the GEMV.
  const model::GpuLinear grouped = fp8(256, 384, 64);
  EXPECT_GT(grouped.blk_scale.size(), 0u);
  EXPECT_EQ(grouped.row_scale.size(), size_t(2 * 256 * 3));
  EXPECT_FALSE(model::GpuLinear::keeps_row_copies(true, 128));
  EXPECT_FALSE(model::GpuLinear::keeps_row_copies(true, 0));
  EXPECT_TRUE(model::GpuLinear::keeps_row_copies(true, 64));
  EXPECT_TRUE(model::GpuLinear::keeps_row_copies(false, 0));

  // BF16: no scales at all.
  const model::GpuLinear bf16 =
      model::GpuLinear::random(WeightType::BF16, 256, 384, 1, 0.05f, 7, nullptr, "test bf16 linear");
  EXPECT_EQ(bf16.row_scale.size() + bf16.blk_scale.size(), 0u);
}

}  // namespace
}  // namespace moeserve
