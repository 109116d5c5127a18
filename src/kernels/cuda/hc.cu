// mHC (manifold-constrained hyper-connections) on the GPU (kernels/cpu/hyper_connection.h):
//  hc_mix_partial: one pass over the hc streams of each token, split along the hc*D width across blocks so a
//    single decode token still spreads over the chip; each block adds its slice's dot products with the mix
//    weights fn and its sum of squares;
//  hc_pre_finish: per token, sums the splits, applies the RMS factor, sigmoid / Sinkhorn, collapses the
//    streams and (fused) RMS-normalises the collapsed row with the block's norm weight;
//  hc_post: the residual update of all streams in one pass.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kMixThreads = 256;
constexpr int kMixTokens = 4;  // tokens per block: fn is read once per 4 tokens

template <int MIX>
__global__ void __launch_bounds__(kMixThreads) hc_mix_kernel(const float* h, int T, int width, const float* fn,
                                                              int chunk, float* partial) {
  const int split = blockIdx.x, t0 = blockIdx.y * kMixTokens;
  const int begin = split * chunk, end = min(width, begin + chunk);
  float acc[kMixTokens][MIX + 1];
#pragma unroll
  for (int i = 0; i < kMixTokens; ++i)
#pragma unroll
    for (int m = 0; m <= MIX; ++m) acc[i][m] = 0.0f;
  for (int e = begin + threadIdx.x; e < end; e += kMixThreads) {
    float hv[kMixTokens];
#pragma unroll
    for (int i = 0; i < kMixTokens; ++i) hv[i] = (t0 + i < T) ? h[size_t(t0 + i) * width + e] : 0.0f;
#pragma unroll
    for (int m = 0; m < MIX; ++m) {
      const float f = fn[size_t(m) * width + e];
#pragma unroll
      for (int i = 0; i < kMixTokens; ++i) acc[i][m] += hv[i] * f;
    }
#pragma unroll
    for (int i = 0; i < kMixTokens; ++i) acc[i][MIX] += hv[i] * hv[i];
  }
  __shared__ float red[kMixThreads / 32][kMixTokens * (MIX + 1)];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kMixTokens; ++i)
#pragma unroll
    for (int m = 0; m <= MIX; ++m) {
      float v = warp_sum(acc[i][m]);
      if (lane == 0) red[warp][i * (MIX + 1) + m] = v;
    }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kMixTokens * (MIX + 1); idx += kMixThreads) {
    const int i = idx / (MIX + 1), m = idx % (MIX + 1);
    if (t0 + i >= T) continue;
    float s = 0;
    for (int w = 0; w < kMixThreads / 32; ++w) s += red[w][idx];
    partial[(size_t(split) * T + t0 + i) * (MIX + 1) + m] = s;
  }
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// One block per token. The split sums are spread over the warps (lanes stride over the splits); warp 0 then
// evaluates post and the Sinkhorn iterations with one matrix element per lane while the other warps collapse
// the streams with the pre weights and RMS-normalise the row, so the two latency-bound parts overlap (at one
// decode token the kernel is a single block).
__global__ void hc_finish_kernel(const float* partial, int splits, const float* h, int T, int hc, int dim, int mix,
                                 const float* base, const float* scale, int iters, float hc_eps, float norm_eps,
                                 const float* norm_w, float* collapsed, float* post, float* comb) {
  extern __shared__ float row[];  // [dim]
  __shared__ float mixes[64];
  __shared__ float cs[32];
  __shared__ double red[32];
  const int t = blockIdx.x;
  const int width = hc * dim;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int m = warp; m <= mix; m += warps) {
    double s = 0;
    for (int k = lane; k < splits; k += 32) s += double(partial[(size_t(k) * T + t) * (mix + 1) + m]);
    s = warp_sum(s);
    if (lane == 0) mixes[m] = float(s);
  }
  __syncthreads();
  const float r = float(1.0 / sqrt(double(mixes[mix]) / double(width) + double(norm_eps)));
  if (warp == 0) {
    // post and the Sinkhorn iterations (latency-bound, one matrix element per lane) run in warp 0 while the
    // other warps collapse the streams.
    if (mix > hc) {
      if (lane < hc) post[size_t(t) * hc + lane] = 2.0f * sigmoidf(mixes[hc + lane] * r * scale[1] + base[hc + lane]);
      const bool act = lane < hc * hc;
      const int rr = act ? lane / hc : 0, kk = act ? lane % hc : 0;
      const float v = act ? mixes[2 * hc + lane] * r * scale[2] + base[2 * hc + lane] : 0.0f;
      cs[lane] = v;
      __syncwarp();
      float mx = -INFINITY;
      for (int k = 0; k < hc; ++k) mx = fmaxf(mx, cs[rr * hc + k]);
      __syncwarp();
      const float e = expf(v - mx);
      cs[lane] = e;
      __syncwarp();
      float sum = 0;
      for (int k = 0; k < hc; ++k) sum += cs[rr * hc + k];
      __syncwarp();
      float c = e / sum + hc_eps;
      for (int it = 0; it < iters; ++it) {
        if (it > 0) {  // rows, then columns (the first pass is columns only)
          cs[lane] = c;
          __syncwarp();
          float rs = 0;
          for (int k = 0; k < hc; ++k) rs += cs[rr * hc + k];
          __syncwarp();
          c /= (rs + hc_eps);
        }
        cs[lane] = c;
        __syncwarp();
        float colsum = 0;
        for (int q = 0; q < hc; ++q) colsum += cs[q * hc + kk];
        __syncwarp();
        c /= (colsum + hc_eps);
      }
      if (act) comb[size_t(t) * hc * hc + lane] = c;
    }
    return;
  }
  // Warps 1..: the pre weights (each thread evaluates the hc sigmoids itself: no barrier), the collapsed row
  // and its RMS norm, reduced among these warps with a named barrier.
  float pre[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) pre[j] = j < hc ? sigmoidf(mixes[j] * r * scale[0] + base[j]) + hc_eps : 0.0f;
  const int tid = threadIdx.x - 32, nthreads = blockDim.x - 32;
  const float* ht = h + size_t(t) * width;
  double ss = 0;
  for (int d = tid; d < dim; d += nthreads) {
    float acc = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < hc) acc += pre[j] * ht[size_t(j) * dim + d];
    row[d] = acc;
    ss += double(acc) * double(acc);
  }
  float* out = collapsed + size_t(t) * dim;
  if (norm_w) {
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
    double total = 0;
    for (int w = 1; w < warps; ++w) total += red[w];
    const float sc = float(1.0 / sqrt(total / double(dim) + double(norm_eps)));
    for (int d = tid; d < dim; d += nthreads) out[d] = row[d] * sc * norm_w[d];
  } else {
    for (int d = tid; d < dim; d += nthreads) out[d] = row[d];
  }
}

template <int HC>
__global__ void hc_post_kernel(float* h, int T, int dim, const float* y, const float* post, const float* comb) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(T) * dim) return;
  const int t = int(i / dim), d = int(i % dim);
  float* ht = h + size_t(t) * HC * dim;
  float old[HC];
#pragma unroll
  for (int j = 0; j < HC; ++j) old[j] = ht[size_t(j) * dim + d];
  const float yv = y[size_t(t) * dim + d];
  const float* c = comb + size_t(t) * HC * HC;
#pragma unroll
  for (int k = 0; k < HC; ++k) {
    float acc = post[size_t(t) * HC + k] * yv;
#pragma unroll
    for (int j = 0; j < HC; ++j) acc += c[j * HC + k] * old[j];
    ht[size_t(k) * dim + d] = acc;
  }
}

}  // namespace

int hc_mix_splits(int width) { return (width + 255) / 256; }

cudaError_t hc_mix_partial(const float* h, int T, int width, const float* fn, int mix, int splits, float* partial,
                           cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  const int chunk = (width + splits - 1) / splits;
  dim3 grid(splits, (T + kMixTokens - 1) / kMixTokens);
  if (mix == 24)
    hc_mix_kernel<24><<<grid, kMixThreads, 0, stream>>>(h, T, width, fn, chunk, partial);
  else if (mix == 4)
    hc_mix_kernel<4><<<grid, kMixThreads, 0, stream>>>(h, T, width, fn, chunk, partial);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t hc_pre_finish(const float* partial, int splits, const float* h, int T, int hc, int dim, int mix,
                          const float* base, const float* scale, int sinkhorn_iters, float hc_eps, float norm_eps,
                          const float* norm_w, float* collapsed, float* post, float* comb, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  if (hc > 8 || mix > 63) return cudaErrorInvalidValue;
  hc_finish_kernel<<<T, 256, dim * sizeof(float), stream>>>(partial, splits, h, T, hc, dim, mix, base, scale,
                                                             sinkhorn_iters, hc_eps, norm_eps, norm_w, collapsed,
                                                             post, comb);
  return cudaGetLastError();
}

cudaError_t hc_post(float* h, int T, int hc, int dim, const float* y, const float* post, const float* comb,
                    cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  const unsigned blocks = unsigned((size_t(T) * dim + 255) / 256);
  if (hc == 4)
    hc_post_kernel<4><<<blocks, 256, 0, stream>>>(h, T, dim, y, post, comb);
  else if (hc == 2)
    hc_post_kernel<2><<<blocks, 256, 0, stream>>>(h, T, dim, y, post, comb);
  else if (hc == 1)
    hc_post_kernel<1><<<blocks, 256, 0, stream>>>(h, T, dim, y, post, comb);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace moeserve::cuda
