#pragma once
// The unit of work of the streaming one-row GEMVs (gemv_stream.cu, moe_fp8_one_token.cu): one warp's loads of
// four weight rows at one k step (kStreamIt 16-byte loads per lane and row), their products with x staged in
// shared memory by stage_x_interleaved, and the rows' warp sums. Both kernels keep a unit's loads in flight while
// they multiply the one before, so the arithmetic is written once here and gives both the same sums bit for bit.
#include "kernels/cuda/common.cuh"

namespace moeserve::cuda::dev {

constexpr int kStreamRows = 4;  // weight rows per unit
constexpr int kStreamIt = 2;    // 16-byte loads per lane, row and unit

struct StreamUnit {
  uint4 w[kStreamRows][kStreamIt];
  float s[kStreamRows][kStreamIt];  // FP8: each load's 128-block row scale
};

// acc[r][i] += this lane's products of unit u (k step ks) with x (xs4: float4 j of 16-byte chunk c at
// [j * chunks + c]); chunks past `chunks` are skipped. A lane's sums are chains of VEC products, then one
// addition per k step.
template <bool FP8>
__device__ __forceinline__ void stream_accumulate(const StreamUnit& u, const float4* xs4, int chunks, int ks,
                                                  int lane, float (&acc)[kStreamRows][kStreamIt]) {
  constexpr int VEC = FP8 ? 16 : 8;  // weights per 16-byte load
  constexpr int NJ = VEC / 4;        // float4s of x per lane and load
#pragma unroll
  for (int i = 0; i < kStreamIt; ++i) {
    const int c = ks * 32 * kStreamIt + i * 32 + lane;  // this lane's chunk
    if (c >= chunks) continue;
    float xv[VEC];
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const float4 v = xs4[j * chunks + c];
      xv[4 * j] = v.x;
      xv[4 * j + 1] = v.y;
      xv[4 * j + 2] = v.z;
      xv[4 * j + 3] = v.w;
    }
#pragma unroll
    for (int r = 0; r < kStreamRows; ++r) {
      float wf[VEC];
      unpack_weights<FP8>(u.w[r][i], wf);
      float part = 0.0f;
#pragma unroll
      for (int v = 0; v < VEC; ++v) part += xv[v] * wf[v];
      acc[r][i] += FP8 ? part * u.s[r][i] : part;
    }
  }
}

// Sums of 4 per-lane values over the warp: returns row (lane >> 3)'s sum in lanes 0, 8, 16, 24 (6 shuffles
// instead of 4 x 5: each step halves the rows a lane carries before the last three).
__device__ __forceinline__ float warp_sum4(const float (&v)[kStreamRows], int lane) {
  const bool h16 = lane & 16, h8 = lane & 8;
  float k0 = h16 ? v[2] : v[0], k1 = h16 ? v[3] : v[1];
  k0 += __shfl_xor_sync(0xffffffffu, h16 ? v[0] : v[2], 16);
  k1 += __shfl_xor_sync(0xffffffffu, h16 ? v[1] : v[3], 16);
  float k = h8 ? k1 : k0;
  k += __shfl_xor_sync(0xffffffffu, h8 ? k0 : k1, 8);
  k += __shfl_xor_sync(0xffffffffu, k, 4);
  k += __shfl_xor_sync(0xffffffffu, k, 2);
  k += __shfl_xor_sync(0xffffffffu, k, 1);
  return k;
}

// The unit rows' totals: the k steps' partials per load slot added in slot order, then warp_sum4.
__device__ __forceinline__ float stream_row_sums(const float (&acc)[kStreamRows][kStreamIt], int lane) {
  float rows[kStreamRows];
#pragma unroll
  for (int r = 0; r < kStreamRows; ++r) {
    rows[r] = acc[r][0];
#pragma unroll
    for (int i = 1; i < kStreamIt; ++i) rows[r] += acc[r][i];
  }
  return warp_sum4(rows, lane);
}

__device__ __forceinline__ void stream_clear(float (&acc)[kStreamRows][kStreamIt]) {
#pragma unroll
  for (int r = 0; r < kStreamRows; ++r)
#pragma unroll
    for (int i = 0; i < kStreamIt; ++i) acc[r][i] = 0.0f;
}

}  // namespace moeserve::cuda::dev
