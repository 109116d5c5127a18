#pragma once
// The load-time layout of MXFP4 expert weights for the Hopper W4A8 grouped GEMM
// (kernels/cuda/moe_w4a8.h). Plain C++ with no project includes, so CUDA sources can include it.
//
// Checkpoint layout, per expert: W[N, K] as packed e2m1 bytes [N, K/2] (low nibble = even k) and one
// E8M0 scale per 32 consecutive k: [N, K/32].
//
// Packed layout, per expert: chunks of 64 rows x 128 k, ordered [N/64][K/128], each kChunkBytes:
//   bytes [0, 4096): the 64x128 e2m1 values, permuted into the wgmma A-operand register layout.
//     Index by (half h in 0..1, warpgroup thread i in 0..127, word j in 0..3), 16 bytes per (h, i):
//     word j holds k-step ks = 2h + j/2 (32 k each) of row r = 16*(i/32) + (i%32)/4 + 8*(j%2).
//     A word carries 8 values: the 4 at wgmma k positions 32ks + 4t + c ("lo", c=0..3) and the 4 at
//     32ks + 16 + 4t + c ("hi"), t = i % 4, which hold the group's channels 32t + 8ks + c and 32t + 8ks + 4 + c
//     (the activation channel order below): every value a thread converts for a row in a group comes from the
//     row's 32-block t, so it needs one e2m1 -> e4m3 table per row and group, not one per k-step (on the H200
//     decode from 4 tokens 7-15 % faster than with natural order, prefill 1-9 %; docs/benchmarks/moe-w4a8.md,
//     forty-third session).
//     Nibble q (bits 4q..4q+3) holds in its low 3 bits the
//     magnitude code of lo[q] (q < 4) or hi[q-4] (q >= 4); the top bit of nibble 2c+1 is the sign of
//     lo[c] and the top bit of nibble 2c the sign of hi[c]. So the signs of lo sit at bits 7,15,23,31 and
//     those of hi at bits 3,11,19,27: a byte permute of the magnitudes plus one mask gives e4m3 bytes.
//   bytes [4096, 4352): for each of the 64 rows, one byte per 32-k block of this 128-k group (block 0
//     first): u = (e - R + 12) mod 256, where e is the block's E8M0 exponent and R the row's reference
//     exponent (below). Blocks whose 32 values are all zero get e = R (u = 12): they contribute 0 either
//     way. For the fast path u is in [1, 12] and the kernel's e2m1 -> e4m3 table represents
//     v * 2^(u - 6) directly (exact in e4m3), so the kernel needs no per-group exponent arithmetic.
//   After the N/64 x K/128 chunks: R[N], one byte per row: the largest exponent of the row's non-zero blocks
//     (127 for an all-zero row). Every value of the row carries 2^(R - 133), applied once in the epilogue.
//   Lossless (e = (R - 12 + u) mod 256) and the same scale bytes as the checkpoint plus N bytes
//   (N*K/2 + N*K/32 + N): no dequantized copy.
// Activation channel order (the GEMM's FP8 input, and every kernel that writes it): within each 128-channel
//   group, the 4-byte word of channels [4q, 4q + 4) is stored at word position moe_w4a8_act_word(q) =
//   8ks + 4hh + t for q = 8t + 2ks + hh, so that wgmma k position p = 32ks + 16hh + 4t + c reads channel
//   32t + 8ks + 4hh + c, the weight the packed layout puts there. Scales stay per 128 channels.
// Wide flags, per expert: [N/64][flag_words(K)] uint64; bit g of word g/64 is set when some row of the
//   64-row block has a non-zero block in group g more than kFastSpread exponents below the row's R. The
//   kernel handles such groups on an exact slower path (per-32 promotion with 2^(e - R)).
#include <cstddef>
#include <cstdint>

namespace moeserve::kernels::cpu {

inline constexpr int kPackRows = 64;
inline constexpr int kPackK = 128;
inline constexpr int kChunkWeightBytes = kPackRows * kPackK / 2;          // 4096
inline constexpr int kChunkScaleBytes = kPackRows * (kPackK / 32);        // 256
inline constexpr int kChunkBytes = kChunkWeightBytes + kChunkScaleBytes;  // 4352
// Largest distance below the row's reference exponent R that the fast path represents exactly: a block at
// R is shifted up by 2^6 (6.0 -> 384, still e4m3), a block d below R by 2^(6-d); every e2m1 value times
// 2^(6-d) is an e4m3 normal for d <= 11.
inline constexpr int kFastSpread = 11;

inline constexpr int moe_w4a8_flag_words(int K) { return (K / kPackK + 63) / 64; }
// Byte offset of R[N] inside a packed expert (after the chunks).
inline constexpr size_t moe_w4a8_row_ref_offset(int N, int K) {
  return size_t(N / kPackRows) * size_t(K / kPackK) * kChunkBytes;
}
inline constexpr size_t moe_w4a8_packed_expert_bytes(int N, int K) { return moe_w4a8_row_ref_offset(N, K) + size_t(N); }
inline constexpr size_t moe_w4a8_flag_expert_words(int N, int K) {
  return size_t(N / kPackRows) * size_t(moe_w4a8_flag_words(K));
}

// Stored word position of the channel word q (0..31) of a 128-channel group, and the stored byte of channel k.
inline constexpr int moe_w4a8_act_word(int q) { return ((q & 7) << 2) | (q >> 3); }
inline constexpr int moe_w4a8_act_pos(int k) {
  return (k & ~127) | (moe_w4a8_act_word((k & 127) >> 2) << 2) | (k & 3);
}
// Puts a row of K FP8 channels (natural order, K % 128 == 0) into the activation channel order, in place.
void moe_w4a8_order_activations(uint8_t* row, int K);

// Shapes the packed layout accepts: N % 64 == 0, K % 128 == 0.
bool moe_w4a8_pack_shape_ok(int N, int K);

// Repacks one expert. weight: [N][K/2] e2m1 pairs, scale: [N][K/32] E8M0. packed: moe_w4a8_packed_expert_bytes,
// flags: moe_w4a8_flag_expert_words. Returns the number of (64-row block, group) pairs flagged wide.
int64_t moe_w4a8_pack_expert(const uint8_t* weight, const uint8_t* scale, int N, int K, uint8_t* packed,
                             uint64_t* flags);

// Inverse, for tests: back to the checkpoint layout (with the all-zero blocks' scales normalized to R).
void moe_w4a8_unpack_expert(const uint8_t* packed, int N, int K, uint8_t* weight, uint8_t* scale);

}  // namespace moeserve::kernels::cpu
