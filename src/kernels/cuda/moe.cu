// MoE routing and grouping (kernels/cuda/ops.h; reference model/moe.cpp): the router's scores and expert
// choice, the grouping of (token, slot) pairs into per-expert row ranges that the grouped GEMV consumes, and
// the ordered combine. No host synchronisation: the active expert groups stay on the device.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/route.cuh"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kRouteWarps = 4;           // tokens a block routes, a warp each (prefill sizes)
constexpr int kRouteSoloThreads = 256;   // decode sizes: a block per token, whose threads score it together
constexpr int kRouteSoloMaxTokens = 64;  // up to here (one block per token then fills at most 64 SMs)
constexpr int kMaxExperts = 1024;

// One warp per token picks its experts (route.cuh). With one token a block (tokens_per_block 1, decode sizes) the
// block's threads score the token together first (the elementwise score functions), so that a decode step's
// token is scored by 256 threads instead of one warp's lanes in turn (~0.9 us of a one-token launch on an H100).
// Scoring a block's 8 tokens together instead was slower at 8-64 tokens (the same scores per thread, on fewer SMs).
// The bias is a weight, read before pdl_wait.
template <int EPL>
__global__ void route_kernel(const float* logits, int T, int E, int K, int func, const float* bias,
                             const int* tid2eid, const int* token_ids, bool norm_topk, float route_scale, int* chosen,
                             float* weight, int tokens_per_block) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float bv[EPL];
  route_bias(bias, E, bv);
  dev::pdl_begin();
  extern __shared__ float sm[];  // a warp's token's scores at warp * E (solo: the block's token at 0)
  const bool solo = tokens_per_block == 1;
  const bool scored = solo && route_scores_elementwise(func);
  if (scored) route_scores_block(logits + size_t(blockIdx.x) * E, E, func, sm);
  const int t = blockIdx.x * tokens_per_block + (solo ? 0 : warp);
  if (t >= T || (solo && warp > 0)) return;
  int pick[8];
  float w[8];
  route_token<EPL>(logits + size_t(t) * E, E, K, func, bv, tid2eid ? tid2eid + size_t(token_ids[t]) * K : nullptr,
                   norm_topk, route_scale, sm + (solo ? 0 : warp) * E, pick, w, scored);
  if (lane == 0)
    route_for_k<EPL>(K, [&](int k) {
      chosen[size_t(t) * K + k] = pick[k];
      weight[size_t(t) * K + k] = w[k];
    });
}

// Single block: counts, offsets, active groups, rows.
__global__ void __launch_bounds__(1024) group_kernel(const int* chosen, const float* weight, int T, int K, int E,
                                                     int* group_expert, int* group_offset, int* group_count,
                                                     int* num_groups, int* row_of_slot, int* token_of_row,
                                                     float* weight_of_row) {
  dev::pdl_begin();
  __shared__ int count[kMaxExperts], offset[kMaxExperts], cursor[kMaxExperts];
  const int slots = T * K;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    count[e] = 0;
    cursor[e] = 0;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < slots; i += blockDim.x) atomicAdd(&count[chosen[i]], 1);
  __syncthreads();
  // Offsets and the active groups in expert order, by warp 0: lane l owns experts [l * per, (l + 1) * per), sums
  // their rows and active experts, and two warp scans give each lane where its own start. (Thread 0 walking all E
  // experts was a chain of E dependent shared-memory round trips: 3-8 us on a decode step's critical path.)
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, per = (E + 31) / 32, e0 = min(E, lane * per), e1 = min(E, e0 + per);
    int rows = 0, active = 0;
    for (int e = e0; e < e1; ++e) {
      rows += count[e];
      active += count[e] > 0;
    }
    int off = rows, g = active;  // inclusive scans, then exclusive
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, off, d), h = __shfl_up_sync(0xffffffffu, g, d);
      if (lane >= d) off += o, g += h;
    }
    if (lane == 31) *num_groups = g;
    off -= rows;
    g -= active;
    for (int e = e0; e < e1; ++e) {
      offset[e] = off;
      if (count[e] > 0) {
        group_expert[g] = e;
        group_offset[g] = off;
        group_count[g] = count[e];
        ++g;
      }
      off += count[e];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < slots; i += blockDim.x) {
    const int e = chosen[i];
    const int row = offset[e] + atomicAdd(&cursor[e], 1);
    row_of_slot[i] = row;
    token_of_row[row] = i / K;
    weight_of_row[row] = weight[i];
  }
}

__global__ void combine_kernel(const float* y, int D, const int* row_of_slot, int T, int K, float* out) {
  dev::pdl_begin();
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(T) * D) return;
  const int t = int(i / D), d = int(i % D);
  out[i] = add_expert_rows(out[i], y, row_of_slot, t, K, D, d);
}

}  // namespace

cudaError_t moe_route(const float* logits, int T, int E, int K, int func, const float* bias, const int* tid2eid,
                      const int* token_ids, bool norm_topk, float route_scale, int* chosen, float* weight,
                      cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  if (K > 8 || E > kMaxExperts || (!tid2eid && !bias)) return cudaErrorInvalidValue;
  return dev::with_experts_per_lane<32>(E, [&](auto epl) {
    const bool solo = T <= kRouteSoloMaxTokens;
    const int per_block = solo ? 1 : kRouteWarps;
    return dev::launch(route_kernel<decltype(epl)::value>, dim3((T + per_block - 1) / per_block),
                       dim3(solo ? kRouteSoloThreads : kRouteWarps * 32), per_block * E * sizeof(float), stream, logits,
                       T, E, K, func, bias, tid2eid, token_ids, norm_topk, route_scale, chosen, weight, per_block);
  });
}

int moe_group_work_ints(int E) { return 2 * E; }

cudaError_t moe_group(const int* chosen, const float* weight, int T, int K, int E, int* /*work*/, int* group_expert,
                      int* group_offset, int* group_count, int* num_groups, int* row_of_slot, int* token_of_row,
                      float* weight_of_row, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  if (E > kMaxExperts) return cudaErrorInvalidValue;
  dev::launch(group_kernel, dim3(1), dim3(1024), 0, stream, chosen, weight, T, K, E, group_expert, group_offset,
              group_count, num_groups, row_of_slot, token_of_row, weight_of_row);
  return cudaGetLastError();
}

cudaError_t moe_combine(const float* y, int D, const int* row_of_slot, int T, int K, float* out,
                        cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  dev::launch(combine_kernel, dim3(unsigned((size_t(T) * D + 255) / 256)), dim3(256), 0, stream, y, D, row_of_slot, T,
              K, out);
  return cudaGetLastError();
}

}  // namespace moeserve::cuda
