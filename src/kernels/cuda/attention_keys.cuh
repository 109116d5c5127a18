#pragma once
// Which keys a token attends to (kernels/cuda/ops.h sparse_attention), shared by the fp32 attention kernel
// (attention.cu) and the tensor-core one (attention_mma.cu): first the window, positions pos - nwin + 1 .. pos
// (this chunk's kv rows, and before the chunk the window ring), then the compressed entries (all i < (pos + 1) /
// ratio, or the token's top-k).
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
  // Key j's row in a key image (image_ring_row, image_entry_row below).
  __device__ __forceinline__ uint32_t image_row(const BatchDesc& b, const AttentionArgs& a, int j) const;
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

// The key image's rows (AttentionArgs::key_image, attention_key_image_rows): [0, T) the chunk's kv rows (row = the
// kv row), then per sequence s its window - 1 ring rows before its chunk (ring row i: position start - (window - 1) +
// i), then per sequence image_comp compressed entries.
__device__ __forceinline__ uint32_t image_ring_row(const BatchDesc& b, const AttentionArgs& a, int s, int i) {
  return uint32_t(b.T + s * (a.window - 1) + i);
}
__device__ __forceinline__ uint32_t image_entry_row(const BatchDesc& b, const AttentionArgs& a, int s, int e) {
  return uint32_t(b.T + b.S * (a.window - 1) + s * a.image_comp + e);
}

__device__ __forceinline__ uint32_t TokenKeys::image_row(const BatchDesc& b, const AttentionArgs& a, int j) const {
  if (j < nwin) {
    const int kp = pos - nwin + 1 + j;  // >= start - (window - 1): the window reaches that far back from the chunk
    return kp >= start ? uint32_t(begin + kp - start) : image_ring_row(b, a, s, kp - (start - (a.window - 1)));
  }
  const int c = j - nwin;
  return image_entry_row(b, a, s, a.topk ? a.topk[size_t(t) * a.k + c] : c);
}

}  // namespace moeserve::cuda::dev
