#pragma once
// Element types of checkpoints and kernels, and scalar conversions to and from fp32.
// Encoders round to nearest even, bit-exact with PyTorch's casts where PyTorch has one (tests/core/dtype_test.cpp).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace moeserve {

enum class DType : uint8_t { F32, F16, BF16, F8_E4M3, F8_E8M0, I8, U8, I32, I64, F64 };

std::string_view dtype_name(DType dtype);             // safetensors spelling: "BF16", "F8_E4M3", ...
bool dtype_from_name(std::string_view name, DType* out);
size_t dtype_size(DType dtype);

inline float bits_to_f32(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
inline uint32_t f32_to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

inline float bf16_to_f32(uint16_t bits) { return bits_to_f32(uint32_t(bits) << 16); }
// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = f32_to_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
inline float round_to_bf16(float value) { return bf16_to_f32(f32_to_bf16(value)); }

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

// FP8 e4m3 "fn" (no infinities, max 448, NaN = 0x7f/0xff).
float fp8_e4m3_to_f32(uint8_t bits);
// Bit-exact with PyTorch's x.to(torch.float8_e4m3fn): round to nearest even; |x| > 464 and inf give NaN.
uint8_t f32_to_fp8_e4m3(float value);
// Clamps to +-448 first (what quantizers do after scaling); NaN stays NaN.
uint8_t f32_to_fp8_e4m3_saturate(float value);
inline float round_to_fp8_e4m3(float value) { return fp8_e4m3_to_f32(f32_to_fp8_e4m3(value)); }

// E8M0: a biased power-of-two exponent, value 2^(bits-127); 0xff is NaN.
float e8m0_to_f32(uint8_t bits);

// FP4 e2m1: values {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a sign bit (bit 3).
float fp4_e2m1_to_f32(uint8_t nibble);
uint8_t f32_to_fp4_e2m1(float value);  // round to nearest even, saturate to +-6
inline float round_to_fp4_e2m1(float value) { return fp4_e2m1_to_f32(f32_to_fp4_e2m1(value)); }

}  // namespace moeserve
