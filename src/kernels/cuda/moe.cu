// MoE routing and grouping (kernels/cuda/ops.h; reference model/moe.cpp): the router's scores and expert
// choice, the grouping of (token, slot) pairs into per-expert row ranges that the grouped GEMV consumes, and
// the ordered combine. No host synchronisation: the active expert groups stay on the device.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kRouteWarps = 4;
constexpr int kMaxExperts = 1024;

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// One warp per token; lane l holds experts l, l + 32, ... (EPL of them) in registers, so the top-k passes are
// register compares and shuffles (a decode step routes one token: this warp is the whole kernel). The bias is a
// weight, read before pdl_wait.
template <int EPL>
__global__ void route_kernel(const float* logits, int T, int E, int K, int func, const float* bias,
                             const int* tid2eid, const int* token_ids, bool norm_topk, float route_scale, int* chosen,
                             float* weight) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float bv[EPL];
#pragma unroll
  for (int i = 0; i < EPL; ++i) bv[i] = bias && lane + 32 * i < E ? bias[lane + 32 * i] : 0.0f;
  dev::pdl_begin();
  extern __shared__ float sm[];
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= T) return;
  float* s = sm + warp * E;
  const float* l = logits + size_t(t) * E;
  float sv[EPL];
#pragma unroll
  for (int i = 0; i < EPL; ++i) sv[i] = lane + 32 * i < E ? l[lane + 32 * i] : 0.0f;
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
    for (int i = 0; i < EPL; ++i) sv[i] = func == 0 ? sqrtf(softplus(sv[i])) : 1.0f / (1.0f + expf(-sv[i]));
  }
#pragma unroll
  for (int i = 0; i < EPL; ++i)
    if (lane + 32 * i < E) s[lane + 32 * i] = sv[i];
  __syncwarp();
  int pick[8];
  if (tid2eid) {
    for (int k = 0; k < K; ++k) pick[k] = tid2eid[size_t(token_ids[t]) * K + k];
  } else {
    uint32_t taken = 0;  // bit i: expert lane + 32 i already picked
    for (int k = 0; k < K; ++k) {
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
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ob > best || (ob == best && oi < bi)) {
          best = ob;
          bi = oi;
        }
      }
      pick[k] = bi;
      if (bi < E && (bi & 31) == lane) taken |= 1u << (bi >> 5);  // bi stays unset only if no score compares
    }
  }
  if (lane == 0) {
    float sum = 0, w[8];
    for (int k = 0; k < K; ++k) sum += (w[k] = s[pick[k]]);
    for (int k = 0; k < K; ++k) {
      float v = w[k];
      if (norm_topk) v /= (sum + 1e-20f);
      v *= route_scale;
      chosen[size_t(t) * K + k] = pick[k];
      weight[size_t(t) * K + k] = v;
    }
  }
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
  if (threadIdx.x == 0) {
    int off = 0, g = 0;
    for (int e = 0; e < E; ++e) {
      offset[e] = off;
      if (count[e] > 0) {
        group_expert[g] = e;
        group_offset[g] = off;
        group_count[g] = count[e];
        ++g;
      }
      off += count[e];
    }
    *num_groups = g;
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
  float acc = out[i];
  for (int k = 0; k < K; ++k) acc += y[size_t(row_of_slot[t * K + k]) * D + d];
  out[i] = acc;
}

}  // namespace

cudaError_t moe_route(const float* logits, int T, int E, int K, int func, const float* bias, const int* tid2eid,
                      const int* token_ids, bool norm_topk, float route_scale, int* chosen, float* weight,
                      cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  if (K > 8 || E > kMaxExperts || (!tid2eid && !bias)) return cudaErrorInvalidValue;
  auto run = [&](auto kernel) {
    return dev::launch(kernel, dim3((T + kRouteWarps - 1) / kRouteWarps), dim3(kRouteWarps * 32),
                       kRouteWarps * E * sizeof(float), stream, logits, T, E, K, func, bias, tid2eid, token_ids,
                       norm_topk, route_scale, chosen, weight);
  };
  const int per_lane = (E + 31) / 32;
  if (per_lane <= 1) return run(route_kernel<1>);
  if (per_lane <= 2) return run(route_kernel<2>);
  if (per_lane <= 4) return run(route_kernel<4>);
  if (per_lane <= 8) return run(route_kernel<8>);
  if (per_lane <= 12) return run(route_kernel<12>);
  if (per_lane <= 16) return run(route_kernel<16>);
  return run(route_kernel<32>);
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
