#include "kernels/cpu/moe_w4a8_pack.h"

#include <algorithm>
#include <cstring>

namespace moeserve::kernels::cpu {

namespace {

inline uint8_t nibble_at(const uint8_t* row, int k) { return (row[k >> 1] >> ((k & 1) * 4)) & 0xf; }
inline void set_nibble(uint8_t* row, int k, uint8_t v) {
  int shift = (k & 1) * 4;
  row[k >> 1] = uint8_t((row[k >> 1] & ~(0xf << shift)) | ((v & 0xf) << shift));
}

// The row a word at (h, i, j) describes, and the first of its channels in the group: k-step ks = 2h + j/2 of quad
// lane t = i % 4 holds channels 32t + 8ks + c ("lo") and 32t + 8ks + 4 + c ("hi"), block t (the activation channel
// order).
inline void word_coords(int h, int i, int j, int* r, int* k_first) {
  *r = 16 * (i / 32) + (i % 32) / 4 + 8 * (j % 2);
  *k_first = 32 * (i % 4) + 8 * (2 * h + j / 2);
}

inline size_t word_offset(int h, int i, int j) { return size_t(h) * 2048 + size_t(i) * 16 + size_t(j) * 4; }

}  // namespace

void moe_w4a8_order_activations(uint8_t* row, int K) {
  uint8_t group[kPackK];
  for (int g = 0; g < K / kPackK; ++g) {
    uint8_t* src = row + size_t(g) * kPackK;
    for (int q = 0; q < kPackK / 4; ++q) std::memcpy(group + 4 * moe_w4a8_act_word(q), src + 4 * q, 4);
    std::memcpy(src, group, kPackK);
  }
}

bool moe_w4a8_pack_shape_ok(int N, int K) { return N > 0 && K > 0 && N % kPackRows == 0 && K % kPackK == 0; }

namespace {

bool block_is_zero(const uint8_t* wrow, int k0) {
  for (int k = k0; k < k0 + 32; ++k)
    if ((nibble_at(wrow, k) & 7) != 0) return false;
  return true;
}

}  // namespace

int64_t moe_w4a8_pack_expert(const uint8_t* weight, const uint8_t* scale, int N, int K, uint8_t* packed,
                             uint64_t* flags) {
  const int n_blocks = N / kPackRows, n_groups = K / kPackK, fw = moe_w4a8_flag_words(K);
  std::memset(flags, 0, sizeof(uint64_t) * size_t(n_blocks) * size_t(fw));
  // The row references: the largest exponent of each row's non-zero blocks.
  uint8_t* ref = packed + moe_w4a8_row_ref_offset(N, K);
  for (int n = 0; n < N; ++n) {
    const uint8_t* wrow = weight + size_t(n) * (K / 2);
    int r = -1;
    for (int b = 0; b < K / 32; ++b)
      if (!block_is_zero(wrow, 32 * b)) r = std::max(r, int(scale[size_t(n) * (K / 32) + b]));
    ref[n] = uint8_t(r < 0 ? 127 : r);
  }
  int64_t wide = 0;
  for (int nb = 0; nb < n_blocks; ++nb) {
    for (int g = 0; g < n_groups; ++g) {
      uint8_t* chunk = packed + (size_t(nb) * n_groups + g) * kChunkBytes;
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 128; ++i)
          for (int j = 0; j < 4; ++j) {
            int r, k_first;
            word_coords(h, i, j, &r, &k_first);
            const uint8_t* wrow = weight + size_t(nb * kPackRows + r) * (K / 2);
            const int k0 = g * kPackK + k_first;
            uint32_t word = 0;
            for (int c = 0; c < 4; ++c) {
              uint8_t lo = nibble_at(wrow, k0 + c), hi = nibble_at(wrow, k0 + 4 + c);
              word |= uint32_t(lo & 7) << (4 * c);
              word |= uint32_t(hi & 7) << (4 * (c + 4));
              word |= uint32_t(lo >> 3) << (8 * c + 7);
              word |= uint32_t(hi >> 3) << (8 * c + 3);
            }
            std::memcpy(chunk + word_offset(h, i, j), &word, 4);
          }
      bool group_wide = false;
      for (int r = 0; r < kPackRows; ++r) {
        const int n = nb * kPackRows + r;
        const uint8_t* wrow = weight + size_t(n) * (K / 2);
        for (int b = 0; b < 4; ++b) {
          int e = scale[size_t(n) * (K / 32) + g * 4 + b];
          if (block_is_zero(wrow, g * kPackK + 32 * b)) e = ref[n];
          if (ref[n] - e > kFastSpread) group_wide = true;
          chunk[kChunkWeightBytes + 4 * r + b] = uint8_t((e - ref[n] + 12) & 0xff);
        }
      }
      if (group_wide) {
        flags[size_t(nb) * fw + g / 64] |= uint64_t(1) << (g % 64);
        ++wide;
      }
    }
  }
  return wide;
}

void moe_w4a8_unpack_expert(const uint8_t* packed, int N, int K, uint8_t* weight, uint8_t* scale) {
  const int n_blocks = N / kPackRows, n_groups = K / kPackK;
  for (int nb = 0; nb < n_blocks; ++nb)
    for (int g = 0; g < n_groups; ++g) {
      const uint8_t* chunk = packed + (size_t(nb) * n_groups + g) * kChunkBytes;
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 128; ++i)
          for (int j = 0; j < 4; ++j) {
            int r, k_first;
            word_coords(h, i, j, &r, &k_first);
            uint32_t word;
            std::memcpy(&word, chunk + word_offset(h, i, j), 4);
            uint8_t* wrow = weight + size_t(nb * kPackRows + r) * (K / 2);
            const int k0 = g * kPackK + k_first;
            for (int c = 0; c < 4; ++c) {
              uint8_t lo = uint8_t(((word >> (4 * c)) & 7) | (((word >> (8 * c + 7)) & 1) << 3));
              uint8_t hi = uint8_t(((word >> (4 * (c + 4))) & 7) | (((word >> (8 * c + 3)) & 1) << 3));
              set_nibble(wrow, k0 + c, lo);
              set_nibble(wrow, k0 + 4 + c, hi);
            }
          }
      const uint8_t* ref = packed + moe_w4a8_row_ref_offset(N, K);
      for (int r = 0; r < kPackRows; ++r) {
        const int n = nb * kPackRows + r;
        for (int b = 0; b < 4; ++b)
          scale[size_t(n) * (K / 32) + g * 4 + b] = uint8_t((ref[n] - 12 + chunk[kChunkWeightBytes + 4 * r + b]) & 0xff);
      }
    }
}

}  // namespace moeserve::kernels::cpu
