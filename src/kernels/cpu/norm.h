#pragma once
// RMSNorm as DeepSeek-V4 uses it: weighted (x * rsqrt(mean(x^2) + eps) * w) and unweighted (per head of q,
// and over all hc*D values in mHC). fp32 throughout.
#include <cstdint>

namespace moeserve::kernels::cpu {

// In place over `rows` rows of `dim` values; `weight` may be null (unweighted).
void rms_norm(float* x, int64_t rows, int64_t dim, const float* weight, float eps);
// out = rms_norm(x); x untouched.
void rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* out);
// 1 / sqrt(mean(x^2) + eps) of one row.
float rms_scale(const float* x, int64_t dim, float eps);

}  // namespace moeserve::kernels::cpu
