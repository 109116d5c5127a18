#pragma once
// The quantization semantics DeepSeek-V4 was trained with, as fp32 "simulations" (quantize then dequantize)
// and as real quantizers for the fast paths:
//  - activations before every FP8/FP4 linear: FP8 e4m3 per token per 128 channels, scale 2^ceil(log2(amax/448))
//    (amax floored at 1e-4);
//  - the 448 non-RoPE KV dims: the same with blocks of 64;
//  - the lightning indexer's q and k: Hadamard rotation (orthonormal), then FP4 e2m1 per 32 with
//    power-of-two scales 2^ceil(log2(amax/6)).
#include <cstdint>

namespace moeserve::kernels::cpu {

// Power-of-two scale for a block whose largest magnitude is amax, for a format whose max is fmt_max.
float pow2_scale(float amax, float fmt_max);

// In place: each `block` of the first `width` values of each row -> fp8(x / s) * s.
void fp8_block_sim(float* x, int64_t rows, int64_t row_stride, int64_t width, int64_t block);
// Real quantizer: q [rows, dim] e4m3 bytes, scales [rows, dim / block] fp32 (powers of two).
void fp8_block_quantize(const float* x, int64_t rows, int64_t dim, int64_t block, uint8_t* q, float* scales);

// In place: each `block` of the row -> e2m1(x / s) * s with s = 2^ceil(log2(amax / 6)).
void fp4_block_sim(float* x, int64_t rows, int64_t dim, int64_t block);

// In place: orthonormal Walsh-Hadamard transform of each row (dim must be a power of two).
void hadamard_rotate(float* x, int64_t rows, int64_t dim);

}  // namespace moeserve::kernels::cpu
