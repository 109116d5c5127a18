// The one-batch GEMV of gemv_small.cu with its FP8 rows multiplied on FP16 tensor cores (mma.sync m16n8k16, fp32
// accumulation): y[n] (+)= sum_k x[k] W[n, k] for FP8 e4m3 weights with per-row 128-block scales.
//
// Why: in a chain of one-row GEMVs of 8.4 MB (shared w2, the indexer's wq_b) gemv_small's launch is what follows its
// dependency wait: ~1 us for the previous launch's completion, then x (~0.55 us), the rows' FMAs (~1.7 us: ~2.5
// CUDA-core instructions per FP8 weight) and the sums (0.3 us), while its bulk copies alone would allow ~3.0 us a
// launch (docs/benchmarks/cuda-ops.md, twenty-third session). A tensor-core version measured level there because its
// fragments read whole 8-row chunks with 8-way bank conflicts (rows 2 KB apart start on the same bank), and slower
// with rows copied one by one to a padded pitch. Here the rows come in by TMA tensor copies with the 128-byte
// swizzle: each 128-k column block of the block's rows is one box [R rows][128 bytes], whose 16-byte pieces are
// XOR-permuted by row, so that ldmatrix reads eight rows at one k without conflicts.
//
// Layout of the work: block b owns rows [b R, b R + R) (R = 16 MT) and all of K = 1024 CPW; warp w takes the column
// blocks w, w + 8, .. (CPW of them) for all R rows, so it stages only its own 128-value blocks of x (no block-wide
// barrier before the products) and its rows' partial sums meet once, in shared memory, at the end.
//  - Weights (A, 16 rows x 16 k per mma): ldmatrix.x4 of 8 rows x 16 bytes gives thread (g, t) = (lane / 4, lane % 4)
//    bytes 4t .. 4t + 3 of rows g and g + 8 of a 16-byte piece; e4m3 -> f16 is exact (one cvt a pair). The mma's k
//    2t, 2t + 1 take bytes 4t, 4t + 1 and its k 2t + 8, 2t + 9 bytes 4t + 2, 4t + 3: one piece is one k-step, with
//    the k order permuted the same way in B. Loaded (raw) before the dependency wait: they are weights.
//  - x (B, 16 k x 8 columns): column n is x's term n. Exact fp32 x: per 128-value block, x = 2^E (t0 + t1 2^-11 +
//    t2 2^-22 + t3 2^-33) with 2^E the block's largest magnitude rounded down to a power of two and t0..t3 f16
//    (each the rounding of what the terms before left, times 2^11): exact to ~2^-57 of the block's largest value.
//    The FP8 activation simulation (act_fp8): one term, the e4m3 value q of x / s, and 2^E = s. Products of f16
//    are exact in the fp32 accumulator; each column block's D is a fresh accumulator, its four columns added and
//    scaled by the row's block scale times 2^E.
// H200, a chain of one-row launches (bench_gpu_ops linear, two rounds of one call, forty-seventh session): shared w2
// 4096 x 2048 3.40-3.43 us (57.3-57.8 % of the roofline) against gemv_small's 3.82 and the streaming kernel's 4.11;
// the indexer's wq_b 8192 x 1024 3.24-3.27 us (60.2-60.7 %) against 3.60 / 3.77-3.81. On 64 blocks (wq_a 1024 x 4096)
// slower: 4.30 against 3.23 us. What is left after the wait is not the products: without any e4m3 -> f16 conversion
// (a timing probe) shared w2 was 0.05 us faster, and neither two mma chains nor shorter x terms moved it (H100 and
// H200, docs/benchmarks/cuda-ops.md, seventy-third and seventy-fourth sessions).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_small.h"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma_sync_bf16.cuh"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kMaxSmem = 112 * 1024;         // the kernels' shared-memory limit (plan_for's largest: ~106 KB)
constexpr int kMaxBlockWeights = 64 * 1024;  // R x K bytes per block: two blocks per SM, as gemv_small (the next
                                             // launch's block copies its rows while this one computes)
constexpr int kTerms = 4;                    // f16 terms of exact fp32 x
// x's terms of one column block in shared memory, [term][128 values] f16 at a pitch of 144 values (72 words, 8 mod 32):
// the lanes' 8-byte loads of B fragments (term g, values 16c + 4t ..) fall on distinct banks.
constexpr int kTermPitch = 144;
constexpr int kTermBytes = kTerms * kTermPitch * 2;

struct Plan {
  int rows = 0;  // R: rows per block (16, 32 or 64), 0 when the matrix does not fit
  size_t s_bytes = 0, smem = 0;
};

// Rows of scales a block of R rows copies: its R rows' copies, or with the 128 x 128 grid (scale_row_shift >= 6: R
// divides 2^shift, and blocks start at multiples of R) the one row they all share.
__host__ __device__ inline int scale_rows_of(const GemvArgs& a, int R) { return a.scale_row_shift ? 1 : R; }

Plan plan_for(const GemvArgs& a) {
  Plan pl;
  const bool fits = a.wtype == WeightType::FP8 && !a.group_count && a.M == 1 && a.problems == 1 && a.N > 0 &&
                    a.K > 0 && a.K % 1024 == 0 && a.K <= 4096 && a.row_scale && a.scale_ld >= a.K / 128 &&
                    (a.scale_row_shift == 0 || (a.scale_row_shift >= 6 && a.scale_row_shift < 31)) &&
                    (a.scale_ld * 4) % 16 == 0 && reinterpret_cast<uintptr_t>(a.row_scale) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
  if (!fits) return pl;
  // Every SM, leave_sms or not: leave_sms keeps SMs free of persistent GEMVs for the critical path's one-block
  // kernels, and a block here is short and leaves room beside it (<= 108 registers x 256 threads, ~90 KB); with a
  // quarter of the SMs left, shared w2's blocks would need 128 KB each and it would not fit.
  const int sms = std::max(1, sm_count());
  int rows = (a.N + sms - 1) / sms;
  rows = (rows + 15) / 16 * 16;
  if (rows == 48) rows = 64;  // compiled for 16, 32 and 64 rows
  if (rows > 64 || size_t(rows) * a.K > size_t(kMaxBlockWeights)) return pl;
  pl.rows = rows;
  pl.s_bytes = size_t(scale_rows_of(a, rows)) * a.scale_ld * 4;
  // 1 KB to align the swizzled boxes, the weights, the scales, x's terms per warp and column block, the partials.
  pl.smem = 1024 + size_t(rows) * a.K + pl.s_bytes + size_t(kWarps) * (a.K / 1024) * kTermBytes +
            size_t(kWarps) * rows * 4;
  return pl;
}

__device__ __forceinline__ uint32_t half2_bits(__half lo, __half hi) {
  return uint32_t(__half_as_ushort(lo)) | (uint32_t(__half_as_ushort(hi)) << 16);
}
// Bytes 0, 1 (lo) or 2, 3 (hi) of four e4m3 -> f16x2 (exact).
__device__ __forceinline__ uint32_t e4m3x2_lo(uint32_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}
__device__ __forceinline__ uint32_t e4m3x2_hi(uint32_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v >> 16), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}
// c += a (16 x 16 f16, row-major fragment) * b (16 x 8 f16, column-major fragment b0, b1).
__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Lane's four values v of a 128-value block (values 4 lane ..) with the block's largest magnitude amax -> their f16
// terms t[term][value] and the block's factor.
template <bool ACT8>
__device__ __forceinline__ float x_terms(float4 v, float amax, __half (&t)[kTerms][4]) {
  if constexpr (ACT8) {
    const float s = pow2_scale(amax, kFp8Max, kFp8AmaxFloor), inv = pow2_reciprocal(s);
    // The e4m3 codes of v / s (fp8_round4's), widened straight to f16 (exact).
    const uint32_t codes = fp8x2_bits(v.x * inv, v.y * inv) | fp8x2_bits(v.z * inv, v.w * inv) << 16;
    const uint32_t h01 = e4m3x2_lo(codes), h23 = e4m3x2_hi(codes);
    t[0][0] = __ushort_as_half(uint16_t(h01));
    t[0][1] = __ushort_as_half(uint16_t(h01 >> 16));
    t[0][2] = __ushort_as_half(uint16_t(h23));
    t[0][3] = __ushort_as_half(uint16_t(h23 >> 16));
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int n = 1; n < kTerms; ++n) t[n][j] = __ushort_as_half(0);
    return s;
  } else {
    const uint32_t eb = __float_as_uint(amax) & 0x7f800000u;
    const float factor = amax == 0.0f ? 1.0f : eb == 0 ? 0x1p-126f : __uint_as_float(eb);
    const float inv = pow2_reciprocal(factor);
    const float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float r = vals[j] * inv;  // |r| < 2
#pragma unroll
      for (int n = 0; n < kTerms; ++n) {
        t[n][j] = __float2half_rn(r);
        r = (r - __half2float(t[n][j])) * 2048.0f;  // the remainder is exact in fp32
      }
    }
    return factor;
  }
}

// MT: 16-row m-tiles per block (R = 16 MT); CPW: column blocks per warp (K = 1024 CPW).
template <bool ACT8, int MT, int CPW>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_small_tc_kernel(const __grid_constant__ CUtensorMap wmap, GemvArgs a) {
  constexpr int R = 16 * MT, NCB = 8 * CPW, K = 128 * NCB;
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full[NCB + 1];  // column block c's box, then the scales
  uint8_t* smem = smem_raw + ((1024 - (hopper::smem_addr(smem_raw) & 1023)) & 1023);  // 1 KB aligned (the swizzle)
  float* ss = reinterpret_cast<float*>(smem + size_t(R) * K);
  const size_t s_bytes = size_t(scale_rows_of(a, R)) * a.scale_ld * 4;
  uint8_t* terms = smem + size_t(R) * K + s_bytes;  // [warp][CPW][kTerms][kTermPitch] f16
  float* partials = reinterpret_cast<float*>(terms + size_t(kWarps) * CPW * kTermBytes);  // [warp][R]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * R;
  const int rows = min(R, a.N - n0);  // > 0: the grid has no empty block

  // Weights and scales are not written by earlier kernels: every copy goes out before the wait.
  if (threadIdx.x == 0) {
    for (int c = 0; c <= NCB; ++c) hopper::mbar_init(&full[c], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const uint32_t sb = uint32_t(scale_rows_of(a, rows)) * a.scale_ld * 4;  // a multiple of 16 (plan_for)
    hopper::mbar_arrive_expect_tx(&full[NCB], sb);
    hopper::bulk_load(ss, a.row_scale + size_t(n0 >> a.scale_row_shift) * a.scale_ld, sb, &full[NCB]);
    for (int c = 0; c < NCB; ++c) {  // rows past N come in as zeros (and still count their bytes)
      hopper::mbar_arrive_expect_tx(&full[c], uint32_t(R) * 128);
      hopper::tma_load_2d(smem + size_t(c) * R * 128, &wmap, &full[c], c * 128, n0);
    }
  }
  __syncthreads();  // the barriers' init visible to every thread

  // This warp's weight fragments, raw e4m3 (4 bytes a register), as soon as its boxes land: for column block j
  // (c = warp + 8 j), m-tile i and piece pair p, ldmatrix.x4 of rows 16 i .. + 7 / + 8 .. + 15 at pieces 2p, 2p + 1.
  uint32_t wa[CPW][MT][4][4];
#pragma unroll
  for (int j = 0; j < CPW; ++j) {
    const int c = warp + kWarps * j;
    hopper::mbar_wait(&full[c], 0);
    const uint32_t box = hopper::smem_addr(smem + size_t(c) * R * 128);
    const int q = lane >> 3, rr = lane & 7;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int row = 16 * i + 8 * (q & 1) + rr;
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const int piece = 2 * p + (q >> 1);
        ldsm_x4(box + uint32_t(row) * 128 + uint32_t((piece ^ (row & 7)) << 4), wa[j][i][p]);
      }
    }
  }
  pdl_begin();

  // x: this warp's 128-value blocks, all loads in flight first (x was written by the previous kernel: past L1).
  const float4* x4 = reinterpret_cast<const float4*>(a.x);
  float4 xv[CPW];
#pragma unroll
  for (int j = 0; j < CPW; ++j) xv[j] = __ldcg(x4 + (warp + kWarps * j) * 32 + lane);
  float factor[CPW];
  uint8_t* my_terms = terms + size_t(warp) * CPW * kTermBytes;
#pragma unroll
  for (int j = 0; j < CPW; ++j) {
    const float m = warp_absmax(fmaxf(fmaxf(fabsf(xv[j].x), fabsf(xv[j].y)), fmaxf(fabsf(xv[j].z), fabsf(xv[j].w))));
    __half tv[kTerms][4];
    factor[j] = x_terms<ACT8>(xv[j], m, tv);
    constexpr int kStored = ACT8 ? 1 : kTerms;  // the zero terms are never read (their B columns are zeros)
#pragma unroll
    for (int n = 0; n < kStored; ++n)
      *reinterpret_cast<uint2*>(my_terms + j * kTermBytes + n * kTermPitch * 2 + lane * 8) =
          make_uint2(half2_bits(tv[n][0], tv[n][1]), half2_bits(tv[n][2], tv[n][3]));
  }
  __syncwarp();
  hopper::mbar_wait(&full[NCB], 0);  // the scales

  // Per column block: D = the rows times x's terms (8 k-steps), its columns added, times the row scale and 2^E.
  constexpr int kLoadTerms = ACT8 ? 1 : kTerms;
  float acc[MT][2];
#pragma unroll
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = 0.0f;
#pragma unroll
  for (int j = 0; j < CPW; ++j) {
    const int c = warp + kWarps * j;
    uint32_t b[8][2];  // k-step (piece) s: term g at values 16 s + 4 t .. + 3
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      uint2 v = make_uint2(0u, 0u);
      if (g < kLoadTerms)
        v = *reinterpret_cast<const uint2*>(my_terms + j * kTermBytes + g * kTermPitch * 2 + (16 * s + 4 * t) * 2);
      b[s][0] = v.x;
      b[s][1] = v.y;
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const uint32_t* r = wa[j][i][p];  // rows g, g + 8 of piece 2p (r[0], r[1]) and 2p + 1 (r[2], r[3])
        mma_f16(d, e4m3x2_lo(r[0]), e4m3x2_lo(r[1]), e4m3x2_hi(r[0]), e4m3x2_hi(r[1]), b[2 * p][0], b[2 * p][1]);
        mma_f16(d, e4m3x2_lo(r[2]), e4m3x2_lo(r[3]), e4m3x2_hi(r[2]), e4m3x2_hi(r[3]), b[2 * p + 1][0],
                b[2 * p + 1][1]);
      }
      // Columns 2t, 2t + 1 are terms 2t, 2t + 1: (t0 + t1 2^-11) from t = 0 plus (t2 2^-22 + t3 2^-33) from t = 1.
      const float w0 = t == 0 ? 1.0f : 0x1p-22f, w1 = t == 0 ? 0x1p-11f : 0x1p-33f;
      float v0 = t < 2 ? d[0] * w0 + d[1] * w1 : 0.0f;  // row g (fma-contracted or not: the same in both lanes' order)
      float v1 = t < 2 ? d[2] * w0 + d[3] * w1 : 0.0f;  // row g + 8
      v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
      v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
      const int r0 = 16 * i + g, r1 = r0 + 8;
      const int s0 = a.scale_row_shift ? 0 : r0, s1 = a.scale_row_shift ? 0 : r1;  // their rows of ss
      if (t == 0) {
        if (r0 < rows) acc[i][0] = fmaf(v0, ss[size_t(s0) * a.scale_ld + c] * factor[j], acc[i][0]);
        if (r1 < rows) acc[i][1] = fmaf(v1, ss[size_t(s1) * a.scale_ld + c] * factor[j], acc[i][1]);
      }
    }
  }
  if (t == 0) {
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      partials[warp * R + 16 * i + g] = acc[i][0];
      partials[warp * R + 16 * i + g + 8] = acc[i][1];
    }
  }
  __syncthreads();
  if (int(threadIdx.x) < rows) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += partials[w * R + threadIdx.x];
    float* out = a.y + n0 + threadIdx.x;
    *out = a.accumulate ? *out + s : s;
  }
}

template <bool ACT8, int MT, int CPW>
cudaError_t launch_tc(const GemvArgs& a, const Plan& pl, cudaStream_t stream) {
  static const cudaError_t configured = cudaFuncSetAttribute(
      gemv_small_tc_kernel<ACT8, MT, CPW>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem);
  if (configured != cudaSuccess) return configured;
  if (pl.smem > size_t(kMaxSmem)) return cudaErrorInvalidValue;
  CUtensorMap map;
  if (!hopper::make_map_2d(&map, a.w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.N, a.K, 128, 16 * MT))
    return cudaErrorInvalidValue;
  const dim3 grid((a.N + pl.rows - 1) / pl.rows);
  return dev::launch(gemv_small_tc_kernel<ACT8, MT, CPW>, grid, dim3(kThreads), pl.smem, stream, map, a);
}

template <bool ACT8>
cudaError_t launch_shape(const GemvArgs& a, const Plan& pl, cudaStream_t stream) {
  const int mt = pl.rows / 16, cpw = a.K / 1024;
  if (cpw == 1) {
    if (mt == 1) return launch_tc<ACT8, 1, 1>(a, pl, stream);
    if (mt == 2) return launch_tc<ACT8, 2, 1>(a, pl, stream);
    if (mt == 4) return launch_tc<ACT8, 4, 1>(a, pl, stream);
  } else if (cpw == 2) {
    if (mt == 1) return launch_tc<ACT8, 1, 2>(a, pl, stream);
    if (mt == 2) return launch_tc<ACT8, 2, 2>(a, pl, stream);
  } else if (cpw == 4 && mt == 1) {
    return launch_tc<ACT8, 1, 4>(a, pl, stream);
  }
  return cudaErrorInvalidValue;
}

// The shapes routed here by default: the indexer's wq_b and the shared expert's w2 (V4-Flash 8192 x 1024 and
// 4096 x 2048), each 12-18 % shorter alone than on gemv()'s other kernels. In the V4-Flash layer at batch 1 the indexer's
// wq_b measured level (H100, 168.36 against 168.27 us); shared w2 measured ~1.2 us slower in three H100 calls
// (fifty-second to fifty-seventh sessions), then, after the shared expert's fork before the router and the BF16 side
// GEMVs' move, level with FP8 experts and 0.5-1.3 us faster with MXFP4 ones in three (seventy-first section of
// docs/benchmarks/cuda-ops.md).
constexpr std::pair<int, int> kDefaultTcShapes[] = {{8192, 1024}, {4096, 2048}};

// MOESERVE_GEMV_TC: unset the default shapes, "0" none, "1" every fitting shape, or "NxK[,NxK...]" only those (N rows
// of K), so that the layer can be timed with one linear switched at a time. Anything else is reported once and read
// as unset.
struct TcShapes {
  bool all = false;
  std::vector<std::pair<int, int>> only;
};

TcShapes parse_tc_shapes(const char* e) {
  TcShapes t;
  if (!e || !*e) {
    t.only.assign(std::begin(kDefaultTcShapes), std::end(kDefaultTcShapes));
    return t;
  }
  if (std::string(e) == "0") return t;
  if (std::string(e) == "1") {
    t.all = true;
    return t;
  }
  std::string s(e);
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    int n = 0, k = 0;
    char tail = 0;
    if (std::sscanf(s.substr(at, end - at).c_str(), "%dx%d%c", &n, &k, &tail) != 2 || n <= 0 || k <= 0) {
      std::fprintf(stderr, "MOESERVE_GEMV_TC: expected 0, 1 or NxK[,NxK...] (e.g. 8192x1024), got '%s'; ignored\n", e);
      return parse_tc_shapes(nullptr);
    }
    t.only.emplace_back(n, k);
    at = end + 1;
  }
  return t;
}

}  // namespace

int gemv_small_tc_rows_per_block(const GemvArgs& a) { return plan_for(a).rows; }

bool gemv_small_tc_preferred(const GemvArgs& a) {
  // Shapes by the layer's measurements (kDefaultTcShapes): the one-row GEMVs' earlier kernels were faster alone and
  // slower in the layer more than once (docs/benchmarks/cuda-ops.md). Blocks over most SMs only: on 64 blocks
  // (wq_a, 1024 x 4096) it measured 4.30 us against the streaming kernel's 3.23.
  static const TcShapes shapes = parse_tc_shapes(std::getenv("MOESERVE_GEMV_TC"));
  const bool listed = std::find(shapes.only.begin(), shapes.only.end(), std::make_pair(a.N, a.K)) != shapes.only.end();
  if (!shapes.all && !listed) return false;
  const Plan pl = plan_for(a);
  return pl.rows > 0 && gemv_blocks_cover_most_sms((a.N + pl.rows - 1) / pl.rows);
}

cudaError_t gemv_small_tc(const GemvArgs& a, cudaStream_t stream) {
  const Plan pl = plan_for(a);
  if (pl.rows == 0) return cudaErrorInvalidValue;
  return a.act_fp8 ? launch_shape<true>(a, pl, stream) : launch_shape<false>(a, pl, stream);
}

}  // namespace moeserve::cuda
