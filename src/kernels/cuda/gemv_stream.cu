// Streaming skinny GEMM for one activation row (a decode step at batch 1): y[n] (+)= sum_k x[k] W[n, k], W BF16 or
// FP8 e4m3 with 128-block scales (ops.h GemvArgs), fp32 accumulation. gemv.cu's one-pass kernel gives
// each block one round of loads; while the block waits for them, reduces and exits, and the next block starts,
// its slot has nothing in flight (FP8 rows of 33 MB reached 63 % of the HBM bandwidth). Here warps are persistent:
// teams of WQ warps walk the rows four at a time (a quad), each warp of a team taking every WQ-th k step of
// 2 x 512 bytes per row and lane, and every warp issues its next unit's 16-byte loads before the current unit's
// FMAs and reduction, so loads stay in flight across row boundaries. WQ > 1 when there are too few quads to give
// every warp slot its own (a 4096-row matrix is 1024 quads); the team adds its warps' sums in warp order.
// x is staged once per block in shared memory, chunk-interleaved so that a warp's float4 reads are conflict-free,
// with the FP8 activation simulation (act_fp8) applied there instead of on every load.

#include "core/env.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv_stream.h"
#include "kernels/cuda/stream_unit.cuh"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kRowsU = kStreamRows;  // weight rows per unit (one warp)
constexpr int kIt = kStreamIt;       // 16-byte loads per lane, row and unit

template <bool FP8, bool ACT8>
__global__ void __launch_bounds__(kThreads, 2) gemv_stream_kernel(GemvArgs a, int WQ, bool after_x) {
  constexpr int VEC = FP8 ? 16 : 8;           // weights per 16-byte load
  constexpr int kBytes = FP8 ? 1 : 2;
  constexpr int kUnitK = 32 * VEC * kIt;      // k per unit
  extern __shared__ float4 xs4[];             // x: float4 j of chunk c at [j * chunks + c]
  const int K = a.K, N = a.N, p = blockIdx.y;
  const int chunks = K / VEC;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool grouped = a.group_count != nullptr;
  // Problem p's weights, x row and y row: dense problems are stacked; a group (one row) is its expert's weights
  // and its routing row.
  const char* w = static_cast<const char*>(a.w) + size_t(p) * a.w_stride * kBytes;
  const float* rs = FP8 ? a.row_scale + size_t(p) * a.scale_stride : nullptr;
  const float* x = a.x + size_t(p) * a.x_stride;
  float* y = a.y + size_t(p) * a.y_stride;
  const int ksteps = (K + kUnitK - 1) / kUnitK;
  const int quads = (N + kRowsU - 1) / kRowsU;
  const int teams = kWarps / WQ, team = warp / WQ, wi = warp % WQ;  // WQ <= ksteps: every warp has units
  const int qstride = gridDim.x * teams;
  __shared__ float red[2][kWarps][kRowsU];  // a team's per-warp row sums, by quad parity

  using Unit = StreamUnit;
  // The unit (quad q, k step ks): 16-byte loads (zeros past N or K) and, FP8, the rows' block scales.
  auto load = [&](int q, int ks, Unit& u) {
#pragma unroll
    for (int r = 0; r < kRowsU; ++r) {
      const int n = q * kRowsU + r;
#pragma unroll
      for (int i = 0; i < kIt; ++i) {
        const int k = ks * kUnitK + (i * 32 + lane) * VEC;
        const bool in = n < N && k < K;
        u.w[r][i] = in ? __ldg(reinterpret_cast<const uint4*>(w + (size_t(n) * K + k) * kBytes)) : make_uint4(0, 0, 0, 0);
        if constexpr (FP8) u.s[r][i] = in ? __ldg(rs + size_t(n >> a.scale_row_shift) * a.scale_ld + k / 128) : 0.f;
      }
    }
  };

  // Weights are not written by earlier kernels: a dense problem's first unit loads before pdl_wait. A group
  // learns its expert from the routing, written by an earlier kernel, so it waits first.
  int q = blockIdx.x * teams + team, ks = wi, parity = 0;
  Unit cur, nxt;
  if (!grouped && q < quads) load(q, ks, cur);
  pdl_wait();
  // Dense problems let the next kernel launch once x is staged (after_x; at the wait before): the next kernel's
  // weight loads, issued as soon as it launches, otherwise queue ahead of this kernel's x reads. On the H200 that
  // took the V4-Flash batch-1 layer from 144.3 to 141.4 us (FP8 experts) and from 138.0 to 134.8 us (MXFP4 experts),
  // though a chain of this GEMV alone reads it as a loss: up to 0.55 us on the 1-4 MB rows, ~0.1 us on the 8.4 MB
  // ones (docs/benchmarks/cuda-ops.md, thirtieth session). Groups (a decode step's experts) let it launch as their
  // blocks finish, which measured faster on the routed MoE at one token; for the dense GEMVs of a layer, releasing
  // at the kernel's end cost 1.5 us at batch 1 (sixteenth session).
  if (!grouped) {
    if (!after_x) pdl_release();
  } else {
    if (p >= *a.num_groups) return;  // block-uniform, after the wait (which keeps the kernel ordering transitive)
    const int e = a.group_expert[p], row = a.group_offset[p];
    w = static_cast<const char*>(a.w) + size_t(e) * a.w_stride * kBytes;
    if constexpr (FP8) rs = a.row_scale + size_t(e) * a.scale_stride;
    x = a.x + size_t(a.x_rows ? a.x_rows[row] : row) * a.ldx;
    y = a.y + size_t(row) * a.ldy;
    if (q < quads) load(q, ks, cur);
  }

  // Stage x (the FP8 activation simulation per 128 values first, fp8_block_sim's arithmetic).
  stage_x_interleaved<VEC, ACT8>(x, K, xs4);
  __syncthreads();
  if (!grouped && after_x) pdl_release();

  // One accumulator per row and load slot: a lane's sums are chains of at most VEC + K / (32 * VEC * kIt) + 1
  // additions before the 5-level warp tree (ops_gemm_gpu_test's tolerance assumes under 64).
  float acc[kRowsU][kIt] = {};
  while (q < quads) {
    // The next unit of this warp: its next k step of the quad, else its first of the team's next quad.
    const bool more = ks + WQ < ksteps;
    const int nks = more ? ks + WQ : wi;
    const int nq = more ? q : q + qstride;
    if (nq < quads) load(nq, nks, nxt);
    stream_accumulate<FP8>(cur, xs4, chunks, ks, lane, acc);
    if (!more) {  // this warp's share of the quad is complete
      float sum = stream_row_sums(acc, lane);
      if (WQ > 1) {  // the team's sums, added in warp order by its first warp
        if ((lane & 7) == 0) red[parity][warp][lane >> 3] = sum;
        asm volatile("bar.sync %0, %1;" ::"r"(1 + team), "r"(WQ * 32) : "memory");
        if (wi == 0 && (lane & 7) == 0) {
          sum = red[parity][warp][lane >> 3];
          for (int j = 1; j < WQ; ++j) sum += red[parity][warp + j][lane >> 3];
        }
        parity ^= 1;  // the next quad's sums go to the other half: no second barrier before it is written
      }
      const int n = q * kRowsU + (lane >> 3);
      if (wi == 0 && (lane & 7) == 0 && n < N) {
        float* out = y + n;
        *out = a.accumulate ? *out + sum : sum;
      }
      stream_clear(acc);
    }
    q = nq;
    ks = nks;
    cur = nxt;
  }
  if (grouped) pdl_release();
}

// Blocks per SM (MOESERVE_GEMV_STREAM_BLOCKS_PER_SM, 1 or 2; default 2): two blocks of 8 warps per SM reach
// 82 % of the bandwidth on wq_b where one reaches 66 %. Two fill every SM's registers, so a GEMV on a concurrent
// branch leaves GemvArgs::leave_sms SMs at one block for the main stream's one-block kernels.
int gemv_stream_blocks_per_sm() {
  static const int n = env_is("MOESERVE_GEMV_STREAM_BLOCKS_PER_SM", "1") ? 1 : 2;
  return n;
}

// Whether dense problems release the next kernel once x is staged (the kernel's after_x; default on), or at the
// wait (MOESERVE_GEMV_RELEASE_AFTER_X=0, for A/B runs).
bool gemv_stream_release_after_x() {
  static const bool on = !env_is("MOESERVE_GEMV_RELEASE_AFTER_X", "0");
  return on;
}

template <bool FP8, bool ACT8>
cudaError_t launch_stream(const GemvArgs& a, cudaStream_t stream) {
  static const bool configured = [] {
    cudaFuncSetAttribute(gemv_stream_kernel<FP8, ACT8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         kGemvStreamMaxK * 4);
    return true;
  }();
  (void)configured;
  const int per_sm = gemv_stream_blocks_per_sm();
  const int quads = (a.N + kRowsU - 1) / kRowsU;
  const int ksteps = (a.K + 32 * (FP8 ? 16 : 8) * kIt - 1) / (32 * (FP8 ? 16 : 8) * kIt);
  // Warps per quad: the fewest that give every warp slot of the GPU a quad, at most the quad's k steps.
  const int64_t slots = int64_t(per_sm) * sm_count() * kWarps;
  int wq = 1;
  while (wq < kWarps && wq * 2 <= ksteps && int64_t(quads) * a.problems * wq < slots) wq *= 2;
  const int teams = kWarps / wq;
  const int blocks_wanted = (quads + teams - 1) / teams;
  const int blocks = std::max(a.problems, per_sm * sm_count() - std::max(0, a.leave_sms));
  const int per_problem = std::max(1, (blocks + a.problems - 1) / a.problems);
  const dim3 grid(std::min(blocks_wanted, per_problem), a.problems);
  return dev::launch(gemv_stream_kernel<FP8, ACT8>, grid, dim3(kThreads), size_t(a.K) * 4, stream, a, wq,
                     gemv_stream_release_after_x());
}

}  // namespace

bool gemv_stream_fits(const GemvArgs& a) {
  const bool fp8 = a.wtype == WeightType::FP8;
  const int vec = fp8 ? 16 : 8;
  const bool one_row = a.group_count ? a.max_group_rows == 1 && a.group_expert && a.group_offset && a.num_groups &&
                                           a.ldx % 4 == 0
                                     : a.M == 1 && a.x_stride % 4 == 0;
  return one_row && a.K > 0 && a.K <= kGemvStreamMaxK && a.K % vec == 0 &&
         (!fp8 || a.K % 128 == 0 || a.scale_ld > 0) && (!a.act_fp8 || a.K % 128 == 0) &&
         reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && (a.w_stride * (fp8 ? 1 : 2)) % 16 == 0;
}

bool gemv_stream_preferred(const GemvArgs& a) {
  // Measured on the H200 against the one-pass kernel (docs/benchmarks/cuda-ops.md): every FP8 shape of the
  // decode step gains or ties; BF16 alone ties at best (the head) or loses (the compressor, 5.2 vs 5.1 us). On a
  // side branch (leave_sms) BF16 takes it too: the one-pass kernel's 512 short blocks of the C4 compressor's
  // projection held the SMs that the query's wq_b waited for (~6 us in the layer's timeline); with the indexer
  // scores' single round trip the V4-Flash layer measured 147.32 -> 144.18 us (MXFP4) and 164.06 -> 161.90 (FP8)
  // at batch 1 on an H100 (sixty-seventh session). MOESERVE_GEMV_STREAM_BF16=0 keeps the one-pass kernel (A/B runs).
  static const bool bf16_sides = !env_is("MOESERVE_GEMV_STREAM_BF16", "0");
  return gemv_stream_fits(a) && (a.wtype == WeightType::FP8 || (bf16_sides && a.leave_sms > 0));
}

cudaError_t gemv_stream(const GemvArgs& a, cudaStream_t stream) {
  if (!gemv_stream_fits(a)) return cudaErrorInvalidValue;
  if (a.N == 0 || a.problems == 0) return cudaSuccess;
  const bool fp8 = a.wtype == WeightType::FP8;
  if (a.act_fp8) return fp8 ? launch_stream<true, true>(a, stream) : launch_stream<false, true>(a, stream);
  return fp8 ? launch_stream<true, false>(a, stream) : launch_stream<false, false>(a, stream);
}

}  // namespace moeserve::cuda
