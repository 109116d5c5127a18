// Sparse attention with per-head sinks over the sliding window plus compressed entries (kernels/cuda/ops.h
// sparse_attention; reference kernels/cpu/attention.h sink_attention). One shared key/value head (K = V),
// head_dim up to 512, fp32 throughout.
//
// Grid (token, head block of HB = 4 * HPW heads, key split). A block stages the head block's queries and tiles
// of 32 keys in shared memory; warp w owns heads [w * HPW, (w + 1) * HPW): lane j scores key j of the tile for
// its heads (float4 loads, conflict-free with a 4-float row pad), the warp keeps the online-softmax state, and
// for the output each lane owns float4 columns of the value rows. Splits (flash-decoding) keep the chip busy
// for a single decode token; a combine kernel adds the sink, normalises and de-rotates, or, given arrival
// counters (AttentionArgs::arrivals), the last split of each head block to finish does (one launch fewer on a
// decode step's critical path). With one split the block finishes itself.
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/attention_keys.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;

constexpr int kWarps = 4;
constexpr int kTile = kKeyTile;

// The rotation of the rotated pairs in the lane's float4s c0 + lane + 32 c (q = 0, 2: the float4's two pairs) at
// position pos, for rotate_store: it depends on the position and constant tables only, so it is computed before
// pdl_wait where it can (double-precision cos and sin are long instruction chains).
template <int NC>
struct RopeCs {
  float cs[NC][2], sn[NC][2];
};
template <int NC>
__device__ __forceinline__ RopeCs<NC> output_rotation(int hd, int rope_dim, const float* inv_freq, float rope_scale,
                                                   int pos, int c0 = 0) {
  const int lane = threadIdx.x & 31;
  RopeCs<NC> r;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const int d = 4 * (c0 + lane + 32 * c);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      r.cs[c][q] = 1.0f;
      r.sn[c][q] = 0.0f;
      if (d < hd && d >= hd - rope_dim) {
        const float angle = float(pos) * inv_freq[(d + 2 * q - (hd - rope_dim)) / 2];
        r.cs[c][q] = float(cos(double(angle))) * rope_scale;
        r.sn[c][q] = -float(sin(double(angle))) * rope_scale;
      }
    }
  }
  return r;
}

// Final output of one head (o already normalised), de-rotated; lane owns the float4s c0 + lane + 32 c.
template <int NC>
__device__ __forceinline__ void rotate_store(float4 (&o)[NC], int hd, int rope_dim, const RopeCs<NC>& r, float* dst,
                                             int c0 = 0) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const int d = 4 * (c0 + lane + 32 * c);
    if (d >= hd) continue;
    float v[4] = {o[c].x, o[c].y, o[c].z, o[c].w};
    if (d >= hd - rope_dim) {
#pragma unroll
      for (int q = 0; q < 4; q += 2) {
        const float cs = r.cs[c][q / 2], sn = r.sn[c][q / 2];
        const float x0 = v[q], x1 = v[q + 1];
        v[q] = x0 * cs - x1 * sn;
        v[q + 1] = x1 * cs + x0 * sn;
      }
    }
    *reinterpret_cast<float4*>(dst + d) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

__device__ __forceinline__ float dot4(float4 q, float4 k, float acc) {
  return fmaf(q.w, k.w, fmaf(q.z, k.z, fmaf(q.y, k.y, fmaf(q.x, k.x, acc))));
}

// o[h][c] += p_j[h] * v_j for the tile's keys j (p of key j in lane j): the lane's value columns start at `v`
// (a row pitch of ldk floats) and are 32 float4s apart. FULL: every column inside head_dim (no bounds test, which
// had cost a branch and an address recomputation per column and key); else columns c with 32 c < `left` only.
template <int HPW, int NCW, bool FULL>
__device__ __forceinline__ void add_values(float4 (&o)[HPW][NCW], const float (&p)[HPW], const float* v, int ldk,
                                           int nk, int left) {
#pragma unroll 4
  for (int j = 0; j < nk; ++j) {
    float pj[HPW];
#pragma unroll
    for (int h = 0; h < HPW; ++h) pj[h] = __shfl_sync(0xffffffffu, p[h], j);
    const float4* row = reinterpret_cast<const float4*>(v + j * ldk);
#pragma unroll
    for (int c = 0; c < NCW; ++c) {
      if (!FULL && 32 * c >= left) continue;
      const float4 x = row[32 * c];
#pragma unroll
      for (int h = 0; h < HPW; ++h) {
        o[h][c].x = fmaf(pj[h], x.x, o[h][c].x);
        o[h][c].y = fmaf(pj[h], x.y, o[h][c].y);
        o[h][c].z = fmaf(pj[h], x.z, o[h][c].z);
        o[h][c].w = fmaf(pj[h], x.w, o[h][c].w);
      }
    }
  }
}

// A head's combined output divided by its denominator (sink included), de-rotated and stored: the end of
// combine_kernel and of combine_splits.
template <int NC>
__device__ __forceinline__ void normalise_store(float4 (&o)[NC], float denom, int hd, int rope_dim,
                                                const RopeCs<NC>& rope, float* dst, int c0 = 0) {
  const float inv = 1.0f / denom;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    o[c].x *= inv;
    o[c].y *= inv;
    o[c].z *= inv;
    o[c].w *= inv;
  }
  rotate_store<NC>(o, hd, rope_dim, rope, dst, c0);
}

// A batch of key splits' partials (maxima ms, sums ls, values v; ms = -inf: none) added to the running output o
// and denominator with the weights exp(ms - M), in batch order: combine_kernel's and combine_splits' sums.
template <int kBatch, int NC>
__device__ __forceinline__ void add_splits(float4 (&o)[NC], float& denom, const float (&ms)[kBatch],
                                           const float (&ls)[kBatch], const float4 (&v)[kBatch][NC], float M) {
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    if (ms[j] == -INFINITY) continue;  // past the splits, or a split past the token's keys
    const float f = expf(ms[j] - M);
    denom += ls[j] * f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      o[c].x += v[j][c].x * f;
      o[c].y += v[j][c].y * f;
      o[c].z += v[j][c].z * f;
      o[c].w += v[j][c].w * f;
    }
  }
}

// One head's key splits (partials of hd + 4 floats: max, sum, then the unnormalised output) added in split order
// with the sink, normalised, de-rotated and stored: the lane's float4 columns c0 + lane + 32 c, as combine_kernel
// computes them (its split order aside). The partials are other blocks' stores: read past L1. As in combine_kernel,
// the maxima (lane-parallel) and the first kBatch splits' values are loaded in one memory round.
template <int NC>
__device__ __forceinline__ void combine_splits(const AttentionArgs& a, const float* src, float sink, int pos,
                                               float* dst, int c0) {
  constexpr int kBatch = 4;
  const int lane = threadIdx.x & 31, hd4 = a.hd / 4, pitch = a.hd + 4;
  float ms[kBatch], ls[kBatch];
  float4 v[kBatch][NC];
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const bool valid = s0 + j < a.splits;
      const float* ps = src + size_t(valid ? s0 + j : 0) * pitch;
      ms[j] = valid ? __ldcg(ps) : -INFINITY;
      ls[j] = valid ? __ldcg(ps + 1) : 0.0f;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int d4 = c0 + lane + 32 * c;
        v[j][c] = valid && d4 < hd4 ? __ldcg(reinterpret_cast<const float4*>(ps + 4) + d4) : make_float4(0, 0, 0, 0);
      }
    }
  };
  load_batch(0);
  float M = sink;
  for (int s0 = 0; s0 < a.splits; s0 += 32)
    M = fmaxf(M, s0 + lane < a.splits ? __ldcg(src + size_t(s0 + lane) * pitch) : -INFINITY);
  M = warp_max(M);
  // The rotation while the loads are in flight (its cos/sin are long chains).
  const RopeCs<NC> rope = output_rotation<NC>(a.hd, a.rope_dim, a.inv_freq, a.rope_scale, pos, c0);
  float denom = expf(sink - M);
  float4 o[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) o[c] = make_float4(0, 0, 0, 0);
  for (int s0 = 0; s0 < a.splits; s0 += kBatch) {
    if (s0 > 0) load_batch(s0);
    add_splits<kBatch, NC>(o, denom, ms, ls, v, M);
  }
  normalise_store<NC>(o, denom, a.hd, a.rope_dim, rope, dst, c0);
}

// DS: warps per head group, each taking 1/DS of head_dim (its share of every score, added in order through
// shared memory, and of the output columns): twice the warps in flight for a decode token, whose blocks are few
// and whose warps' chains of shared-memory reads are the time.
template <int HPW, int NC, int DS>
__global__ void __launch_bounds__(kWarps * 32 * DS) attention_kernel(BatchDesc b, AttentionArgs a) {
  const int t = blockIdx.x, h0 = blockIdx.y * (kWarps * HPW), split = blockIdx.z;
  // The token's position, sequence, slot and key count come from the host-written BatchDesc: before the wait, so
  // that after it the queries' and the first tile's loads come first (not two dependent round trips).
  const TokenKeys tk(b, a, t);
  constexpr int HB = kWarps * HPW;
  constexpr int NCW = NC / DS;  // output float4 columns per lane of a warp
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) % kWarps, ds = (threadIdx.x >> 5) / kWarps;
  const int cw0 = ds * NCW * 32;  // this warp's first output float4 column (and hd4 / DS its share of the dot)
  dev::pdl_begin();
  extern __shared__ float4 sm4[];
  const int hd = a.hd, ldk = hd + 4, hd4 = hd / 4;
  float* qs = reinterpret_cast<float*>(sm4);  // [HB][hd]
  float* ks = qs + HB * hd;                   // [kTile][ldk]
  __shared__ const float* kptr[kTile];
  __shared__ float part_sc[DS][kWarps][HPW][kTile];  // the warps' shares of each score
  const int n = tk.n;
  const int per = split_keys(a.max_keys, a.splits);
  const int k0 = split * per, k1 = min(n, k0 + per);
  // Key tile copies: where hd4 divides the block, thread i copies float4 column i % hd4 of rows i / hd4 + k * step.
  const int copy_step = blockDim.x % hd4 == 0 ? blockDim.x / hd4 : 0;
  const int copy_col = copy_step ? threadIdx.x % hd4 : 0, copy_row = copy_step ? threadIdx.x / hd4 : 0;
  // Every output column of this warp inside head_dim (all but odd head dims): the value loop needs no bounds test.
  const bool full_cols = cw0 + 32 * NCW <= hd4;

  float4 o[HPW][NCW];
  float m[HPW], l[HPW];
#pragma unroll
  for (int h = 0; h < HPW; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int c = 0; c < NCW; ++c) o[h][c] = make_float4(0, 0, 0, 0);
  }
  if (k0 < k1) {
    // Queries and key tiles arrive by cp.async: every thread's copies are in flight together (one memory
    // latency for the queries and the first tile, not one per 8 loads).
    {
      const float4* src = reinterpret_cast<const float4*>(a.q + (size_t(t) * a.H + h0) * hd);
      for (int i = threadIdx.x; i < HB * hd4; i += blockDim.x) cp_async16(sm4 + i, src + i);
    }
    for (int tile = k0; tile < k1; tile += kTile) {
      __syncthreads();
      if (threadIdx.x < kTile) {
        const int j = tile + threadIdx.x;
        kptr[threadIdx.x] = j < k1 ? tk.row(b, a, j) : nullptr;
      }
      __syncthreads();
      if (copy_step > 0) {  // a fixed column per thread (no division per copy: the copies' address math was ~15 %
                            // of the kernel's instructions)
        for (int r = copy_row; r < kTile; r += copy_step) {
          const float* p = kptr[r];
          cp_async16(ks + r * ldk + 4 * copy_col, p ? p + 4 * copy_col : a.q, p ? 16 : 0);  // past the split: zeros
        }
      } else {
        for (int i = threadIdx.x; i < kTile * hd4; i += blockDim.x) {
          const float* p = kptr[i / hd4];
          float* dst = ks + (i / hd4) * ldk + 4 * (i % hd4);
          cp_async16(dst, p ? p + 4 * (i % hd4) : a.q, p ? 16 : 0);
        }
      }
      cp_async_wait_all();
      __syncthreads();
      const bool valid = tile + lane < k1;
      // Scores of key `lane` for this warp's heads.
      // Two chains of fused multiply-adds per head (even and odd float4s), added at the end: 4 instructions per
      // float4 and head instead of 5, and twice the independent work for a warp that waits on each one.
      float sc[HPW], sc2[HPW];
#pragma unroll
      for (int h = 0; h < HPW; ++h) sc[h] = sc2[h] = 0.0f;
      const float4* kr = reinterpret_cast<const float4*>(ks + lane * ldk);
      const float4* qw = reinterpret_cast<const float4*>(qs + warp * HPW * hd);
      const int cbeg = ds * (hd4 / DS), cend = DS == 1 ? hd4 : cbeg + hd4 / DS;
      int c = cbeg;
#pragma unroll 2
      for (; c + 1 < cend; c += 2) {
        const float4 k0 = kr[c], k1 = kr[c + 1];
#pragma unroll
        for (int h = 0; h < HPW; ++h) {
          sc[h] = dot4(qw[h * hd4 + c], k0, sc[h]);
          sc2[h] = dot4(qw[h * hd4 + c + 1], k1, sc2[h]);
        }
      }
      if (c < cend) {
        const float4 k0 = kr[c];
#pragma unroll
        for (int h = 0; h < HPW; ++h) sc[h] = dot4(qw[h * hd4 + c], k0, sc[h]);
      }
#pragma unroll
      for (int h = 0; h < HPW; ++h) sc[h] += sc2[h];
      if constexpr (DS > 1) {  // the whole score of key `lane`: the warps' shares added in order
#pragma unroll
        for (int h = 0; h < HPW; ++h) part_sc[ds][warp][h][lane] = sc[h];
        __syncthreads();
#pragma unroll
        for (int h = 0; h < HPW; ++h) {
          float total = part_sc[0][warp][h][lane];
#pragma unroll
          for (int d = 1; d < DS; ++d) total += part_sc[d][warp][h][lane];
          sc[h] = total;
        }
      }
      float p[HPW];
#pragma unroll
      for (int h = 0; h < HPW; ++h) {
        const float sv = valid ? sc[h] * a.scale : -INFINITY;
        const float mt = warp_max(sv);
        const float mn = fmaxf(m[h], mt);
        const float corr = expf(m[h] - mn);  // m = -inf at first: 0
        p[h] = valid ? expf(sv - mn) : 0.0f;
        l[h] = l[h] * corr + warp_sum(p[h]);
        m[h] = mn;
#pragma unroll
        for (int c = 0; c < NCW; ++c) {
          o[h][c].x *= corr;
          o[h][c].y *= corr;
          o[h][c].z *= corr;
          o[h][c].w *= corr;
        }
      }
      const int nk = min(kTile, k1 - tile);
      if (full_cols)
        add_values<HPW, NCW, true>(o, p, ks + 4 * (cw0 + lane), ldk, nk, 0);
      else
        add_values<HPW, NCW, false>(o, p, ks + 4 * (cw0 + lane), ldk, nk, hd4 - cw0 - lane);
    }
  }
  if (a.splits == 1) {
    const RopeCs<NCW> rope = output_rotation<NCW>(hd, a.rope_dim, a.inv_freq, a.rope_scale, tk.pos, cw0);
#pragma unroll
    for (int h = 0; h < HPW; ++h) {
      const int head = h0 + warp * HPW + h;
      const float sink = a.sinks[head];
      const float M = fmaxf(m[h], sink);
      const float f = (m[h] == -INFINITY) ? 0.0f : expf(m[h] - M);
      const float inv = 1.0f / (l[h] * f + expf(sink - M));
#pragma unroll
      for (int c = 0; c < NCW; ++c) {
        o[h][c].x *= f * inv;
        o[h][c].y *= f * inv;
        o[h][c].z *= f * inv;
        o[h][c].w *= f * inv;
      }
      rotate_store<NCW>(o[h], hd, a.rope_dim, rope, a.o + (size_t(t) * a.H + head) * hd, cw0);
    }
    return;
  }
#pragma unroll
  for (int h = 0; h < HPW; ++h) {
    const int head = h0 + warp * HPW + h;
    float* dst = a.partial + ((size_t(t) * a.H + head) * a.splits + split) * (hd + 4);
    if (lane == 0 && ds == 0) {
      dst[0] = m[h];
      dst[1] = l[h];
    }
#pragma unroll
    for (int c = 0; c < NCW; ++c) {
      const int d4 = cw0 + lane + 32 * c;
      if (d4 < hd4) *reinterpret_cast<float4*>(dst + 4 + 4 * d4) = o[h][c];
    }
  }
  if (!a.arrivals) return;  // combine_kernel adds the splits
  // The last split of this (token, head block) to arrive adds them itself, instead of a combine launch: the fence
  // puts each block's partial ahead of its arrival, and the last block's reads after every arrival.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int* count = a.arrivals + size_t(t) * gridDim.y + blockIdx.y;
    last = atomicAdd(count, 1) == a.splits - 1;
    if (last) *count = 0;  // zero again for the next launch (graph replays)
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
#pragma unroll
  for (int h = 0; h < HPW; ++h) {
    const int head = h0 + warp * HPW + h;
    combine_splits<NCW>(a, a.partial + (size_t(t) * a.H + head) * a.splits * (hd + 4), a.sinks[head], tk.pos,
                        a.o + (size_t(t) * a.H + head) * hd, cw0);
  }
}

// One block of 4 warps per (token, head): warp w combines splits w, w + 4, ..., reading up to kBatch of them at
// once, beside all the splits' maxima read lane-parallel. A decode step's ~20 splits arrive in one memory round
// (the one-warp version took five, 12 us of a C4 layer's critical path in the nsys timeline). The warps' partial
// sums are added in warp order, after the sink's term. kBatch only groups the loads (the additions run in split
// order whatever it is); the launcher sizes it to the splits, since 8 batched splits of 512 dims hold 192
// registers a thread: 2 blocks per SM, and 32 tokens x 64 heads of 2 splits took 19.6 us in 8 waves.
template <int NC, int kBatch>
__global__ void __launch_bounds__(128) combine_kernel(BatchDesc b, AttentionArgs a) {
  constexpr int kWarpsC = 4;
  __shared__ float4 so[kWarpsC][NC][32];
  __shared__ float sden[kWarpsC];
  const int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int t = row / a.H, head = row % a.H, hd = a.hd;
  // Before pdl_wait (weights, constant tables and the host-written positions only): the sink, and (warp 0, which
  // stores) the rotation.
  const float sink = a.sinks[head];
  RopeCs<NC> rope;
  if (warp == 0) rope = output_rotation<NC>(hd, a.rope_dim, a.inv_freq, a.rope_scale, b.tok_pos[t]);
  dev::pdl_begin();
  const int pitch = hd + 4;
  const float* src = a.partial + size_t(row) * a.splits * pitch;
  float ms[kBatch], ls[kBatch];
  float4 v[kBatch][NC];
  auto load_batch = [&](int j0) {  // this warp's splits warp + kWarpsC * (j0 + j)
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int sp = warp + kWarpsC * (j0 + j);
      const bool valid = sp < a.splits;
      const float* ps = src + size_t(valid ? sp : 0) * pitch;
      ms[j] = valid ? ps[0] : -INFINITY;
      ls[j] = valid ? ps[1] : 0.0f;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int d4 = lane + 32 * c;
        v[j][c] = valid && d4 < hd / 4 ? *reinterpret_cast<const float4*>(ps + 4 + 4 * d4) : make_float4(0, 0, 0, 0);
      }
    }
  };
  // The first batch's values are loaded with the maxima (they do not depend on M): one memory round for up to
  // kWarpsC * kBatch splits.
  load_batch(0);
  float M = sink;
  for (int s0 = 0; s0 < a.splits; s0 += 32) M = fmaxf(M, s0 + lane < a.splits ? src[size_t(s0 + lane) * pitch] : -INFINITY);
  M = warp_max(M);
  float denom = 0.0f;
  float4 o[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) o[c] = make_float4(0, 0, 0, 0);
  for (int j0 = 0; warp + kWarpsC * j0 < a.splits; j0 += kBatch) {
    if (j0 > 0) load_batch(j0);
    add_splits<kBatch, NC>(o, denom, ms, ls, v, M);
  }
#pragma unroll
  for (int c = 0; c < NC; ++c) so[warp][c][lane] = o[c];
  if (lane == 0) sden[warp] = denom;
  __syncthreads();
  if (warp != 0) return;
  denom = expf(sink - M);
  for (int w = 0; w < kWarpsC; ++w) denom += sden[w];
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    o[c] = so[0][c][lane];
    for (int w = 1; w < kWarpsC; ++w) {
      const float4 p = so[w][c][lane];
      o[c].x += p.x;
      o[c].y += p.y;
      o[c].z += p.z;
      o[c].w += p.w;
    }
  }
  normalise_store<NC>(o, denom, hd, a.rope_dim, rope, a.o + size_t(row) * hd);
}

template <int HPW, int NC>
cudaError_t launch(const BatchDesc& b, const AttentionArgs& a, cudaStream_t stream) {
  constexpr int HB = kWarps * HPW;
  const size_t smem = (size_t(HB) * a.hd + size_t(kTile) * (a.hd + 4)) * sizeof(float);
  // Two warps per head group where head_dim splits evenly (columns of 32-lane float4s, dot halves).
  constexpr int DS = NC % 2 == 0 ? 2 : 1;
  const bool split_dim = DS == 2 && (a.hd / 4) % 2 == 0;
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(attention_kernel<HPW, NC, DS>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    cudaFuncSetAttribute(attention_kernel<HPW, NC, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    configured = true;
  }
  dim3 grid(b.T, a.H / HB, a.splits);
  // The splits combine themselves where there are counters for every (token, head block); else combine_kernel.
  AttentionArgs k = a;
  if (a.splits == 1 || int64_t(b.T) * (a.H / HB) > a.arrival_slots) k.arrivals = nullptr;
  if (split_dim)
    dev::launch(attention_kernel<HPW, NC, DS>, dim3(grid), dim3(kWarps * 32 * DS), smem, stream, b, k);
  else
    dev::launch(attention_kernel<HPW, NC, 1>, dim3(grid), dim3(kWarps * 32), smem, stream, b, k);
  // combine_kernel<NC, kBatch>: NC from hd as launch_nc picks it
  if (a.splits > 1 && !k.arrivals) attention_combine(b, a, stream);
  return cudaGetLastError();
}

template <int HPW>
cudaError_t launch_nc(const BatchDesc& b, const AttentionArgs& a, cudaStream_t stream) {
  switch ((a.hd + 127) / 128) {
    case 1: return launch<HPW, 1>(b, a, stream);
    case 2: return launch<HPW, 2>(b, a, stream);
    case 3: return launch<HPW, 3>(b, a, stream);
    case 4: return launch<HPW, 4>(b, a, stream);
    default: return cudaErrorInvalidValue;
  }
}

// Heads per warp: 4 while (token, head block, key split) blocks give every multiprocessor one; fewer (more,
// shorter blocks) when they do not. One decode token over 640 keys: 80 blocks of 16 heads took 24-34 us, 160 of
// 8 heads 20.5 us, 320 of 4 heads 31.6 us (more blocks re-read the same key tiles; ncu at 160 blocks: 1.2 warps
// per scheduler, 0.8 IPC, latency-bound).
int heads_per_warp(int H, int T, int max_keys) {
  const int64_t key_splits = max_keys > kTile ? (max_keys + kTile - 1) / kTile : 1;
  for (int hpw : {4, 2})
    if (H % (kWarps * hpw) == 0 && int64_t(T) * (H / (kWarps * hpw)) * key_splits >= dev::sm_count()) return hpw;
  return 1;
}

}  // namespace

// Keys per split at least (MOESERVE_ATTN_SPLIT_KEYS, default one tile): fewer, longer splits trade the blocks in
// flight for the combine's work, for A/B timing of short contexts (a C128 layer's 160 keys in 4 splits of 40).
static int min_split_keys() {
  static const int n = [] {
    const char* e = std::getenv("MOESERVE_ATTN_SPLIT_KEYS");
    const int v = e ? std::atoi(e) : 0;
    return v > kTile ? v : kTile;
  }();
  return n;
}

int attention_splits(int T, int H, int max_keys) {
  const int hb = kWarps * heads_per_warp(H, T, max_keys);
  const int base = T * (H / hb);
  const int max_splits = (max_keys + min_split_keys() - 1) / min_split_keys();
  int splits = (264 + base - 1) / base;  // about two blocks per multiprocessor
  return splits < 1 ? 1 : splits > max_splits ? (max_splits < 1 ? 1 : max_splits) : splits;
}

size_t attention_workspace_floats(int T, int H, int hd, int splits) {
  return splits > 1 ? size_t(T) * H * splits * (hd + 4) : 0;
}

namespace {

// combine_kernel<NC, kBatch> with kBatch the smallest of 1, 2, 4, 8 that takes each warp's splits in one round
// (8 past 32 splits: more rounds).
template <int NC>
cudaError_t launch_combine(const BatchDesc& b, const AttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(b.T * a.H), block(128);
  const int per_warp = (a.splits + 3) / 4;
  if (per_warp <= 1) return dev::launch(combine_kernel<NC, 1>, grid, block, 0, stream, b, a);
  if (per_warp <= 2) return dev::launch(combine_kernel<NC, 2>, grid, block, 0, stream, b, a);
  if (per_warp <= 4) return dev::launch(combine_kernel<NC, 4>, grid, block, 0, stream, b, a);
  return dev::launch(combine_kernel<NC, 8>, grid, block, 0, stream, b, a);
}

}  // namespace

cudaError_t attention_combine(const BatchDesc& b, const AttentionArgs& a, cudaStream_t stream) {
  switch ((a.hd + 127) / 128) {
    case 1: return launch_combine<1>(b, a, stream);
    case 2: return launch_combine<2>(b, a, stream);
    case 3: return launch_combine<3>(b, a, stream);
    case 4: return launch_combine<4>(b, a, stream);
    default: return cudaErrorInvalidValue;
  }
}

// Whether a step takes the tensor-core kernel (where the keys allow it). By default from 2 tokens on, and at one
// token where it attends to at least 512 keys (a C4 layer's top-k): bench_gpu_ops attention, nineteenth session,
// one token at ctx 8192: C4 12.8 us against the fp32 kernel's 15.4, C128 (160 keys) 12.1 against 9.5; 8 tokens
// C4 25.1 against 50.1, C128 17.1 against 22.7. MOESERVE_ATTN_MMA_MIN_T=N: from N tokens on, whatever the keys.
static bool use_mma(int T, int max_keys) {
  static const int min_t = [] {
    const char* e = std::getenv("MOESERVE_ATTN_MMA_MIN_T");
    return e ? std::max(1, std::atoi(e)) : 0;
  }();
  return min_t > 0 ? T >= min_t : T >= 2 || max_keys >= 512;
}

cudaError_t sparse_attention(const BatchDesc& b, const AttentionArgs& a, cudaStream_t stream) {
  if (b.T == 0) return cudaSuccess;
  if (a.H % 4 || a.hd % 4 || a.hd > 512 || a.rope_dim % 4 || a.splits < 1 || (a.splits > 1 && !a.partial))
    return cudaErrorInvalidValue;
  if (a.keys_bf16_nope && use_mma(b.T, a.max_keys) && sparse_attention_mma_fits(a.H, a.hd, a.rope_dim, a.max_keys))
    return sparse_attention_mma(b, a, stream);
  switch (heads_per_warp(a.H, b.T, a.max_keys)) {
    case 4: return launch_nc<4>(b, a, stream);
    case 2: return launch_nc<2>(b, a, stream);
    default: return launch_nc<1>(b, a, stream);
  }
}

}  // namespace moeserve::cuda
