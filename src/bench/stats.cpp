#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace moeserve::bench {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// numpy's pairwise summation (8 accumulators inside blocks of up to 128, recursive halving above), so
// means and standard deviations round the way numpy's do.
double pairwise_sum(const double* a, size_t n) {
  if (n < 8) {
    double res = 0.0;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

std::vector<double> sorted(std::span<const double> values) {
  std::vector<double> out(values.begin(), values.end());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

double sum(std::span<const double> values) { return pairwise_sum(values.data(), values.size()); }

double mean(std::span<const double> values) {
  if (values.empty()) return kNaN;
  return pairwise_sum(values.data(), values.size()) / static_cast<double>(values.size());
}

double median(std::span<const double> values) {
  if (values.empty()) return kNaN;
  const std::vector<double> a = sorted(values);
  const size_t k = a.size() / 2;
  // numpy.median averages the two middle order statistics of an even-sized sample.
  return a.size() % 2 == 1 ? a[k] : (a[k - 1] + a[k]) / 2.0;
}

double stddev(std::span<const double> values) {
  if (values.empty()) return kNaN;
  const double m = mean(values);
  std::vector<double> squared(values.size());
  for (size_t i = 0; i < values.size(); ++i) squared[i] = (values[i] - m) * (values[i] - m);
  return std::sqrt(pairwise_sum(squared.data(), squared.size()) / static_cast<double>(values.size()));
}

double percentile(std::span<const double> values, double p) {
  check(p >= 0.0 && p <= 100.0, "percentile must be in [0, 100], got {}", p);
  if (values.empty()) return kNaN;
  const std::vector<double> a = sorted(values);
  const double n = static_cast<double>(a.size());
  const double q = p / 100.0;
  // numpy's _compute_virtual_index for the linear method (alpha = beta = 1), evaluated in the same order.
  const double virtual_index = std::clamp(n * q + (1.0 + q * (1.0 - 1.0 - 1.0)) - 1.0, 0.0, n - 1.0);
  const double lower = std::floor(virtual_index);
  const size_t lo = static_cast<size_t>(lower);
  const size_t hi = std::min(lo + 1, a.size() - 1);
  const double t = virtual_index - lower;
  // numpy's _lerp: a + (b-a)·t, evaluated from the upper end when t >= 0.5 (keeps monotonicity exact).
  const double diff = a[hi] - a[lo];
  return t >= 0.5 ? a[hi] - diff * (1.0 - t) : a[lo] + diff * t;
}

double max_value(std::span<const double> values) {
  if (values.empty()) return kNaN;
  return *std::max_element(values.begin(), values.end());
}

}  // namespace moeserve::bench
