#include "bench/arrivals.h"

#include <cmath>

#include "core/error.h"

namespace moeserve::bench {

std::vector<double> arrival_times(int count, double request_rate, double burstiness, std::mt19937_64& rng) {
  check(count >= 0, "request count must not be negative, got {}", count);
  check(request_rate > 0.0, "request rate must be positive, got {}", request_rate);
  check(burstiness > 0.0, "burstiness must be positive, got {}", burstiness);
  std::vector<double> times(static_cast<size_t>(count), 0.0);
  if (std::isinf(request_rate)) return times;
  std::gamma_distribution<double> interval(burstiness, 1.0 / (request_rate * burstiness));
  double t = 0.0;
  for (int i = 0; i < count; ++i) {
    times[static_cast<size_t>(i)] = t;
    t += interval(rng);
  }
  return times;
}

}  // namespace moeserve::bench
