#pragma once
// Summary statistics with numpy's semantics, so our aggregates equal what sglang.bench_serving prints
// for the same samples: mean, median, population std (ddof=0), percentile with linear interpolation.
// An empty sample yields NaN (numpy warns and returns nan; SGLang's `x or 0` guard is applied by callers).
#include <span>

namespace moeserve::bench {

double sum(std::span<const double> values);  // numpy's pairwise summation
double mean(std::span<const double> values);
double median(std::span<const double> values);
double stddev(std::span<const double> values);  // population standard deviation (numpy's default ddof=0)
// numpy.percentile(values, p) with method="linear": virtual index (n-1)·p/100, linear interpolation
// between the two neighbouring order statistics. p in [0, 100].
double percentile(std::span<const double> values, double p);
double max_value(std::span<const double> values);

}  // namespace moeserve::bench
