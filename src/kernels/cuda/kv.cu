// KV-side ops of a compressed attention layer (kernels/cuda/ops.h): the compressors (entry emission from the
// chunk's rows and the ring, ring update), the window ring update, the lightning indexer's scores and top-k.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"


namespace moeserve::cuda {

namespace {

using namespace dev;

__device__ __forceinline__ const float* ring_or_chunk(const CompressorArgs& a, int p, int start, int begin, int slot,
                                                     bool score) {
  if (p >= start) return (score ? a.score : a.kv) + size_t(begin + p - start) * a.ld;
  return a.state + (size_t(slot * 2 + (score ? 1 : 0)) * a.rows + p % a.rows) * a.width;
}

// One position's step of a feature's softmax pool with a running maximum (online softmax): the same sums as the
// reference's maximum-first pool, up to the rounding of the rescales. Padding (-inf scores) is skipped, as there.
__device__ __forceinline__ void pool_step(float v, float x, float& m, float& s, float& acc) {
  if (v == -INFINITY) return;
  if (v > m) {
    const float r = expf(m - v);  // 0 for the first position (m = -inf)
    s = s * r + 1.0f;
    acc = acc * r + x;
    m = v;
  } else {
    const float e = expf(v - m);
    s += e;
    acc += e * x;
  }
}

// Positions whose score and kv pairs a thread of compressor_emit_kernel loads before it uses any. More in flight
// (8 or 16) took the kernel to 68 / 96 registers and cost the layer's non-emitting steps (three in four on C4 layers,
// 127 in 128 on C128 ones) ~1 us, for about the same emitting step (docs/benchmarks/cuda-ops.md, thirty-sixth session).
constexpr int kBatch = 4;

// One block per token; emits when the token completes a block. One pass over the positions, kBatch at a time, with
// both of a thread's features in each load: 32 memory round trips at C128, 2 at C4, where the two passes of eight
// positions per feature before took 64 and 4.
__global__ void compressor_emit_kernel(BatchDesc b, CompressorArgs a) {
  extern __shared__ float out[];  // [dim]
  __shared__ double red[32];
  const int t = blockIdx.x;
  const int pos = b.tok_pos[t];  // written by the host, like the rope table: both read before the wait
  if ((pos + 1) % a.ratio != 0) {
    dev::pdl_begin();
    return;
  }
  // This thread's first rotated pair's double-precision cos / sin, before the wait (they depend on the position
  // only) instead of after the pool and the norm.
  const float pf = float(pos / a.ratio * a.ratio);
  float rc = 0.0f, rs = 0.0f;
  if (int(threadIdx.x) < a.rope_dim / 2) rope_cos_sin(pf, a.inv_freq[threadIdx.x], a.rope_scale, false, &rc, &rs);
  dev::pdl_begin();
  const int s = b.tok_seq[t];
  const int begin = b.seq_begin[s], start = b.seq_start[s], slot = b.seq_slot[s];
  const int entry = pos / a.ratio, d = a.dim, r = a.ratio;
  const bool has_prev = a.overlap && entry > 0;
  const int half = a.overlap ? d : 0;
  // Each thread pools a pair of features (float2 loads; the host checks the even widths) over the positions in
  // order: the previous block's (column f, with overlap), then this block's (column half + f).
  const int p0 = has_prev ? (entry - 1) * r : entry * r, p1 = (entry + 1) * r, own = entry * r;
  for (int f = 2 * int(threadIdx.x); f < d; f += 2 * int(blockDim.x)) {
    float m0 = -INFINITY, m1 = -INFINITY, s0 = 0.0f, s1 = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int pb = p0; pb < p1; pb += kBatch) {
      float2 v[kBatch], x[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int p = pb + j, c = p < own ? f : half + f;
        v[j] = make_float2(-INFINITY, -INFINITY);
        x[j] = make_float2(0.0f, 0.0f);
        if (p < p1) {
          v[j] = *reinterpret_cast<const float2*>(ring_or_chunk(a, p, start, begin, slot, true) + c);
          x[j] = *reinterpret_cast<const float2*>(ring_or_chunk(a, p, start, begin, slot, false) + c);
        }
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        pool_step(v[j].x, x[j].x, m0, s0, acc0);
        pool_step(v[j].y, x[j].y, m1, s1, acc1);
      }
    }
    out[f] = s0 > 0.0f ? acc0 / s0 : 0.0f;
    out[f + 1] = s1 > 0.0f ? acc1 / s1 : 0.0f;
  }
  __syncthreads();  // the norm reads other threads' pairs
  // RMSNorm (double accumulation, as the reference).
  double ss = 0;
  for (int f = threadIdx.x; f < d; f += blockDim.x) ss += double(out[f]) * double(out[f]);
  ss = block_sum(ss, red);
  const float sc = float(1.0 / sqrt(ss / double(d) + double(a.eps)));
  for (int f = threadIdx.x; f < d; f += blockDim.x) out[f] = out[f] * sc * a.norm_w[f];
  __syncthreads();
  // RoPE at the entry's first position.
  {
    float* rr = out + (d - a.rope_dim);
    for (int i = threadIdx.x; i < a.rope_dim / 2; i += blockDim.x) {
      float c = rc, sn = rs;  // this thread's first pair's, computed before the wait
      if (i != int(threadIdx.x)) rope_cos_sin(pf, a.inv_freq[i], a.rope_scale, false, &c, &sn);
      const float x0 = rr[2 * i], x1 = rr[2 * i + 1];
      rr[2 * i] = x0 * c - x1 * sn;
      rr[2 * i + 1] = x1 * c + x0 * sn;
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (a.post == 1) {  // FP8 simulation of the non-rope dims, blocks of 64
    for (int blk = warp; blk * 64 < a.nope; blk += warps) {
      const int b0 = blk * 64;
      fp8_block_sim_warp(out + b0, out + b0, min(a.nope, b0 + 64) - b0, lane);
    }
    __syncthreads();
  } else if (a.post == 2) {  // Hadamard rotation, then FP4 per 32
    dev::hadamard_shared(out, d);
    for (int blk = warp; blk < d / 32; blk += warps) {
      out[blk * 32 + lane] = fp4_block_sim_lane(out[blk * 32 + lane]);
    }
    __syncthreads();
  }
  const int page = b.page_table[size_t(s) * b.page_ld + entry / a.epp];
  float* dst = a.pool + (size_t(page) * a.epp + entry % a.epp) * d;
  for (int f = threadIdx.x; f < d; f += blockDim.x) dst[f] = out[f];
}

__global__ void compressor_store_kernel(BatchDesc b, CompressorArgs a) {
  dev::pdl_begin();
  const int t = blockIdx.x, s = b.tok_seq[t];
  const int i = t - b.seq_begin[s];
  if (i < b.seq_count[s] - a.rows) return;
  const int pos = b.tok_pos[t], slot = b.seq_slot[s];
  float* kv = a.state + (size_t(slot * 2) * a.rows + pos % a.rows) * a.width;
  float* sc = a.state + (size_t(slot * 2 + 1) * a.rows + pos % a.rows) * a.width;
  // Up to kStoreBatch values of each row a thread, all loaded before any store: the compiler cannot move a load
  // above a store that may alias it, so a copy loop was one memory round trip per value (C4's 1024-wide rows: four
  // at 256 threads), every step, before the attention.
  constexpr int kStoreBatch = 4;
  for (int f0 = 0; f0 < a.width; f0 += kStoreBatch * int(blockDim.x)) {
    float vk[kStoreBatch], vs[kStoreBatch];
#pragma unroll
    for (int j = 0; j < kStoreBatch; ++j) {
      const int f = f0 + threadIdx.x + j * blockDim.x;
      vk[j] = f < a.width ? a.kv[size_t(t) * a.ld + f] : 0.0f;
      vs[j] = f < a.width ? a.score[size_t(t) * a.ld + f] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kStoreBatch; ++j) {
      const int f = f0 + threadIdx.x + j * blockDim.x;
      if (f < a.width) {
        kv[f] = vk[j];
        sc[f] = vs[j];
      }
    }
  }
}

__global__ void window_store_kernel(BatchDesc b, KvLayerView v, const float* kv) {
  dev::pdl_begin();
  const int t = blockIdx.x, s = b.tok_seq[t];
  const int i = t - b.seq_begin[s];
  if (i < b.seq_count[s] - v.cap) return;
  const int pos = b.tok_pos[t], slot = b.seq_slot[s];
  float* dst = v.window + ((size_t(slot) * v.num_layers + v.layer) * v.cap + pos % v.cap) * v.hd;
  constexpr int kStoreBatch = 4;  // loads before stores, as compressor_store_kernel (512 values at 128 threads)
  for (int f0 = 0; f0 < v.hd; f0 += kStoreBatch * int(blockDim.x)) {
    float vals[kStoreBatch];
#pragma unroll
    for (int j = 0; j < kStoreBatch; ++j) {
      const int f = f0 + threadIdx.x + j * blockDim.x;
      vals[j] = f < v.hd ? kv[size_t(t) * v.hd + f] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kStoreBatch; ++j) {
      const int f = f0 + threadIdx.x + j * blockDim.x;
      if (f < v.hd) dst[f] = vals[j];
    }
  }
}

// grid (T, key tiles of kIdxKeys); 256 threads = kIdxKeys keys x (256 / kIdxKeys) head groups. Tiles of 32 keys
// share each block's load of q among more keys (prefill); tiles of 8 spread a decode step's few tiles over 4x
// more SMs. q rows are padded by 8 floats so that the 4 heads a warp reads at 8-key tiles fall in different banks;
// key rows by 4, so that the float4 reads of 8 keys fall in different banks too. Each dot product runs as four
// interleaved partial sums over float4 reads (a chain of dim / 4 dependent FMAs, not dim: at one decode token the
// block's chain of dependent FMAs and shared loads was the kernel's time).
template <int kIdxKeys>
__global__ void __launch_bounds__(256) indexer_scores_kernel(BatchDesc b, const float* q, const float* w, int heads,
                                                             int dim, const float* keys, int epp, int ratio,
                                                             float scale, float* scores, int ld) {
  constexpr int kGroups = 256 / kIdxKeys;
  extern __shared__ float sm[];
  const int qp = dim + 8;
  float* qs = sm;              // [heads][dim + 8]
  const int kp = dim + 4;
  float* ks = sm + heads * qp;  // [kIdxKeys][dim + 4]
  __shared__ float part[kGroups][kIdxKeys];
  __shared__ int key_page[kIdxKeys];  // the page of each of the tile's valid keys
  const int t = blockIdx.x, j0 = blockIdx.y * kIdxKeys;
  // The host writes the positions (so the count of valid keys), the sequences and the page table: read before the
  // wait, so that after it the queries' and keys' loads come first (not three dependent round trips).
  const int valid = (b.tok_pos[t] + 1) / ratio;
  const int s = b.tok_seq[t];
  if (threadIdx.x < kIdxKeys && j0 + int(threadIdx.x) < valid)
    key_page[threadIdx.x] = b.page_table[size_t(s) * b.page_ld + (j0 + threadIdx.x) / epp];
  dev::pdl_begin();
  if (j0 >= valid) return;
  __syncthreads();  // key_page
  const int q4 = heads * dim / 4, d4 = dim / 4, k4 = kIdxKeys * d4;  // float4s of the queries and the tile's keys
  const int j = threadIdx.x % kIdxKeys, hg = threadIdx.x / kIdxKeys;
  const float* wt = w + size_t(t) * heads;
  const float4* src = reinterpret_cast<const float4*>(q + size_t(t) * heads * dim);
  auto key4 = [&](int i) {  // float4 i of the tile's keys (zeros past valid)
    const int key = j0 + i / d4;
    return key < valid ? *reinterpret_cast<const float4*>(keys + (size_t(key_page[i / d4]) * epp + key % epp) * dim +
                                                          4 * (i % d4))
                       : make_float4(0, 0, 0, 0);
  };
  // This thread's first two head weights (the heads loop's first step below), loaded with the rows.
  const int h2_first = hg + kGroups < heads ? hg + kGroups : hg;
  const float w_first = hg < heads ? wt[hg] : 0.0f, w_first2 = h2_first < heads ? wt[h2_first] : 0.0f;
  // Each pass has every thread's queries and keys in flight before any store: one pass, so one round trip, at
  // V4's 64 heads x 128 (and at every shape the tests run).
  for (int b0 = threadIdx.x; b0 < max(q4, k4); b0 += blockDim.x * 8) {
    float4 vq[8], vk[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = b0 + u * blockDim.x;
      vq[u] = i < q4 ? src[i] : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = b0 + u * blockDim.x;
      vk[u] = i < k4 ? key4(i) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int i = b0 + u * blockDim.x;
      if (i < q4) *reinterpret_cast<float4*>(qs + (i / d4) * qp + 4 * (i % d4)) = vq[u];
      if (i < k4) *reinterpret_cast<float4*>(ks + (i / d4) * kp + 4 * (i % d4)) = vk[u];
    }
  }
  __syncthreads();
  float acc = 0.0f;
  const float4* kj = reinterpret_cast<const float4*>(ks + j * kp);
  // Two heads at a time (the key's reads shared, eight independent partial sums), added to acc in head order.
  for (int h = hg; h < heads; h += 2 * kGroups) {
    const int h2 = h + kGroups < heads ? h + kGroups : h;
    const float4* q0 = reinterpret_cast<const float4*>(qs + h * qp);
    const float4* q1 = reinterpret_cast<const float4*>(qs + h2 * qp);
    float4 s0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), s1 = s0;
#pragma unroll 8
    for (int c = 0; c < dim / 4; ++c) {
      const float4 k = kj[c], a = q0[c], b = q1[c];
      s0.x = fmaf(a.x, k.x, s0.x);
      s0.y = fmaf(a.y, k.y, s0.y);
      s0.z = fmaf(a.z, k.z, s0.z);
      s0.w = fmaf(a.w, k.w, s0.w);
      s1.x = fmaf(b.x, k.x, s1.x);
      s1.y = fmaf(b.y, k.y, s1.y);
      s1.z = fmaf(b.z, k.z, s1.z);
      s1.w = fmaf(b.w, k.w, s1.w);
    }
    const bool first = h == hg;
    acc += fmaxf((s0.x + s0.y) + (s0.z + s0.w), 0.0f) * scale * (first ? w_first : wt[h]);
    if (h2 != h) acc += fmaxf((s1.x + s1.y) + (s1.z + s1.w), 0.0f) * scale * (first ? w_first2 : wt[h2]);
  }
  part[hg][j] = acc;
  __syncthreads();
  if (threadIdx.x < kIdxKeys && j0 + threadIdx.x < valid) {
    float total = 0.0f;
    for (int g = 0; g < kGroups; ++g) total += part[g][threadIdx.x];
    scores[size_t(t) * ld + j0 + threadIdx.x] = total;
  }
}

__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kTopkThreads = 1024;
constexpr int kTopkBatch = 4;  // keys past the cached ones: re-read per pass, this many a thread loaded before any is used

// Cached: keys per thread held in registers for all the passes, the fewest that hold a row of ld keys (up to 8:
// 8192 keys, a 32K-token context's C4 keys). Holding 8 takes 48 registers, one 1024-thread block per SM, which
// halved a 4096-token prefill's rows of 1024 keys (91.5 against 51.2 us); 1 to 4 fit in 32 (two blocks per SM).
template <int Cached>
__global__ void __launch_bounds__(kTopkThreads) indexer_topk_kernel(BatchDesc b, const float* scores, int ld,
                                                                    int ratio, int k, int* idx) {
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining, s_count;
  __shared__ int warp_counts[32];
  const int t = blockIdx.x;
  const int n = (b.tok_pos[t] + 1) / ratio;  // written by the host: read before the wait
  dev::pdl_begin();
  const int kk = min(k, n);
  int* out = idx + size_t(t) * k;
  for (int j = kk + threadIdx.x; j < k; j += blockDim.x) out[j] = -1;
  if (kk == n) {  // every valid key is chosen: in index order, that is the identity
    for (int j = threadIdx.x; j < n; j += blockDim.x) out[j] = j;
    return;
  }
  const float* sc = scores + size_t(t) * ld;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // The first Cached * blockDim keys stay in registers for all the passes (a decode step's whole row:
  // one read of the scores instead of six); later ones are re-read.
  uint32_t cached[Cached];
#pragma unroll
  for (int j = 0; j < Cached; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    cached[j] = i < n ? order_key(sc[i]) : 0u;
  }
  // Visits (i, key) of this thread's keys in pass order; every thread of the block runs the same trip count
  // (the bound is rounded up to whole blocks), so f may use warp collectives and block barriers; valid = i < n.
  auto for_keys = [&](auto&& f) {
#pragma unroll
    for (int j = 0; j < Cached; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (j * int(blockDim.x) < n) f(i, cached[j], i < n);
    }
    for (int c0 = Cached * blockDim.x; c0 < n; c0 += kTopkBatch * blockDim.x) {
      uint32_t u[kTopkBatch];
#pragma unroll
      for (int j = 0; j < kTopkBatch; ++j) {
        const int i = c0 + j * int(blockDim.x) + threadIdx.x;
        u[j] = i < n ? order_key(sc[i]) : 0u;
      }
#pragma unroll
      for (int j = 0; j < kTopkBatch; ++j) {
        const int i = c0 + j * int(blockDim.x) + threadIdx.x;
        if (c0 + j * int(blockDim.x) < n) f(i, u[j], i < n);
      }
    }
  };
  // Radix select of the kk-th largest key. Scores cluster (their top bits agree): a warp whose counted keys
  // all share one digit adds once; otherwise each lane adds its own (a __match_any_sync per key instead cost
  // 2x at 8192 keys).
  uint32_t prefix = 0, mask = 0;
  int remaining = kk;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for_keys([&](int, uint32_t u, bool valid) {
      const bool in = valid && (u & mask) == prefix;
      const int digit = int((u >> shift) & 255);
      const unsigned counted = __ballot_sync(0xffffffffu, in);
      if (!counted) return;
      const int first = __shfl_sync(0xffffffffu, digit, __ffs(counted) - 1);
      if (__all_sync(0xffffffffu, !in || digit == first)) {
        if (lane == 0) atomicAdd(&hist[first], __popc(counted));
      } else if (in) {
        atomicAdd(&hist[digit], 1);
      }
    });
    __syncthreads();
    if (threadIdx.x < 32) {  // warp 0: lane l owns digits 255 - 8l ... 248 - 8l; a scan finds the digit
      int local = 0;
      for (int u = 0; u < 8; ++u) local += hist[255 - (lane * 8 + u)];
      const int incl = warp_inclusive_sum(local);
      const unsigned hit = __ballot_sync(0xffffffffu, incl >= remaining);
      if (lane == __ffs(hit) - 1) {
        int cum = incl - local, digit = 0;
        for (int u = 0; u < 8; ++u) {
          const int dg = 255 - (lane * 8 + u);
          if (cum + hist[dg] >= remaining) {
            digit = dg;
            break;
          }
          cum += hist[dg];
        }
        s_remaining = remaining - cum;
        s_prefix = prefix | (uint32_t(digit) << shift);
      }
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
    __syncthreads();
  }
  const uint32_t thr = prefix;  // the kk-th largest key; the first `remaining` keys equal to it (by index) are taken
  // The chosen keys in index order, with no sort: key i goes to slot (keys above thr before i) + min(ties before
  // i, remaining). One block-wide exclusive scan per pass of blockDim keys, over both counts packed into one int
  // (keys above in the low 16 bits, ties in the high: a pass holds at most 1024 keys). The rank-by-comparison sort
  // of score order this replaces was ~2/3 of a decode step's top-512 of 1024.
  // The skip once every chosen key has its slot is block-uniform too (the bases are the block's).
  const int nwarps = int(blockDim.x) / 32;
  int above_base = 0, tie_base = 0;
  for_keys([&](int i, uint32_t u, bool valid) {
    if (above_base + min(tie_base, remaining) == kk) return;
    const bool above = valid && u > thr, tie = valid && u == thr;
    const int mine = int(above) | (int(tie) << 16);
    const int incl = warp_inclusive_sum(mine);
    if (lane == 31) warp_counts[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      const int total = lane < nwarps ? warp_counts[lane] : 0;
      const int scan = warp_inclusive_sum(total);
      if (lane < nwarps) warp_counts[lane] = scan - total;  // exclusive: the warps before
      if (lane == 31) s_count = scan;                       // the pass's totals
    }
    __syncthreads();
    const int before = warp_counts[warp] + incl - mine;
    const int above_before = above_base + (before & 0xffff), ties_before = tie_base + (before >> 16);
    if (above || (tie && ties_before < remaining)) out[above_before + min(ties_before, remaining)] = i;
    above_base += s_count & 0xffff;
    tie_base += s_count >> 16;
    __syncthreads();  // warp_counts and s_count are rewritten by the next pass
  });
}

}  // namespace

cudaError_t compressor_emit(const BatchDesc& b, const CompressorArgs& a, cudaStream_t stream) {
  if (b.T == 0) return cudaSuccess;
  if (a.post == 2 && ((a.dim & (a.dim - 1)) || a.dim % 32)) return cudaErrorInvalidValue;
  if (a.dim % 2 || a.ld % 2 || a.width % 2) return cudaErrorInvalidValue;  // the pool's float2 loads
  dev::launch(compressor_emit_kernel, dim3(b.T), dim3(256), a.dim * sizeof(float), stream, b, a);
  return cudaGetLastError();
}

cudaError_t compressor_store(const BatchDesc& b, const CompressorArgs& a, cudaStream_t stream) {
  if (b.T == 0) return cudaSuccess;
  dev::launch(compressor_store_kernel, dim3(b.T), dim3(256), 0, stream, b, a);
  return cudaGetLastError();
}

cudaError_t window_store(const BatchDesc& b, const KvLayerView& v, const float* kv, cudaStream_t stream) {
  if (b.T == 0) return cudaSuccess;
  dev::launch(window_store_kernel, dim3(b.T), dim3(128), 0, stream, b, v, kv);
  return cudaGetLastError();
}

cudaError_t indexer_scores(const BatchDesc& b, const float* q, const float* w, int heads, int dim, const float* keys,
                           int epp, int ratio, float scale, int max_keys, float* scores, int ld,
                           cudaStream_t stream) {
  if (b.T == 0 || max_keys <= 0) return cudaSuccess;
  // 8-key tiles when 32-key tiles would leave SMs idle (a decode step), 32-key tiles otherwise.
  const bool small = int64_t(b.T) * ((max_keys + 31) / 32) < dev::sm_count();
  const int tile = small ? 8 : 32;
  const size_t smem = (size_t(heads) * (dim + 8) + size_t(tile) * (dim + 4)) * sizeof(float);
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(indexer_scores_kernel<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    cudaFuncSetAttribute(indexer_scores_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    configured = true;
  }
  if (smem > 200 * 1024 || dim % 4 != 0) return cudaErrorInvalidValue;
  dim3 grid(b.T, (max_keys + tile - 1) / tile);
  return dev::launch(small ? indexer_scores_kernel<8> : indexer_scores_kernel<32>, grid, dim3(256), smem, stream, b, q,
                     w, heads, dim, keys, epp, ratio, scale, scores, ld);
}

cudaError_t indexer_topk(const BatchDesc& b, const float* scores, int ld, int ratio, int k, int* idx,
                         cudaStream_t stream) {
  if (b.T == 0) return cudaSuccess;
  if (k <= 0) return cudaErrorInvalidValue;
  const auto kernel = ld <= kTopkThreads       ? indexer_topk_kernel<1>
                      : ld <= 2 * kTopkThreads ? indexer_topk_kernel<2>
                      : ld <= 4 * kTopkThreads ? indexer_topk_kernel<4>
                                               : indexer_topk_kernel<8>;
  dev::launch(kernel, dim3(b.T), dim3(kTopkThreads), 0, stream, b, scores, ld, ratio, k, idx);
  return cudaGetLastError();
}

}  // namespace moeserve::cuda
