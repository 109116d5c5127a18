#pragma once
// The quantization semantics DeepSeek-V4 was trained with, as fp32 "simulations" (quantize then dequantize),
// and the real quantizers / dequantizers of its checkpoint formats. Verified against the official inference
// code (DeepSeek-V4 inference/kernel.py and model.py; see docs/numerics.md):
//  - activations before every FP8/FP4 linear (`act_quant(x, 128, "ue8m0")`): FP8 e4m3 per token per 128
//    channels, scale 2^ceil(log2(amax * (1/448))) with amax floored at 1e-4, x/s clamped to +-448;
//  - the non-RoPE KV dims (window KV and compressed entries): the same with blocks of 64;
//  - the lightning indexer's q and k (`fp4_act_quant(x, 32)`): Hadamard rotation (orthonormal, Sylvester
//    order, scale d^-1/2), then FP4 e2m1 per 32 with scale 2^ceil(log2(amax * (1/6))), amax floored at
//    6 * 2^-126, x/s clamped to +-6;
//  - checkpoint weights: FP8 e4m3 with one scale per 128x128 block, MXFP4 (e2m1, two per byte, low nibble =
//    even element) with one E8M0 scale per 32 inputs.
#include <cstdint>

#include "core/dtype.h"

namespace moeserve::kernels::cpu {

inline constexpr float kFp8Max = 448.0f;
inline constexpr float kFp4Max = 6.0f;
inline constexpr float kFp8AmaxFloor = 1e-4f;                    // act_quant_kernel
inline constexpr float kFp4AmaxFloor = 6.0f * 1.1754943508e-38f;  // fp4_quant_kernel: 6 * 2^-126

// 2^ceil(log2(x)) for a positive normal float x, from its exponent bits (exact, unlike std::log2 near powers
// of two): the official kernels' fast_log2_ceil / fast_pow2.
float pow2_ceil(float x);
// The power-of-two scale of a block whose largest magnitude is amax: pow2_ceil(max(amax, floor) * (1/fmt_max)),
// with the reciprocal rounded to fp32 first, exactly as the official kernels compute it.
float pow2_scale(float amax, float fmt_max, float amax_floor);
inline float fp8_pow2_scale(float amax) { return pow2_scale(amax, kFp8Max, kFp8AmaxFloor); }
inline float fp4_pow2_scale(float amax) { return pow2_scale(amax, kFp4Max, kFp4AmaxFloor); }

// E8M0 byte of a power of two in [2^-127, 2^127]; throws otherwise.
uint8_t e8m0_from_pow2(float scale);

// In place: each `block` of the first `width` values of each row -> fp8(clamp(x / s, +-448)) * s.
// A trailing partial block (width not a multiple of block) is its own block.
void fp8_block_sim(float* x, int64_t rows, int64_t row_stride, int64_t width, int64_t block);
// Real activation quantizer: q [rows, dim] e4m3 bytes, scales [rows, dim / block] fp32 (powers of two).
void fp8_block_quantize(const float* x, int64_t rows, int64_t dim, int64_t block, uint8_t* q, float* scales);

// In place: each `block` of the row -> e2m1(clamp(x / s, +-6)) * s with s = fp4_pow2_scale(amax).
void fp4_block_sim(float* x, int64_t rows, int64_t dim, int64_t block);

// In place: orthonormal Walsh-Hadamard transform of each row (dim must be a power of two).
void hadamard_rotate(float* x, int64_t rows, int64_t dim);

// Checkpoint weights. W [out, in] fp32.
// FP8 with 128x128 blocks: q [out, in] e4m3, scales [ceil(out/128), ceil(in/128)] E8M0 (fp8_pow2_scale of
// the block's amax, so nothing clips and the scale is exact in E8M0).
void fp8_weight_quantize(const float* w, int64_t out, int64_t in, uint8_t* q, uint8_t* scales_e8m0);
// W = q * scale of the block; `scales` are F8_E8M0 bytes or F32 values (scale_dtype), [ceil(out/128), ceil(in/128)].
void fp8_weight_dequantize(const uint8_t* q, DType scale_dtype, const void* scales, int64_t out, int64_t in,
                           float* w);
// MXFP4: packed [out, in/2] (element 2j in the low nibble of byte j, 2j+1 in the high nibble), scales
// [out, in/32] E8M0 (fp4_pow2_scale of the group's amax). `in` must be a multiple of 32.
void mxfp4_weight_quantize(const float* w, int64_t out, int64_t in, uint8_t* packed, uint8_t* scales_e8m0);
void mxfp4_weight_dequantize(const uint8_t* packed, const uint8_t* scales_e8m0, int64_t out, int64_t in, float* w);

}  // namespace moeserve::kernels::cpu
