// A decode step's routed FP8 experts at batch 1 in one launch (moe_fp8_one_token.h). Two streams of weights,
// each walked as gemv_stream.cu walks one: persistent warps take quads of four weight rows, one 1024-weight unit at
// a time, with the next unit's loads in flight while the current one is multiplied (stream_unit.cuh).
// - W13: a quad is gate rows j, j + 1 and up rows I + j, I + j + 1 of one slot's expert, so the warp that sums it
//   also applies SwiGLU to its two pairs and writes two values of W2's input (act).
// - W2: a quad is output rows d .. d + 3 of one slot's expert, over act.
// Each block owns a contiguous range of quads in each stream (W13's slots are independent; W2's range spans at
// most `span` slots, whose act rows it stages). Between the streams every block waits at a grid-wide barrier for
// all of act; each warp issues its first W2 unit's loads before it. Optional: the shared expert as slot K (written
// to its own output).
#include <algorithm>

#include "kernels/cuda/moe_fp8_one_token.h"
#include "kernels/cuda/stream_unit.cuh"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kVec = 16;                            // FP8 weights per 16-byte load
constexpr int kUnitK = 32 * kVec * kStreamIt;       // weights of a row per unit
constexpr int kMaxSlots = 16;
constexpr int kMaxDim = 16384;                      // D and I: x and act rows are staged in shared memory

// Grid-wide barrier of a kernel whose blocks are all resident. bar[0] counts arrivals; the last one resets it
// (for the next launch) and advances the generation bar[1], which the others watch. Every block reads the
// generation before it arrives, so none can miss the advance.
__device__ void grid_barrier(unsigned* bar) {
  __syncthreads();  // this block's writes before thread 0's fence
  if (threadIdx.x == 0) {
    unsigned gen, now;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(gen) : "l"(bar + 1) : "memory");
    __threadfence();
    if (atomicAdd(bar, 1u) == gridDim.x - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(bar + 1), "r"(gen + 1) : "memory");
    } else {
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(bar + 1) : "memory");
      } while (now == gen);
    }
    __threadfence();
  }
  __syncthreads();
}

// The four rows' starts and scale rows of one quad of slot k: expert chosen[k] of the routed stack, or the shared
// expert (k == K). Fields are picked one by one (a runtime choice between two parameter structs would copy them to
// local memory).
struct QuadRows {
  const uint8_t* row[kStreamRows];
  const float* rs[kStreamRows];
};

// The launch's slots: the K routed ones, and the shared expert's when it runs inside.
__host__ __device__ inline int slot_count(const MoeFp8OneTokenArgs& a) { return a.K + (a.shared_out ? 1 : 0); }

__device__ __forceinline__ QuadRows quad_rows(const Fp8ExpertWeights& routed, const Fp8ExpertWeights& shared,
                                              int K, const int* chosen, int k, const int (&n)[kStreamRows], int cols) {
  const bool sh = k >= K;
  const long long e = sh ? 0 : chosen[k];
  const uint8_t* w = static_cast<const uint8_t*>(sh ? shared.w : routed.w) + e * routed.w_stride;
  const float* s = (sh ? shared.row_scale : routed.row_scale) + e * routed.scale_stride;
  const int ld = sh ? shared.scale_ld : routed.scale_ld;
  const int shift = sh ? shared.scale_row_shift : routed.scale_row_shift;
  QuadRows q;
#pragma unroll
  for (int r = 0; r < kStreamRows; ++r) {
    q.row[r] = w + size_t(n[r]) * cols;
    q.rs[r] = s + size_t(n[r] >> shift) * ld;
  }
  return q;
}

__device__ __forceinline__ void load_unit(const QuadRows& q, int ks, int lane, StreamUnit& u) {
#pragma unroll
  for (int r = 0; r < kStreamRows; ++r)
#pragma unroll
    for (int i = 0; i < kStreamIt; ++i) {
      const int k = ks * kUnitK + (i * 32 + lane) * kVec;
      u.w[r][i] = __ldg(reinterpret_cast<const uint4*>(q.row[r] + k));
      u.s[r][i] = __ldg(q.rs[r] + k / 128);
    }
}

template <bool ACT8>
__global__ void __launch_bounds__(kThreads, 2) moe_fp8_one_token_kernel(MoeFp8OneTokenArgs a) {
  extern __shared__ float4 xs4[];  // x, then the act rows of this block's W2 slots (stage_x_interleaved's layout)
  __shared__ int chosen[kMaxSlots];
  __shared__ float weight[kMaxSlots];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int D = a.D, I = a.I, nb = gridDim.x, b = blockIdx.x;
  const int per1 = I / 2, steps1 = D / kUnitK;  // W13 quads per slot, units per quad
  const int per2 = D / 4, steps2 = I / kUnitK;  // W2
  const long long Q1 = (long long)slot_count(a) * per1, Q2 = (long long)slot_count(a) * per2;
  const int q1_end = int(Q1 * (b + 1) / nb), q2_begin = int(Q2 * b / nb), q2_end = int(Q2 * (b + 1) / nb);
  auto rows13 = [&](int q) {
    const int k = q / per1, j = 2 * (q % per1);
    const int n[kStreamRows] = {j, j + 1, I + j, I + j + 1};
    return quad_rows(a.w13, a.shared_w13, a.K, chosen, k, n, D);
  };
  auto rows2 = [&](int q) {
    const int k = q / per2, d = 4 * (q % per2);
    const int n[kStreamRows] = {d, d + 1, d + 2, d + 3};
    return quad_rows(a.w2, a.shared_w2, a.K, chosen, k, n, I);
  };

  pdl_wait();  // the slots' experts, weights and x come from earlier kernels
  if (warp == 0 && lane < a.K) {
    chosen[lane] = a.chosen[lane];
    weight[lane] = a.weight[lane];
  }
  __syncthreads();
  StreamUnit cur, nxt;
  float acc[kStreamRows][kStreamIt] = {};
  int q = int(Q1 * b / nb) + warp, ks = 0;
  if (q < q1_end) load_unit(rows13(q), 0, lane, cur);
  stage_x_interleaved<kVec, ACT8>(a.x, D, xs4);
  if (b == 0 && int(threadIdx.x) < a.K) a.row_of_slot[threadIdx.x] = int(threadIdx.x);
  __syncthreads();

  // W13 and SwiGLU (swiglu_kernel's arithmetic): lanes 0 and 8 end with gate rows j and j + 1, lanes 16 and 24
  // with their up rows.
  while (q < q1_end) {
    const bool more = ks + 1 < steps1;
    const int nks = more ? ks + 1 : 0, nq = more ? q : q + kWarps;
    if (nq < q1_end) load_unit(rows13(nq), nks, lane, nxt);
    stream_accumulate<true>(cur, xs4, D / kVec, ks, lane, acc);
    if (!more) {
      const float sum = stream_row_sums(acc, lane);
      const float up = __shfl_down_sync(0xffffffffu, sum, 16);
      if (lane == 0 || lane == 8) {
        const int k = q / per1, j = 2 * (q % per1) + (lane >> 3);
        const float g = fminf(sum, a.limit);
        const float u = fmaxf(-a.limit, fminf(up, a.limit));
        const float silu = g / (1.0f + expf(-g));
        a.act[size_t(k) * I + j] = silu * u * (k < a.K ? weight[k] : 1.0f);
      }
      stream_clear(acc);
    }
    q = nq;
    ks = nks;
    cur = nxt;
  }

  // W2: the first unit's loads go out before the barrier.
  q = q2_begin + warp;
  ks = 0;
  if (q < q2_end) load_unit(rows2(q), 0, lane, cur);
  grid_barrier(a.barrier);
  const int k0 = q2_begin / per2;
  if (q2_end > q2_begin)
    for (int k = k0; k <= (q2_end - 1) / per2; ++k)
      stage_x_interleaved<kVec, ACT8, true>(a.act + size_t(k) * I, I, xs4 + size_t(k - k0) * (I / 4));
  __syncthreads();
  while (q < q2_end) {
    const bool more = ks + 1 < steps2;
    const int nks = more ? ks + 1 : 0, nq = more ? q : q + kWarps;
    if (nq < q2_end) load_unit(rows2(nq), nks, lane, nxt);
    const int k = q / per2;
    stream_accumulate<true>(cur, xs4 + size_t(k - k0) * (I / 4), I / kVec, ks, lane, acc);
    if (!more) {
      const float sum = stream_row_sums(acc, lane);
      float* yk = k < a.K ? a.y + size_t(k) * D : a.shared_out;
      if ((lane & 7) == 0) yk[4 * (q % per2) + (lane >> 3)] = sum;
      stream_clear(acc);
    }
    q = nq;
    ks = nks;
    cur = nxt;
  }
  pdl_release();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Blocks of the launch (all resident at once: the barrier needs them), and the shared memory each needs.
struct Shape {
  int blocks = 0;
  size_t smem = 0;
};

template <bool ACT8>
Shape shape_for(const MoeFp8OneTokenArgs& a) {
  static const bool configured = [] {
    cudaFuncSetAttribute(moe_fp8_one_token_kernel<ACT8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         kMaxDim * 4 * 3);
    return true;
  }();
  (void)configured;
  // Two blocks per SM where they fit (the streaming GEMV's measured best), sized for the act rows of the
  // slots a block's W2 range can span: ceil(range / per2) + 1.
  Shape s;
  for (int per_sm = 2; per_sm >= 1 && s.blocks == 0; --per_sm) {
    const int blocks = per_sm * sm_count();
    const int slots = slot_count(a);
    const long long Q2 = (long long)slots * (a.D / 4), range = (Q2 + blocks - 1) / blocks;
    const int span = int(std::min<long long>(slots, (range + a.D / 4 - 1) / (a.D / 4) + 1));
    const size_t smem = size_t(std::max(a.D, span * a.I)) * 4;
    int fit = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, moe_fp8_one_token_kernel<ACT8>, kThreads, smem) ==
            cudaSuccess &&
        fit >= per_sm) {
      s.blocks = blocks;
      s.smem = smem;
    }
  }
  return s;
}

template <bool ACT8>
cudaError_t launch(const MoeFp8OneTokenArgs& a, cudaStream_t stream) {
  const Shape s = shape_for<ACT8>(a);
  if (s.blocks == 0) return cudaErrorInvalidConfiguration;
  return dev::launch(moe_fp8_one_token_kernel<ACT8>, dim3(s.blocks), dim3(kThreads), s.smem, stream, a);
}

}  // namespace

bool moe_fp8_one_token_fits(const MoeFp8OneTokenArgs& a) {
  auto weights_ok = [](const Fp8ExpertWeights& w, int cols) {
    return w.w && w.row_scale && aligned16(w.w) && w.w_stride % 16 == 0 && w.scale_ld >= cols / 128;
  };
  const bool shared_ok = !a.shared_out || (weights_ok(a.shared_w13, a.D) && weights_ok(a.shared_w2, a.I));
  return a.D > 0 && a.I > 0 && a.D % kUnitK == 0 && a.I % kUnitK == 0 && a.D <= kMaxDim && a.I <= kMaxDim &&
         a.K >= 1 && slot_count(a) <= kMaxSlots && weights_ok(a.w13, a.D) && weights_ok(a.w2, a.I) &&
         shared_ok && a.x && aligned16(a.x) &&
         a.chosen && a.weight && a.act && aligned16(a.act) && a.y && a.row_of_slot && a.barrier;
}

cudaError_t moe_fp8_one_token(const MoeFp8OneTokenArgs& a, cudaStream_t stream) {
  if (!moe_fp8_one_token_fits(a)) return cudaErrorInvalidValue;
  return a.act_fp8 ? launch<true>(a, stream) : launch<false>(a, stream);
}

}  // namespace moeserve::cuda
