#include "core/dtype.h"

#include <algorithm>
#include <cmath>

namespace moeserve {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "F32", 4},         {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E8M0, "F8_E8M0", 1}, {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},           {DType::I32, "I32", 4},         {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},
};
}  // namespace

std::string_view dtype_name(DType dtype) {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return info.name;
  return "?";
}

bool dtype_from_name(std::string_view name, DType* out) {
  for (const auto& info : kDTypes)
    if (info.name == name) {
      *out = info.dtype;
      return true;
    }
  return false;
}

size_t dtype_size(DType dtype) {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return info.size;
  return 0;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    float value = std::ldexp(float(mantissa), -24);
    return sign ? -value : value;
  }
  if (exponent == 31) return bits_to_f32(sign | 0x7f800000u | (mantissa << 13));
  return bits_to_f32(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float value) {
  uint32_t bits = f32_to_bits(value);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  float magnitude = std::fabs(value);
  if (std::isnan(value)) return uint16_t(sign | 0x7e00);
  if (magnitude >= 65520.0f) return uint16_t(sign | 0x7c00);
  if (magnitude < 6.103515625e-05f) {  // subnormal: multiples of 2^-24, round to nearest even
    float scaled = magnitude * 16777216.0f;
    return uint16_t(sign | uint16_t(std::nearbyint(scaled)));
  }
  uint32_t abs_bits = bits & 0x7fffffffu;
  abs_bits += 0xfffu + ((abs_bits >> 13) & 1u);
  return uint16_t(sign | ((abs_bits - (112u << 23)) >> 13));
}

float fp8_e4m3_to_f32(uint8_t bits) {
  bool negative = bits & 0x80;
  int exponent = (bits >> 3) & 0xf;
  int mantissa = bits & 0x7;
  float value;
  if (exponent == 15 && mantissa == 7) {
    value = NAN;
  } else if (exponent == 0) {
    value = std::ldexp(float(mantissa), -9);  // subnormal: m/8 * 2^-6
  } else {
    value = std::ldexp(1.0f + float(mantissa) / 8.0f, exponent - 7);
  }
  return negative ? -value : value;
}

// Round to nearest even on the e4m3 grid. Like PyTorch's cast to float8_e4m3fn, magnitudes that round
// past 448 (above 464, the midpoint to the would-be 480) become NaN; infinities become NaN.
uint8_t f32_to_fp8_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  float magnitude = std::fabs(value);
  if (magnitude > 464.0f) return uint8_t(sign | 0x7f);
  if (magnitude >= 448.0f) return uint8_t(sign | 0x7e);  // [448, 464]: 464 is a tie, to the even 448
  // Step for the binade of `magnitude`: normals have 3 mantissa bits; subnormals step 2^-9.
  int exponent;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
  int unbiased = std::max(exponent - 1, -6);
  float step = std::ldexp(1.0f, unbiased - 3);
  float quantized = std::nearbyint(magnitude / step) * step;  // exact division; ties to even
  if (quantized < std::ldexp(1.0f, -6)) return uint8_t(sign | int(quantized / std::ldexp(1.0f, -9)));
  int e;
  float f = std::frexp(quantized, &e);  // quantized = f * 2^e, f in [0.5, 1)
  int mantissa = int((f * 2.0f - 1.0f) * 8.0f);
  return uint8_t(sign | ((e - 1 + 7) << 3) | mantissa);
}

uint8_t f32_to_fp8_e4m3_saturate(float value) {
  if (std::isnan(value)) return 0x7f;
  return f32_to_fp8_e4m3(std::fmax(-448.0f, std::fmin(448.0f, value)));
}

float e8m0_to_f32(uint8_t bits) {
  if (bits == 0xff) return NAN;
  return std::ldexp(1.0f, int(bits) - 127);
}

float fp4_e2m1_to_f32(uint8_t nibble) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float value = kValues[nibble & 0x7];
  return (nibble & 0x8) ? -value : value;
}

uint8_t f32_to_fp4_e2m1(float value) {
  uint8_t sign = std::signbit(value) ? 0x8 : 0x0;
  float magnitude = std::fabs(value);
  if (std::isnan(value)) return 0x7;  // no NaN in e2m1; PyTorch maps NaN to max magnitude
  // Midpoints between grid values; ties go to the even code (codes 0,2,4,6 are even).
  static constexpr float kGrid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  uint8_t code = 7;
  for (uint8_t i = 0; i < 7; ++i) {
    float mid = 0.5f * (kGrid[i] + kGrid[i + 1]);
    if (magnitude < mid) {
      code = i;
      break;
    }
    if (magnitude == mid) {
      code = (i % 2 == 0) ? i : uint8_t(i + 1);
      break;
    }
  }
  return uint8_t(sign | code);
}

}  // namespace moeserve
