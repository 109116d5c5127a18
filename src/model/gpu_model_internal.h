// Shared by GpuModel's translation units (gpu_model.cpp, gpu_linear.cpp, gpu_attention.cpp, gpu_moe.cpp); not
// part of the model's interface.
#pragma once
#if MOESERVE_WITH_CUDA
#include "core/error.h"
#include "model/gpu_model.h"

namespace moeserve::model {

constexpr int kSkinnyRows = 8;  // linears with at most this many rows always take the skinny GEMM

// The weight side of a gemv: problems of [N, K] weights laid out back to back (grouped launches index them).
// FP8 scales: the grid where the problems start on its 128-row blocks, else the copies per row (kept for such linears:
// GpuLinear::keeps_row_copies).
inline void set_weights(cuda::GemvArgs& a, const GemmView& v, int N, int K) {
  a.wtype = v.type;
  a.w = v.w;
  a.N = N;
  a.K = K;
  a.w_stride = (long long)N * K;
  if (v.blk_scale && N % 128 == 0 && gemv_reads_block_scales()) {
    a.row_scale = v.blk_scale;
    a.scale_ld = v.blk_ld;
    a.scale_row_shift = 7;
    a.scale_stride = (long long)(N / 128) * v.blk_ld;
  } else {
    check(v.type != cuda::WeightType::FP8 || v.row_scale,
          "internal: an FP8 GEMV over problems of {} rows needs the per-row scale copies (GpuLinear::keeps_row_copies)",
          N);
    a.row_scale = v.row_scale;
    a.scale_ld = v.scale_ld;
    a.scale_row_shift = 0;
    a.scale_stride = (long long)N * v.scale_ld;
  }
}

}  // namespace moeserve::model
#endif
