// Lightning indexer scores on BF16 tensor cores (kernels/cuda/ops.h indexer_scores_bf16). Under the checkpoint
// numerics the indexer's queries and keys are FP4-simulated (e2m1 values times a power of two), which bf16 holds
// exactly, so the products are exact and only the fp32 summation order differs from the fp32 kernel (kv.cu).
//
// A block scores one token's 64 heads against 128 keys: the 64 x 128 queries and the 128 x 128 keys are staged as
// bf16 in shared memory (rows padded to 136 values, so that the 8 rows a fragment load touches fall in different
// banks); warp w multiplies heads 16 (w % 4) .. + 16 by keys 64 (w / 4) .. + 64 with mma.m16n8k16 (fp32
// accumulation), applies relu, the scale and the head weight, sums its 16 heads by shuffles, and the four head
// groups are added in order through shared memory.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma_sync_bf16.cuh"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kHeads = 64, kDim = 128, kKeys = 128, kPitch = kDim + 8;  // bf16 per staged row
constexpr int kThreads = 256;
constexpr size_t kSmemBytes = size_t(kHeads + kKeys) * kPitch * 2;

// Four fp32 values as bf16 into a staged row at column c (a multiple of 4).
__device__ __forceinline__ void stage4(uint16_t* row, int c, float4 v) {
  *reinterpret_cast<uint2*>(row + c) = make_uint2(bf16x2(v.x, v.y), bf16x2(v.z, v.w));
}

__global__ void __launch_bounds__(kThreads) indexer_scores_bf16_kernel(BatchDesc b, const float* q, const float* w,
                                                                       const float* keys, int epp, int ratio,
                                                                       float scale, float* scores, int ld) {
  extern __shared__ uint16_t sm16[];
  uint16_t* qs = sm16;                  // [kHeads][kPitch]
  uint16_t* ks = sm16 + kHeads * kPitch;  // [kKeys][kPitch]
  __shared__ float red[4][kKeys];       // per head group: the sums over its 16 heads
  const int t = blockIdx.x, j0 = blockIdx.y * kKeys;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int rg = warp % 4, kh = warp / 4;  // heads 16 rg .. + 16, keys 64 kh .. + 64
  // The host writes the positions, the sequences and the page table: read before the wait (kv.cu's
  // indexer_scores_kernel), so that after it the queries' and keys' loads come first.
  __shared__ int key_page[kKeys];  // the page of each of the tile's valid keys
  const int valid = (b.tok_pos[t] + 1) / ratio;
  const int s = b.tok_seq[t];
  if (threadIdx.x < kKeys && j0 + int(threadIdx.x) < valid)
    key_page[threadIdx.x] = b.page_table[size_t(s) * b.page_ld + (j0 + threadIdx.x) / epp];
  dev::pdl_begin();
  if (j0 >= valid) return;
  __syncthreads();  // key_page
  // Stage: the token's queries (2048 float4s, 8 per thread) and the tile's keys (4096, 16 per thread; zeros past
  // `valid`), every load issued before the first store.
  {
    const float4* src = reinterpret_cast<const float4*>(q + size_t(t) * kHeads * kDim);
    float4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = src[threadIdx.x + u * kThreads];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = threadIdx.x + u * kThreads;
      stage4(qs + (i / 32) * kPitch, 4 * (i % 32), v[u]);
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = threadIdx.x + (8 * half + u) * kThreads, key = j0 + i / 32;
      v[u] = make_float4(0, 0, 0, 0);
      if (key < valid)
        v[u] = reinterpret_cast<const float4*>(keys + (size_t(key_page[i / 32]) * epp + key % epp) * kDim)[i % 32];
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = threadIdx.x + (8 * half + u) * kThreads;
      stage4(ks + (i / 32) * kPitch, 4 * (i % 32), v[u]);
    }
  }
  __syncthreads();

  // acc[n][*]: heads 16 rg + g (0, 1) and + 8 (2, 3), keys 64 kh + 8 n + 2 c (+1).
  float acc[8][4];
#pragma unroll
  for (int n = 0; n < 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  const uint16_t* qa = qs + (16 * rg + g) * kPitch + 2 * c;
  const uint16_t* kb = ks + (64 * kh + g) * kPitch + 2 * c;
#pragma unroll
  for (int k = 0; k < kDim; k += 16) {
    uint32_t a[4];
    a[0] = *reinterpret_cast<const uint32_t*>(qa + k);
    a[1] = *reinterpret_cast<const uint32_t*>(qa + 8 * kPitch + k);
    a[2] = *reinterpret_cast<const uint32_t*>(qa + k + 8);
    a[3] = *reinterpret_cast<const uint32_t*>(qa + 8 * kPitch + k + 8);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const uint16_t* kr = kb + 8 * n * kPitch + k;
      mma_bf16(acc[n], a, *reinterpret_cast<const uint32_t*>(kr), *reinterpret_cast<const uint32_t*>(kr + 8));
    }
  }

  // relu * scale * w per head, summed over this warp's 16 heads: the thread's two heads, then lanes of equal c.
  const float* wt = w + size_t(t) * kHeads + 16 * rg;
  const float w0 = wt[g] * scale, w1 = wt[g + 8] * scale;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float v = fmaxf(acc[n][e], 0.0f) * w0 + fmaxf(acc[n][2 + e], 0.0f) * w1;
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (g == 0) red[rg][64 * kh + 8 * n + 2 * c + e] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x < kKeys && j0 + int(threadIdx.x) < valid)
    scores[size_t(t) * ld + j0 + threadIdx.x] =
        ((red[0][threadIdx.x] + red[1][threadIdx.x]) + red[2][threadIdx.x]) + red[3][threadIdx.x];
}

}  // namespace

bool indexer_scores_bf16_fits(int heads, int dim) { return heads == kHeads && dim == kDim; }

cudaError_t indexer_scores_bf16(const BatchDesc& b, const float* q, const float* w, int heads, int dim,
                                const float* keys, int epp, int ratio, float scale, int max_keys, float* scores, int ld,
                                cudaStream_t stream) {
  if (b.T == 0 || max_keys <= 0) return cudaSuccess;
  if (!indexer_scores_bf16_fits(heads, dim) || ratio <= 0 || epp <= 0) return cudaErrorInvalidValue;
  static const bool configured = [] {
    cudaFuncSetAttribute(indexer_scores_bf16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
    return true;
  }();
  (void)configured;
  const dim3 grid(b.T, (max_keys + kKeys - 1) / kKeys);
  return dev::launch(indexer_scores_bf16_kernel, grid, dim3(kThreads), kSmemBytes, stream, b, q, w, keys, epp, ratio,
                     scale, scores, ld);
}

}  // namespace moeserve::cuda
