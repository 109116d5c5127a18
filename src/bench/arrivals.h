#pragma once
// When each request is released, in seconds from the start of the timed run. sglang.bench_serving
// releases request 0 at once and waits an exponential interval (rate λ) after each; vLLM generalises
// the interval to a gamma distribution with shape = burstiness and mean 1/λ (burstiness 1 = Poisson,
// < 1 burstier, > 1 more regular). An infinite rate releases everything at time 0.
#include <random>
#include <vector>

namespace moeserve::bench {

std::vector<double> arrival_times(int count, double request_rate, double burstiness, std::mt19937_64& rng);

}  // namespace moeserve::bench
