#pragma once
// One token's MoE routing by one warp (model/moe.cpp semantics), shared by moe_route (moe.cu) and the decode
// step's routing + gather launch (moe_w4a8_glue.cu): scores (sqrtsoftplus, sigmoid or softmax), top-k on the
// bias-corrected scores (ties to the lower expert) or the hash table's row, weights from the uncorrected scores,
// normalized and scaled. Lane l holds experts l, l + 32, ... (EPL of them) in registers, so the top-k passes are
// register compares and shuffles.
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace moeserve::cuda::dev {

__device__ __forceinline__ float route_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// An expert's score from its logit, for the elementwise score functions (0 sqrtsoftplus, 1 sigmoid).
__device__ __forceinline__ float route_score(float x, int func) {
  return func == 0 ? sqrtf(route_softplus(x)) : 1.0f / (1.0f + expf(-x));
}

// Whether route_scores_block can score for route_token: the elementwise functions (softmax needs the row's max).
__device__ __forceinline__ bool route_scores_elementwise(int func) { return func != 2; }

// s[i] = route_score(logits[i]) for i < n (n = tokens x E, rows contiguous) by every thread of the block, then a
// block barrier: a decode step's token is then scored by the block's warps together instead of one warp's lanes in
// turn (sqrtsoftplus is ~50 instructions a value: at E = 256, 8 a lane, ~0.9 us of the routing launch on an H100).
__device__ __forceinline__ void route_scores_block(const float* logits, int n, int func, float* s) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = route_score(logits[i], func);
  __syncthreads();
}

// This lane's biases bv[i] of expert lane + 32 i (zeros past E or without a bias, as with a hash table): a weight,
// so callers read them before pdl_wait.
template <int EPL>
__device__ __forceinline__ void route_bias(const float* bias, int E, float (&bv)[EPL]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < EPL; ++i) bv[i] = bias && lane + 32 * i < E ? bias[lane + 32 * i] : 0.0f;
}

// A score as an unsigned key in the same order (larger score, larger key; -0 as +0, so that they tie as floats
// do): the warp's maximum in one redux.sync.
__device__ __forceinline__ unsigned route_key(float v) {
  const unsigned u = v == 0.0f ? 0u : __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// f(k) for k = 0 .. K-1 (K <= 8). Up to 8 experts per lane the loop is unrolled to 8 with a break at K, so that
// arrays indexed by k (a token's picks and weights) stay in registers; indexed by the run-time K they were a
// 64-byte stack frame. Past 8 per lane (V4-Pro's 384 experts) unrolling spilled under the fused kernel's register
// budget, so those keep the loop.
template <int EPL, class F>
__device__ __forceinline__ void route_for_k(int K, F&& f) {
  if constexpr (EPL <= 8) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (k >= K) break;
      f(k);
    }
  } else {
    for (int k = 0; k < K; ++k) f(k);
  }
}

// bias: this lane's biases (bv[i] for expert lane + 32 i; zeros with a hash table), read by the caller before
// pdl_wait (a weight). hash_row: the token's K experts from tid2eid, or null. s: E floats of shared memory for
// this warp. scored: s already holds the token's scores (route_scores_block; elementwise functions only).
// Every lane gets pick[0..K); lane 0 also gets weight[0..K).
template <int EPL>
__device__ void route_token(const float* logits, int E, int K, int func, const float (&bv)[EPL], const int* hash_row,
                            bool norm_topk, float route_scale, float* s, int (&pick)[8], float (&weight)[8],
                            bool scored = false) {
  const int lane = threadIdx.x & 31;
  float sv[EPL];
#pragma unroll
  for (int i = 0; i < EPL; ++i) sv[i] = lane + 32 * i < E ? (scored ? s : logits)[lane + 32 * i] : 0.0f;
  if (!scored) {
    if (func == 2) {  // softmax
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < EPL; ++i)
        if (lane + 32 * i < E) mx = fmaxf(mx, sv[i]);
      mx = warp_max(mx);
      float sum = 0;
#pragma unroll
      for (int i = 0; i < EPL; ++i)
        if (lane + 32 * i < E) sum += (sv[i] = expf(sv[i] - mx));
      sum = warp_sum(sum);
#pragma unroll
      for (int i = 0; i < EPL; ++i) sv[i] /= sum;
    } else {
#pragma unroll
      for (int i = 0; i < EPL; ++i) sv[i] = route_score(sv[i], func);
    }
#pragma unroll
    for (int i = 0; i < EPL; ++i)
      if (lane + 32 * i < E) s[lane + 32 * i] = sv[i];
  }
  __syncwarp();
  if (hash_row) {
    route_for_k<EPL>(K, [&](int k) { pick[k] = hash_row[k]; });
  } else {
    uint32_t taken = 0;  // bit i: expert lane + 32 i already picked
    route_for_k<EPL>(K, [&](int k) {
      float best = -INFINITY;
      int bi = 0x7fffffff;
#pragma unroll
      for (int i = 0; i < EPL; ++i) {
        const int e = lane + 32 * i;
        const float v = sv[i] + bv[i];
        if (e < E && !((taken >> i) & 1u) && (v > best || (v == best && e < bi))) {
          best = v;
          bi = e;
        }
      }
      // The warp's argmax as two redux.sync: the largest key, then the lowest expert holding it (measured 0.4 us
      // faster per routing launch and ~1 us per V4-Flash layer than a 5-level shuffle tree of (score, expert) pairs).
      const unsigned key = bi < E ? route_key(best) : 0u;  // 0: below every score's key (-inf's is 0x007fffff)
      const unsigned top = __reduce_max_sync(0xffffffffu, key);
      bi = int(__reduce_min_sync(0xffffffffu, key == top ? unsigned(bi) : 0xffffffffu));
      pick[k] = bi;
      if (bi < E && (bi & 31) == lane) taken |= 1u << (bi >> 5);  // bi stays unset only if no score compares
    });
  }
  if (lane == 0) {
    float sum = 0;
    route_for_k<EPL>(K, [&](int k) { sum += (weight[k] = s[pick[k]]); });
    route_for_k<EPL>(K, [&](int k) {
      float v = weight[k];
      if (norm_topk) v /= (sum + 1e-20f);
      weight[k] = v * route_scale;
    });
  }
  __syncwarp();  // s is reused by the warp's next token
}

// f(std::integral_constant<int, EPL>{}) for E experts: EPL (experts per lane, the route kernels' template
// argument) is the first of 1, 2, 4, 8, 12, 16 (and 32 when kMaxEPL is 32) with 32 * EPL >= E; the caller has
// checked E against its own limit.
template <int kMaxEPL, class F>
decltype(auto) with_experts_per_lane(int E, F&& f) {
  static_assert(kMaxEPL == 16 || kMaxEPL == 32, "EPL cap");
  const int per_lane = (E + 31) / 32;
  if (per_lane <= 1) return f(std::integral_constant<int, 1>{});
  if (per_lane <= 2) return f(std::integral_constant<int, 2>{});
  if (per_lane <= 4) return f(std::integral_constant<int, 4>{});
  if (per_lane <= 8) return f(std::integral_constant<int, 8>{});
  if (per_lane <= 12) return f(std::integral_constant<int, 12>{});
  if constexpr (kMaxEPL == 32)
    if (per_lane > 16) return f(std::integral_constant<int, 32>{});
  return f(std::integral_constant<int, 16>{});
}

}  // namespace moeserve::cuda::dev
