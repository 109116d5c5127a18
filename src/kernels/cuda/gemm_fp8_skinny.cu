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
// result does not depend on scheduling). Grouped mode (gemm_fp8_skinny_grouped, FP8 routed experts): blockIdx.z is
// a routing group; its expert, rows and count come from device memory after pdl_wait, so no weights load early.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/skinny_gemm.cuh"
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
  // Grouped (MoE) mode when g_count is set: blockIdx.z is an active group (of *g_num) with expert g_expert[z],
  // activation and output rows [g_offset[z], + g_count[z]), weights rows [e N, (e + 1) N) and block scales at
  // ws + e ws_expert_stride. No K split.
  const int *g_expert = nullptr, *g_offset = nullptr, *g_count = nullptr, *g_num = nullptr;
  size_t ws_expert_stride = 0;
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

  init_stage_barriers<S>(full_bar, empty_bar, 4 * WG);
  __syncthreads();
  // The problem: dense, or (grouped) the routing's group blockIdx.z, known only after pdl_wait.
  const bool grouped = p.g_count != nullptr;
  int M = p.M, xrow0 = 0, wrow0 = 0;
  const float* ws = p.ws;
  float* y = p.y;
  if (grouped) {
    dev::pdl_begin();  // every thread, before any exit (the ordering stays transitive)
    if (int(blockIdx.z) >= *p.g_num) return;
    const int e = p.g_expert[blockIdx.z];
    xrow0 = p.g_offset[blockIdx.z];
    M = p.g_count[blockIdx.z];
    if (M > BN) __trap();  // the caller's max_rows bound was wrong: fail loudly, not with rows left out
    wrow0 = e * p.N;
    ws += size_t(e) * p.ws_expert_stride;
    y += size_t(xrow0) * p.ldy;
  }

  if (warp == 4 * WG) {
    // ------------------------------ producer ------------------------------
    if (lane != 0) {
      dev::pdl_begin();  // every thread waits (the ordering stays transitive)
      return;
    }
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_w)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_x)) : "memory");
    // (Grouped: pdl_wait came first, the expert being the routing's.)
    produce_stages<S>(
        full_bar, empty_bar, stages, C::kStageBytes, kTx, NG,
        [&](int g, uint8_t* st, uint64_t* bar) {
#pragma unroll
          for (int w = 0; w < WG; ++w)
            tma_load_2d(st + w * 64 * 128, &tmap_w, bar, (g0 + g) * 128, wrow0 + n0 + 64 * w);
        },
        [&](int g, uint8_t* st, uint64_t* bar) { tma_load_2d(st + C::kWBytes, &tmap_x, bar, (g0 + g) * 128, xrow0); });
    return;
  }

  // ------------------------------ consumers ------------------------------
  dev::pdl_begin();
  const int wg = warp / 4, wq = warp % 4;
  const int g8 = lane / 4, t4 = lane % 4;
  const int r0 = 16 * wq + g8;  // rows r0 and r0 + 8 of this warpgroup's 64
  const int rows0 = n0 + 64 * wg;
  const float* wsr = ws + size_t(rows0 / 128) * p.ws_ld;  // the 64 rows lie in one 128-row scale block
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
        xsc[2 * i + h] = tok < M ? __ldg(p.xs + size_t(g0 + g) * p.xs_ld + xrow0 + tok) * wsc : 0.0f;
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

  store_swap_ab<BN>(acc, y + blockIdx.y * p.split_stride + rows0 + r0, M, p.ldy, t4);
}

// w_rows / x_rows: the rows the tensor maps cover (all experts' weights, all groups' activations when grouped);
// z: the grid's third dimension (the groups' upper bound).
template <class C>
cudaError_t launch_skinny(const uint8_t* xq, int x_rows, const uint8_t* w, int w_rows, int z, const SkinnyParams& p,
                          cudaStream_t stream) {
  const cudaError_t setup = allow_smem_once<gemm_fp8_skinny_kernel<C>>(C::kSmemBytes);
  if (setup != cudaSuccess) return setup;
  CUtensorMap mw, mx;
  if (!make_map_2d(&mw, w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, w_rows, p.K, 128, 64) ||
      !make_map_2d(&mx, xq, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, x_rows, p.K, 128, C::BN))
    return cudaErrorInvalidValue;
  return dev::launch(gemm_fp8_skinny_kernel<C>, dim3(p.N / (64 * C::WG), p.K / 128 / p.groups, z),
                     dim3(C::kThreads), C::kSmemBytes, stream, mw, mx, p);
}

// One consumer warpgroup per CTA, 5-6 stages of 8 KB of weights; BN from the most rows a problem has.
cudaError_t launch_by_rows(int rows, const uint8_t* xq, int x_rows, const uint8_t* w, int w_rows, int z,
                           const SkinnyParams& p, cudaStream_t stream) {
  if (rows <= 8) return launch_skinny<SkinnyCfg<8, 1, 6>>(xq, x_rows, w, w_rows, z, p, stream);
  if (rows <= 16) return launch_skinny<SkinnyCfg<16, 1, 6>>(xq, x_rows, w, w_rows, z, p, stream);
  if (rows <= 32) return launch_skinny<SkinnyCfg<32, 1, 6>>(xq, x_rows, w, w_rows, z, p, stream);
  return launch_skinny<SkinnyCfg<64, 1, 5>>(xq, x_rows, w, w_rows, z, p, stream);
}

}  // namespace

bool gemm_fp8_skinny_fits(int M, int N, int K) {
  return M >= 1 && M <= 64 && N > 0 && N % 128 == 0 && K > 0 && K % 128 == 0;
}

int gemm_fp8_skinny_splits(int N, int K) { return skinny_k_splits(N / 64, K / 128); }

size_t gemm_fp8_skinny_workspace_floats(int M, int N, int K) {
  const int splits = gemm_fp8_skinny_splits(N, K);
  return splits > 1 ? size_t(splits) * M * N : 0;
}

cudaError_t gemm_fp8_skinny(const uint8_t* xq, const float* x_scales, int xs_ld, int M, const uint8_t* w,
                            const float* w_scales, int ws_ld, int N, int K, float* y, int ldy, float* workspace,
                            size_t workspace_floats, cudaStream_t stream) {
  if (!gemm_fp8_skinny_fits(M, N, K) || !xq || !x_scales || !w || !w_scales || !y || xs_ld < M ||
      ws_ld < K / 128 || ldy < N || reinterpret_cast<uintptr_t>(xq) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  int splits = gemm_fp8_skinny_splits(N, K);
  if (!workspace || workspace_floats < size_t(splits) * M * N) splits = 1;
  SkinnyParams p{x_scales, w_scales, y, M, N, K, xs_ld, ws_ld, ldy, K / 128 / splits, 0};
  if (splits > 1) {
    p.y = workspace;
    p.ldy = N;
    p.split_stride = size_t(M) * N;
  }
  const cudaError_t err = launch_by_rows(M, xq, M, w, N, 1, p, stream);
  if (err != cudaSuccess || splits == 1) return err;
  return add_parts(workspace, splits, size_t(M) * N, M, N, N, y, ldy, stream);
}

cudaError_t gemm_fp8_skinny_grouped(const uint8_t* xq, const float* x_scales, int xs_ld, int rows, int max_rows,
                                    const uint8_t* w, const float* w_scales, int ws_ld, size_t ws_expert_stride,
                                    int experts, int N, int K, const int* group_expert, const int* group_offset,
                                    const int* group_count, const int* num_groups, int max_groups, float* y, int ldy,
                                    cudaStream_t stream) {
  if (rows == 0 || max_groups == 0) return cudaSuccess;
  if (!gemm_fp8_skinny_fits(max_rows, N, K) || rows < 0 || experts < 1 || max_groups < 0 || !xq || !x_scales || !w ||
      !w_scales || !y || !group_expert || !group_offset || !group_count || !num_groups || xs_ld < rows ||
      ws_ld < K / 128 || ldy < N || int64_t(experts) * N > INT32_MAX || reinterpret_cast<uintptr_t>(xq) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  SkinnyParams p{x_scales, w_scales, y, max_rows, N, K, xs_ld, ws_ld, ldy, K / 128, 0};
  p.g_expert = group_expert;
  p.g_offset = group_offset;
  p.g_count = group_count;
  p.g_num = num_groups;
  p.ws_expert_stride = ws_expert_stride;
  return launch_by_rows(max_rows, xq, rows, w, experts * N, max_groups, p, stream);
}

}  // namespace moeserve::cuda
