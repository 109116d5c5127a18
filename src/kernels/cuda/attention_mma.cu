// Sparse attention with per-head sinks on BF16 tensor cores (kernels/cuda/ops.h sparse_attention_mma), for prefill.
// The fp32 kernel (attention.cu) is the reference op beside it; the keys are the same (attention_keys.cuh).
//
// Exact products: under the checkpoint numerics the keys' non-rope dims are FP8-simulated (e4m3 times a power of
// two), which bf16 holds exactly. The fp32 queries, the keys' fp32 rope dims and the fp32 probabilities enter as
// three bf16 terms each (hi + mid + lo hold all 24 bits), so every product the fp32 kernel forms is formed exactly
// by mma.m16n8k16 (fp32 accumulation) and only the summation order differs.
//
// Block: one token, 32 heads (two m16 head groups), one key split (flash-decoding, as attention.cu; the same
// combine), 8 warps. Warp w takes head group w / 4 and a quarter of head_dim: 112 nope dims (3 query terms) and 16
// rope dims (3 x 3 terms), the same columns for the scores and the output, so every warp runs the same code with
// the same tensor work (one code path: four specialised ones thrashed the instruction cache). Per tile of 32
// keys: each warp's partial scores over its part, added in part order through shared memory; the online softmax of
// the warp's 16 heads (the four warps of a head group compute the same one); the output columns of its part with
// the probabilities in three terms. Key rows arrive by bulk copies one tile ahead as fp32 and are converted to bf16
// rows [448 nope | rope term 1 | term 2 | term 3]; the token's queries are converted once to three bf16 planes.
//
// With a key image (AttentionArgs::key_image, prefill sizes) a first launch converts every key row the step can
// reach to that bf16 row form once, and the blocks bulk-copy their keys' image rows straight into two alternating
// key tiles: no per-block conversion, 1280 instead of 2048 bytes a row, and the next tile's copies run under
// this one's mmas. The tiles hold the same values either way, so the two forms give the same bits.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/attention_keys.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma_sync_bf16.cuh"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

namespace {

using namespace dev;
using namespace hopper;

constexpr int kHd = 512, kRope = 64, kNope = kHd - kRope;
constexpr int kHeads = 32, kKeys = 32, kThreads = 256;
constexpr int kQPitch = kHd + 8;                // bf16 per query row: rows 16 bytes apart in the banks
constexpr int kKPitch = kNope + 3 * kRope + 8;  // bf16 per key row
constexpr int kQPlane = kHeads * kQPitch;       // bf16 per query term plane
constexpr size_t kQBytes = size_t(3) * kQPlane * 2;
constexpr size_t kKBytes = size_t(kKeys) * kKPitch * 2;
constexpr size_t kStageBytes = size_t(kKeys) * kHd * 4;
constexpr size_t kXBytes = size_t(2) * 4 * 4 * 32 * 16;  // partial scores: [head group][part][n-tile][lane] float4
constexpr int kMaxKeys = 2048;                           // keys per split (their codes stay in shared memory)
constexpr size_t kSmemBytes = kQBytes + kKBytes + kStageBytes + kXBytes + size_t(kMaxKeys) * 4 + 8;
static_assert(kQBytes % 16 == 0 && kKBytes % 16 == 0 && kSmemBytes <= 232448, "shared memory");
constexpr int kImageRow = kNope + 3 * kRope;  // bf16 per key image row: a key tile row without its padding
// With the key image: two key tiles in place of the staging rows and one tile, and a barrier per key tile.
constexpr size_t kSmemImageBytes = kQBytes + 2 * kKBytes + kXBytes + size_t(kMaxKeys) * 4 + 16;
static_assert(kSmemImageBytes <= 232448 && kImageRow * 2 % 16 == 0, "shared memory");

// Key columns c .. c + 3 (c % 4 == 0) in a key tile or image row: nope dims as bf16 (exact for FP8-simulated
// values), rope dims (c >= kNope) as three bf16 terms (columns c, c + kRope, c + 2 kRope).
template <bool kRopeCols>
__device__ __forceinline__ void store_key_cols(uint16_t* row, int c, float4 v) {
  if constexpr (!kRopeCols) {
    *reinterpret_cast<uint2*>(row + c) = make_uint2(bf16x2(v.x, v.y), bf16x2(v.z, v.w));
  } else {
    uint32_t a1, a2, a3, b1, b2, b3;
    split3(v.x, v.y, a1, a2, a3);
    split3(v.z, v.w, b1, b2, b3);
    *reinterpret_cast<uint2*>(row + c) = make_uint2(a1, b1);
    *reinterpret_cast<uint2*>(row + c + kRope) = make_uint2(a2, b2);
    *reinterpret_cast<uint2*>(row + c + 2 * kRope) = make_uint2(a3, b3);
  }
}

struct Block {
  const BatchDesc& b;
  const AttentionArgs& a;
  const TokenKeys& tk;
  uint16_t* qs;   // [3][kHeads][kQPitch]
  uint16_t* ks;   // [kKeys][kKPitch]
  float* stage;   // [kKeys][kHd]
  float4* xchg;   // [2][4][4][32]
  uint32_t* keys; // [kMaxKeys]: the split's key codes (attention_keys.cuh), or with the image its image rows
  uint64_t* full; // the staged tile's mbarrier: one arrival per row, plus the rows' bytes (image: one per key tile)
  int r, x;       // this thread's key row in a tile and its first float4 column (8 threads per row)
  int k0, k1;     // this split's keys

  // Key row tile + r into the staging rows: one 2 KB bulk copy per row, issued by the row's first thread (the
  // 4096 16-byte cp.asyncs of a tile had queued behind the shared-memory loads of the mmas).
  __device__ __forceinline__ void issue(int tile) const {
    if (x != 0) return;
    const int j = tile + r;
    if (j < k1) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the rows' last reads were the generic proxy's
      mbar_arrive_expect_tx(full, kHd * 4);
      bulk_load(stage + r * kHd, TokenKeys::row_of(a, keys[j - k0]), kHd * 4, full);
    } else {
      mbar_arrive(full);
    }
  }
  // With the key image: key row tile + r into key tile `buf`, by a bulk copy from its image row (by the row's first
  // thread), or zeros past the split's keys (the row's 8 threads; the probabilities there are 0, and 0 times
  // leftover bits could be NaN). Called by every thread after a block barrier that ends the tile's last reads.
  __device__ __forceinline__ void issue_image(int tile, int buf) const {
    const int j = tile + r;
    uint16_t* dst = ks + (size_t(buf) * kKeys + r) * kKPitch;
    if (j < k1) {
      if (x != 0) return;
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the rows' last reads were the generic proxy's
      mbar_arrive_expect_tx(full + buf, kImageRow * 2);
      bulk_load(dst, a.key_image + size_t(keys[j - k0]) * kImageRow, kImageRow * 2, full + buf);
    } else {
#pragma unroll
      for (int u = 0; u < kImageRow / 64; ++u) reinterpret_cast<uint4*>(dst)[x + 8 * u] = make_uint4(0, 0, 0, 0);
      if (x == 0) mbar_arrive(full + buf);
    }
  }
  // The thread's own staged columns of row r to bf16 (zeros past the split's keys): nope dims as they are, rope
  // dims (columns of u = 14, 15) as three terms.
  __device__ __forceinline__ void convert(int tile) const {
    const float* src = stage + r * kHd;
    uint16_t* dst = ks + r * kKPitch;
    const bool valid = tile + r < k1;
#pragma unroll
    for (int u = 0; u < 16; ++u) {  // columns of u < 14 are nope dims
      const int c = 4 * (x + 8 * u);
      const float4 v = valid ? *reinterpret_cast<const float4*>(src + c) : make_float4(0, 0, 0, 0);
      if (u < 14) store_key_cols<false>(dst, c, v);
      else store_key_cols<true>(dst, c, v);
    }
  }
};

// The tile loop and the output of warp `part` (head group hg): nope columns [112 part, + 112) and rope columns
// kNope + [16 part, + 16), for the scores (as dims) and the output alike.
template <bool kImage>
__device__ __forceinline__ void attend(const Block& k, int hg, int part, int h0) {
  constexpr int kNopeCols = kNope / 4, kRopeCols = kRope / 4;  // per warp: 112 and 16
  constexpr int kNT = kNopeCols / 8, kRT = kRopeCols / 8;     // output n-tiles of 8 columns: 14 and 2
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const AttentionArgs& a = k.a;
  const int n = k.k1, lo = kNopeCols * part, ro = kNope + kRopeCols * part;

  float o[kNT][4], orp[kRT][4];
#pragma unroll
  for (int i = 0; i < kNT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
#pragma unroll
  for (int i = 0; i < kRT; ++i) orp[i][0] = orp[i][1] = orp[i][2] = orp[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // ldmatrix row addresses (bytes). Queries (A, 16 x 16): row lane % 16, column 8 (lane / 16). Keys for the scores
  // (B, n = keys): key lane % 8 + 8 (lane / 16), column 8 ((lane / 8) % 2). Values (B, k = keys, transposed): key
  // lane % 8 + 8 ((lane / 8) % 2), column 8 (lane / 16).
  const uint32_t qa = smem_addr(k.qs + (16 * hg + lane % 16) * kQPitch + 8 * (lane / 16));
  const uint32_t kb0 = smem_addr(k.ks + (lane % 8 + 8 * (lane / 16)) * kKPitch + 8 * ((lane / 8) % 2));
  const uint32_t vb0 = smem_addr(k.ks + (lane % 8 + 8 * ((lane / 8) % 2)) * kKPitch + 8 * (lane / 16));
  constexpr uint32_t kQTerm = kQPlane * 2, kKRow = kKPitch * 2;

  // With the image (prefill: many tiles a block) the query's first term over the warp's nope dims stays in registers
  // (28 of them) for every tile: 7 of the tile's 24 query fragment loads (bench_gpu_ops attention-pf: -1.7 % at
  // 4096 tokens; the second term too gained nothing more).
  constexpr int kQRegs = kImage ? 1 : 0;
  uint32_t qn[kQRegs > 0 ? kQRegs : 1][kNopeCols / 16][4];
#pragma unroll
  for (int q = 0; q < kQRegs; ++q)
#pragma unroll
    for (int di = 0; di < kNopeCols / 16; ++di) ldsm_x4(qa + q * kQTerm + 2 * (lo + 16 * di), qn[q][di]);
  uint32_t phase = 1;  // the first tile's phase (0) was waited for before (without the image)
  for (int tile = k.k0; tile < n; tile += kKeys) {
    uint32_t kb = kb0, vb = vb0;
    const int ti = (tile - k.k0) / kKeys;
    if constexpr (kImage) {  // tile ti is in key tile ti % 2, that tile's (ti / 2)-th fill
      mbar_wait(k.full + (ti & 1), uint32_t(ti >> 1) & 1);
      kb += (ti & 1) * uint32_t(kKBytes);
      vb += (ti & 1) * uint32_t(kKBytes);
    } else if (tile + kKeys < n) {
      k.issue(tile + kKeys);  // the staging rows are free: this tile's are converted
    }

    // Partial scores of the 16 heads x 32 keys over this warp's dims: nope (3 query terms), rope (3 x 3 terms).
    float sc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll
    for (int d = 0; d < kNopeCols; d += 16) {
      uint32_t k0[4], k1[4];
      ldsm_x4(kb + 2 * (lo + d), k0);
      ldsm_x4(kb + 16 * kKRow + 2 * (lo + d), k1);
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        uint32_t qf[4];
        if (q < kQRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qf[e] = qn[q < kQRegs ? q : 0][d / 16][e];
        } else {
          ldsm_x4(qa + q * kQTerm + 2 * (lo + d), qf);
        }
        mma_bf16(sc[0], qf, k0[0], k0[1]);
        mma_bf16(sc[1], qf, k0[2], k0[3]);
        mma_bf16(sc[2], qf, k1[0], k1[1]);
        mma_bf16(sc[3], qf, k1[2], k1[3]);
      }
    }
    {
      uint32_t qf[3][4];
#pragma unroll
      for (int q = 0; q < 3; ++q) ldsm_x4(qa + q * kQTerm + 2 * ro, qf[q]);
#pragma unroll
      for (int kt = 0; kt < 3; ++kt) {
        uint32_t k0[4], k1[4];
        ldsm_x4(kb + 2 * (ro + kRope * kt), k0);
        ldsm_x4(kb + 16 * kKRow + 2 * (ro + kRope * kt), k1);
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          mma_bf16(sc[0], qf[q], k0[0], k0[1]);
          mma_bf16(sc[1], qf[q], k0[2], k0[3]);
          mma_bf16(sc[2], qf[q], k1[0], k1[1]);
          mma_bf16(sc[3], qf[q], k1[2], k1[3]);
        }
      }
    }

    // The whole scores: the four warps' parts added in part order.
    float4* xw = k.xchg + (hg * 4 + part) * 4 * 32 + lane;
#pragma unroll
    for (int i = 0; i < 4; ++i) xw[32 * i] = make_float4(sc[i][0], sc[i][1], sc[i][2], sc[i][3]);
    named_barrier(1 + hg, 128);
    const float4* xr = k.xchg + hg * 4 * 4 * 32 + lane;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float4 s = xr[32 * i];
#pragma unroll
      for (int p = 1; p < 4; ++p) {
        const float4 v = xr[(p * 4 + i) * 32];
        s.x += v.x;
        s.y += v.y;
        s.z += v.z;
        s.w += v.w;
      }
      sc[i][0] = s.x;
      sc[i][1] = s.y;
      sc[i][2] = s.z;
      sc[i][3] = s.w;
    }

    // Online softmax of rows g (elements 0, 1) and g + 8 (2, 3); key of element e of n-tile i: 8 i + 2 c + e % 2.
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 2 * rr; e < 2 * rr + 2; ++e) {
          const bool valid = tile + 8 * i + 2 * c + (e & 1) < n;
          sc[i][e] = valid ? sc[i][e] * a.scale : -INFINITY;
          mx = fmaxf(mx, sc[i][e]);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mn = fmaxf(m[rr], mx);  // finite: the tile's first key is valid
      const float corr = expf(m[rr] - mn);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 2 * rr; e < 2 * rr + 2; ++e) {
          sc[i][e] = expf(sc[i][e] - mn);
          sum += sc[i][e];
        }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      l[rr] = l[rr] * corr + sum;
      m[rr] = mn;
#pragma unroll
      for (int i = 0; i < kNT; ++i) {
        o[i][2 * rr] *= corr;
        o[i][2 * rr + 1] *= corr;
      }
#pragma unroll
      for (int i = 0; i < kRT; ++i) {
        orp[i][2 * rr] *= corr;
        orp[i][2 * rr + 1] *= corr;
      }
    }

    // Output columns: P (three terms; the scores' accumulator layout is the A fragment's) times the values.
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      uint32_t pf[3][4];
      split3(sc[2 * kk][0], sc[2 * kk][1], pf[0][0], pf[1][0], pf[2][0]);
      split3(sc[2 * kk][2], sc[2 * kk][3], pf[0][1], pf[1][1], pf[2][1]);
      split3(sc[2 * kk + 1][0], sc[2 * kk + 1][1], pf[0][2], pf[1][2], pf[2][2]);
      split3(sc[2 * kk + 1][2], sc[2 * kk + 1][3], pf[0][3], pf[1][3], pf[2][3]);
      const uint32_t vrow = vb + 16 * kk * kKRow;
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t v[4];
        ldsm_x4_trans(vrow + 2 * (lo + 16 * np), v);
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          mma_bf16(o[2 * np], pf[q], v[0], v[1]);
          mma_bf16(o[2 * np + 1], pf[q], v[2], v[3]);
        }
      }
#pragma unroll
      for (int vt = 0; vt < 3; ++vt) {
        uint32_t v[4];
        ldsm_x4_trans(vrow + 2 * (ro + kRope * vt), v);
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          mma_bf16(orp[0], pf[q], v[0], v[1]);
          mma_bf16(orp[1], pf[q], v[2], v[3]);
        }
      }
    }

    __syncthreads();  // every warp is done with this tile's keys and partial scores
    if constexpr (kImage) {
      if (tile + 2 * kKeys < n) k.issue_image(tile + 2 * kKeys, ti & 1);
    } else if (tile + kKeys < n) {
      mbar_wait(k.full, phase);
      phase ^= 1;
      k.convert(tile + kKeys);
      __syncthreads();
    }
  }

  if (a.splits > 1) {  // the split's running max, sum and unnormalised output, as attention.cu's kernel leaves them
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int head = h0 + 16 * hg + g + 8 * rr;
      float* dst = a.partial + ((size_t(k.tk.t) * a.H + head) * a.splits + blockIdx.z) * (kHd + 4);
      if (part == 0 && c == 0) {
        dst[0] = m[rr];
        dst[1] = l[rr];
      }
#pragma unroll
      for (int i = 0; i < kNT; ++i)
        *reinterpret_cast<float2*>(dst + 4 + lo + 8 * i + 2 * c) = make_float2(o[i][2 * rr], o[i][2 * rr + 1]);
#pragma unroll
      for (int i = 0; i < kRT; ++i)
        *reinterpret_cast<float2*>(dst + 4 + ro + 8 * i + 2 * c) = make_float2(orp[i][2 * rr], orp[i][2 * rr + 1]);
    }
    return;
  }
  // Sink, normalisation, the inverse rotation of the rope columns (as attention.cu's output_rotation), store.
  float cs[kRT], sn[kRT];
#pragma unroll
  for (int i = 0; i < kRT; ++i) {
    const float angle = float(k.tk.pos) * a.inv_freq[(ro - kNope + 8 * i + 2 * c) / 2];
    cs[i] = float(cos(double(angle))) * a.rope_scale;
    sn[i] = -float(sin(double(angle))) * a.rope_scale;
  }
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int head = h0 + 16 * hg + g + 8 * rr;
    const float sink = a.sinks[head];
    const float M = fmaxf(m[rr], sink);
    const float f = (m[rr] == -INFINITY) ? 0.0f : expf(m[rr] - M);
    const float inv = 1.0f / (l[rr] * f + expf(sink - M));
    float* dst = a.o + (size_t(k.tk.t) * a.H + head) * kHd + 2 * c;
#pragma unroll
    for (int i = 0; i < kNT; ++i)
      *reinterpret_cast<float2*>(dst + lo + 8 * i) = make_float2(o[i][2 * rr] * (f * inv), o[i][2 * rr + 1] * (f * inv));
#pragma unroll
    for (int i = 0; i < kRT; ++i) {
      const float x0 = orp[i][2 * rr] * (f * inv), x1 = orp[i][2 * rr + 1] * (f * inv);
      *reinterpret_cast<float2*>(dst + ro + 8 * i) = make_float2(x0 * cs[i] - x1 * sn[i], x1 * cs[i] + x0 * sn[i]);
    }
  }
}

template <bool kImage>
__global__ void __launch_bounds__(kThreads, 1)
    attention_mma_kernel(const __grid_constant__ BatchDesc b, const __grid_constant__ AttentionArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  // The token's position, sequence, slot and key count (host-written BatchDesc) before the wait, so that after it the
  // key codes' loads come first (not two dependent round trips ahead of them).
  const TokenKeys tk(b, a, blockIdx.x);
  dev::pdl_begin();
  const int h0 = blockIdx.y * kHeads, warp = threadIdx.x / 32;
  // Shared memory: queries, key tile(s), staging rows (not with the image), exchange, key codes, barrier(s).
  constexpr size_t kTiles = kQBytes + (kImage ? 2 : 1) * kKBytes, kX = kTiles + (kImage ? 0 : kStageBytes);
  Block k{b,
          a,
          tk,
          reinterpret_cast<uint16_t*>(smem),
          reinterpret_cast<uint16_t*>(smem + kQBytes),
          reinterpret_cast<float*>(smem + kTiles),
          reinterpret_cast<float4*>(smem + kX),
          reinterpret_cast<uint32_t*>(smem + kX + kXBytes),
          reinterpret_cast<uint64_t*>(smem + kX + kXBytes + size_t(kMaxKeys) * 4),
          int(threadIdx.x) / 8,
          int(threadIdx.x) % 8,
          0,
          0};
  const int per = split_keys(a.max_keys, a.splits);
  k.k0 = blockIdx.z * per;
  k.k1 = min(tk.n, k.k0 + per);
  // The split's key codes once (top-k and page-table loads), not per tile on the way to each tile's copies.
  for (int j = k.k0 + threadIdx.x; j < k.k1; j += kThreads)
    k.keys[j - k.k0] = kImage ? tk.image_row(b, a, j) : tk.code(b, a, j);
  if (threadIdx.x == 0) {
    mbar_init(k.full, kKeys);
    if (kImage) mbar_init(k.full + 1, kKeys);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if constexpr (kImage) {
    if (k.k0 < k.k1) k.issue_image(k.k0, 0);
    if (k.k0 + kKeys < k.k1) k.issue_image(k.k0 + kKeys, 1);
  } else if (k.k0 < k.k1) {
    k.issue(k.k0);
  }
  // The token's 32 heads x 512 queries as three bf16 planes (16 float4s per thread, loads first).
  {
    const float4* src = reinterpret_cast<const float4*>(a.q + (size_t(tk.t) * a.H + h0) * kHd);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = src[threadIdx.x + kThreads * (8 * half + u)];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int i = threadIdx.x + kThreads * (8 * half + u), head = i / (kHd / 4), col = 4 * (i % (kHd / 4));
        uint32_t a1, a2, a3, b1, b2, b3;
        split3(v[u].x, v[u].y, a1, a2, a3);
        split3(v[u].z, v[u].w, b1, b2, b3);
        uint16_t* row = k.qs + head * kQPitch + col;
        *reinterpret_cast<uint2*>(row) = make_uint2(a1, b1);
        *reinterpret_cast<uint2*>(row + kQPlane) = make_uint2(a2, b2);
        *reinterpret_cast<uint2*>(row + 2 * kQPlane) = make_uint2(a3, b3);
      }
    }
  }
  if (!kImage && k.k0 < k.k1) {
    mbar_wait(k.full, 0);
    k.convert(k.k0);
  }
  __syncthreads();
  // Warps w and w + 4 share a scheduler: the same part of both head groups (the same code and tensor work).
  attend<kImage>(k, warp >> 2, warp & 3, h0);
}

// The key image (AttentionArgs::key_image): one warp per row, in the form Block::convert gives a key tile row. Grid
// y 0: the chunk's kv rows; y = 1 + s: sequence s's ring rows (positions from start - (window - 1), those >= 0),
// then its compressed entries (those < (start + count) / ratio, the most any of its tokens reaches).
__global__ void __launch_bounds__(256) attention_key_image_kernel(const __grid_constant__ BatchDesc b,
                                                                 const __grid_constant__ AttentionArgs a) {
  dev::pdl_begin();
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int ring = a.window - 1;
  const float* src = nullptr;
  size_t row = 0;
  if (blockIdx.y == 0) {
    if (i >= b.T) return;
    src = a.kv + size_t(i) * kHd;
    row = size_t(i);
  } else {
    const int s = int(blockIdx.y) - 1, start = b.seq_start[s];
    if (i < ring) {
      const int kp = start - ring + i;
      if (kp < 0) return;
      const size_t ring_row = (size_t(b.seq_slot[s]) * a.view.num_layers + a.view.layer) * a.view.cap + kp % a.view.cap;
      src = a.view.window + ring_row * kHd;
      row = image_ring_row(b, a, s, i);
    } else {
      const int e = i - ring;
      if (a.ratio == 0 || e >= min(a.image_comp, (start + b.seq_count[s]) / a.ratio)) return;
      const int page = b.page_table[size_t(s) * b.page_ld + e / a.view.epp];
      src = a.view.compressed + (size_t(page) * a.view.epp + e % a.view.epp) * kHd;
      row = image_entry_row(b, a, s, e);
    }
  }
  uint16_t* dst = a.key_image + row * kImageRow;
  float4 v[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) v[u] = reinterpret_cast<const float4*>(src)[lane + 32 * u];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int c = 4 * (lane + 32 * u);
    if (c < kNope) store_key_cols<false>(dst, c, v[u]);
    else store_key_cols<true>(dst, c, v[u]);
  }
}

}  // namespace

size_t attention_key_image_rows(int T, int S, int window, int comp) {
  return size_t(T) + size_t(S) * (std::max(window, 1) - 1) + size_t(S) * std::max(comp, 0);
}
size_t attention_key_image_elems(int T, int S, int window, int comp) {
  return attention_key_image_rows(T, S, window, comp) * kImageRow;
}

bool sparse_attention_mma_fits(int H, int hd, int rope_dim, int max_keys) {
  return hd == kHd && rope_dim == kRope && H > 0 && H % kHeads == 0 && max_keys <= kMaxKeys;
}

cudaError_t sparse_attention_mma(const BatchDesc& b, const AttentionArgs& a, cudaStream_t stream) {
  if (b.T == 0) return cudaSuccess;
  if (!sparse_attention_mma_fits(a.H, a.hd, a.rope_dim, a.max_keys)) return cudaErrorInvalidValue;
  using Kernel = void (*)(const BatchDesc, const AttentionArgs);
  const bool image = a.key_image != nullptr;
  static const cudaError_t configured = [] {
    cudaError_t e = cudaFuncSetAttribute(attention_mma_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(kSmemBytes));
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(attention_mma_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(kSmemImageBytes));
    return e;
  }();
  if (configured != cudaSuccess) return configured;
  if (a.splits < 1 || (a.splits > 1 && !a.partial)) return cudaErrorInvalidValue;
  if (image && (a.window < 1 || (a.ratio > 0 && (a.image_comp < 0 || !a.view.compressed))))
    return cudaErrorInvalidValue;
  // At most a.splits (the workspace's), and no more blocks than one wave at one block per multiprocessor: a second
  // wave costs more than the splits save (T = 64 at the splits attention_splits picks: 167 against 120 us).
  AttentionArgs m = a;
  m.splits = std::max(1, std::min(a.splits, dev::sm_count() / (b.T * (a.H / kHeads))));
  if (image) {
    const int rows = std::max(b.T, a.window - 1 + (a.ratio > 0 ? a.image_comp : 0));
    const cudaError_t err = dev::launch(attention_key_image_kernel, dim3((rows + 7) / 8, b.S + 1), dim3(256), 0,
                                        stream, b, m);
    if (err != cudaSuccess) return err;
  }
  const Kernel kernel = image ? attention_mma_kernel<true> : attention_mma_kernel<false>;
  const cudaError_t err = dev::launch(kernel, dim3(b.T, a.H / kHeads, m.splits), dim3(kThreads),
                                      image ? kSmemImageBytes : kSmemBytes, stream, b, m);
  return err != cudaSuccess || m.splits == 1 ? err : attention_combine(b, m, stream);
}

}  // namespace moeserve::cuda
