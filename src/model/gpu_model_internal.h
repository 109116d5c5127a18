// Shared by GpuModel's translation units (gpu_model.cpp, gpu_linear.cpp, gpu_attention.cpp, gpu_moe.cpp); not
// part of the model's interface.
#pragma once
#if MOESERVE_WITH_CUDA
#include "model/gpu_model.h"

namespace moeserve::model {

constexpr int kSkinnyRows = 8;  // linears with at most this many rows always take the skinny GEMM

// The weight side of a gemv: problems of [N, K] weights laid out back to back (grouped launches index them).
inline void set_weights(cuda::GemvArgs& a, const GemmView& v, int N, int K) {
  a.wtype = v.type;
  a.w = v.w;
  a.row_scale = v.row_scale;
  a.N = N;
  a.K = K;
  a.scale_ld = v.scale_ld;
  a.w_stride = (long long)N * K;
  a.scale_stride = (long long)N * v.scale_ld;
}

}  // namespace moeserve::model
#endif
