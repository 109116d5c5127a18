#pragma once
// Pieces shared by the skinny tensor-core GEMMs (gemm_fp8_skinny.cu, gemm_bf16_fp8w_skinny.cu): the producer's
// stage ring (its barriers: hopper.cuh init_stage_barriers), the swap-AB accumulator store, the one-time
// shared-memory opt-in, and the K splits (weights of few rows give few CTAs, so K is split over more of them into a
// workspace of fp32 partial products, which a second launch adds in split order: the result does not depend on
// scheduling).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hopper.cuh"

namespace moeserve::cuda {

// Up to `per_sm` CTAs per SM (default 2; MOESERVE_SKINNY_CTAS_PER_SM=N for A/B runs: the H200 runs showed more,
// shorter CTAs moving bytes faster, wq_b's 512 CTAs of 8 groups at 72 % against shared w13's 128 of 16 at 44 %,
// not yet tried as a setting): split K (into whole 128-k groups, at least 4 per split) while `ctas` fall short.
inline int skinny_k_splits(int ctas, int groups) {
  static const int per_sm = [] {
    const char* e = std::getenv("MOESERVE_SKINNY_CTAS_PER_SM");
    const int v = e ? std::atoi(e) : 0;
    return v >= 1 && v <= 16 ? v : 2;
  }();
  int splits = 1;
  while (ctas * splits * 2 <= per_sm * dev::sm_count() && groups % (splits * 2) == 0 && groups / (splits * 2) >= 4)
    splits *= 2;
  return splits;
}

namespace {

// The producer thread's stage ring: the first min(NG, S) stages' weights are requested before pdl_wait (weights
// are never written by kernels; fresh stages need no empty wait), then for each group g the weights of a later
// stage once its consumers released it, and the group's activations. load_w / load_x (g, stage base, full barrier)
// issue the TMA loads of the group's `tx` bytes.
template <int S, class LoadW, class LoadX>
__device__ __forceinline__ void produce_stages(uint64_t* full, uint64_t* empty, uint8_t* stages, int stage_bytes,
                                               uint32_t tx, int NG, const LoadW& load_w, const LoadX& load_x) {
  const int early = NG < S ? NG : S;
  for (int g = 0; g < early; ++g) {
    hopper::mbar_arrive_expect_tx(&full[g], tx);
    load_w(g, stages + g * stage_bytes, &full[g]);
  }
  dev::pdl_begin();
  for (int g = 0; g < NG; ++g) {
    const int stage = g % S;
    uint8_t* st = stages + stage * stage_bytes;
    if (g >= early) {
      hopper::mbar_wait(&empty[stage], ((g / S) & 1) ^ 1);
      hopper::mbar_arrive_expect_tx(&full[stage], tx);
      load_w(g, st, &full[stage]);
    }
    load_x(g, st, &full[stage]);
  }
}

// The swap-AB accumulators of an m64nBN wgmma to y: accumulator j holds weight row r0 + 8 ((j >> 1) & 1) and
// activation row 8 (j >> 2) + 2 t4 + (j & 1); rows past M are not written. `out` points at y's column of row r0.
template <int BN>
__device__ __forceinline__ void store_swap_ab(const float (&acc)[BN / 2], float* out, int M, int ldy, int t4) {
#pragma unroll
  for (int i = 0; i < BN / 8; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int tok = 8 * i + 2 * t4 + h;
      if (tok >= M) continue;
      out[size_t(tok) * ldy] = acc[4 * i + h];
      out[size_t(tok) * ldy + 8] = acc[4 * i + 2 + h];
    }
}

// The kernel's dynamic shared memory opt-in, once per kernel (a template argument: kernels of one signature share
// a function pointer type, so a type parameter would share the flag).
template <auto Kernel>
cudaError_t allow_smem_once(int bytes) {
  static std::once_flag once;
  static cudaError_t setup = cudaSuccess;
  std::call_once(once,
                 [&] { setup = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes); });
  return setup;
}

}  // namespace

}  // namespace moeserve::cuda
