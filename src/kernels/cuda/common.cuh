#pragma once
// Device helpers shared by the .cu files: reductions, the exact power-of-two scales of the official quantizers
// (kernels/cpu/quant.h), FP8 e4m3 and FP4 e2m1 rounding, bf16.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda/ops.h"

namespace moeserve::cuda::dev {

constexpr float kFp8Max = 448.0f;
constexpr float kFp4Max = 6.0f;
constexpr float kFp8AmaxFloor = 1e-4f;
constexpr float kFp4AmaxFloor = 6.0f * 1.1754943508e-38f;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Sums each of P values (P a multiple of 32) over the lanes of a warp by halving exchanges: P - P / 32 shuffles,
// where warp_sum on each value takes 5 P. Afterwards lane l holds the sum of value l * (P / 32) + j in v[j] for
// j < P / 32, bit for bit warp_sum's (the same additions in the same order: this lane's partial plus the partner's).
template <int P, int Half, int O>
__device__ __forceinline__ void warp_sum_scatter_level(float (&v)[P], int lane) {
  const bool upper = lane & O;  // keeps the upper half of the live values, sends the lower
#pragma unroll
  for (int i = 0; i < Half; ++i) {
    const float send = upper ? v[i] : v[i + Half];
    const float keep = upper ? v[i + Half] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
  }
  if constexpr (O > 1) warp_sum_scatter_level<P, Half / 2, O / 2>(v, lane);
}
template <int P>
__device__ __forceinline__ void warp_sum_scatter(float (&v)[P]) {
  static_assert(P % 32 == 0, "P: a multiple of 32");
  warp_sum_scatter_level<P, P / 2, 16>(v, int(threadIdx.x & 31));
}
// Inclusive prefix sum over the lanes of a full warp (int, unsigned long long, double).
template <class T>
__device__ __forceinline__ T warp_inclusive_sum(T v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// The largest magnitude of the warp's values (every lane gets it) in one redux.sync over the magnitudes' bit patterns,
// whose unsigned order is the order of non-negative floats, instead of five shuffles: warp_max(fabsf(v)), NaN skipped
// the same way (a warp of only NaN gives 0 where warp_max gives NaN; pow2_scale maps both to its floor).
__device__ __forceinline__ float warp_absmax(float v) {
  return __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(fmaxf(fabsf(v), 0.0f))));
}

// Block-wide sum (any blockDim multiple of 32, <= 1024); every thread gets the result. `red` >= 32 slots.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  T r = lane < warps ? red[lane] : T(0);
  r = warp_sum(r);
  return r;
}
__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = lane < warps ? red[lane] : -INFINITY;
  return warp_max(r);
}

// 2^ceil(log2(x)) from the exponent bits (x positive normal), as kernels/cpu/quant.h pow2_ceil.
// Orthonormal Walsh-Hadamard transform of v[0, dim) in shared memory, in place (dim a power of two), as
// kernels::cpu::hadamard_rotate. Every thread of the block calls it; it ends with a barrier.
__device__ __forceinline__ void hadamard_shared(float* v, int dim) {
  for (int len = 1; len < dim; len <<= 1) {
    for (int p = threadIdx.x; p < dim / 2; p += blockDim.x) {
      const int i = (p / len) * 2 * len + p % len, j = i + len;
      const float a = v[i], b = v[j];
      v[i] = a + b;
      v[j] = a - b;
    }
    __syncthreads();
  }
  const float norm = 1.0f / sqrtf(float(dim));
  for (int i = threadIdx.x; i < dim; i += blockDim.x) v[i] *= norm;
  __syncthreads();
}

__device__ __forceinline__ float pow2_ceil(float x) {
  uint32_t bits = __float_as_uint(x);
  int e = int((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  return __uint_as_float(uint32_t(e + 127) << 23);
}
// 1 / s for a power of two s = 2^e, e in [-126, 127] (pow2_ceil's results), or +inf: exact (2^-127 for 2^127, 0 for
// inf), from the exponent bits, without the IEEE reciprocal's refinement and its slow-path branch (rcp.rn.f32).
__device__ __forceinline__ float pow2_reciprocal(float s) {
  const uint32_t b = __float_as_uint(s);
  return __uint_as_float(b < 0x7f000000u ? 0x7f000000u - b : b == 0x7f000000u ? 0x00400000u : 0u);
}
__device__ __forceinline__ float pow2_scale(float amax, float fmt_max, float floor_) {
  const float inverse = 1.0f / fmt_max;  // folded to the fp32 reciprocal, as the official kernels
  return pow2_ceil(fmaxf(amax, floor_) * inverse);
}

__device__ __forceinline__ uint8_t fp8_bits(float v) {  // saturating (clamp to +-448), round to nearest even
  return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float fp8_value(uint8_t b) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3);
  return __half2float(__half(h));
}
__device__ __forceinline__ float fp8_round(float v) { return fp8_value(fp8_bits(v)); }
// fp8_bits of two values at once (a in the low byte): one conversion instruction for the pair.
__device__ __forceinline__ uint32_t fp8x2_bits(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}
// fp8_round of four values times inv, two at a time. With inv = 1 / s for a power of two s (pow2_scale), v * inv is
// v / s exactly (the same rounding, where the quotient is subnormal too), without a division per value.
__device__ __forceinline__ float4 fp8_round4(float4 v, float inv) {
  const __nv_fp8x2_storage_t lo = __nv_fp8x2_storage_t(fp8x2_bits(v.x * inv, v.y * inv));
  const __nv_fp8x2_storage_t hi = __nv_fp8x2_storage_t(fp8x2_bits(v.z * inv, v.w * inv));
  const __half2_raw hl = __nv_cvt_fp8x2_to_halfraw2(lo, __NV_E4M3), hh = __nv_cvt_fp8x2_to_halfraw2(hi, __NV_E4M3);
  const float2 a = __half22float2(__half2(hl)), b = __half22float2(__half2(hh));
  return make_float4(a.x, a.y, b.x, b.y);
}

// 16-byte asynchronous copy global -> shared (no register staging, so a thread can have dozens in flight);
// src_bytes = 0 zero-fills the destination (src must still be a valid address). Wait with cp_async_wait_all.
__device__ __forceinline__ void cp_async16(void* smem, const void* src, int src_bytes = 16) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// Groups of cp_async16 copies: commit closes the thread's current group; wait_group<N> waits until at most N of the
// thread's groups are still in flight.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// e2m1 round to nearest even of v clamped to +-6 (core/dtype.cpp f32_to_fp4_e2m1), returned as a value.
__device__ __forceinline__ float fp4_round(float v) {
  v = fmaxf(-kFp4Max, fminf(kFp4Max, v));
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float m = fabsf(v);
  int code = 7;
#pragma unroll
  for (int i = 0; i < 7; ++i) {
    float mid = 0.5f * (grid[i] + grid[i + 1]);
    if (code == 7) {
      if (m < mid) code = i;
      else if (m == mid) code = (i % 2 == 0) ? i : i + 1;
    }
  }
  float r = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) r = (code == i) ? grid[i] : r;
  return signbit(v) ? -r : r;
}

// fp8_block_sim of one block of n values by one warp: out[i] = fp8(v[i] / s) * s, s the power-of-two scale of
// the block's amax (out may be v).
__device__ __forceinline__ void fp8_block_sim_warp(const float* v, float* out, int n, int lane) {
  float amax = 0;
  for (int i = lane; i < n; i += 32) amax = fmaxf(amax, fabsf(v[i]));
  amax = warp_absmax(amax);
  const float s = pow2_scale(amax, kFp8Max, kFp8AmaxFloor), inv = pow2_reciprocal(s);
  for (int i = lane; i < n; i += 32) out[i] = fp8_round(v[i] * inv) * s;
}
// The FP4 simulation of a 32-value block held one value a lane by a warp: fp4(v / s) * s, s the power-of-two scale
// of the block's amax.
__device__ __forceinline__ float fp4_block_sim_lane(float v) {
  const float s = pow2_scale(warp_absmax(v), kFp4Max, kFp4AmaxFloor);
  return fp4_round(v * pow2_reciprocal(s)) * s;
}

__device__ __forceinline__ float bf16_value(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// One 16-byte weight load to fp32: 8 bf16 or 16 e4m3 (the skinny GEMMs, gemv.cu and gemv_stream.cu).
// 8 bf16 (one uint4) -> fp32
__device__ __forceinline__ void unpack_bf16(const uint4& v, float* f) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
// 16 e4m3 (one uint4) -> fp32
__device__ __forceinline__ void unpack_fp8(const uint4& v, float* f) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(u[i] & 0xffffu), __NV_E4M3);
    __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(u[i] >> 16), __NV_E4M3);
    float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
    f[4 * i] = a.x;
    f[4 * i + 1] = a.y;
    f[4 * i + 2] = b.x;
    f[4 * i + 3] = b.y;
  }
}
template <bool FP8>
__device__ __forceinline__ void unpack_weights(const uint4& v, float* f) {
  if constexpr (FP8) unpack_fp8(v, f);
  else unpack_bf16(v, f);
}

// RoPE: cos and sin (times attn_scale; sin negated for the inverse rotation) of pair i at position p: the fp32 angle
// p * inv_freq[i], as the reference, through double-precision cos/sin.
__device__ __forceinline__ void rope_cos_sin(float p, float inv_freq_i, float attn_scale, bool inverse, float* c,
                                             float* s) {
  const double ad = double(p * inv_freq_i);
  *c = float(cos(ad)) * attn_scale;
  const float sn = float(sin(ad)) * attn_scale;
  *s = inverse ? -sn : sn;
}

// ---- Programmatic dependent launch (sm_90). A kernel started by launch() may begin while the kernel before it
// in the stream is still running, so that its launch, its prologue (reading weights, which no kernel writes)
// and the previous kernel's drain overlap. Every such kernel calls pdl_wait() in every thread before it touches
// memory another kernel writes or reads (waiting also makes the earlier kernels' writes visible; it is what
// keeps the ordering transitive, so no thread may skip it), then pdl_release() to let the next kernel start.
// Both are no-ops in a kernel launched without the attribute.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_release();
}
// The same, or with release_first the release before the wait: the next kernel may then launch while this one still
// waits for its predecessor (its ordering is kept by its own wait, which also waits for this kernel).
__device__ __forceinline__ void pdl_begin(bool release_first) {
  if (release_first) pdl_release();
  pdl_wait();
  if (!release_first) pdl_release();
}

// x's 128-value blocks (K % 128 == 0), a warp per block: emit(b, v, amax) gets this lane's four values of block b
// (float4 b * 32 + lane) and the block's largest magnitude. Each warp loads all of its blocks (up to 4 per pass)
// before it reduces any, so that their memory latencies and maxima overlap. L2: loads that bypass L1 (x written by
// other blocks of the same kernel).
template <bool L2 = false, class Emit>
__device__ __forceinline__ void for_x_blocks(const float* x, int K, Emit emit) {
  constexpr int kBatch = 4;
  const int lane = threadIdx.x & 31, warps = int(blockDim.x >> 5), KB = K / 128;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  for (int b0 = int(threadIdx.x >> 5); b0 < KB; b0 += warps * kBatch) {
    float4 v[kBatch];
    float m[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int b = b0 + j * warps;
      v[j] = b >= KB ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : L2 ? __ldcg(x4 + b * 32 + lane) : x4[b * 32 + lane];
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (b0 + j * warps < KB)  // the same for every lane of the warp
        m[j] = warp_absmax(fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w))));
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (b0 + j * warps < KB) emit(b0 + j * warps, v[j], m[j]);
  }
}

// x[0, K) staged in shared memory for the one-row GEMVs whose lanes take VEC consecutive weights per 16-byte load
// (gemv_stream.cu, gemv_small.cu): float4 j of chunk c (weights c * VEC ..) at xs4[j * (K / VEC) + c], so that a
// warp's float4 reads of consecutive chunks are conflict-free. ACT8: the FP8 activation simulation per 128 values
// first (fp8_block_sim's arithmetic, one warp per block of 128; K % 128 == 0), four values at a time with the
// block's exact reciprocal: with a division per value and a block at a time it cost a one-row GEMV of K = 4096 on
// the H200 ~1.2 us more than the plain copy, and 4.1 us at K = 16384 (bench_gpu_ops linear, the `gemv fp8 act8`
// rows). Every thread of the block takes part; the caller synchronizes before reading. L2: as for_x_blocks.
template <int VEC, bool ACT8, bool L2 = false>
__device__ __forceinline__ void stage_x_interleaved(const float* x, int K, float4* xs4) {
  constexpr int NJ = VEC / 4;  // float4s per chunk
  const int chunks = K / VEC, lane = threadIdx.x & 31;
  if constexpr (ACT8) {
    for_x_blocks<L2>(x, K, [&](int b, float4 v, float amax) {
      const float s = pow2_scale(amax, kFp8Max, kFp8AmaxFloor);
      const float4 q = fp8_round4(v, pow2_reciprocal(s));
      v = make_float4(q.x * s, q.y * s, q.z * s, q.w * s);
      const int f = b * 32 + lane;  // float4 index in x
      xs4[(f % NJ) * chunks + f / NJ] = v;
    });
  } else {
    for (int f = threadIdx.x; f < K / 4; f += blockDim.x) {
      const float4* x4 = reinterpret_cast<const float4*>(x) + f;
      xs4[(f % NJ) * chunks + f / NJ] = L2 ? __ldcg(x4) : *x4;
    }
  }
}

// acc plus column d of token t's K expert rows, rows[row_of_slot[t * K + j]], added in slot order: moe_combine's
// sum, also folded into hc_post_mix (the same order keeps the two bit for bit).
// Up to kAddRowsBatch slots at a time, every row index and then every value loaded before the first addition (a
// rolled loop over a runtime K waited two dependent round trips per slot: twelve for a decode token's six
// experts, in hc_post_mix at the end of every layer); the additions in slot order, as before.
constexpr int kAddRowsBatch = 8;
__device__ __forceinline__ float add_expert_rows(float acc, const float* rows, const int* row_of_slot, int t, int K,
                                                 int D, int d) {
  for (int j0 = 0; j0 < K; j0 += kAddRowsBatch) {
    int idx[kAddRowsBatch];
    float v[kAddRowsBatch];
#pragma unroll
    for (int j = 0; j < kAddRowsBatch; ++j) idx[j] = j0 + j < K ? row_of_slot[t * K + j0 + j] : 0;
#pragma unroll
    for (int j = 0; j < kAddRowsBatch; ++j) v[j] = j0 + j < K ? rows[size_t(idx[j]) * D + d] : 0.0f;
#pragma unroll
    for (int j = 0; j < kAddRowsBatch; ++j)
      if (j0 + j < K) acc += v[j];
  }
  return acc;
}

// Asks L2 to fetch [p, p + bytes) (16-byte aligned, a multiple of 16 bytes) without waiting for it.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// Multiprocessors of the current device (cached: the engine drives one GPU per process).
inline int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) !=
                                                   cudaSuccess)
      return 132;
    return count;
  }();
  return n;
}

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization when pdl_enabled().
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace moeserve::cuda::dev
