// mHC (manifold-constrained hyper-connections) on the GPU (kernels/cpu/hyper_connection.h):
//  hc_mix_partial: one pass over the hc streams of each token, split along the hc*D width across blocks so a
//    single decode token still spreads over the chip; each block adds its slice's dot products with the mix
//    weights fn and its sum of squares;
//  hc_pre_finish: per token, sums the splits, applies the RMS factor, sigmoid / Sinkhorn, collapses the
//    streams and (fused) RMS-normalises the collapsed row with the block's norm weight;
//  hc_post: the residual update of all streams in one pass;
//  hc_post_mix: hc_post and the next hc_mix_partial in one pass (decode-sized steps).
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kMixThreads = 256;
// hc_mix_kernel takes kMixTokens tokens a block (fn is read once per block); from kMixWideT tokens on, where that
// pass is bound by re-reading fn from L2 (1.6 GB for 4096 tokens), hc_mix_tiles_kernel takes over.
constexpr int kMixTokens = 4, kMixWideT = 2048;

template <int MIX>
__global__ void __launch_bounds__(kMixThreads) hc_mix_kernel(const float* h, int T, int width, const float* fn,
                                                              int chunk, float* partial) {
  dev::pdl_begin();
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
  // The warp's kMixTokens * (MIX + 1) sums by halving exchanges (at 32 tokens, 5 shuffles per sum took 8.8 us of the
  // launch); lane l then holds sums l * kPer ... l * kPer + kPer - 1.
  constexpr int kVals = kMixTokens * (MIX + 1), kPad = (kVals + 31) / 32 * 32, kPer = kPad / 32;
  __shared__ float red[kMixThreads / 32][kVals];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float v[kPad];
#pragma unroll
  for (int idx = 0; idx < kPad; ++idx) v[idx] = idx < kVals ? acc[idx / (MIX + 1)][idx % (MIX + 1)] : 0.0f;
  warp_sum_scatter(v);
#pragma unroll
  for (int j = 0; j < kPer; ++j)
    if (lane * kPer + j < kVals) red[warp][lane * kPer + j] = v[j];
  __syncthreads();
  for (int idx = threadIdx.x; idx < kMixTokens * (MIX + 1); idx += kMixThreads) {
    const int i = idx / (MIX + 1), m = idx % (MIX + 1);
    if (t0 + i >= T) continue;
    float s = 0;
    for (int w = 0; w < kMixThreads / 32; ++w) s += red[w][idx];
    partial[(size_t(split) * T + t0 + i) * (MIX + 1) + m] = s;
  }
}

// hc_mix_partial for prefill-sized T (from kMixWideT tokens). The kernel above, run here at 8 tokens a block before,
// held 200 accumulators a thread (254 registers, one block of 8 warps per SM): each pass's loads were a memory round
// trip with nothing else in flight (nsys: 250 us for 4096 V4-Flash tokens, 268 MB, against 63 us of bandwidth). Here a
// block takes kMixTileTokens tokens and walks its split of the width in tiles of kMixTileCols columns; the tokens' rows
// and fn's rows of a tile reach shared memory by cp.async, kMixStages tiles in flight (112 KB; one block an SM: two, at
// 3 stages and 128 registers, measured no faster). Warp w then takes tokens 4w .. 4w + 3 of the tile, lane l
// columns 4l .. 4l + 3: each fn value read from shared memory serves 4 tokens' FMAs. The lanes' sums are added by
// the warp at the end. The prefill layer's hc_mix pass: ~250 -> ~170 us at 4096 tokens (nsys).
constexpr int kMixTileTokens = 32, kMixWarpTokens = kMixTileTokens / (kMixThreads / 32), kMixTileCols = 128,
              kMixStages = 4;
template <int MIX>
constexpr size_t mix_tiles_smem() {
  return size_t(kMixStages) * (kMixTileTokens + MIX) * kMixTileCols * sizeof(float);
}

template <int MIX>
__global__ void __launch_bounds__(kMixThreads)
    hc_mix_tiles_kernel(const float* h, int T, int width, const float* fn, int chunk, float* partial) {
  extern __shared__ float4 tiles[];  // [stage][kMixTileTokens + MIX rows][kMixTileCols / 4]
  constexpr int kRows = kMixTileTokens + MIX, kQuads = kMixTileCols / 4;
  const int split = blockIdx.x, t0 = blockIdx.y * kMixTileTokens;
  const int begin = split * chunk, end = min(width, begin + chunk);
  const int n_tiles = end > begin ? (end - begin + kMixTileCols - 1) / kMixTileCols : 0;
  dev::pdl_begin();
  // Tile i into stage i % kMixStages: rows of h past T and columns past the split read as zeros.
  auto issue = [&](int i) {
    if (i < n_tiles) {
      float4* st = tiles + size_t(i % kMixStages) * kRows * kQuads;
      const int e0 = begin + i * kMixTileCols;
      for (int idx = threadIdx.x; idx < kRows * kQuads; idx += kMixThreads) {
        const int r = idx / kQuads, e = e0 + (idx % kQuads) * 4;
        const bool tok = r < kMixTileTokens;
        const bool in = e < end && (!tok || t0 + r < T);
        const float* src = tok ? h + size_t(in ? t0 + r : 0) * width : fn + size_t(r - kMixTileTokens) * width;
        dev::cp_async16(st + idx, src + (in ? e : 0), in ? 16 : 0);
      }
    }
    dev::cp_async_commit();  // an empty group past the last tile keeps the count of groups in flight uniform
  };
#pragma unroll
  for (int i = 0; i < kMixStages - 1; ++i) issue(i);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float acc[kMixWarpTokens][MIX + 1];
#pragma unroll
  for (int i = 0; i < kMixWarpTokens; ++i)
#pragma unroll
    for (int m = 0; m <= MIX; ++m) acc[i][m] = 0.0f;
  for (int i = 0; i < n_tiles; ++i) {
    dev::cp_async_wait_group<kMixStages - 2>();  // this thread's copies of tile i have landed
    __syncthreads();                             // everyone's have, and tile i - 1's stage is free again
    issue(i + kMixStages - 1);
    const float4* st = tiles + size_t(i % kMixStages) * kRows * kQuads;
    float4 x[kMixWarpTokens];
#pragma unroll
    for (int j = 0; j < kMixWarpTokens; ++j) {
      x[j] = st[(warp * kMixWarpTokens + j) * kQuads + lane];
      acc[j][MIX] += x[j].x * x[j].x + x[j].y * x[j].y + x[j].z * x[j].z + x[j].w * x[j].w;
    }
#pragma unroll
    for (int m = 0; m < MIX; ++m) {
      const float4 f = st[(kMixTileTokens + m) * kQuads + lane];
#pragma unroll
      for (int j = 0; j < kMixWarpTokens; ++j) acc[j][m] += x[j].x * f.x + x[j].y * f.y + x[j].z * f.z + x[j].w * f.w;
    }
  }
  dev::cp_async_wait_all();
  // The lanes' sums, 32 values at a time: lane l ends with value g * 32 + l of the warp's flattened accumulators.
  constexpr int kVals = kMixWarpTokens * (MIX + 1);
#pragma unroll
  for (int g = 0; g < (kVals + 31) / 32; ++g) {
    float v[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) {
      const int idx = g * 32 + k;
      v[k] = idx < kVals ? acc[idx / (MIX + 1)][idx % (MIX + 1)] : 0.0f;
    }
    warp_sum_scatter(v);
    const int idx = g * 32 + lane, t = t0 + warp * kMixWarpTokens + idx / (MIX + 1);
    if (idx < kVals && t < T) partial[(size_t(split) * T + t) * (MIX + 1) + idx % (MIX + 1)] = v[0];
  }
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// One warp: a token's post weights (lanes < HC) and its Sinkhorn-normalised comb matrix (lane = row * HC + column),
// from its summed mixes (mixes[HC ..] post then comb) and RMS factor r; cs: 32 floats of shared memory for the
// warp's exchanges. Latency-bound: ~20 dependent iterations of shared-memory round trips.
template <int HC>
__device__ __forceinline__ void post_and_comb(const float* mixes, float r, float post_scale, float post_base,
                                              float comb_scale, float comb_base, int iters, float hc_eps, float* cs,
                                              float* post_t, float* comb_t) {
  const int lane = threadIdx.x & 31;
  if (lane < HC) post_t[lane] = 2.0f * sigmoidf(mixes[HC + lane] * r * post_scale + post_base);
  const bool act = lane < HC * HC;
  const int rr = act ? lane / HC : 0, kk = act ? lane % HC : 0;
  const float v = act ? mixes[2 * HC + lane] * r * comb_scale + comb_base : 0.0f;
  cs[lane] = v;
  __syncwarp();
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < HC; ++k) mx = fmaxf(mx, cs[rr * HC + k]);
  __syncwarp();
  const float e = expf(v - mx);
  cs[lane] = e;
  __syncwarp();
  float sum = 0;
#pragma unroll
  for (int k = 0; k < HC; ++k) sum += cs[rr * HC + k];
  __syncwarp();
  float c = e / sum + hc_eps;
  // c divided by the sum of its row (stride 1) or column (stride HC) of the matrix, from first.
  auto divide_by_sum = [&](int first, int stride) {
    cs[lane] = c;
    __syncwarp();
    float total = 0;
#pragma unroll
    for (int k = 0; k < HC; ++k) total += cs[first + k * stride];
    __syncwarp();
    c /= (total + hc_eps);
  };
  for (int it = 0; it < iters; ++it) {
    if (it > 0) divide_by_sum(rr * HC, 1);  // rows, then columns (the first pass is columns only)
    divide_by_sum(kk, HC);
  }
  if (act) comb_t[lane] = c;
}

// One block of 512 threads per token, built for the one-token decode case where it is the only block on the chip,
// so every load is issued before its value is needed (one memory latency for the whole row, not one per column):
// the weights (norm_w, base, scale) before pdl_wait, then each warp's share of the split sums (warp w sums mixes
// w, w + 16, ...; lanes stride over the splits) and each collapse thread's columns of the hc streams. Then warp 0
// evaluates post and the Sinkhorn iterations (latency-bound, one matrix element per lane) while warps 1..15
// collapse the streams with the pre weights and RMS-normalise the row among themselves (named barrier).
// part: Collapse skips post and the Sinkhorn (warp 0 leaves once the mixes are summed); Mix skips the h and norm_w
// loads and the collapse (warps 1..15 only help sum the mixes). Each part sums only the mixes it reads.
constexpr int kFinishThreads = 512;
constexpr int kFinishCollapse = kFinishThreads - 32;  // warps 1..15
constexpr int kFinishQuads = 4;                       // float4 columns per collapse thread per pass
constexpr int kFinishSplitLoads = 4;                  // split sums per lane in flight per pass

template <int HC>
__global__ void __launch_bounds__(kFinishThreads)
    hc_finish_kernel(const float* partial, int splits, const float* h, int T, int dim, int mix, const float* base,
                     const float* scale, int iters, float hc_eps, float norm_eps, const float* norm_w,
                     float* collapsed, float* post, float* comb, HcFinishPart part) {
  extern __shared__ float row[];  // [dim]: the collapsed row, for rows longer than one pass
  __shared__ float mixes[64];
  __shared__ float cs[32];
  __shared__ double red[32];
  const int t = blockIdx.x, quads = dim / 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int tid = threadIdx.x - 32;  // collapse thread index (warps 1..15)
  const int pass = kFinishQuads * kFinishCollapse;
  const bool do_collapse = part != HcFinishPart::Mix, do_mix = part != HcFinishPart::Collapse && mix > HC;
  float4 nw[kFinishQuads];
  if (warp > 0 && do_collapse && norm_w) {
#pragma unroll
    for (int q = 0; q < kFinishQuads; ++q) {
      const int c = tid + q * kFinishCollapse;
      nw[q] = c < quads ? reinterpret_cast<const float4*>(norm_w)[c] : make_float4(0, 0, 0, 0);
    }
  }
  // The pre/post/comb bases and scales, also weights: the collapse threads' pre terms, warp 0's post and comb.
  float pre_base[HC], pre_scale = 0.0f, post_base = 0.0f, comb_base = 0.0f, post_scale = 0.0f, comb_scale = 0.0f;
  if (warp > 0 && do_collapse) {
    pre_scale = scale[0];
#pragma unroll
    for (int j = 0; j < HC; ++j) pre_base[j] = base[j];
  }
  if (warp == 0 && do_mix) {
    post_scale = scale[1];
    comb_scale = scale[2];
    post_base = lane < HC ? base[HC + lane] : 0.0f;
    comb_base = lane < HC * HC ? base[2 * HC + lane] : 0.0f;
  }
  pdl_begin();

  // Every load in flight first: the split sums of this warp's mixes, and this thread's first pass of columns.
  const float4* ht = reinterpret_cast<const float4*>(h + size_t(t) * HC * dim);
  float4 hv[kFinishQuads][HC];
  if (warp > 0 && do_collapse) {
#pragma unroll
    for (int q = 0; q < kFinishQuads; ++q) {
      const int c = tid + q * kFinishCollapse;
#pragma unroll
      for (int j = 0; j < HC; ++j) hv[q][j] = c < quads ? ht[size_t(j) * quads + c] : make_float4(0, 0, 0, 0);
    }
  }
  for (int m = warp; m <= mix; m += kFinishThreads / 32) {
    // Mixes [0, HC): pre; [HC, mix): post and comb; mix: the sum of squares (the RMS factor both parts use).
    const bool needed = m == mix || (m < HC ? do_collapse : do_mix);
    if (!needed) continue;
    double s = 0;
    for (int k0 = 0; k0 < splits; k0 += 32 * kFinishSplitLoads) {
      float v[kFinishSplitLoads];
#pragma unroll
      for (int i = 0; i < kFinishSplitLoads; ++i) {
        const int k = k0 + lane + 32 * i;
        v[i] = k < splits ? partial[(size_t(k) * T + t) * (mix + 1) + m] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kFinishSplitLoads; ++i) s += double(v[i]);
    }
    s = warp_sum(s);
    if (lane == 0) mixes[m] = float(s);
  }
  __syncthreads();
  const float r = float(1.0 / sqrt(double(mixes[mix]) / double(HC * dim) + double(norm_eps)));
  if (warp == 0) {
    if (do_mix)
      post_and_comb<HC>(mixes, r, post_scale, post_base, comb_scale, comb_base, iters, hc_eps, cs,
                        post + size_t(t) * HC, comb + size_t(t) * HC * HC);
    return;
  }
  if (!do_collapse) return;
  // Warps 1..15: the pre weights (each thread evaluates the sigmoids itself: no barrier), the collapsed row and its
  // RMS norm. The first pass's columns stay in registers; longer rows go through shared memory.
  float pre[HC];
#pragma unroll
  for (int j = 0; j < HC; ++j) pre[j] = sigmoidf(mixes[j] * r * pre_scale + pre_base[j]) + hc_eps;
  float4 col[kFinishQuads];
  double ss = 0;
  for (int c0 = 0; c0 < quads; c0 += pass) {
    if (c0 > 0) {
#pragma unroll
      for (int q = 0; q < kFinishQuads; ++q) {
        const int c = c0 + tid + q * kFinishCollapse;
#pragma unroll
        for (int j = 0; j < HC; ++j) hv[q][j] = c < quads ? ht[size_t(j) * quads + c] : make_float4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int q = 0; q < kFinishQuads; ++q) {
      float4 a = make_float4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < HC; ++j) {
        a.x += pre[j] * hv[q][j].x;
        a.y += pre[j] * hv[q][j].y;
        a.z += pre[j] * hv[q][j].z;
        a.w += pre[j] * hv[q][j].w;
      }
      ss += double(a.x) * a.x + double(a.y) * a.y + double(a.z) * a.z + double(a.w) * a.w;
      const int c = c0 + tid + q * kFinishCollapse;
      if (c0 == 0) col[q] = a;
      else if (c < quads) reinterpret_cast<float4*>(row)[c] = a;
    }
  }
  float4* out = reinterpret_cast<float4*>(collapsed + size_t(t) * dim);
  float sc = 1.0f;
  if (norm_w) {
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    asm volatile("bar.sync 1, %0;" ::"n"(kFinishCollapse) : "memory");
    double total = 0;
    for (int w = 1; w < kFinishThreads / 32; ++w) total += red[w];
    sc = float(1.0 / sqrt(total / double(dim) + double(norm_eps)));
  }
  for (int c0 = 0; c0 < quads; c0 += pass) {
#pragma unroll
    for (int q = 0; q < kFinishQuads; ++q) {
      const int c = c0 + tid + q * kFinishCollapse;
      if (c >= quads) continue;
      float4 a = c0 == 0 ? col[q] : reinterpret_cast<const float4*>(row)[c];
      if (norm_w) {
        const float4 w = c0 == 0 ? nw[q] : reinterpret_cast<const float4*>(norm_w)[c];
        a = make_float4(a.x * sc * w.x, a.y * sc * w.y, a.z * sc * w.z, a.w * sc * w.w);
      }
      out[c] = a;
    }
  }
}

// hc_pre_finish's Mix part for prefill-sized T: one warp per token, kTokenMixWarps tokens a block. In the 512-thread
// kernel above (one block per SM by its registers), every block holds its SM through warp 0's Sinkhorn chain while
// warps 1..15 wait at the exit: at 4096 tokens that is 31 waves of ~8 us (nsys, 245 us a launch). Here the chains
// of many small blocks overlap. Lane j sums mix HC + j over the splits in double, as the warps above do.
constexpr int kTokenMixWarps = 8;
constexpr int kTokenMixMinT = 264;  // two waves of the 512-thread blocks on 132 SMs; below, those chains overlap

template <int HC>
__global__ void __launch_bounds__(kTokenMixWarps * 32)
    hc_finish_mix_tokens_kernel(const float* partial, int splits, int T, int dim, int mix, const float* base,
                                const float* scale, int iters, float hc_eps, float norm_eps, float* post, float* comb) {
  __shared__ float mixes[kTokenMixWarps][64];
  __shared__ float cs[kTokenMixWarps][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.x * kTokenMixWarps + warp;
  const float post_scale = scale[1], comb_scale = scale[2];
  const float post_base = lane < HC ? base[HC + lane] : 0.0f;
  const float comb_base = lane < HC * HC ? base[2 * HC + lane] : 0.0f;
  pdl_begin();
  if (t >= T) return;
  const int m = HC + lane;  // post, comb, then the sum of squares at mix
  if (m <= mix) {
    double s = 0;
    for (int k = 0; k < splits; ++k) s += double(partial[(size_t(k) * T + t) * (mix + 1) + m]);
    mixes[warp][m] = float(s);
  }
  __syncwarp();
  const float r = float(1.0 / sqrt(double(mixes[warp][mix]) / double(HC * dim) + double(norm_eps)));
  post_and_comb<HC>(mixes[warp], r, post_scale, post_base, comb_scale, comb_base, iters, hc_eps, cs[warp],
                    post + size_t(t) * HC, comb + size_t(t) * HC * HC);
}

template <int HC>
__global__ void hc_post_kernel(float* h, int T, int dim, const float* y, const float* post, const float* comb) {
  dev::pdl_begin();
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

// hc_post followed by the next hc_mix_partial in one pass, for decode-sized T: thread (k, d) of a block owns
// stream k of column d (a block holds whole columns, so the in-place update needs only a block barrier between
// reading the old streams and writing the new ones), computes h[t, k, d] and adds its products with the next mix
// weights fn — read into registers before pdl_wait, they are weights — and its square; split = blockIdx.x.
// add (rows non-null): y + the token's expert rows, added in slot order (moe_combine's sum, folded in here).
template <int HC, int MIX>
__global__ void __launch_bounds__(kMixThreads)
    hc_post_mix_kernel(float* h, int dim, const float* y, const float* post, const float* comb, const float* fn,
                       int T, float* partial, HcAddRows add) {
  constexpr int kCols = kMixThreads / HC;
  const int k = threadIdx.x / kCols, d = blockIdx.x * kCols + threadIdx.x % kCols, t = blockIdx.y;
  const bool active = d < dim;
  const size_t e = size_t(k) * dim + d;  // index in the hc * dim width
  float f[MIX];
#pragma unroll
  for (int m = 0; m < MIX; ++m) f[m] = active ? fn[size_t(m) * HC * dim + e] : 0.0f;
  dev::pdl_begin();
  float* ht = h + size_t(t) * HC * dim;
  float old[HC];
#pragma unroll
  for (int j = 0; j < HC; ++j) old[j] = active ? ht[size_t(j) * dim + d] : 0.0f;
  float yv = active ? y[size_t(t) * dim + d] : 0.0f;
  if (add.rows && active) yv = add_expert_rows(yv, add.rows, add.row_of_slot, t, add.K, dim, d);
  const float* c = comb + size_t(t) * HC * HC;
  float acc = post[size_t(t) * HC + k] * yv;
#pragma unroll
  for (int j = 0; j < HC; ++j) acc += c[j * HC + k] * old[j];
  __syncthreads();  // every old value of these columns is read before any is replaced
  if (active) ht[e] = acc;
  float sums[MIX + 1];
#pragma unroll
  for (int m = 0; m < MIX; ++m) sums[m] = acc * f[m];
  sums[MIX] = acc * acc;
  constexpr int kPad = (MIX + 1 + 31) / 32 * 32, kPer = kPad / 32;
  __shared__ float red[kMixThreads / 32][MIX + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float v[kPad];
#pragma unroll
  for (int m = 0; m < kPad; ++m) v[m] = m <= MIX ? sums[m] : 0.0f;
  warp_sum_scatter(v);  // lane l: sums l * kPer ...
#pragma unroll
  for (int j = 0; j < kPer; ++j)
    if (lane * kPer + j <= MIX) red[warp][lane * kPer + j] = v[j];
  __syncthreads();
  for (int m = threadIdx.x; m <= MIX; m += kMixThreads) {
    float v = 0;
    for (int w = 0; w < kMixThreads / 32; ++w) v += red[w][m];
    partial[(size_t(blockIdx.x) * T + t) * (MIX + 1) + m] = v;
  }
}

}  // namespace

int hc_mix_splits(int width) { return (width + 255) / 256; }
// Enough (split, 4-token) blocks to fill the chip, no more: every split adds a reduction of (mix + 1) values per
// token and warp and a row of partials, so at prefill sizes the full split count cost more than the pass itself.
// From kMixWideT tokens (hc_mix_tiles_kernel, one block per SM by its registers and shared memory): enough splits
// that the 32-token blocks cover the SMs once.
int hc_mix_splits(int width, int T) {
  if (T >= kMixWideT) {
    const int blocks = (T + kMixTileTokens - 1) / kMixTileTokens;
    return std::max(1, std::min(hc_mix_splits(width), dev::sm_count() / blocks));
  }
  return std::max(1, std::min(hc_mix_splits(width), (1056 + T - 1) / std::max(T, 1)));
}

cudaError_t hc_mix_partial(const float* h, int T, int width, const float* fn, int mix, int splits, float* partial,
                           cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  if (mix != 24 && mix != 4) return cudaErrorInvalidValue;
  const bool aligned = width % 4 == 0 && reinterpret_cast<uintptr_t>(h) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(fn) % 16 == 0;
  if (T >= kMixWideT && aligned) {
    // Each split a whole number of tiles; trailing splits may be empty (their partials are zeros).
    const int chunk = ((width + splits - 1) / splits + kMixTileCols - 1) / kMixTileCols * kMixTileCols;
    const dim3 grid(splits, (T + kMixTileTokens - 1) / kMixTileTokens), block(kMixThreads);
    static const cudaError_t configured = [] {
      const cudaError_t e = cudaFuncSetAttribute(hc_mix_tiles_kernel<24>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 int(mix_tiles_smem<24>()));
      return e != cudaSuccess ? e
                              : cudaFuncSetAttribute(hc_mix_tiles_kernel<4>,
                                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     int(mix_tiles_smem<4>()));
    }();
    if (configured != cudaSuccess) return configured;
    if (mix == 24)
      return dev::launch(hc_mix_tiles_kernel<24>, grid, block, mix_tiles_smem<24>(), stream, h, T, width, fn, chunk,
                         partial);
    return dev::launch(hc_mix_tiles_kernel<4>, grid, block, mix_tiles_smem<4>(), stream, h, T, width, fn, chunk,
                       partial);
  }
  const int chunk = (width + splits - 1) / splits;
  const dim3 grid(splits, (T + kMixTokens - 1) / kMixTokens), block(kMixThreads);
  if (mix == 24)
    dev::launch(hc_mix_kernel<24>, grid, block, 0, stream, h, T, width, fn, chunk, partial);
  else
    dev::launch(hc_mix_kernel<4>, grid, block, 0, stream, h, T, width, fn, chunk, partial);
  return cudaGetLastError();
}

cudaError_t hc_pre_finish(const float* partial, int splits, const float* h, int T, int hc, int dim, int mix,
                          const float* base, const float* scale, int sinkhorn_iters, float hc_eps, float norm_eps,
                          const float* norm_w, float* collapsed, float* post, float* comb, cudaStream_t stream,
                          HcFinishPart part) {
  if (T == 0) return cudaSuccess;
  const bool head = mix <= hc;  // hc_head: no post/comb to compute
  if (mix > 63 || dim % 4 != 0 || (part == HcFinishPart::Mix && head) ||
      (part != HcFinishPart::Collapse && !head && (post == nullptr || comb == nullptr)))
    return cudaErrorInvalidValue;
  auto launch_finish = [&](auto kernel, HcFinishPart p) {
    // Shared row only for rows longer than one pass of the collapse threads.
    const size_t smem =
        p != HcFinishPart::Mix && dim > 4 * kFinishQuads * kFinishCollapse ? size_t(dim) * sizeof(float) : 0;
    return launch(kernel, dim3(T), dim3(kFinishThreads), smem, stream, partial, splits, h, T, dim, mix, base, scale,
                  sinkhorn_iters, hc_eps, norm_eps, norm_w, collapsed, post, comb, p);
  };
  // Prefill-sized T: post and the Sinkhorn comb in hc_finish_mix_tokens_kernel, the collapse in the per-token blocks.
  const bool token_mix = !head && part != HcFinishPart::Collapse && T >= kTokenMixMinT && mix + 1 - hc <= 32 &&
                         hc * hc <= 32;
  auto run = [&](auto finish, auto token_mix_kernel) {
    if (token_mix) {
      if (part == HcFinishPart::All) {
        const cudaError_t e = launch_finish(finish, HcFinishPart::Collapse);
        if (e != cudaSuccess) return e;
      }
      return launch(token_mix_kernel, dim3((T + kTokenMixWarps - 1) / kTokenMixWarps), dim3(kTokenMixWarps * 32), 0,
                    stream, partial, splits, T, dim, mix, base, scale, sinkhorn_iters, hc_eps, norm_eps, post, comb);
    }
    return launch_finish(finish, part);
  };
  switch (hc) {
    case 1: return run(hc_finish_kernel<1>, hc_finish_mix_tokens_kernel<1>);
    case 2: return run(hc_finish_kernel<2>, hc_finish_mix_tokens_kernel<2>);
    case 4: return run(hc_finish_kernel<4>, hc_finish_mix_tokens_kernel<4>);
    case 8: return run(hc_finish_kernel<8>, hc_finish_mix_tokens_kernel<8>);
    default: return cudaErrorInvalidValue;
  }
}

int hc_post_mix_splits(int hc, int dim) { return (dim + kMixThreads / hc - 1) / (kMixThreads / hc); }

cudaError_t hc_post_mix(float* h, int T, int hc, int dim, const float* y, const float* post, const float* comb,
                        const float* fn, int mix, float* partial, cudaStream_t stream, const HcAddRows& add) {
  if (T == 0) return cudaSuccess;
  if (hc != 4 || (mix != 24 && mix != 4) || (add.rows && (!add.row_of_slot || add.K <= 0)))
    return cudaErrorInvalidValue;
  const dim3 grid(hc_post_mix_splits(hc, dim), T);
  if (mix == 24)
    return dev::launch(hc_post_mix_kernel<4, 24>, grid, dim3(kMixThreads), 0, stream, h, dim, y, post, comb, fn, T,
                       partial, add);
  return dev::launch(hc_post_mix_kernel<4, 4>, grid, dim3(kMixThreads), 0, stream, h, dim, y, post, comb, fn, T,
                     partial, add);
}

cudaError_t hc_post(float* h, int T, int hc, int dim, const float* y, const float* post, const float* comb,
                    cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  const unsigned blocks = unsigned((size_t(T) * dim + 255) / 256);
  if (hc == 4)
    dev::launch(hc_post_kernel<4>, dim3(blocks), dim3(256), 0, stream, h, T, dim, y, post, comb);
  else if (hc == 2)
    dev::launch(hc_post_kernel<2>, dim3(blocks), dim3(256), 0, stream, h, T, dim, y, post, comb);
  else if (hc == 1)
    dev::launch(hc_post_kernel<1>, dim3(blocks), dim3(256), 0, stream, h, T, dim, y, post, comb);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace moeserve::cuda
