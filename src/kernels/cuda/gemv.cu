// Skinny GEMM for decode-sized row counts (kernels/cuda/ops.h gemv): y = x W^T with fp32 activations and fp32
// accumulation, weights BF16 or FP8 e4m3 with 128-wide block scales, streamed from HBM once per 8 rows with
// 16-byte loads. A block of 256 threads owns RG x R weight rows; the KT threads of a row group split K
// (KT = 32..256, chosen so that short rows still keep every thread busy) and reduce through shuffles and
// shared memory. Grouped mode (MoE): blockIdx.y is an active expert group with its own rows. One row over FP8
// weights goes to the one-batch kernel (kernels/cuda/gemv_small.cu) when the matrix is small, else to the
// streaming kernel (kernels/cuda/gemv_stream.cu).

#include "core/env.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_small.h"
#include "kernels/cuda/gemv_stream.h"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kThreads = 256;
constexpr int kRows = 4;  // weight rows per row group

template <bool FP8>
__device__ __forceinline__ float weight_scalar(const void* w, size_t index) {
  if constexpr (FP8) return fp8_value(static_cast<const uint8_t*>(w)[index]);
  else return bf16_value(static_cast<const uint16_t*>(w)[index]);
}

// One token: 4 blocks of 256 threads per SM (at most 64 registers), the occupancy the weight stream needs.
// ACT8 (VECTOR, MT = 1 only): x goes through the FP8 activation simulation as it is loaded.
template <bool FP8, int MT, bool VECTOR, bool ACT8>
__global__ void __launch_bounds__(kThreads, MT == 1 ? 4 : 1) gemv_kernel(GemvArgs a, int KT) {
  constexpr int VEC = FP8 ? 16 : 8;
  const int p = blockIdx.y;
  const int RG = kThreads / KT;
  const int kl = threadIdx.x % KT, rg = threadIdx.x / KT;
  const int n0 = (blockIdx.x * RG + rg) * kRows;
  const int K = a.K, N = a.N;
  // One 16-byte weight load per row of this thread's rows at column k (zero past N).
  auto load_w = [&](const void* w, int k, uint4* wv) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int n = n0 + r;
      wv[r] = n < N ? __ldg(reinterpret_cast<const uint4*>(static_cast<const char*>(w) +
                                                           (size_t(n) * K + k) * (FP8 ? 1 : 2)))
                    : make_uint4(0, 0, 0, 0);
    }
  };
  // Dense problems know their weights before the previous kernel ends, so the weight stream starts before
  // pdl_wait and overlaps the previous kernel's tail: BF16 rows load their first k step into registers (free at
  // this occupancy); FP8 rows fetch their first k steps into L2 instead (held in registers they would cost a
  // quarter of the blocks per SM; measured slower). The FP8 block scales, 4 bytes a row, follow with the
  // activations. Grouped problems learn their expert from the routing, so they wait first.
  const bool dense = VECTOR && a.group_count == nullptr;
  const bool prefetched = !FP8 && dense && kl * VEC < K;
  uint4 pre_w[kRows];
  if (prefetched) load_w(static_cast<const char*>(a.w) + size_t(p) * a.w_stride * 2, kl * VEC, pre_w);
  if (FP8 && dense) {
    const char* w = static_cast<const char*>(a.w) + size_t(p) * a.w_stride;
    for (int k = kl * VEC, i = 0; k < K && i < 4; k += KT * VEC, ++i)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (n0 + r < N) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + size_t(n0 + r) * K + k));
  }
  dev::pdl_begin();
  const void* w;
  const float* rs = nullptr;
  const float* x = a.x;
  float* y = a.y;
  int M, row0 = 0;
  if (a.group_count) {
    if (p >= *a.num_groups) return;
    const int e = a.group_expert[p];
    w = static_cast<const char*>(a.w) + size_t(e) * a.w_stride * (FP8 ? 1 : 2);
    if (FP8) rs = a.row_scale + size_t(e) * a.scale_stride;
    row0 = a.group_offset[p];
    M = a.group_count[p];
  } else {
    w = static_cast<const char*>(a.w) + size_t(p) * a.w_stride * (FP8 ? 1 : 2);
    if (FP8) rs = a.row_scale + size_t(p) * a.scale_stride;
    x += size_t(p) * a.x_stride;
    y += size_t(p) * a.y_stride;
    M = a.M;
  }
  __shared__ float red[kThreads / 32][kRows * MT];

  for (int m0 = 0; m0 < M; m0 += MT) {
    const float* xr[MT];
    bool mv[MT];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int m = m0 + i;
      mv[i] = m < M;
      const int xrow = !mv[i] ? 0 : (a.group_count ? (a.x_rows ? a.x_rows[row0 + m] : row0 + m) : m);
      xr[i] = x + size_t(xrow) * a.ldx;
    }
    float acc[kRows][MT];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int i = 0; i < MT; ++i) acc[r][i] = 0.0f;

    if constexpr (VECTOR) {
      for (int k = kl * VEC; k < K; k += KT * VEC) {
        float xv[MT][VEC];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
#pragma unroll
          for (int v = 0; v < VEC; v += 4) {
            float4 f = mv[i] ? __ldg(reinterpret_cast<const float4*>(xr[i] + k + v)) : make_float4(0, 0, 0, 0);
            xv[i][v] = f.x;
            xv[i][v + 1] = f.y;
            xv[i][v + 2] = f.z;
            xv[i][v + 3] = f.w;
          }
        }
        if constexpr (ACT8) {
          // fp8_block_sim's arithmetic on this k step: the G lanes holding one 128-wide block of a row share its
          // amax (K % 128 == 0, so the whole group is inside the loop together).
          constexpr int G = 128 / VEC;
          const unsigned lane = threadIdx.x & 31u;
          const unsigned mask = ((1u << G) - 1u) << (lane & ~unsigned(G - 1));
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            float amax = 0.0f;
#pragma unroll
            for (int v = 0; v < VEC; ++v) amax = fmaxf(amax, fabsf(xv[i][v]));
#pragma unroll
            for (int off = 1; off < G; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, off));
            const float s = pow2_scale(amax, kFp8Max, kFp8AmaxFloor), inv = pow2_reciprocal(s);
#pragma unroll
            for (int v = 0; v < VEC; ++v) xv[i][v] = fp8_round(xv[i][v] * inv) * s;
          }
        }
        uint4 wv[kRows];
        if (prefetched && m0 == 0 && k == kl * VEC) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) wv[r] = pre_w[r];
        } else {
          load_w(w, k, wv);
        }
        float ws[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const size_t srow = size_t((n0 + r) >> a.scale_row_shift);
          ws[r] = !FP8 ? 1.0f : n0 + r < N ? __ldg(rs + srow * a.scale_ld + k / 128) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float wf[VEC];
          unpack_weights<FP8>(wv[r], wf);
          const float s = ws[r];
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            float part = 0.0f;
#pragma unroll
            for (int v = 0; v < VEC; ++v) part += xv[i][v] * wf[v];
            acc[r][i] += FP8 ? part * s : part;
          }
        }
      }
    } else {
      for (int k = kl; k < K; k += KT) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int n = n0 + r;
          if (n >= N) continue;
          float wf = weight_scalar<FP8>(w, size_t(n) * K + k);
          if constexpr (FP8) wf *= rs[size_t(n >> a.scale_row_shift) * a.scale_ld + k / 128];
#pragma unroll
          for (int i = 0; i < MT; ++i)
            if (mv[i]) acc[r][i] += xr[i][k] * wf;
        }
      }
    }

    // Reduce over the KT threads of each row group.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        float v = warp_sum(acc[r][i]);
        if (lane == 0) red[warp][r * MT + i] = v;
      }
    __syncthreads();
    const int wpg = KT / 32;  // warps per row group
    for (int idx = threadIdx.x; idx < RG * kRows * MT; idx += kThreads) {
      const int g = idx / (kRows * MT), ri = idx % (kRows * MT);
      const int r = ri / MT, i = ri % MT;
      const int n = (blockIdx.x * RG + g) * kRows + r, m = m0 + i;
      if (n >= N || m >= M) continue;
      float s = 0;
      for (int q = 0; q < wpg; ++q) s += red[g * wpg + q][ri];
      float* out = y + size_t(a.group_count ? row0 + m : m) * a.ldy + n;
      *out = a.accumulate ? *out + s : s;
    }
    __syncthreads();
  }
}

template <bool FP8, bool VECTOR>
cudaError_t launch(const GemvArgs& a, int mt, dim3 grid, int KT, cudaStream_t stream) {
  switch (mt) {
    case 1: return dev::launch(gemv_kernel<FP8, 1, VECTOR, false>, grid, dim3(kThreads), 0, stream, a, KT);
    case 2: return dev::launch(gemv_kernel<FP8, 2, VECTOR, false>, grid, dim3(kThreads), 0, stream, a, KT);
    case 4: return dev::launch(gemv_kernel<FP8, 4, VECTOR, false>, grid, dim3(kThreads), 0, stream, a, KT);
    default: return dev::launch(gemv_kernel<FP8, 8, VECTOR, false>, grid, dim3(kThreads), 0, stream, a, KT);
  }
}

// 16-byte loads of x and of the weight rows line up.
bool vectorized(const GemvArgs& a) {
  const bool fp8 = a.wtype == WeightType::FP8;
  const int vec = fp8 ? 16 : 8;
  return a.K % vec == 0 && a.ldx % 4 == 0 && a.x_stride % 4 == 0 && (reinterpret_cast<uintptr_t>(a.x) % 16) == 0 &&
         (reinterpret_cast<uintptr_t>(a.w) % 16) == 0 && (a.w_stride * (fp8 ? 1 : 2)) % 16 == 0;
}

}  // namespace

GemvArgs gemv_args_on_slices(int G, int N, int K, const float* x, float* y, int M) {
  GemvArgs a;
  a.x = x;
  a.ldx = G * K;
  a.x_stride = K;
  a.y = y;
  a.ldy = G * N;
  a.y_stride = N;
  a.M = M;
  a.problems = G;
  return a;
}

bool gemv_fuses_act_fp8(const GemvArgs& a) {
  const bool one_row = a.group_count ? a.max_group_rows == 1 : a.M == 1;
  return one_row && a.K % 128 == 0 && vectorized(a);
}

cudaError_t gemv(const GemvArgs& a, cudaStream_t stream) {
  if (a.N == 0 || a.problems == 0 || (!a.group_count && a.M == 0)) return cudaSuccess;
  if (a.act_fp8 && !gemv_fuses_act_fp8(a)) return cudaErrorInvalidValue;
  // One row over a small BF16 matrix: the bulk-copy kernel where it measured faster (gemv_small_preferred); over
  // other FP8 weights: the streaming kernel (MOESERVE_GEMV_STREAM=0 keeps this one-pass kernel, for A/B runs).
  if (gemv_small_preferred(a)) return gemv_small(a, stream);
  if (gemv_small_tc_preferred(a)) return gemv_small_tc(a, stream);
  static const bool stream_on = !env_is("MOESERVE_GEMV_STREAM", "0");
  if (stream_on && gemv_stream_preferred(a)) return gemv_stream(a, stream);
  const bool fp8 = a.wtype == WeightType::FP8;
  const int vec = fp8 ? 16 : 8;
  const bool vector = vectorized(a);
  const int lanes = vector ? (a.K + vec - 1) / vec : a.K;
  int KT = 32;
  while (KT < kThreads && KT < lanes) KT *= 2;
  // Rows per pass: grouped problems may hold any count (8); dense ones exactly what they need.
  const int rows = a.group_count ? (a.max_group_rows > 0 ? a.max_group_rows : 8) : a.M;
  const int mt = rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : 8;
  const int rows_per_block = (kThreads / KT) * kRows;
  dim3 grid((a.N + rows_per_block - 1) / rows_per_block, a.problems);
  if (a.act_fp8)  // one row per pass
    return fp8 ? dev::launch(gemv_kernel<true, 1, true, true>, grid, dim3(kThreads), 0, stream, a, KT)
               : dev::launch(gemv_kernel<false, 1, true, true>, grid, dim3(kThreads), 0, stream, a, KT);
  if (fp8)
    return vector ? launch<true, true>(a, mt, grid, KT, stream) : launch<true, false>(a, mt, grid, KT, stream);
  return vector ? launch<false, true>(a, mt, grid, KT, stream) : launch<false, false>(a, mt, grid, KT, stream);
}

}  // namespace moeserve::cuda
