#pragma once
// fp32 GEMM for the reference path: y[m, n] = sum_k x[m, k] * w[n, k] (weights row-major [N, K], the
// checkpoint layout). Multithreaded over rows of w (decode) or tokens (prefill).
#include <cstdint>

namespace moeserve::kernels::cpu {

void matmul_nt(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y);
// y[m, n] += ...
void matmul_nt_accumulate(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y);

// Dot product with fp32 accumulation in a fixed order (8 partial sums).
float dot(const float* a, const float* b, int64_t n);

}  // namespace moeserve::kernels::cpu
