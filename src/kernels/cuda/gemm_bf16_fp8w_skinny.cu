// Skinny GEMM of BF16 activations and FP8 weights on BF16 tensor cores for 1..64 rows (sm_90a): kernels/cuda/ops.h
// gemm_bf16_fp8w_skinny. V4's grouped output projection wo_a is a BF16 einsum on the dequantized FP8 weight
// (docs/numerics.md); e4m3 values are exact in BF16 and the block scales are powers of two, so converting the
// weights in registers and multiplying on BF16 tensor cores is that einsum, in fp32 accumulation.
//
// The structure is gemm_fp8_skinny.cu's (swap-AB: 64 weight rows as the wgmma M dimension, the activation rows as
// N = BN, a producer warp streaming 128-k groups through S stages by TMA, per-group promotion with the weight's
// block scale, K splits into a workspace for weights of few rows), with the A operand in registers: each thread
// reads 4 weight bytes per row and k16 step from the swizzled stage (one 32-bit load) and converts them to two
// bf16 pairs. Those 4 bytes are columns 4 t4 .. 4 t4 + 3 of the step's 16, while the bf16 A fragment holds
// columns 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9; the activations are stored with each 16-column chunk permuted to
// match (bf16_permute16: position v holds column 4 ((v % 8) / 2) + v % 2 + 2 (v / 8)), which reorders the terms
// of each dot product and nothing else. Problems (the G groups of wo_a) run side by side over blockIdx.z: problem
// p reads activation columns [p K, (p + 1) K), weight rows [p N, (p + 1) N) and writes y columns [p N, (p + 1) N).
// The consumers convert the next group's weights while the current group's wgmmas run. Launches take up to 128
// activation rows: the 1..64 rows of one term, or the stacked terms (hi, lo, lo2) of an fp32 input.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/skinny_gemm.cuh"
#include "kernels/cuda/wgmma_rs_bf16.cuh"

namespace moeserve::cuda {

namespace {

using namespace hopper;

struct Bf16SkinnyParams {
  const float* ws;  // [problems * N / 128][ws_ld] weight block scales
  float* y;         // [M][ldy]; with K splits: split s at y + s * split_stride
  int M, N, K, ws_ld, ldy;
  int groups;           // 128-k groups per K split
  size_t split_stride;  // floats between splits' outputs
};

template <int BN_, int S_>
struct Bf16SkinnyCfg {
  static constexpr int BN = BN_, S = S_;
  static constexpr int kThreads = 128 + 32;     // one consumer warpgroup, then one producer warp
  static constexpr int kWBytes = 64 * 128;      // a group's weights (64 rows x 128 k, FP8)
  static constexpr int kHalfBytes = BN * 128;   // a group's activations, per 64 k (BN rows x 64 bf16)
  static constexpr int kStageBytes = ((kWBytes + 2 * kHalfBytes + 1023) / 1024) * 1024;
  static constexpr int kSmemBytes = 1024 /*align slack*/ + S * kStageBytes;
  static_assert(BN % 8 == 0 && BN <= 128, "stage layout");
  static_assert(kSmemBytes <= 232448, "shared memory");
};

// Four e4m3 values (bytes 0..3 of w) as bf16 pairs: lo = (byte 0, byte 1), hi = (byte 2, byte 3), lower column in
// the lower half. Exact: every e4m3 value is a bf16 value.
__device__ __forceinline__ void e4m3x4_to_bf16(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w & 0xffffu), __NV_E4M3);
  const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w >> 16), __NV_E4M3);
  const float2 fa = __half22float2(*reinterpret_cast<const __half2*>(&a));
  const float2 fb = __half22float2(*reinterpret_cast<const __half2*>(&b));
  const __nv_bfloat162 ba = __floats2bfloat162_rn(fa.x, fa.y), bb = __floats2bfloat162_rn(fb.x, fb.y);
  lo = *reinterpret_cast<const uint32_t*>(&ba);
  hi = *reinterpret_cast<const uint32_t*>(&bb);
}

template <class C>
__global__ void __launch_bounds__(C::kThreads) gemm_bf16_fp8w_skinny_kernel(const __grid_constant__ CUtensorMap tmap_w,
                                                                            const __grid_constant__ CUtensorMap tmap_x,
                                                                            const Bf16SkinnyParams p) {
  constexpr int BN = C::BN, S = C::S;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  __shared__ uint64_t full_bar[S], empty_bar[S];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int prob = blockIdx.z;
  const int n0 = blockIdx.x * 64;                                   // row within the problem
  const int NG = p.groups, g0 = blockIdx.y * p.groups;              // this CTA's groups: g0 + [0, NG)
  constexpr uint32_t kTx = uint32_t(C::kWBytes + 2 * C::kHalfBytes);

  init_stage_barriers<S>(full_bar, empty_bar, 4);
  __syncthreads();

  if (warp == 4) {
    // ------------------------------ producer ------------------------------
    if (lane != 0) {
      dev::pdl_begin();  // every thread waits (the ordering stays transitive)
      return;
    }
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_w)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_x)) : "memory");
    const int wrow = prob * p.N + n0, xcol = prob * p.K;
    produce_stages<S>(
        full_bar, empty_bar, stages, C::kStageBytes, kTx, NG,
        [&](int g, uint8_t* st, uint64_t* bar) { tma_load_2d(st, &tmap_w, bar, (g0 + g) * 128, wrow); },
        [&](int g, uint8_t* st, uint64_t* bar) {
          const int k = xcol + (g0 + g) * 128;  // the two 64-column halves of the group's activations
          tma_load_2d(st + C::kWBytes, &tmap_x, bar, k, 0);
          tma_load_2d(st + C::kWBytes + C::kHalfBytes, &tmap_x, bar, k + 64, 0);
        });
    return;
  }

  // ------------------------------ consumers ------------------------------
  dev::pdl_begin();
  const int wq = warp, g8 = lane / 4, t4 = lane % 4;
  const int r0 = 16 * wq + g8;  // rows r0 and r0 + 8 of the 64
  const int rows0 = prob * p.N + n0;
  const float* wsr = p.ws + size_t(rows0 / 128) * p.ws_ld;  // the 64 rows lie in one 128-row scale block
  const uint32_t stages_addr = smem_addr(stages);
  // Rows r0 and r0 + 8 share the swizzle (row % 8): 16-byte chunk c of row r sits at chunk c ^ (r % 8).
  const uint32_t a_row0 = uint32_t(r0) * 128 + 4 * t4, a_row8 = a_row0 + 8 * 128;
  const uint32_t swz = uint32_t(r0 % 8);
  float acc[BN / 2], tmp[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;

  // The A fragments of group g's 8 k16 steps: 4 weight bytes of row r0 and of row r0 + 8 each, as bf16 pairs,
  // read from the group's stage (full).
  auto convert = [&](int g, uint32_t(&a)[8][4]) {
    const uint32_t st = stages_addr + (g % S) * C::kStageBytes;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const uint32_t chunk = (uint32_t(kk) ^ swz) * 16;
      e4m3x4_to_bf16(lds32(st + a_row0 + chunk), a[kk][0], a[kk][2]);
      e4m3x4_to_bf16(lds32(st + a_row8 + chunk), a[kk][1], a[kk][3]);
    }
  };
  auto load_a = [&](int g, uint32_t(&a)[8][4]) {
    mbar_wait(&full_bar[g % S], (g / S) & 1);
    __syncwarp();  // reconverge after the spin: wgmma is .sync.aligned
    convert(g, a);
  };
  // Group g's wgmmas from fragments a (issued, not waited for).
  auto issue = [&](int g, const uint32_t(&a)[8][4]) {
    const uint32_t st = stages_addr + (g % S) * C::kStageBytes;
    const uint32_t db0 = sw128_desc_lo(st + C::kWBytes), db1 = sw128_desc_lo(st + C::kWBytes + C::kHalfBytes);
    fence_operands(tmp);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)  // k16 steps: 32 bytes along the swizzled bf16 rows (descriptor units of 16 bytes)
      wgmma::RsBf16<BN>::mma(tmp, a[kk], sw128_desc((kk < 4 ? db0 : db1) + 2 * (kk % 4)), kk > 0 ? 1 : 0);
    wgmma_commit();
  };
  // Waits for group g's wgmmas (a stays live until then), releases its stage and adds its product, scaled.
  auto retire = [&](int g, uint32_t(&a)[8][4]) {
    const float wsc = __ldg(wsr + g0 + g);
    wgmma_wait_all();
    fence_operands(tmp);
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[kk][i])::"memory");
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty_bar[g % S]);  // this warp is done with the stage
    // acc += tmp * w_scale: accumulator j holds row r0 + 8 ((j >> 1) & 1), token 8 (j >> 2) + 2 t4 + (j & 1).
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = fmaf(tmp[i], wsc, acc[i]);
  };
  if constexpr (BN < 32) {
    // Tiles of 8 and 16 rows: one group at a time. Overlapping the next group's conversion with the wgmmas (below)
    // cost wo_a 14 -> 17 us here (bench_gpu_ops linear, V4-Flash, 8 and 16 rows): the wgmmas are too short to
    // hide anything.
    for (int g = 0; g < NG; ++g) {
      uint32_t a[8][4];
      load_a(g, a);
      issue(g, a);
      retire(g, a);
    }
  } else {
    // If group g + 1's stage has already landed, its fragments are converted while group g's wgmmas run (96
    // rows: 40 -> 33 us); otherwise after group g's stage is released, so that waiting for it never holds a
    // stage back from the producer. Two fragment sets, named statically (a runtime index would put them in
    // local memory).
    auto step = [&](int g, uint32_t(&a)[8][4], uint32_t(&next)[8][4]) {
      issue(g, a);
      const bool early = g + 1 < NG && mbar_ready_warp(&full_bar[(g + 1) % S], ((g + 1) / S) & 1);
      if (early) convert(g + 1, next);
      retire(g, a);
      if (g + 1 < NG && !early) load_a(g + 1, next);
    };
    uint32_t a0[8][4], a1[8][4];
    load_a(0, a0);
    for (int g = 0; g < NG; g += 2) {
      step(g, a0, a1);
      if (g + 1 < NG) step(g + 1, a1, a0);
    }
  }

  store_swap_ab<BN>(acc, p.y + blockIdx.y * p.split_stride + rows0 + r0, p.M, p.ldy, t4);
}

template <class C>
cudaError_t launch_bf16_skinny(const uint16_t* xb, int problems, const uint8_t* w, const Bf16SkinnyParams& p,
                               cudaStream_t stream) {
  const cudaError_t setup = allow_smem_once<gemm_bf16_fp8w_skinny_kernel<C>>(C::kSmemBytes);
  if (setup != cudaSuccess) return setup;
  CUtensorMap mw, mx;
  if (!make_map_2d(&mw, w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, problems * p.N, p.K, 128, 64) ||
      !make_map_2d(&mx, xb, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.M, problems * p.K, 64, C::BN))
    return cudaErrorInvalidValue;
  return dev::launch(gemm_bf16_fp8w_skinny_kernel<C>, dim3(p.N / 64, p.K / 128 / p.groups, problems),
                     dim3(C::kThreads), C::kSmemBytes, stream, mw, mx, p);
}

// x [M][ldx] fp32 -> out [M][K] bf16 (round to nearest even), each 16-column chunk permuted for the A fragments:
// out[16 c + v] = x[16 c + 4 ((v % 8) / 2) + v % 2 + 2 (v / 8)]. One thread per chunk.
// With lo (lo2): the further bf16 terms of to_bf16_split, permuted alike.
__global__ void bf16_permute16_kernel(const float* x, int M, int K, int ldx, uint16_t* out, uint16_t* lo,
                                      uint16_t* lo2) {
  dev::pdl_begin();
  const int chunks = K / 16;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * chunks) return;
  const int m = i / chunks, c = i % chunks;
  const float* src = x + size_t(m) * ldx + 16 * c;
  float v[16];
#pragma unroll
  for (int j = 0; j < 16; j += 4) {
    const float4 f = *reinterpret_cast<const float4*>(src + j);
    v[j] = f.x;
    v[j + 1] = f.y;
    v[j + 2] = f.z;
    v[j + 3] = f.w;
  }
  uint16_t* const outs[3] = {out, lo, lo2};
  for (int t = 0; t < 3 && outs[t]; ++t) {  // term t: the rounding of what the earlier terms left (exact in fp32)
    uint32_t packed[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {  // positions 2q, 2q + 1
      const int p0 = 2 * q, p1 = 2 * q + 1;
      const int c0 = 4 * ((p0 % 8) / 2) + p0 % 2 + 2 * (p0 / 8), c1 = 4 * ((p1 % 8) / 2) + p1 % 2 + 2 * (p1 / 8);
      const __nv_bfloat162 b = __floats2bfloat162_rn(v[c0], v[c1]);
      packed[q] = *reinterpret_cast<const uint32_t*>(&b);
      v[c0] -= __low2float(b);
      v[c1] -= __high2float(b);
    }
    uint4* dst = reinterpret_cast<uint4*>(outs[t] + size_t(m) * K + 16 * c);
    dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  }
}

}  // namespace

cudaError_t bf16_permute16(const float* x, int M, int K, int ldx, uint16_t* out, cudaStream_t stream, uint16_t* lo,
                           uint16_t* lo2) {
  if (M == 0) return cudaSuccess;
  if (K % 16 != 0 || ldx % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0 || reinterpret_cast<uintptr_t>(lo) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(lo2) % 16 != 0 || (lo2 && !lo))
    return cudaErrorInvalidValue;
  const int n = M * (K / 16);
  return dev::launch(bf16_permute16_kernel, dim3((n + 255) / 256), dim3(256), 0, stream, x, M, K, ldx, out, lo, lo2);
}

bool gemm_bf16_fp8w_skinny_fits(int M, int N, int K) {
  return M >= 1 && M <= 64 && N > 0 && N % 128 == 0 && K > 0 && K % 128 == 0;
}

int gemm_bf16_fp8w_skinny_splits(int N, int K, int problems) { return skinny_k_splits(problems * N / 64, K / 128); }

size_t gemm_bf16_fp8w_skinny_workspace_floats(int M, int N, int K, int problems, int terms) {
  const int parts = gemm_bf16_fp8w_skinny_splits(N, K, problems) * terms;
  return parts > 1 ? size_t(parts) * M * problems * N : 0;
}

cudaError_t gemm_bf16_fp8w_skinny(const uint16_t* xb, int M, int problems, const uint8_t* w, const float* w_scales,
                                  int ws_ld, int N, int K, float* y, int ldy, float* workspace,
                                  size_t workspace_floats, cudaStream_t stream, int terms) {
  if (!gemm_bf16_fp8w_skinny_fits(M, N, K) || problems < 1 || terms < 1 || terms > 3 || !xb || !w || !w_scales ||
      !y || ws_ld < K / 128 || ldy < problems * N || reinterpret_cast<uintptr_t>(xb) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  const int cols = problems * N;
  int splits = gemm_bf16_fp8w_skinny_splits(N, K, problems);
  if (!workspace || workspace_floats < size_t(splits) * terms * M * cols) {
    if (terms > 1) return cudaErrorInvalidValue;  // the terms are added from the workspace
    splits = 1;
  }
  // As many terms' rows per launch as the widest tile (128 rows) holds. A launch of n terms writes split s's
  // n x M rows at its base + s n M cols, so the workspace holds terms x splits parts of [M][cols], M cols floats
  // apart, and add_parts sums them all.
  const int per_launch = std::min(terms, 128 / M);
  const bool direct = splits * terms == 1;
  float* base = workspace;
  for (int t0 = 0; t0 < terms; t0 += per_launch) {
    const int n = std::min(per_launch, terms - t0), rows = n * M;
    Bf16SkinnyParams p{w_scales, y, rows, N, K, ws_ld, ldy, K / 128 / splits, 0};
    if (!direct) {
      p.y = base;
      p.ldy = cols;
      p.split_stride = size_t(rows) * cols;
      base += size_t(splits) * rows * cols;
    }
    const uint16_t* xl = xb + size_t(t0) * M * problems * K;
    cudaError_t err;
    if (rows <= 8) err = launch_bf16_skinny<Bf16SkinnyCfg<8, 6>>(xl, problems, w, p, stream);
    else if (rows <= 16) err = launch_bf16_skinny<Bf16SkinnyCfg<16, 6>>(xl, problems, w, p, stream);
    else if (rows <= 32) err = launch_bf16_skinny<Bf16SkinnyCfg<32, 6>>(xl, problems, w, p, stream);
    else if (rows <= 64) err = launch_bf16_skinny<Bf16SkinnyCfg<64, 5>>(xl, problems, w, p, stream);
    else if (rows <= 96) err = launch_bf16_skinny<Bf16SkinnyCfg<96, 6>>(xl, problems, w, p, stream);
    else err = launch_bf16_skinny<Bf16SkinnyCfg<128, 5>>(xl, problems, w, p, stream);
    if (err != cudaSuccess) return err;
  }
  if (direct) return cudaSuccess;
  return add_parts(workspace, splits * terms, size_t(M) * cols, M, cols, cols, y, ldy, stream);
}

}  // namespace moeserve::cuda
