// Next-token sampling on the GPU (kernels/cuda/ops.h sample_rows; reference engine/sampler.cpp): one block per
// row. Ranks are composite 64-bit keys (logit order, then lower id first), so top-k is a radix select and
// top-p a binary search over the key threshold; the token is the first id (id order) whose cumulative
// probability exceeds u, as the reference draws it.
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kThreads = 1024;

__device__ __forceinline__ unsigned long long rank_key(float logit, int id) {
  const uint32_t u = __float_as_uint(logit);
  const uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(k) << 32) | static_cast<unsigned long long>(0xffffffffu - uint32_t(id));
}

// The row's passes visit this thread's ids i = threadIdx.x + j * blockDim.x in increasing order (so every
// per-thread sum keeps its order), with the loads of kSampleBatch ids issued before any is used: a rolled
// `for (i ...; i < vocab; i += blockDim.x)` loop waited one memory round trip per id (127 at a 129280-token vocab,
// per pass; the top-p search makes up to 64 passes).
constexpr int kSampleBatch = 8;
template <class F>
__device__ __forceinline__ void for_ids(const float* l, int vocab, F&& f) {
  for (int c0 = threadIdx.x; c0 < vocab; c0 += kSampleBatch * int(blockDim.x)) {
    float v[kSampleBatch];
#pragma unroll
    for (int j = 0; j < kSampleBatch; ++j) {
      const int i = c0 + j * int(blockDim.x);
      v[j] = i < vocab ? l[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kSampleBatch; ++j) {
      const int i = c0 + j * int(blockDim.x);
      if (i < vocab) f(i, v[j]);
    }
  }
}
// The same with each id's weight w[i] loaded beside its logit.
template <class F>
__device__ __forceinline__ void for_ids_w(const float* l, const double* w, int vocab, F&& f) {
  for (int c0 = threadIdx.x; c0 < vocab; c0 += kSampleBatch * int(blockDim.x)) {
    float v[kSampleBatch];
    double wv[kSampleBatch];
#pragma unroll
    for (int j = 0; j < kSampleBatch; ++j) {
      const int i = c0 + j * int(blockDim.x);
      v[j] = i < vocab ? l[i] : 0.0f;
      wv[j] = i < vocab ? w[i] : 0.0;
    }
#pragma unroll
    for (int j = 0; j < kSampleBatch; ++j) {
      const int i = c0 + j * int(blockDim.x);
      if (i < vocab) f(i, v[j], wv[j]);
    }
  }
}

__device__ double block_sum_d(double v) {
  __shared__ double red[32];
  return block_sum(v, red);
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int vocab, float temperature,
                                                          float top_p, int top_k, const double* u, int* tokens,
                                                          float* probs_out, double* work) {
  dev::pdl_begin();
  using Scan = cub::BlockScan<double, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ unsigned long long s_key;
  __shared__ int s_hist[256];
  __shared__ int s_token, s_last;
  __shared__ int s_rem;
  const int r = blockIdx.x;
  const float* l = logits + size_t(r) * vocab;
  // Greedy / the top key: argmax with ties to the lowest id.
  unsigned long long best = 0;
  for_ids(l, vocab, [&](int i, float li) {
    const unsigned long long k = rank_key(li, i);
    best = k > best ? k : best;
  });
  {
    __shared__ unsigned long long red[32];
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long v = __shfl_xor_sync(0xffffffffu, best, o);
      best = v > best ? v : best;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long b = 0;
      for (int w = 0; w < int(blockDim.x / 32); ++w) b = red[w] > b ? red[w] : b;
      s_key = b;
    }
    __syncthreads();
    best = s_key;
  }
  const int top_id = int(0xffffffffu - uint32_t(best & 0xffffffffu));
  if (temperature <= 0.0f) {
    if (threadIdx.x == 0) tokens[r] = top_id;
    if (probs_out)
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) probs_out[size_t(r) * vocab + i] = i == top_id ? 1.0f : 0.0f;
    return;
  }
  // top-k threshold: the top_k-th largest key (radix select, 8 bits at a time).
  unsigned long long kth = 0;
  if (top_k > 0 && top_k < vocab) {
    unsigned long long prefix = 0, mask = 0;
    int remaining = top_k;
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += blockDim.x) s_hist[i] = 0;
      __syncthreads();
      for_ids(l, vocab, [&](int i, float li) {
        const unsigned long long k = rank_key(li, i);
        if ((k & mask) == prefix) atomicAdd(&s_hist[(k >> shift) & 255], 1);
      });
      __syncthreads();
      if (threadIdx.x == 0) {
        int cum = 0, digit = 0;
        for (int dg = 255; dg >= 0; --dg) {
          if (cum + s_hist[dg] >= remaining) {
            digit = dg;
            break;
          }
          cum += s_hist[dg];
        }
        s_rem = remaining - cum;
        s_key = prefix | (static_cast<unsigned long long>(digit) << shift);
      }
      __syncthreads();
      prefix = s_key;
      remaining = s_rem;
      mask |= 255ull << shift;
      __syncthreads();
    }
    kth = prefix;  // keys are unique: exactly top_k keys are >= kth
  }
  const float mx = l[top_id];
  double* w = work + size_t(r) * vocab;
  double sum = 0;
  for_ids(l, vocab, [&](int i, float li) {
    const bool in = rank_key(li, i) >= kth;
    const double v = in ? exp(double(li - mx) / double(temperature)) : 0.0;
    w[i] = v;
    sum += v;
  });
  sum = block_sum_d(sum);
  unsigned long long thr = kth;
  if (top_p < 1.0f) {  // the largest key threshold whose mass still reaches top_p
    unsigned long long lo = kth, hi = best;
    while (lo < hi) {
      const unsigned long long mid = lo + (hi - lo + 1) / 2;
      double mass = 0;
      for_ids_w(l, w, vocab, [&](int i, float li, double wi) {
        if (rank_key(li, i) >= mid) mass += wi;
      });
      mass = block_sum_d(mass);
      if (mass / sum >= double(top_p)) lo = mid;
      else hi = mid - 1;
    }
    thr = lo;
  }
  double sum2 = 0;
  for_ids_w(l, w, vocab, [&](int i, float li, double wi) {
    if (rank_key(li, i) >= thr) sum2 += wi;
  });
  sum2 = block_sum_d(sum2);
  if (threadIdx.x == 0) {
    s_token = 0x7fffffff;
    s_last = -1;
  }
  __syncthreads();
  const double ur = u[r];
  double carry = 0;
  for (int c0 = 0; c0 < vocab; c0 += blockDim.x) {
    const int i = c0 + threadIdx.x;
    float p = 0.0f;
    if (i < vocab && rank_key(l[i], i) >= thr) p = float(w[i] / sum2);
    if (i < vocab && probs_out) probs_out[size_t(r) * vocab + i] = p;
    double incl, total;
    Scan(scan_storage).InclusiveSum(double(p), incl, total);
    if (p > 0.0f) {
      atomicMax(&s_last, i);
      if (ur < carry + incl) atomicMin(&s_token, i);
    }
    carry += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) tokens[r] = s_token != 0x7fffffff ? s_token : s_last;
}

}  // namespace

size_t sample_work_bytes(int rows, int vocab) { return size_t(rows) * vocab * sizeof(double); }

cudaError_t sample_rows(const float* logits, int rows, int vocab, float temperature, float top_p, int top_k,
                        const double* u, int* tokens, float* probs, void* work, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  dev::launch(sample_kernel, dim3(rows), dim3(kThreads), 0, stream, logits, vocab, temperature, top_p, top_k, u, tokens,
              probs, static_cast<double*>(work));
  return cudaGetLastError();
}

}  // namespace moeserve::cuda
