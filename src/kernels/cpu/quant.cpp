#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/threads.h"

namespace moeserve::kernels::cpu {

float pow2_ceil(float x) {
  // Exponent of x, plus one unless x is already a power of two (mantissa bits zero). Written on the raw
  // bits like the official fast_log2_ceil: std::ceil(std::log2(x)) gets 2^k * (1 + 2^-23) wrong, because the
  // float log2 rounds k + 1.7e-7 down to k.
  uint32_t bits = f32_to_bits(x);
  int32_t exponent = int32_t((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  return bits_to_f32(uint32_t(exponent + 127) << 23);
}

float pow2_scale(float amax, float fmt_max, float amax_floor) {
  const float inverse = 1.0f / fmt_max;  // the kernels multiply by the fp32-rounded reciprocal
  return pow2_ceil(std::fmax(amax, amax_floor) * inverse);
}

uint8_t e8m0_from_pow2(float scale) {
  int exponent;
  float mantissa = std::frexp(scale, &exponent);  // scale = mantissa * 2^exponent, mantissa in [0.5, 1)
  check(mantissa == 0.5f && exponent - 1 >= -127 && exponent - 1 <= 127,
        "E8M0 scale {} is not a power of two in [2^-127, 2^127]", scale);
  return uint8_t(exponent - 1 + 127);
}

namespace {

float fp8_round(float v) { return fp8_e4m3_to_f32(f32_to_fp8_e4m3_saturate(v)); }

// e2m1 of v clamped to +-6 (the nibble; round to nearest even).
uint8_t fp4_code(float v) { return f32_to_fp4_e2m1(std::fmax(-kFp4Max, std::fmin(kFp4Max, v))); }

float amax_of(const float* x, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

}  // namespace

void fp8_block_sim(float* x, int64_t rows, int64_t row_stride, int64_t width, int64_t block) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * row_stride;
    for (int64_t b = 0; b < width; b += block) {
      const int64_t n = std::min(width, b + block) - b;
      const float s = fp8_pow2_scale(amax_of(row + b, n));
      for (int64_t i = b; i < b + n; ++i) row[i] = fp8_round(row[i] / s) * s;  // saturate = clamp to +-448
    }
  }
}

void fp8_block_quantize(const float* x, int64_t rows, int64_t dim, int64_t block, uint8_t* q, float* scales) {
  check(dim % block == 0, "fp8_block_quantize: dim {} is not a multiple of the block {}", dim, block);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < dim / block; ++b) {
      const float* in = x + r * dim + b * block;
      const float s = fp8_pow2_scale(amax_of(in, block));
      scales[r * (dim / block) + b] = s;
      for (int64_t i = 0; i < block; ++i) q[r * dim + b * block + i] = f32_to_fp8_e4m3_saturate(in[i] / s);
    }
  }
}

void fp4_block_sim(float* x, int64_t rows, int64_t dim, int64_t block) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * dim;
    for (int64_t b = 0; b < dim; b += block) {
      const int64_t n = std::min(dim, b + block) - b;
      const float s = fp4_pow2_scale(amax_of(row + b, n));
      for (int64_t i = b; i < b + n; ++i) row[i] = fp4_e2m1_to_f32(fp4_code(row[i] / s)) * s;
    }
  }
}

void hadamard_rotate(float* x, int64_t rows, int64_t dim) {
  check(dim > 0 && (dim & (dim - 1)) == 0, "hadamard_rotate: dim {} is not a power of two", dim);
  const float norm = 1.0f / std::sqrt(float(dim));
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * dim;
    // Butterflies from stride 1 up give the Sylvester-ordered matrix H[i][j] = (-1)^popcount(i & j), the one
    // fast_hadamard_transform applies.
    for (int64_t len = 1; len < dim; len <<= 1)
      for (int64_t i = 0; i < dim; i += 2 * len)
        for (int64_t j = i; j < i + len; ++j) {
          const float a = v[j], b = v[j + len];
          v[j] = a + b;
          v[j + len] = a - b;
        }
    for (int64_t i = 0; i < dim; ++i) v[i] *= norm;
  }
}

void fp8_weight_quantize(const float* w, int64_t out, int64_t in, uint8_t* q, uint8_t* scales_e8m0) {
  const int64_t block_rows = (out + 127) / 128, block_cols = (in + 127) / 128;
  parallel_for(block_rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t br = begin; br < end; ++br)
      for (int64_t bc = 0; bc < block_cols; ++bc) {
        const int64_t r0 = br * 128, r1 = std::min(out, r0 + 128), c0 = bc * 128, c1 = std::min(in, c0 + 128);
        float amax = 0;
        for (int64_t r = r0; r < r1; ++r) amax = std::fmax(amax, amax_of(w + r * in + c0, c1 - c0));
        const float s = fp8_pow2_scale(amax);
        scales_e8m0[br * block_cols + bc] = e8m0_from_pow2(s);
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) q[r * in + c] = f32_to_fp8_e4m3_saturate(w[r * in + c] / s);
      }
  });
}

void fp8_weight_dequantize(const uint8_t* q, DType scale_dtype, const void* scales, int64_t out, int64_t in,
                           float* w) {
  check(scale_dtype == DType::F8_E8M0 || scale_dtype == DType::F32,
        "fp8_weight_dequantize: scale dtype {} (expected F8_E8M0 or F32)", dtype_name(scale_dtype));
  const int64_t block_cols = (in + 127) / 128;
  parallel_for(out, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const int64_t si = (r / 128) * block_cols + c / 128;
        const float s = scale_dtype == DType::F32 ? static_cast<const float*>(scales)[si]
                                                  : e8m0_to_f32(static_cast<const uint8_t*>(scales)[si]);
        w[r * in + c] = fp8_e4m3_to_f32(q[r * in + c]) * s;
      }
  });
}

void mxfp4_weight_quantize(const float* w, int64_t out, int64_t in, uint8_t* packed, uint8_t* scales_e8m0) {
  check(in % 32 == 0, "mxfp4_weight_quantize: input width {} is not a multiple of 32", in);
  parallel_for(out, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t g = 0; g < in / 32; ++g) {
        const float* x = w + r * in + g * 32;
        const float s = fp4_pow2_scale(amax_of(x, 32));
        scales_e8m0[r * (in / 32) + g] = e8m0_from_pow2(s);
        for (int64_t k = 0; k < 32; k += 2)
          packed[r * (in / 2) + (g * 32 + k) / 2] = uint8_t(fp4_code(x[k] / s) | (fp4_code(x[k + 1] / s) << 4));
      }
  });
}

void mxfp4_weight_dequantize(const uint8_t* packed, const uint8_t* scales_e8m0, int64_t out, int64_t in, float* w) {
  check(in % 32 == 0, "mxfp4_weight_dequantize: input width {} is not a multiple of 32", in);
  parallel_for(out, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t k = 0; k < in; k += 2) {
        const uint8_t byte = packed[r * (in / 2) + k / 2];
        const float s = e8m0_to_f32(scales_e8m0[r * (in / 32) + k / 32]);
        w[r * in + k] = fp4_e2m1_to_f32(byte & 0xf) * s;  // low nibble: the even element
        w[r * in + k + 1] = fp4_e2m1_to_f32(byte >> 4) * s;
      }
  });
}

}  // namespace moeserve::kernels::cpu
