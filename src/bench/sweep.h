#pragma once
// Concurrency sweeps (--max-concurrency 1,2,4,...): one run per level, then a throughput vs
// interactivity frontier and plots.
//   tokens/s/GPU  = output token throughput / --num-gpus
//   tokens/s/user = 1000 / median TPOT (ms): the decode speed one user sees
// Files in the plot directory: frontier.tsv (the table), sweep.dat (one row per level, gnuplot's
// input), ttft_vs_concurrency.gp/.png, tpot_vs_concurrency.gp/.png, frontier.gp/.png. PNGs are drawn
// by gnuplot (pngcairo); without gnuplot the .dat/.gp files are still written.
#include <string>
#include <vector>

#include "bench/metrics.h"

namespace moeserve::bench {

struct SweepPoint {
  int max_concurrency = 0;
  BenchmarkMetrics metrics;
};

double tokens_per_s_per_gpu(const BenchmarkMetrics& m, int num_gpus);
double tokens_per_s_per_user(const BenchmarkMetrics& m);  // 0 when there is no TPOT sample

// A fixed-width table (also written tab-separated to frontier.tsv).
std::string format_frontier_table(const std::vector<SweepPoint>& points, int num_gpus);

struct PlotResult {
  std::vector<std::string> files;  // everything written, PNGs included when gnuplot drew them
  bool drew_png = false;
  std::string problem;             // why no PNG was drawn (gnuplot missing or failed)
};

// `title` goes into the plot titles (backend, model, lengths). Throws moeserve::Error when the
// directory cannot be created or written.
PlotResult write_sweep_files(const std::vector<SweepPoint>& points, int num_gpus, const std::string& dir,
                             const std::string& title);

}  // namespace moeserve::bench
