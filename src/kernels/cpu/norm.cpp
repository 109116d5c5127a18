#include "kernels/cpu/norm.h"

#include <cmath>

namespace moeserve::kernels::cpu {

float rms_scale(const float* x, int64_t dim, float eps) {
  // Accumulate in double: a stable reference for long rows (hc*D = 28672 in V4-Pro).
  double sum = 0;
  for (int64_t i = 0; i < dim; ++i) sum += double(x[i]) * double(x[i]);
  return float(1.0 / std::sqrt(sum / double(dim) + double(eps)));
}

void rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    float s = rms_scale(xr, dim, eps);
    for (int64_t i = 0; i < dim; ++i) o[i] = weight ? xr[i] * s * weight[i] : xr[i] * s;
  }
}

void rms_norm(float* x, int64_t rows, int64_t dim, const float* weight, float eps) {
  rms_norm(x, rows, dim, weight, eps, x);
}

}  // namespace moeserve::kernels::cpu
