// The checked-in tile-config dispatch table of the W4A8 grouped GEMM (no tuning at serve time).
// Keyed by (GPU name, E, N, K, expected rows per active expert); the rows buckets come from top-6 routing of
// uniform and Zipf token->expert distributions (the tuner's --tune mode; see docs/benchmarks/moe-w4a8.md).
#include <climits>
#include <cstring>
#include <string>

#include "kernels/cuda/device.h"
#include "kernels/cuda/moe_w4a8.h"

namespace moeserve::cuda {

namespace {

struct Entry {
  const char* gpu;
  int E, N, K;
  int max_rows;  // bucket: expected rows per active expert <= max_rows (INT32_MAX for the last)
  const char* config;
};

const Entry kTable[] = {
#include "kernels/cuda/moe_w4a8_dispatch_table.inc"
    {nullptr, 0, 0, 0, 0, nullptr},
};

int config_by_name(const char* name) {
  for (int i = 0; i < moe_w4a8_config_count(); ++i)
    if (std::strcmp(moe_w4a8_config(i).name, name) == 0) return i;
  return -1;
}

// Without a table entry: one consumer warpgroup and small token tiles while the experts see few rows
// (decode: weight-bandwidth bound, fine work items), two warpgroups and wide token tiles for prefill.
int heuristic(int rows) {
  const char* name = rows <= 8 ? "bn8_wg1_g2_s5"
                     : rows <= 16 ? "bn16_wg1_g2_s4"
                     : rows <= 32 ? "bn32_wg2_g2_s7"
                     : rows <= 64 ? "bn64_wg2_g1_s8"
                                  : "bn128_wg2_g1_s5_pf";
  return config_by_name(name);
}

}  // namespace

int moe_w4a8_pick_config(int E, int N, int K, int expected_rows) {
  const std::string& gpu = device_info().name;
  for (const Entry& e : kTable) {
    if (!e.gpu) break;
    if (gpu == e.gpu && e.E == E && e.N == N && e.K == K && expected_rows <= e.max_rows) {
      int id = config_by_name(e.config);
      if (id >= 0 && moe_w4a8_config_fits(id, N, K)) return id;
    }
  }
  return heuristic(expected_rows);
}

}  // namespace moeserve::cuda
