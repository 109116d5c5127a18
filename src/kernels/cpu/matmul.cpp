#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstring>

#include "core/threads.h"

namespace moeserve::kernels::cpu {

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (; i < n; ++i) acc[0] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

namespace {

// A block of 4 weight rows against a block of tokens: each weight row is read once per token block.
void kernel(const float* x, int64_t m0, int64_t m1, int64_t k, const float* w, int64_t n0, int64_t n1, int64_t n,
            float* y, bool accumulate) {
  constexpr int64_t kTokenBlock = 8;
  for (int64_t mb = m0; mb < m1; mb += kTokenBlock) {
    int64_t me = std::min(m1, mb + kTokenBlock);
    for (int64_t j = n0; j < n1; ++j) {
      const float* wr = w + j * k;
      for (int64_t i = mb; i < me; ++i) {
        float v = dot(x + i * k, wr, k);
        float& out = y[i * n + j];
        out = accumulate ? out + v : v;
      }
    }
  }
}

void run(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(y, y + m * n, 0.0f);
    return;
  }
  // Parallelise over the larger of the two output dimensions.
  int64_t work = m * n * k;
  int64_t grain_rows = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, k));
  if (work < (1 << 16)) {
    kernel(x, 0, m, k, w, 0, n, n, y, accumulate);
  } else if (n >= m) {
    parallel_for(n, std::max<int64_t>(4, grain_rows / std::max<int64_t>(1, m)),
                 [&](int64_t b, int64_t e) { kernel(x, 0, m, k, w, b, e, n, y, accumulate); });
  } else {
    parallel_for(m, std::max<int64_t>(1, grain_rows / std::max<int64_t>(1, n)),
                 [&](int64_t b, int64_t e) { kernel(x, b, e, k, w, 0, n, n, y, accumulate); });
  }
}

}  // namespace

void matmul_nt(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) {
  run(x, m, k, w, n, y, false);
}

void matmul_nt_accumulate(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) {
  run(x, m, k, w, n, y, true);
}

}  // namespace moeserve::kernels::cpu
