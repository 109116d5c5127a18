#pragma once
// Shared pieces of the CUDA op differential tests: a fresh seed per test (printed; MOESERVE_TEST_SEED repeats
// it), device arrays from host vectors, outputs poisoned with NaN before a run, and an every-element comparison
// against the CPU reference with a per-element tolerance (a NaN anywhere fails) or bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/runtime.h"
#include "gpu_skip.h"
#include "test_seed.h"

namespace moeserve::gputest {

// DeepSeek-V4's compressed-layer rope: theta 160000 with YaRN factor 16 over 65536 positions (beta 32 / 1).
inline io::RopeSpec yarn_spec() {
  io::RopeSpec s;
  s.theta = 160000;
  s.yarn = true;
  s.factor = 16;
  s.original_max_position = 65536;
  s.beta_fast = 32;
  s.beta_slow = 1;
  return s;
}

using moeserve::testing::seeded;

inline std::vector<float> uniform(size_t n, std::mt19937_64& g, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
inline std::vector<float> normal(size_t n, std::mt19937_64& g, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

template <class T>
cuda::DeviceArray<T> dev(const std::vector<T>& h) {
  return cuda::DeviceArray<T>::from(std::span<const T>(h), "test input");
}
template <class T>
cuda::DeviceArray<T> poisoned(size_t n) {
  cuda::DeviceArray<T> a(n, "test output");
  a.fill_bytes(0xff);  // NaN for floats, -1 for ints
  return a;
}
template <class T>
std::vector<T> host(const cuda::DeviceArray<T>& a) {
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  return a.download();
}

// Every element: finite and |got - ref| <= tol[i]. Reports the count, the first failures and the worst ratio.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<float>& tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0;
  double worst = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    const double ratio = tol[i] > 0 ? d / tol[i] : (d > 0 ? INFINITY : 0);
    if (!std::isfinite(got[i]) || !(d <= tol[i])) {
      if (bad < 5)
        first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(ref[i]) +
                 " tol " + std::to_string(tol[i]) + ";";
      ++bad;
    }
    if (std::isfinite(ratio)) worst = std::max(worst, ratio);
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements out of tolerance:" << first;
  std::printf("  %s: %zu elements, worst |diff|/tol = %.3g\n", what.c_str(), got.size(), worst);
}
inline void expect_close_rel(const std::vector<float>& got, const std::vector<float>& ref, float rel, float abs,
                             const std::string& what) {
  std::vector<float> tol(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) tol[i] = rel * std::fabs(ref[i]) + abs;
  expect_close(got, ref, tol, what);
}
inline void expect_equal(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
  expect_close(got, ref, std::vector<float>(ref.size(), 0.0f), what);
}
// Every element finite and the same bit pattern as ref (a fused launch against the ops it fuses: -0 != +0).
inline void expect_same_bits(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(got[i]) && std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(ref[i])) continue;
    if (bad < 5)
      first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(ref[i]) + ";";
    ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ in bits:" << first;
  std::printf("  %s: %zu elements, %zu differ in bits\n", what.c_str(), got.size(), bad);
}
inline float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}
// Extreme inputs for the FP8 activation quantizers (n channels a row): row0's first 128-channel group one huge
// value over tiny and subnormal ones (subnormal quotients), row1 all subnormal (the amax floor). The quantizers
// multiply by 1 / s; these pin that to v / s.
inline void fill_quantizer_extremes(float* row0, float* row1, int n) {
  for (int c = 0; c < n; ++c) {
    if (c < 128) row0[c] = c == 0 ? 3e30f : (c % 3 == 0 ? 1e-10f : c % 3 == 1 ? -1e-40f : 1e-38f);
    row1[c] = float((c % 7) - 3) * 1e-41f;
  }
}

}  // namespace moeserve::gputest
