// One-batch GEMV for one activation row over a small dense matrix: y[n] (+)= sum_k x[k] W[n, k], W BF16 or FP8
// e4m3 with per-row 128-block scales (ops.h GemvArgs), fp32 accumulation.
//
// Why a kernel of its own: an 8.4 MB matrix is 2 us of HBM bandwidth, and bench_gpu_read shows a chain of plain
// reads of that size reaching 88-100 % of it when every block issues all its reads at once, before
// griddepcontrol.wait, and lets the next launch start first. The streaming kernel (gemv_stream.cu) measured ~49 %
// on such a matrix, and so did a version of this kernel with every lane's weights in registers: each warp's
// conversions and FMAs (~2.5 instructions per FP8 weight) can only start when the last of its loads lands, and
// with every load issued at once that is near the end of the stream for almost every warp, so most of the
// arithmetic runs after the last byte.
//
// Here each block owns R consecutive rows (one SM's share of the matrix, R a multiple of 8) and has them copied
// into shared memory by bulk copies (the TMA engine) in chunks of 8 rows, each with its own mbarrier, plus the rows'
// FP8 block scales, all issued before the wait. Chunks land in order, so warps work on chunk c (one row per warp:
// lane l takes the row's 16-byte pieces l, l + 32, ...) while later chunks are in flight, and what is left after
// the last byte is one chunk's arithmetic. x is loaded after the wait and staged chunk-interleaved in shared memory
// (the FP8 activation simulation per 128 values on the way) so that the lanes' float4 reads are conflict-free.
// A block of a single chunk (up to 8 rows: matrices of up to ~1056 rows) would leave all its arithmetic after the last
// byte, so its BF16 rows are copied in SL slices of 2 KB along K instead (one copy per row and slice, a barrier per
// slice), and the warps work on slice s while later ones land; the pieces are summed in the same order either way.
// (H200, the BF16 1024 x 4096 row: 3.17-3.20 against 3.25-3.28 us; FP8 rows of 4 KB in slices of 1 KB were slower,
// 3.03-3.07 against 2.72-2.75 us, so FP8 keeps whole chunks.)
#include <algorithm>
#include <type_traits>
#include <utility>

#include "core/env.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_small.h"
#include "kernels/cuda/hopper.cuh"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kChunkRows = kWarps;         // rows per bulk-copied chunk: one per warp
constexpr int kMaxChunks = 32;             // mbarriers per block
constexpr int kMaxSmem = 220 * 1024;       // weights + scales + x + partial sums per block

// The pieces per lane the kernel is compiled for (16-byte pieces of a row per lane: row bytes / 512): the row
// lengths of the V4 matrices (FP8 K = 1024 .. 8192, BF16 K = 1024 .. 4096) and a few between.
using PieceCounts = std::integer_sequence<int, 2, 3, 4, 6, 8, 12, 14, 16>;
// f(std::integral_constant<int, P>{}) for the P of PieceCounts equal to pieces; false when there is none.
template <class F, int... Ps>
bool with_pieces(int pieces, F&& f, std::integer_sequence<int, Ps...>) {
  return ((pieces == Ps ? (f(std::integral_constant<int, Ps>{}), true) : false) || ...);
}
template <class F>
bool with_pieces(int pieces, F&& f) {
  return with_pieces(pieces, f, PieceCounts{});
}
bool pieces_supported(int pieces) {
  return with_pieces(pieces, [](auto) {});
}

// K slices of a block of one chunk: BF16 rows in slices of 2 KB or more (four rounds of 512 bytes, 16 a lane), at
// most 4; FP8 rows whole.
constexpr int slices_of(bool fp8, int pieces) {
  return fp8 ? 1 : pieces >= 16 && pieces % 4 == 0 ? 4 : pieces >= 8 && pieces % 2 == 0 ? 2 : 1;
}
// Whether a launch of `chunks` chunks per block takes slices_of (MOESERVE_GEMV_SMALL_SLICES=0: never, for A/B runs).
bool sliced(int chunks) {
  static const bool off = env_is("MOESERVE_GEMV_SMALL_SLICES", "0");
  return !off && chunks == 1;
}

// Whether the next launch may start before this one's wait (MOESERVE_GEMV_SMALL_EARLY=1; default after it, as the
// other GEMVs). Early measured slower in a chain of these GEMVs on the H200 (shared w2 6.06 against 3.84 us): a
// block of ~72 KB leaves room for two more launches' blocks on an SM, whose copies then share the bandwidth
// with the oldest one's.
bool release_early() {
  static const bool on = env_is("MOESERVE_GEMV_SMALL_EARLY", "1");
  return on;
}

struct Plan {
  int rows = 0;  // R: rows per block (a multiple of kChunkRows), 0 when the matrix does not fit
  size_t w_bytes = 0, s_bytes = 0, smem = 0;
};

int row_bytes(const GemvArgs& a) { return a.K * (a.wtype == WeightType::FP8 ? 1 : 2); }

Plan plan_for(const GemvArgs& a) {
  Plan pl;
  const bool fp8 = a.wtype == WeightType::FP8;
  const int rb = row_bytes(a);
  const bool fits = !a.group_count && a.M == 1 && a.problems >= 1 && a.N > 0 && rb % 512 == 0 &&
                    pieces_supported(rb / 512) && (!fp8 || (a.row_scale && a.scale_ld > 0)) &&
                    (!fp8 || a.scale_row_shift == 0) && a.x_stride % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0 &&
                    (a.w_stride * (fp8 ? 1 : 2)) % 16 == 0 &&
                    (!fp8 || (reinterpret_cast<uintptr_t>(a.row_scale) % 16 == 0 && a.scale_stride % 4 == 0));
  if (!fits) return pl;
  // Blocks: one per SM, or two (MOESERVE_GEMV_SMALL_BLOCKS_PER_SM=2, for A/B runs: half the rows each, twice the
  // warps per SM), leave_sms SMs left free on a concurrent branch; the rows split evenly over them.
  static const int per_sm = env_is("MOESERVE_GEMV_SMALL_BLOCKS_PER_SM", "2") ? 2 : 1;
  const long long avail = std::max(1, per_sm * (sm_count() - std::max(0, a.leave_sms)));
  const long long per_problem = std::max<long long>(1, avail / a.problems);
  long long rows = (a.N + per_problem - 1) / per_problem;
  rows = (rows + kChunkRows - 1) / kChunkRows * kChunkRows;
  if (rows / kChunkRows > kMaxChunks) return pl;
  pl.w_bytes = size_t(rows) * rb;
  pl.s_bytes = fp8 ? (size_t(rows) * a.scale_ld * 4 + 15) / 16 * 16 : 0;
  pl.smem = pl.w_bytes + pl.s_bytes + size_t(a.K) * 4 + size_t(rows) * 32 * 4;  // + the lanes' partials
  if (pl.smem > size_t(kMaxSmem)) return pl;
  pl.rows = int(rows);
  return pl;
}

// SL: K slices per chunk (1, or slices_of for a block of one chunk).
template <bool FP8, bool ACT8, int P, int SL>
__global__ void __launch_bounds__(kThreads, 2) gemv_small_kernel(GemvArgs a, int R, bool early) {
  static_assert(P % SL == 0, "whole pieces per slice");
  constexpr int PS = P / SL;         // pieces per lane and slice
  constexpr int VEC = FP8 ? 16 : 8;  // weights per 16-byte piece
  constexpr int kBytes = FP8 ? 1 : 2;
  constexpr int NJ = VEC / 4;        // float4s of x per piece
  extern __shared__ __align__(128) uint8_t smem[];  // [R rows of weights][R x scale_ld scales][x][R x 32 partials]
  __shared__ uint64_t full[kMaxChunks + 1];         // chunk c's slice s at c * SL + s, then the scales
  const int p = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int K = a.K, N = a.N, rb = K * kBytes, chunks16 = K / VEC;
  const int n0 = blockIdx.x * R;
  const int rows = min(R, N - n0);  // > 0: the grid has no empty block
  const int nchunks = (rows + kChunkRows - 1) / kChunkRows;
  const int nbars = nchunks * SL;  // SL > 1 only for nchunks == 1 (sliced)
  const size_t w_bytes = size_t(R) * rb;
  const size_t s_bytes = FP8 ? (size_t(R) * a.scale_ld * 4 + 15) / 16 * 16 : 0;
  float* ss = reinterpret_cast<float*>(smem + w_bytes);
  float4* xs4 = reinterpret_cast<float4*>(smem + w_bytes + s_bytes);
  float* partials = reinterpret_cast<float*>(smem + w_bytes + s_bytes + size_t(K) * 4);

  // Weights and scales are not written by earlier kernels: every copy goes out before the wait.
  if (threadIdx.x == 0) {
    for (int c = 0; c <= nbars; ++c) hopper::mbar_init(&full[c], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const char* w = static_cast<const char*>(a.w) + (size_t(p) * a.w_stride + size_t(n0) * K) * kBytes;
    if constexpr (FP8) {  // the rows' scales first: every chunk needs them
      const float* rs = a.row_scale + size_t(p) * a.scale_stride + size_t(n0) * a.scale_ld;
      const uint32_t sb = uint32_t(rows) * a.scale_ld * 4;
      const uint32_t sb16 = sb / 16 * 16;
      hopper::mbar_arrive_expect_tx(&full[nbars], sb16);
      if (sb16) hopper::bulk_load(ss, rs, sb16, &full[nbars]);
      for (uint32_t i = sb16 / 4; i < sb / 4; ++i) ss[i] = __ldg(rs + i);  // a tail under 16 bytes
    }
    if constexpr (SL == 1) {
      for (int c = 0; c < nchunks; ++c) {
        const uint32_t bytes = uint32_t(min(kChunkRows, rows - c * kChunkRows)) * rb;
        hopper::mbar_arrive_expect_tx(&full[c], bytes);
        hopper::bulk_load(smem + size_t(c) * kChunkRows * rb, w + size_t(c) * kChunkRows * rb, bytes, &full[c]);
      }
    } else {  // one chunk: slice s of every row, then slice s + 1 (each slice's bytes of a row are contiguous)
      const uint32_t sb = uint32_t(rb / SL);
      for (int sl = 0; sl < SL; ++sl) {
        hopper::mbar_arrive_expect_tx(&full[sl], uint32_t(rows) * sb);
        for (int r = 0; r < rows; ++r)
          hopper::bulk_load(smem + size_t(r) * rb + sl * sb, w + size_t(r) * rb + sl * sb, sb, &full[sl]);
      }
    }
  }
  pdl_begin(early);

  // x, chunk-interleaved: float4 j of 16-byte piece c at [j * chunks16 + c].
  stage_x_interleaved<VEC, ACT8>(a.x + size_t(p) * a.x_stride, K, xs4);
  __syncthreads();  // x staged; the barriers' init visible to every thread
  if constexpr (FP8) hopper::mbar_wait(&full[nbars], 0);

  // Chunk c: warp w takes row c * 8 + w; its lanes the row's 16-byte pieces lane + 32 i. What follows a chunk's
  // last byte is short chains: the P pieces' loads go out together, each piece's products are summed in four
  // independent chains, and the lane's partial goes to shared memory (the rows' warp sums come after the last
  // chunk, all at once) instead of five dependent shuffles per row.
  // With slices, slice s holds the pieces lane + 32 i of i in [s PS, (s + 1) PS): the same order of i as one slice.
  for (int c = 0; c < nchunks; ++c) {
    const int r = c * kChunkRows + warp;
    const uint32_t row_addr = hopper::smem_addr(smem + size_t(r) * rb);
    float acc = 0.0f;
    for (int sl = 0; sl < SL; ++sl) {
      hopper::mbar_wait(&full[c * SL + sl], 0);
      if (r >= rows) continue;
      uint4 wq[PS];
#pragma unroll
      for (int i = 0; i < PS; ++i) wq[i] = hopper::lds128(row_addr + 16u * (lane + 32 * (sl * PS + i)));
#pragma unroll
      for (int i = 0; i < PS; ++i) {
        const int piece = lane + 32 * (sl * PS + i);
        float xv[VEC], wf[VEC];
#pragma unroll
        for (int v = 0; v < NJ; ++v) {
          const float4 q = xs4[v * chunks16 + piece];
          xv[4 * v] = q.x, xv[4 * v + 1] = q.y, xv[4 * v + 2] = q.z, xv[4 * v + 3] = q.w;
        }
        unpack_weights<FP8>(wq[i], wf);
        float q4[4] = {xv[0] * wf[0], xv[1] * wf[1], xv[2] * wf[2], xv[3] * wf[3]};
#pragma unroll
        for (int v = 4; v < VEC; ++v) q4[v & 3] = fmaf(xv[v], wf[v], q4[v & 3]);
        const float part = (q4[0] + q4[1]) + (q4[2] + q4[3]);
        acc = FP8 ? fmaf(part, ss[size_t(r) * a.scale_ld + piece * VEC / 128], acc) : acc + part;
      }
    }
    if (r < rows) partials[r * 32 + lane] = acc;
  }
  __syncthreads();

  // The rows' sums: eight lanes per row, four rows per warp and pass.
  float* y = a.y + size_t(p) * a.y_stride;
  for (int base = warp * 4; base < rows; base += kWarps * 4) {
    const int r = base + lane / 8;
    float s = 0.0f;
    if (r < rows) {
      const float4 v = reinterpret_cast<const float4*>(partials + r * 32)[lane % 8];
      s = (v.x + v.y) + (v.z + v.w);
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if (r < rows && lane % 8 == 0) {
      float* out = y + n0 + r;
      *out = a.accumulate ? *out + s : s;
    }
  }
}

template <bool FP8, bool ACT8, int P, int SL>
cudaError_t launch_slices(const GemvArgs& a, const Plan& pl, cudaStream_t stream) {
  static const bool configured = [] {
    cudaFuncSetAttribute(gemv_small_kernel<FP8, ACT8, P, SL>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem);
    return true;
  }();
  (void)configured;
  const dim3 grid((a.N + pl.rows - 1) / pl.rows, a.problems);
  return dev::launch(gemv_small_kernel<FP8, ACT8, P, SL>, grid, dim3(kThreads), pl.smem, stream, a, pl.rows,
                     release_early());
}

template <bool FP8, bool ACT8, int P>
cudaError_t launch_pieces(const GemvArgs& a, const Plan& pl, cudaStream_t stream) {
  constexpr int kSl = slices_of(FP8, P);
  if constexpr (kSl > 1)
    if (sliced(pl.rows / kChunkRows)) return launch_slices<FP8, ACT8, P, kSl>(a, pl, stream);
  return launch_slices<FP8, ACT8, P, 1>(a, pl, stream);
}

template <bool FP8, bool ACT8>
cudaError_t launch_small(const GemvArgs& a, const Plan& pl, cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;  // pieces not compiled for: plan_for refuses them
  with_pieces(row_bytes(a) / 512, [&](auto P) { err = launch_pieces<FP8, ACT8, decltype(P)::value>(a, pl, stream); });
  return err;
}

}  // namespace

int gemv_small_rows_per_block(const GemvArgs& a) { return plan_for(a).rows; }

bool gemv_small_preferred(const GemvArgs& a) {
  // Measured on the H200 against the streaming / one-pass kernels, one-row chains (docs/benchmarks/cuda-ops.md,
  // twenty-second session): faster for rows of >= 2 KB at <= 64 KB per block over most SMs (BF16 1024 x 4096
  // 3.21 / 3.58 us, FP8 wq_a 2.63 / 2.93, shared w2 3.84 / 4.03); slower for 1 KB rows (indexer wq_b 4.16 / 3.71:
  // eight chunks of 8 KB per block), for 128 KB per block (shared w13 7.69 / 6.18, the BF16 C4 compressor
  // 5.95 / 5.10) and on 64 SMs (wkv 2.29 / 2.15). FP8 weights stay with the streaming kernel: routing the FP8
  // wq_a here made the V4-Flash decode layer at batch 1 ~4 us slower (140.7 against 136.8 us, device-ab medians).
  // MOESERVE_GEMV_SMALL=0: never; =fp8: FP8 weights too (for A/B runs of the layer).
  static const int mode = env_is("MOESERVE_GEMV_SMALL", "0") ? 0 : env_is("MOESERVE_GEMV_SMALL", "fp8") ? 2 : 1;
  if (mode == 0 || (a.wtype != WeightType::BF16 && mode != 2)) return false;
  const Plan pl = plan_for(a);
  if (pl.rows == 0) return false;
  const long long blocks = (a.N + pl.rows - 1) / pl.rows * (long long)a.problems;
  return row_bytes(a) >= 2048 && pl.w_bytes <= 64 * 1024 && gemv_blocks_cover_most_sms(blocks);
}

bool gemv_blocks_cover_most_sms(long long blocks) { return blocks * 4 >= 3LL * sm_count(); }

cudaError_t gemv_small(const GemvArgs& a, cudaStream_t stream) {
  const Plan pl = plan_for(a);
  if (pl.rows == 0) return cudaErrorInvalidValue;
  const bool fp8 = a.wtype == WeightType::FP8;
  if (a.act_fp8) return fp8 ? launch_small<true, true>(a, pl, stream) : launch_small<false, true>(a, pl, stream);
  return fp8 ? launch_small<true, false>(a, pl, stream) : launch_small<false, false>(a, pl, stream);
}

}  // namespace moeserve::cuda
