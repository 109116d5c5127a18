#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace moeserve::kernels::cpu {

float pow2_scale(float amax, float fmt_max) {
  float s = std::fmax(amax, 1e-4f) / fmt_max;
  return std::ldexp(1.0f, int(std::ceil(std::log2(s))));
}

void fp8_block_sim(float* x, int64_t rows, int64_t row_stride, int64_t width, int64_t block) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * row_stride;
    for (int64_t b = 0; b < width; b += block) {
      int64_t e = std::min(width, b + block);
      float amax = 0;
      for (int64_t i = b; i < e; ++i) amax = std::fmax(amax, std::fabs(row[i]));
      float s = pow2_scale(amax, 448.0f);
      for (int64_t i = b; i < e; ++i) row[i] = fp8_e4m3_to_f32(f32_to_fp8_e4m3_saturate(row[i] / s)) * s;
    }
  }
}

void fp8_block_quantize(const float* x, int64_t rows, int64_t dim, int64_t block, uint8_t* q, float* scales) {
  check(dim % block == 0, "fp8_block_quantize: dim {} is not a multiple of the block {}", dim, block);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < dim / block; ++b) {
      const float* in = x + r * dim + b * block;
      float amax = 0;
      for (int64_t i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(in[i]));
      float s = pow2_scale(amax, 448.0f);
      scales[r * (dim / block) + b] = s;
      for (int64_t i = 0; i < block; ++i) q[r * dim + b * block + i] = f32_to_fp8_e4m3_saturate(in[i] / s);
    }
  }
}

void fp4_block_sim(float* x, int64_t rows, int64_t dim, int64_t block) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * dim;
    for (int64_t b = 0; b < dim; b += block) {
      int64_t e = std::min(dim, b + block);
      float amax = 0;
      for (int64_t i = b; i < e; ++i) amax = std::fmax(amax, std::fabs(row[i]));
      float s = pow2_scale(amax, 6.0f);
      for (int64_t i = b; i < e; ++i) row[i] = round_to_fp4_e2m1(row[i] / s) * s;
    }
  }
}

void hadamard_rotate(float* x, int64_t rows, int64_t dim) {
  check(dim > 0 && (dim & (dim - 1)) == 0, "hadamard_rotate: dim {} is not a power of two", dim);
  float norm = 1.0f / std::sqrt(float(dim));
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * dim;
    for (int64_t len = 1; len < dim; len <<= 1)
      for (int64_t i = 0; i < dim; i += 2 * len)
        for (int64_t j = i; j < i + len; ++j) {
          float a = v[j], b = v[j + len];
          v[j] = a + b;
          v[j + len] = a - b;
        }
    for (int64_t i = 0; i < dim; ++i) v[i] *= norm;
  }
}

}  // namespace moeserve::kernels::cpu
