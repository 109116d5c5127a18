// Skinny FP8 GEMM on tensor cores for 1..64 activation rows (sm_90a): kernels/cuda/ops.h gemm_fp8_skinny.
//
// Swap-AB: the weight rows are the wgmma M dimension (64 per consumer warpgroup, the A operand read from shared
// memory), the activation rows the N dimension (BN = 8, 16, 32 or 64, zero-filled past M by the TMA). A producer
// warp streams the K dimension in groups of 128 through S stages (weights [64 WG x 128] and activations
// [BN x 128] by TMA with the 128-byte swizzle that the K-major descriptors expect); the first stages' weights are
// requested before pdl_wait (weights are not written by earlier kernels). Per group a warpgroup issues four
// m64nBNk32 wgmmas into a group accumulator, then adds it to the fp32 accumulator times the group's scales
// w_scale[row block][group] * x_scale[group][token] (the DeepSeek block-scaled product, promoted per 128 k as
// cuBLASLt's block-scaling mode and the W4A8 kernel do). One CTA per 64 WG weight rows and K split; no
// persistence. Weights of few rows (N / 64 well under the SM count: V4-Flash's 4096-row linears give 64 CTAs) split K
// over blockIdx.y into a workspace of fp32 partial products, which a second launch adds in split order (the
// result does not depend on scheduling).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/wgmma_ss_fp8.cuh"

namespace moeserve::cuda {

namespace {

using namespace hopper;

struct SkinnyParams {
  const float* xs;  // [K/128][xs_ld] activation scales
  const float* ws;  // [N/128][ws_ld] weight block scales
  float* y;         // [M][ldy]; with K splits: split s at y + s * split_stride
  int M, N, K, xs_ld, ws_ld, ldy;
  int groups;           // 128-k groups per K split
  size_t split_stride;  // floats between splits' outputs
};

template <int BN_, int WG_, int S_>
struct SkinnyCfg {
  static constexpr int BN = BN_, WG = WG_, S = S_;
  static constexpr int kThreads = 128 * WG + 32;  // consumer warpgroups, then one producer warp
  static constexpr int kWBytes = WG * 64 * 128;   // a group's weights (64 WG rows x 128 k)
  static constexpr int kABytes = BN * 128;        // a group's activations (BN rows x 128 k)
  static constexpr int kStageBytes = ((kWBytes + kABytes + 1023) / 1024) * 1024;
  static constexpr int kSmemBytes = 1024 /*align slack*/ + S * kStageBytes;
  static_assert(kWBytes % 1024 == 0 && BN % 8 == 0 && BN <= 64, "stage layout");
  static_assert(kSmemBytes <= 232448, "shared memory");
};

template <class C>
__global__ void __launch_bounds__(C::kThreads) gemm_fp8_skinny_kernel(const __grid_constant__ CUtensorMap tmap_w,
                                                                      const __grid_constant__ CUtensorMap tmap_x,
                                                                      const SkinnyParams p) {
  constexpr int BN = C::BN, WG = C::WG, S = C::S;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  __shared__ uint64_t full_bar[S], empty_bar[S];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n0 = blockIdx.x * 64 * WG;
  const int NG = p.groups, g0 = blockIdx.y * p.groups;  // this CTA's groups: g0 + [0, NG)
  constexpr uint32_t kTx = uint32_t(C::kWBytes + C::kABytes);

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&full_bar[s], 1);
      mbar_init(&empty_bar[s], 4 * WG);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (warp == 4 * WG) {
    // ------------------------------ producer ------------------------------
    if (lane != 0) {
      dev::pdl_begin();  // every thread waits (the ordering stays transitive)
      return;
    }
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_w)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_x)) : "memory");
    auto load_weights = [&](int g, uint8_t* st) {
#pragma unroll
      for (int w = 0; w < WG; ++w)
        tma_load_2d(st + w * 64 * 128, &tmap_w, &full_bar[g % S], (g0 + g) * 128, n0 + 64 * w);
    };
    // The first stages' weights before pdl_wait (fresh stages: no empty wait).
    const int early = NG < S ? NG : S;
    for (int g = 0; g < early; ++g) {
      mbar_arrive_expect_tx(&full_bar[g], kTx);
      load_weights(g, stages + g * C::kStageBytes);
    }
    dev::pdl_begin();
    for (int g = 0; g < NG; ++g) {
      const int stage = g % S;
      uint8_t* st = stages + stage * C::kStageBytes;
      if (g >= early) {
        mbar_wait(&empty_bar[stage], ((g / S) & 1) ^ 1);
        mbar_arrive_expect_tx(&full_bar[stage], kTx);
        load_weights(g, st);
      }
      tma_load_2d(st + C::kWBytes, &tmap_x, &full_bar[stage], (g0 + g) * 128, 0);
    }
    return;
  }

  // ------------------------------ consumers ------------------------------
  dev::pdl_begin();
  const int wg = warp / 4, wq = warp % 4;
  const int g8 = lane / 4, t4 = lane % 4;
  const int r0 = 16 * wq + g8;  // rows r0 and r0 + 8 of this warpgroup's 64
  const int rows0 = n0 + 64 * wg;
  const float* wsr = p.ws + size_t(rows0 / 128) * p.ws_ld;  // the 64 rows lie in one 128-row scale block
  const uint32_t stages_addr = smem_addr(stages);
  float acc[BN / 2], tmp[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;

  for (int g = 0; g < NG; ++g) {
    const int stage = g % S;
    // The group's scales (global, L1/L2): the weights' one and this thread's tokens'.
    const float wsc = __ldg(wsr + g0 + g);
    float xsc[BN / 4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tok = 8 * i + 2 * t4 + h;
        xsc[2 * i + h] = tok < p.M ? __ldg(p.xs + size_t(g0 + g) * p.xs_ld + tok) * wsc : 0.0f;
      }
    mbar_wait(&full_bar[stage], (g / S) & 1);
    __syncwarp();  // reconverge after the spin: wgmma is .sync.aligned
    const uint32_t st = stages_addr + stage * C::kStageBytes;
    const uint32_t da = sw128_desc_lo(st + wg * 64 * 128), db = sw128_desc_lo(st + C::kWBytes);
    fence_operands(tmp);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)  // k32 steps: 32 bytes along the swizzled rows (descriptor units of 16 bytes)
      wgmma::SsFp8<BN>::mma(tmp, sw128_desc(da + 2 * ks), sw128_desc(db + 2 * ks), ks > 0 ? 1 : 0);
    wgmma_commit();
    wgmma_wait_all();
    fence_operands(tmp);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty_bar[stage]);  // this warp is done with the stage
    // acc += tmp * w_scale * x_scale[token]: accumulator j holds row r0 + 8 ((j >> 1) & 1), token 8 (j >> 2) +
    // 2 t4 + (j & 1).
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
      acc[4 * i + 0] = fmaf(tmp[4 * i + 0], xsc[2 * i], acc[4 * i + 0]);
      acc[4 * i + 1] = fmaf(tmp[4 * i + 1], xsc[2 * i + 1], acc[4 * i + 1]);
      acc[4 * i + 2] = fmaf(tmp[4 * i + 2], xsc[2 * i], acc[4 * i + 2]);
      acc[4 * i + 3] = fmaf(tmp[4 * i + 3], xsc[2 * i + 1], acc[4 * i + 3]);
    }
  }

#pragma unroll
  for (int i = 0; i < BN / 8; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int tok = 8 * i + 2 * t4 + h;
      if (tok >= p.M) continue;
      float* out = p.y + blockIdx.y * p.split_stride + size_t(tok) * p.ldy + rows0 + r0;
      out[0] = acc[4 * i + h];
      out[8] = acc[4 * i + 2 + h];
    }
}

// y[m][n] = the K splits' partial products added in split order (one thread per output).
__global__ void add_splits_kernel(const float* parts, int splits, size_t stride, int M, int N, int ld, float* y,
                                  int ldy) {
  dev::pdl_begin();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  const int m = i / N, n = i % N;
  float s = parts[size_t(m) * ld + n];
  for (int k = 1; k < splits; ++k) s += parts[k * stride + size_t(m) * ld + n];
  y[size_t(m) * ldy + n] = s;
}

// Row-major 2-D uint8 tensor [rows][K] with a {128, box_rows} box and the 128-byte swizzle; rows past `rows` read
// as zeros.
bool make_map(CUtensorMap* map, const uint8_t* base, int rows, int K, int box_rows) {
  EncodeTiled enc = encode_fn();
  if (!enc) return false;
  cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(rows)};
  cuuint64_t strides[1] = {cuuint64_t(K)};
  cuuint32_t box[2] = {128, cuuint32_t(box_rows)};
  cuuint32_t estr[2] = {1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(base), dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <class C>
cudaError_t launch_skinny(const uint8_t* xq, const uint8_t* w, const SkinnyParams& p, cudaStream_t stream) {
  static std::once_flag once;
  static cudaError_t setup = cudaSuccess;
  std::call_once(once, [] {
    setup = cudaFuncSetAttribute(gemm_fp8_skinny_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 C::kSmemBytes);
  });
  if (setup != cudaSuccess) return setup;
  CUtensorMap mw, mx;
  if (!make_map(&mw, w, p.N, p.K, 64) || !make_map(&mx, xq, p.M, p.K, C::BN)) return cudaErrorInvalidValue;
  return dev::launch(gemm_fp8_skinny_kernel<C>, dim3(p.N / (64 * C::WG), p.K / 128 / p.groups), dim3(C::kThreads),
                     C::kSmemBytes, stream, mw, mx, p);
}

}  // namespace

bool gemm_fp8_skinny_fits(int M, int N, int K) {
  return M >= 1 && M <= 64 && N > 0 && N % 128 == 0 && K > 0 && K % 128 == 0;
}

int gemm_fp8_skinny_splits(int N, int K) {
  // About two CTAs per SM: split K (into whole 128-k groups, at least 4 per split) while N / 64 CTAs fall short.
  const int ctas = N / 64, groups = K / 128;
  int splits = 1;
  while (ctas * splits * 2 <= 2 * dev::sm_count() && groups % (splits * 2) == 0 && groups / (splits * 2) >= 4)
    splits *= 2;
  return splits;
}

size_t gemm_fp8_skinny_workspace_floats(int M, int N, int K) {
  const int splits = gemm_fp8_skinny_splits(N, K);
  return splits > 1 ? size_t(splits) * M * N : 0;
}

cudaError_t gemm_fp8_skinny(const uint8_t* xq, const float* x_scales, int xs_ld, int M, const uint8_t* w,
                            const float* w_scales, int ws_ld, int N, int K, float* y, int ldy, float* workspace,
                            size_t workspace_floats, cudaStream_t stream) {
  if (!gemm_fp8_skinny_fits(M, N, K) || !xq || !x_scales || !w || !w_scales || !y || xs_ld < M ||
      ws_ld < K / 128 || ldy < N || reinterpret_cast<uintptr_t>(xq) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  int splits = gemm_fp8_skinny_splits(N, K);
  if (!workspace || workspace_floats < size_t(splits) * M * N) splits = 1;
  SkinnyParams p{x_scales, w_scales, y, M, N, K, xs_ld, ws_ld, ldy, K / 128 / splits, 0};
  if (splits > 1) {
    p.y = workspace;
    p.ldy = N;
    p.split_stride = size_t(M) * N;
  }
  // One consumer warpgroup per CTA, 5-6 stages of 8 KB of weights.
  cudaError_t err;
  if (M <= 8) err = launch_skinny<SkinnyCfg<8, 1, 6>>(xq, w, p, stream);
  else if (M <= 16) err = launch_skinny<SkinnyCfg<16, 1, 6>>(xq, w, p, stream);
  else if (M <= 32) err = launch_skinny<SkinnyCfg<32, 1, 6>>(xq, w, p, stream);
  else err = launch_skinny<SkinnyCfg<64, 1, 5>>(xq, w, p, stream);
  if (err != cudaSuccess || splits == 1) return err;
  const int n = M * N;
  return dev::launch(add_splits_kernel, dim3((n + 255) / 256), dim3(256), 0, stream, workspace, splits,
                     size_t(M) * N, M, N, N, y, ldy);
}

}  // namespace moeserve::cuda
