#pragma once
// Warp-level BF16 tensor-core helpers (mma.sync m16n8k16 with fp32 accumulation, ldmatrix), shared by the kernels
// that feed exact bf16 values to the tensor cores: indexer_scores_bf16.cu and attention_mma.cu.
#include <cuda_bf16.h>

#include <cstdint>

namespace moeserve::cuda::dev {

// Two fp32 values rounded to bf16, lo in the low half.
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// (lo, hi) = t1 + t2 + t3 exactly, as three bf16 pairs: each term the bf16 rounding of what the ones before left
// (every remainder is exact in fp32, and three terms hold all 24 bits).
__device__ __forceinline__ void split3(float lo, float hi, uint32_t& t1, uint32_t& t2, uint32_t& t3) {
  t1 = bf16x2(lo, hi);
  const float rl = lo - __uint_as_float(t1 << 16), rh = hi - __uint_as_float(t1 & 0xffff0000u);
  t2 = bf16x2(rl, rh);
  t3 = bf16x2(rl - __uint_as_float(t2 << 16), rh - __uint_as_float(t2 & 0xffff0000u));
}

// c += a (16 x 16, row-major fragment) * b (16 x 8, column-major fragment b0, b1).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 bf16 matrices from shared memory (lanes 8 i .. 8 i + 7 address the rows of matrix i), plain or
// transposed.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

}  // namespace moeserve::cuda::dev
