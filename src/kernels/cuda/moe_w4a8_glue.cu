// MoE glue around the W4A8 grouped GEMM: routing -> grouped rows, gather + FP8 quantization, SwiGLU with
// clamp fused with W2's FP8 quantization, and the top-k combine. Semantics: kernels/cpu/moe_w4a8.h.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/cpu/moe_w4a8_pack.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_w4a8.h"
#include "kernels/cuda/route.cuh"

namespace moeserve::cuda {

namespace {

constexpr int kRouteChunk = 1024;  // slots per block in the routing kernels
constexpr int kMaxE = 512;

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// Quantizes 8 values per thread, channels c..c+7 of the row q_row; 16 consecutive threads own one 128-channel
// group (aligned inside a warp). The two 4-byte words go to their places in the W4A8 activation channel order
// (kernels/cpu/moe_w4a8_pack.h). s is a power of two (or inf), so v * pow2_reciprocal(s) is v / s exactly, rounded
// once the same way (subnormal quotients included), without a division: one whose operand is tiny or subnormal takes
// a slow path that diverges the warp.
__device__ __forceinline__ void quant8_store(const float (&v)[8], uint8_t* q_row, int c, float* scale_slot,
                                             bool leader, bool active) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
  // Each half-warp's largest: two whole-warp redux.sync, the other half contributing 0 to each (warp_absmax).
  const uint32_t bits = __float_as_uint(amax), upper = threadIdx.x & 16u;
  const uint32_t lo_max = __reduce_max_sync(0xffffffffu, upper ? 0u : bits);
  const uint32_t hi_max = __reduce_max_sync(0xffffffffu, upper ? bits : 0u);
  amax = __uint_as_float(upper ? hi_max : lo_max);
  const float s = dev::pow2_scale(amax, dev::kFp8Max, dev::kFp8AmaxFloor);  // DeepSeek's act_quant scale
  const float inv = dev::pow2_reciprocal(s);
  const uint32_t lo = dev::fp8x2_bits(v[0] * inv, v[1] * inv) | dev::fp8x2_bits(v[2] * inv, v[3] * inv) << 16;
  const uint32_t hi = dev::fp8x2_bits(v[4] * inv, v[5] * inv) | dev::fp8x2_bits(v[6] * inv, v[7] * inv) << 16;
  if (!active) return;
  namespace pack = moeserve::kernels::cpu;
  uint32_t* group = reinterpret_cast<uint32_t*>(q_row + (c & ~127));
  const int word = (c & 127) / 4;
  group[pack::moe_w4a8_act_word(word)] = lo;
  group[pack::moe_w4a8_act_word(word + 1)] = hi;
  if (leader) *scale_slot = s;
}

// ---- routing ----
__global__ void route_hist_kernel(const int* topk_ids, int S, int E, int* hist) {
  dev::pdl_begin();
  __shared__ int h[kMaxE];
  for (int e = threadIdx.x; e < E; e += blockDim.x) h[e] = 0;
  __syncthreads();
  const int s0 = blockIdx.x * kRouteChunk;
  for (int s = s0 + threadIdx.x; s < min(S, s0 + kRouteChunk); s += blockDim.x) atomicAdd(&h[topk_ids[s]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[size_t(blockIdx.x) * E + e] = h[e];
}

// One block of kMaxE threads: per-expert totals, block bases, counts and expert row starts.
__global__ void route_scan_kernel(int* hist, int nblk, int E, int cap, int* counts, int* start) {
  dev::pdl_begin();
  __shared__ int tot[kMaxE];
  const int e = threadIdx.x;
  int total = 0;
  if (e < E) {
    for (int b = 0; b < nblk; ++b) {
      const int v = hist[size_t(b) * E + e];
      hist[size_t(b) * E + e] = total;  // exclusive base of block b within expert e
      total += v;
    }
    counts[e] = cap > 0 ? min(total, cap) : total;
  }
  tot[e] = e < E ? total : 0;
  __syncthreads();
  if (e == 0) {
    int run = 0;
    for (int i = 0; i < E; ++i) {
      const int t = tot[i];
      tot[i] = run;
      run += t;
    }
  }
  __syncthreads();
  if (e < E) start[e] = cap > 0 ? e * cap : tot[e];
}

// One warp places the slots [s0, s1) in slot order, stable within an expert (rank inside a step of 32 slots
// by match_any). seen[e]: the expert's slots already placed from this range (shared, zeroed by the caller);
// base: the range's first rank per expert (null: 0, the whole batch is one range).
__device__ __forceinline__ void place_slots(const int* topk_ids, int s0, int s1, int cap, const int* base,
                                            const int* start, int* seen, int* row_of_slot, int* slot_of_row) {
  const int lane = threadIdx.x & 31;
  for (int first = s0; first < s1; first += 32) {
    const int s = first + lane;
    const bool valid = s < s1;
    const int e = valid ? topk_ids[s] : -1 - lane;  // distinct dummies never match real experts
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank_in_warp = __popc(peers & ((1u << lane) - 1));
    int before = 0;
    if (valid) before = seen[e];
    __syncwarp();
    if (valid) {
      const int rank = (base ? base[e] : 0) + before + rank_in_warp;
      if (cap > 0 && rank >= cap) {
        row_of_slot[s] = -1;
      } else {
        const int row = start[e] + rank;
        row_of_slot[s] = row;
        slot_of_row[row] = s;
      }
      if (rank_in_warp == 0) seen[e] = before + __popc(peers);
    }
    __syncwarp();
  }
}

// One warp per chunk of kRouteChunk slots.
__global__ void route_place_kernel(const int* topk_ids, int S, int E, int cap, const int* hist, const int* start,
                                   int* row_of_slot, int* slot_of_row) {
  dev::pdl_begin();
  __shared__ int seen[kMaxE];
  const int lane = threadIdx.x;
  for (int e = lane; e < E; e += 32) seen[e] = 0;
  __syncwarp();
  const int s0 = blockIdx.x * kRouteChunk;
  place_slots(topk_ids, s0, min(S, s0 + kRouteChunk), cap, hist + size_t(blockIdx.x) * E, start, seen, row_of_slot,
              slot_of_row);
}

using dev::warp_inclusive_sum;

// All S slots of a small batch placed by one block (blockDim >= kMaxE): histogram, exclusive scan of the
// expert starts, stable placement. counts (null: not written) gets min(total, cap) per expert (cap 0: no cap).
__device__ void route_small_batch(const int* topk_ids, int S, int E, int cap, int* counts, int* row_of_slot,
                                  int* slot_of_row) {
  __shared__ int seen[kMaxE];  // the histogram, then the running rank per expert during placement
  __shared__ int start[kMaxE];
  __shared__ int warp_base[32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int e = tid; e < kMaxE; e += blockDim.x) seen[e] = 0;
  __syncthreads();
  for (int s = tid; s < S; s += blockDim.x) atomicAdd(&seen[topk_ids[s]], 1);
  __syncthreads();
  // Exclusive scan of the totals over the experts: threads 0..kMaxE-1, one expert each.
  int total = 0, incl = 0;
  if (tid < kMaxE) {
    total = tid < E ? seen[tid] : 0;
    incl = warp_inclusive_sum(total);
    if (lane == 31) warp_base[warp] = incl;
  }
  __syncthreads();
  if (warp == 0) {
    const int w = lane < kMaxE / 32 ? warp_base[lane] : 0;
    warp_base[lane] = warp_inclusive_sum(w) - w;  // exclusive
  }
  __syncthreads();
  if (tid < E) {
    if (counts) counts[tid] = cap > 0 ? min(total, cap) : total;
    start[tid] = cap > 0 ? tid * cap : warp_base[warp] + incl - total;
    seen[tid] = 0;
  }
  __syncthreads();
  if (warp == 0) place_slots(topk_ids, 0, S, cap, nullptr, start, seen, row_of_slot, slot_of_row);
  __syncthreads();
}

// Small batches (all slots in one routing chunk): histogram, expert starts and the stable placement in one
// block instead of a memset and three launches (a decode step's routing is launch-bound).
__global__ void route_small_kernel(const int* topk_ids, int S, int E, int cap, int rows, int* counts,
                                   int* row_of_slot, int* slot_of_row) {
  dev::pdl_begin();
  for (int r = threadIdx.x; r < rows; r += blockDim.x) slot_of_row[r] = -1;
  __syncthreads();
  route_small_batch(topk_ids, S, E, cap, counts, row_of_slot, slot_of_row);
}

// Eight consecutive inputs as fp32: bf16 (one 16-byte load) or fp32 (two).
__device__ __forceinline__ void load8(const uint16_t* p, bool active, float (&v)[8]) {
  const uint4 raw = active ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = bf16_bits_to_f32(uint16_t(w[i] & 0xffff));
    v[2 * i + 1] = bf16_bits_to_f32(uint16_t(w[i] >> 16));
  }
}
__device__ __forceinline__ void load8(const float* p, bool active, float (&v)[8]) {
  const float4 a = active ? *reinterpret_cast<const float4*>(p) : make_float4(0, 0, 0, 0);
  const float4 b = active ? *reinterpret_cast<const float4*>(p + 4) : make_float4(0, 0, 0, 0);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// ---- gather + quantize (one block per grouped row, 8 channels per thread) ----
// Grouped row `row` <- token slot / topk of x, FP8 with per-128 scales. Every thread of whole warps takes part
// (the scale's shuffles); threads past D load nothing and store nothing.
template <class In>
__device__ __forceinline__ void gather_quant_row(const In* x, int D, int slot, int row, int topk, uint8_t* a,
                                                 float* sa, int sa_ld) {
  const int c = threadIdx.x * 8;
  const bool active = c < D;
  float v[8];
  load8(x + size_t(slot / topk) * D + c, active, v);
  quant8_store(v, a + size_t(row) * D, c, sa + size_t(c / 128) * sa_ld + row, (threadIdx.x % 16) == 0, active);
}

template <class In>
__global__ void gather_quant_kernel(const In* x, int D, const int* slot_of_row, int topk, uint8_t* a, float* sa,
                                    int sa_ld) {
  dev::pdl_begin();
  const int row = blockIdx.x;
  const int slot = slot_of_row[row];
  if (slot < 0) return;
  gather_quant_row(x, D, slot, row, topk, a, sa, sa_ld);
}

// ---- routing + gather + quantize in one launch (contiguous layout, a decode step's few slots) ----
// Every block places all S slots itself (route_small_kernel's histogram, scan and stable placement, in shared
// memory: a few dozen slots cost less than a launch), then gathers and quantizes its own row; block 0 also
// writes counts, row_of_slot and slot_of_row for the GEMMs and the later glue. blockDim >= kMaxE.
constexpr int kFusedRouteSlots = 256;
constexpr int kRouteLogitsMaxTokens = 16;  // tokens the fused router's warps route (one pass of 16 warps)

// The fused launches' body after the experts are known: place the S slots, block 0 writes the rows for the later
// kernels, each block gathers and quantizes its own row.
template <class In>
__device__ void place_gather_quant(const int* topk_ids, int S, int E, const In* x, int D, int topk, int* counts,
                                   int* row_of_slot, int* slot_of_row, uint8_t* a, float* sa, int sa_ld) {
  __shared__ int s_row_of_slot[kFusedRouteSlots], s_slot_of_row[kFusedRouteSlots];
  route_small_batch(topk_ids, S, E, 0, blockIdx.x == 0 ? counts : nullptr, s_row_of_slot, s_slot_of_row);
  if (blockIdx.x == 0)
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
      row_of_slot[s] = s_row_of_slot[s];
      slot_of_row[s] = s_slot_of_row[s];
    }
  gather_quant_row(x, D, s_slot_of_row[blockIdx.x], blockIdx.x, topk, a, sa, sa_ld);
}

template <class In>
__global__ void route_gather_quant_kernel(const int* topk_ids, int S, int E, const In* x, int D, int topk,
                                          int* counts, int* row_of_slot, int* slot_of_row, uint8_t* a, float* sa,
                                          int sa_ld) {
  dev::pdl_begin();
  place_gather_quant(topk_ids, S, E, x, D, topk, counts, row_of_slot, slot_of_row, a, sa, sa_ld);
}

// ---- the router's choice + routing rows + gather + quantize in one launch (a decode step at batch <= 16) ----
// Every block also routes every token itself (route.cuh, one warp per token, after the block's threads scored all
// tokens together) from the gate logits, into shared memory, so that the route kernel's launch leaves the critical
// path; block 0 writes chosen and weights.
template <int EPL>
__global__ void __launch_bounds__(1024)
    route_logits_gather_quant_kernel(RouteLogits r, const float* x, int D, int* counts, int* row_of_slot,
                                     int* slot_of_row, uint8_t* a, float* sa, int sa_ld) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  float bv[EPL];
  dev::route_bias(r.bias, r.E, bv);
  dev::pdl_begin();
  extern __shared__ float scores[];  // [warps][E]
  __shared__ int s_chosen[kFusedRouteSlots];
  const int S = r.T * r.K;
  // T <= kRouteLogitsMaxTokens <= warps: token t is warp t's, its scores at t * E.
  const bool scored = dev::route_scores_elementwise(r.func);
  if (scored) dev::route_scores_block(r.logits, r.T * r.E, r.func, scores);
  for (int t = warp; t < r.T; t += warps) {
    int pick[8];
    float w[8];
    dev::route_token<EPL>(r.logits + size_t(t) * r.E, r.E, r.K, r.func, bv,
                          r.tid2eid ? r.tid2eid + size_t(r.token_ids[t]) * r.K : nullptr, r.norm_topk, r.route_scale,
                          scores + warp * r.E, pick, w, scored);
    if (lane == 0)
      dev::route_for_k<EPL>(r.K, [&](int k) {
        s_chosen[t * r.K + k] = pick[k];
        if (blockIdx.x == 0) {
          r.chosen[size_t(t) * r.K + k] = pick[k];
          r.weight[size_t(t) * r.K + k] = w[k];
        }
      });
  }
  __syncthreads();
  place_gather_quant(s_chosen, S, r.E, x, D, r.K, counts, row_of_slot, slot_of_row, a, sa, sa_ld);
}

// ---- SwiGLU(clamp) * routing weight -> FP8 (one block per grouped row, 8 channels per thread) ----
template <class In>
__global__ void swiglu_quant_kernel(const In* h, int I, const int* slot_of_row, const float* weights, float limit,
                                    int round_bf16, uint8_t* a2, float* sa2, int sa_ld, int release_first) {
  dev::pdl_begin(release_first != 0);
  const int row = blockIdx.x;
  const int slot = slot_of_row[row];
  if (slot < 0) return;
  const int c = threadIdx.x * 8;
  const bool active = c < I;
  const In* hr = h + size_t(row) * 2 * I;
  float gv[8], uv[8];
  load8(hr + c, active, gv);
  load8(hr + I + c, active, uv);
  const float rw = weights[slot];
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float g = fminf(gv[i], limit);
    const float u = fminf(fmaxf(uv[i], -limit), limit);
    float xv = g / (1.0f + expf(-g)) * u;
    xv = rw * xv;
    v[i] = round_bf16 ? __bfloat162float(__float2bfloat16_rn(xv)) : xv;
  }
  quant8_store(v, a2 + size_t(row) * I, c, sa2 + size_t(c / 128) * sa_ld + row, (threadIdx.x % 16) == 0, active);
}

// ---- combine (one block per token, 8 channels per thread) ----
// The token's slots sorted by (expert id, row) in registers (odd-even transposition, compile-time indices; the
// dynamic indices of an insertion sort put the arrays in local memory), then all its rows loaded before the sum, in
// that order (the CPU reference's order: bit for bit).
constexpr int kCombineMaxTopk = 8;
__global__ void combine_kernel(const uint16_t* y2, int D, const int* row_of_slot, const int* topk_ids, int topk,
                               float* out) {
  dev::pdl_begin();
  const int t = blockIdx.x;
  int ids[kCombineMaxTopk], rows[kCombineMaxTopk];
#pragma unroll
  for (int j = 0; j < kCombineMaxTopk; ++j) {
    const bool in = j < topk;
    ids[j] = in ? topk_ids[size_t(t) * topk + j] : INT_MAX;
    rows[j] = in ? row_of_slot[size_t(t) * topk + j] : -1;
  }
#pragma unroll
  for (int round = 0; round < kCombineMaxTopk; ++round)
#pragma unroll
    for (int j = round & 1; j + 1 < kCombineMaxTopk; j += 2) {
      const bool swap = ids[j] > ids[j + 1] || (ids[j] == ids[j + 1] && rows[j] > rows[j + 1]);
      const int id_lo = swap ? ids[j + 1] : ids[j], id_hi = swap ? ids[j] : ids[j + 1];
      const int row_lo = swap ? rows[j + 1] : rows[j], row_hi = swap ? rows[j] : rows[j + 1];
      ids[j] = id_lo, ids[j + 1] = id_hi, rows[j] = row_lo, rows[j + 1] = row_hi;
    }
  const int c = threadIdx.x * 8;
  uint4 raw[kCombineMaxTopk];
#pragma unroll
  for (int j = 0; j < kCombineMaxTopk; ++j)
    raw[j] = rows[j] >= 0 ? *reinterpret_cast<const uint4*>(y2 + size_t(rows[j]) * D + c) : make_uint4(0, 0, 0, 0);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < kCombineMaxTopk; ++j) {
    if (rows[j] < 0) continue;  // dropped slots, and the places past topk
    const uint32_t w[4] = {raw[j].x, raw[j].y, raw[j].z, raw[j].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc[2 * i] += bf16_bits_to_f32(uint16_t(w[i] & 0xffff));
      acc[2 * i + 1] += bf16_bits_to_f32(uint16_t(w[i] >> 16));
    }
  }
  float* o = out + size_t(t) * D + c;
  *reinterpret_cast<float4*>(o) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  *reinterpret_cast<float4*>(o + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
}

}  // namespace

size_t moe_route_rows_workspace(int T, int topk, int E) {
  const size_t nblk = (size_t(T) * topk + kRouteChunk - 1) / kRouteChunk;
  return (nblk * size_t(E) + size_t(E)) * sizeof(int);
}

cudaError_t moe_route_rows(const int* topk_ids, int T, int topk, int E, int cap, int* counts, int* row_of_slot,
                           int* slot_of_row, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const int S = T * topk;
  if (T <= 0 || topk <= 0 || E <= 0 || E > kMaxE || workspace_bytes < moe_route_rows_workspace(T, topk, E))
    return cudaErrorInvalidValue;
  const int nblk = (S + kRouteChunk - 1) / kRouteChunk;
  const size_t rows = cap > 0 ? size_t(E) * cap : size_t(S);
  if (nblk == 1) {
    dev::launch(route_small_kernel, dim3(1), dim3(1024), 0, stream, topk_ids, S, E, cap, int(rows), counts, row_of_slot,
                slot_of_row);
    return cudaGetLastError();
  }
  int* hist = static_cast<int*>(workspace);
  int* start = hist + size_t(nblk) * E;
  cudaError_t err = cudaMemsetAsync(slot_of_row, 0xff, rows * sizeof(int), stream);
  if (err != cudaSuccess) return err;
  dev::launch(route_hist_kernel, dim3(nblk), dim3(256), 0, stream, topk_ids, S, E, hist);
  dev::launch(route_scan_kernel, dim3(1), dim3(kMaxE), 0, stream, hist, nblk, E, cap, counts, start);
  dev::launch(route_place_kernel, dim3(nblk), dim3(32), 0, stream, topk_ids, S, E, cap, hist, start, row_of_slot,
              slot_of_row);
  return cudaGetLastError();
}

template <class In>
cudaError_t launch_gather_quant(const In* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a, float* sa,
                                int sa_ld, cudaStream_t stream) {
  if (D % 128 != 0 || D / 8 > 1024 || rows <= 0) return cudaErrorInvalidValue;
  dev::launch(gather_quant_kernel<In>, dim3(rows), dim3((D / 8 + 31) / 32 * 32), 0, stream, x, D, slot_of_row, topk, a,
              sa, sa_ld);
  return cudaGetLastError();
}

template <class In>
cudaError_t launch_swiglu_quant(const In* h, int I, const int* slot_of_row, int rows, const float* weights,
                                float limit, bool round_bf16, uint8_t* a2, float* sa2, int sa_ld, cudaStream_t stream,
                                bool release_first = false) {
  if (I % 128 != 0 || I / 8 > 1024 || rows <= 0) return cudaErrorInvalidValue;
  dev::launch(swiglu_quant_kernel<In>, dim3(rows), dim3((I / 8 + 31) / 32 * 32), 0, stream, h, I, slot_of_row, weights,
              limit, round_bf16 ? 1 : 0, a2, sa2, sa_ld, release_first ? 1 : 0);
  return cudaGetLastError();
}

cudaError_t moe_gather_quant(const uint16_t* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a,
                             float* sa, int sa_ld, cudaStream_t stream) {
  return launch_gather_quant(x, D, slot_of_row, rows, topk, a, sa, sa_ld, stream);
}
cudaError_t moe_gather_quant_f32(const float* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a,
                                 float* sa, int sa_ld, cudaStream_t stream) {
  return launch_gather_quant(x, D, slot_of_row, rows, topk, a, sa, sa_ld, stream);
}

cudaError_t moe_route_gather_quant_f32(const int* topk_ids, int T, int topk, int E, const float* x, int D, int* counts,
                                       int* row_of_slot, int* slot_of_row, uint8_t* a, float* sa, int sa_ld,
                                       cudaStream_t stream) {
  const int S = T * topk;
  if (T <= 0 || topk <= 0 || E <= 0 || E > kMaxE || S > kFusedRouteSlots || D % 128 != 0 || D / 8 > 1024)
    return cudaErrorInvalidValue;
  const int threads = max(kMaxE, (D / 8 + 31) / 32 * 32);
  return dev::launch(route_gather_quant_kernel<float>, dim3(S), dim3(threads), 0, stream, topk_ids, S, E, x, D, topk,
                     counts, row_of_slot, slot_of_row, a, sa, sa_ld);
}

int moe_route_logits_max_tokens() { return kRouteLogitsMaxTokens; }

cudaError_t moe_route_logits_gather_quant_f32(const RouteLogits& r, const float* x, int D, int* counts, int* row_of_slot,
                                              int* slot_of_row, uint8_t* a, float* sa, int sa_ld, cudaStream_t stream) {
  const int S = r.T * r.K;
  if (r.T <= 0 || r.T > kRouteLogitsMaxTokens || r.K <= 0 || r.K > 8 || r.E <= 0 || r.E > kMaxE ||
      S > kFusedRouteSlots || D % 128 != 0 || D / 8 > 1024 || !r.logits || !r.chosen || !r.weight ||
      (!r.tid2eid && !r.bias) || (r.tid2eid && !r.token_ids))
    return cudaErrorInvalidValue;
  const int threads = max(kMaxE, (D / 8 + 31) / 32 * 32);
  const size_t smem = size_t(min(threads / 32, kRouteLogitsMaxTokens)) * r.E * sizeof(float);  // routing warps
  return dev::with_experts_per_lane<kMaxE / 32>(r.E, [&](auto epl) {
    return dev::launch(route_logits_gather_quant_kernel<decltype(epl)::value>, dim3(S), dim3(threads), smem, stream, r,
                       x, D, counts, row_of_slot, slot_of_row, a, sa, sa_ld);
  });
}

int moe_route_gather_max_slots() { return kFusedRouteSlots; }

cudaError_t moe_swiglu_quant(const uint16_t* h, int I, const int* slot_of_row, int rows, const float* weights,
                             float limit, bool round_bf16, uint8_t* a2, float* sa2, int sa_ld, cudaStream_t stream) {
  return launch_swiglu_quant(h, I, slot_of_row, rows, weights, limit, round_bf16, a2, sa2, sa_ld, stream);
}
cudaError_t moe_swiglu_quant_f32(const float* h, int I, const int* slot_of_row, int rows, const float* weights,
                                 float limit, uint8_t* a2, float* sa2, int sa_ld, cudaStream_t stream,
                                 bool release_first) {
  return launch_swiglu_quant(h, I, slot_of_row, rows, weights, limit, false, a2, sa2, sa_ld, stream, release_first);
}

cudaError_t moe_combine(const uint16_t* y2, int D, const int* row_of_slot, const int* topk_ids, int T, int topk,
                        float* out, cudaStream_t stream) {
  if (D % 8 != 0 || D / 8 > 1024 || topk > kCombineMaxTopk || T <= 0) return cudaErrorInvalidValue;
  dev::launch(combine_kernel, dim3(T), dim3(D / 8), 0, stream, y2, D, row_of_slot, topk_ids, topk, out);
  return cudaGetLastError();
}

}  // namespace moeserve::cuda
