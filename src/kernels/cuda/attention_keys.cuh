#pragma once
// Which keys a token attends to (kernels/cuda/ops.h sparse_attention), shared by the fp32 attention kernel
// (attention.cu) and the tensor-core one (attention_mma.cu): first the window, positions pos - nwin + 1 .. pos
// (this chunk's kv rows, and before the chunk the window ring), then the compressed entries (all i < (pos + 1) /
// ratio, or the token's top-k). Also shared: how a block adds the key splits' partials (combine_split_rows).
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

// The key splits' partial results (flash-decoding: per token, head and split the running max, the sum and the
// unnormalised output, attention_workspace_floats) combined with the sink, normalised and de-rotated (attention.cu).
cudaError_t attention_combine(const BatchDesc& b, const AttentionArgs& a, cudaStream_t stream);

}  // namespace moeserve::cuda

namespace moeserve::cuda::dev {

// Keys per tile of both kernels; a split's keys are a multiple of it.
constexpr int kKeyTile = 32;

// Keys per split: split s takes keys [s * per, (s + 1) * per) of each token.
__device__ __forceinline__ int split_keys(int max_keys, int splits) {
  const int per = (max_keys + splits - 1) / splits;
  return (per + kKeyTile - 1) / kKeyTile * kKeyTile;
}

__device__ __forceinline__ int key_count(const AttentionArgs& a, int pos) {
  const int nwin = min(pos + 1, a.window);
  int ncomp = 0;
  if (a.ratio > 0) {
    ncomp = (pos + 1) / a.ratio;
    if (a.topk) ncomp = min(ncomp, a.k);
  }
  return nwin + ncomp;
}

struct TokenKeys {
  int t, s, pos, begin, start, slot, nwin, n;

  __device__ __forceinline__ TokenKeys(const BatchDesc& b, const AttentionArgs& a, int token) : t(token) {
    pos = b.tok_pos[t];
    s = b.tok_seq[t];
    begin = b.seq_begin[s];
    start = b.seq_start[s];
    slot = b.seq_slot[s];
    nwin = min(pos + 1, a.window);
    n = key_count(a, pos);
  }

  // Key j (0 <= j < n) as 32 bits: its array in the top two (0 this chunk's kv, 1 the window ring, 2 the compressed
  // pool) and its row there, so that a kernel can look its keys up once and keep them in shared memory.
  __device__ __forceinline__ uint32_t code(const BatchDesc& b, const AttentionArgs& a, int j) const {
    if (j < nwin) {
      const int kp = pos - nwin + 1 + j;
      return kp >= start ? uint32_t(begin + kp - start)
                         : 1u << 30 | uint32_t((slot * a.view.num_layers + a.view.layer) * a.view.cap + kp % a.view.cap);
    }
    const int c = j - nwin;
    const int e = a.topk ? a.topk[size_t(t) * a.k + c] : c;
    const int page = b.page_table[size_t(s) * b.page_ld + e / a.view.epp];
    return 2u << 30 | uint32_t(page * a.view.epp + e % a.view.epp);
  }
  // The [hd] row of a key code.
  __device__ __forceinline__ static const float* row_of(const AttentionArgs& a, uint32_t code) {
    const float* base = code >> 30 == 0 ? a.kv : code >> 30 == 1 ? a.view.window : a.view.compressed;
    return base + size_t(code & ((1u << 30) - 1)) * a.hd;
  }
  // The [hd] row of key j (0 <= j < n).
  __device__ __forceinline__ const float* row(const BatchDesc& b, const AttentionArgs& a, int j) const {
    return row_of(a, code(b, a, j));
  }
};


// Rows [row0, row1) (row = token * H + head) of the key splits' partials (a.partial, as both attention kernels
// leave them) combined by the calling block: per output float4 the splits in order, eight at a time (one load
// round), each batch rescaling the running sum to its new maximum, the sink's term first; normalised, de-rotated
// (rotate_store's arithmetic), stored. The partials are read through L2 (written by other blocks of the kernel).
// combine_kernel adds the same terms in another order: the same up to rounding.
__device__ inline void combine_split_rows(const BatchDesc& b, const AttentionArgs& a, int row0, int row1) {
  const int hd = a.hd, hd4 = hd / 4, pitch = hd + 4;
  constexpr int kBatch = 8;  // splits loaded together: one L2 round trip for a decode token's 4-5 splits
  for (int i = threadIdx.x; i < (row1 - row0) * hd4; i += blockDim.x) {
    const int row = row0 + i / hd4, head = row % a.H, d4 = i % hd4, pos = b.tok_pos[row / a.H];
    const float* src = a.partial + size_t(row) * a.splits * pitch;
    // Online over batches: M the largest maximum so far (the sink's first), denom and o scaled to it.
    float M = a.sinks[head], denom = 1.0f;
    float4 o = make_float4(0, 0, 0, 0);
    for (int s0 = 0; s0 < a.splits; s0 += kBatch) {
      float ms[kBatch], ls[kBatch];
      float4 vs[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const bool in = s0 + j < a.splits;
        const float* ps = src + size_t(in ? s0 + j : 0) * pitch;
        ms[j] = in ? __ldcg(ps) : -INFINITY;
        ls[j] = in ? __ldcg(ps + 1) : 0.0f;
        vs[j] = in ? __ldcg(reinterpret_cast<const float4*>(ps + 4) + d4) : make_float4(0, 0, 0, 0);
      }
      float Mb = M;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) Mb = fmaxf(Mb, ms[j]);
      const float scale = expf(M - Mb);
      denom *= scale;
      o = make_float4(o.x * scale, o.y * scale, o.z * scale, o.w * scale);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (ms[j] == -INFINITY) continue;
        const float f = expf(ms[j] - Mb);
        denom += ls[j] * f;
        o.x += vs[j].x * f;
        o.y += vs[j].y * f;
        o.z += vs[j].z * f;
        o.w += vs[j].w * f;
      }
      M = Mb;
    }
    const float inv = 1.0f / denom;
    float v[4] = {o.x * inv, o.y * inv, o.z * inv, o.w * inv};
    const int d = 4 * d4;
    if (d >= hd - a.rope_dim)  // de-rotate (rotate_store's arithmetic for one float4)
#pragma unroll
      for (int q = 0; q < 4; q += 2) {
        const float angle = float(pos) * a.inv_freq[(d + q - (hd - a.rope_dim)) / 2];
        const float cs = float(cos(double(angle))) * a.rope_scale, sn = -float(sin(double(angle))) * a.rope_scale;
        const float x0 = v[q], x1 = v[q + 1];
        v[q] = x0 * cs - x1 * sn;
        v[q + 1] = x1 * cs + x0 * sn;
      }
    *reinterpret_cast<float4*>(a.o + size_t(row) * hd + d) = make_float4(v[0], v[1], v[2], v[3]);
  }
}


}  // namespace moeserve::cuda::dev
