// The checked-in tile-config dispatch table of the W4A8 grouped GEMM (no tuning at serve time).
// Keyed by (GPU name, E, N, K, routed slots = tokens x top-k): each entry covers the slots up to its own, the token
// counts the tuner timed (its --tune mode, with top-6 routing of uniform and Zipf token->expert distributions;
// see docs/benchmarks/moe-w4a8.md).
#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/moe_w4a8.h"

namespace moeserve::cuda {

namespace {

struct Entry {
  const char* gpu;
  int E, N, K;
  int max_slots;  // bucket: routed slots <= max_slots (INT_MAX for the last)
  const char* config;
  const char* split_config;  // MoeW4A8Split: experts with more than split_rows rows on this config (or none)
  int split_rows;
};

const Entry kTable[] = {
#include "kernels/cuda/moe_w4a8_dispatch_table.inc"
    {nullptr, 0, 0, 0, 0, nullptr, nullptr, 0},
};

// Without a table entry, by the expected rows per active expert: one consumer warpgroup and small token tiles
// while the experts see few rows (decode: weight-bandwidth bound, fine work items), two warpgroups and wide token
// tiles for prefill.
int heuristic(int rows) {
  const char* name = rows <= 8 ? "bn8_wg1_g2_s5"
                     : rows <= 16 ? "bn16_wg1_g2_s4"
                     : rows <= 32 ? "bn32_wg2_g2_s7"
                     : rows <= 64 ? "bn64_wg2_g1_s8"
                                  : "bn128_wg2_g1_s5_pf";
  return moe_w4a8_config_by_name(name);
}

}  // namespace

int moe_w4a8_config_by_name(const char* name) {
  for (int i = 0; i < moe_w4a8_config_count(); ++i)
    if (std::strcmp(moe_w4a8_config(i).name, name) == 0) return i;
  return -1;
}

int moe_w4a8_pick_config(int E, int N, int K, int slots) {
  return moe_w4a8_pick_config_for(device_info().name.c_str(), E, N, K, slots);
}

namespace {

// The table's entry for the key, or null.
const Entry* find_entry(const char* gpu, int E, int N, int K, int slots) {
  for (const Entry& e : kTable) {
    if (!e.gpu) break;
    if (std::strcmp(gpu, e.gpu) == 0 && e.E == E && e.N == N && e.K == K && slots <= e.max_slots) {
      const int id = moe_w4a8_config_by_name(e.config);
      if (id >= 0 && moe_w4a8_config_fits(id, N, K)) return &e;
    }
  }
  return nullptr;
}

}  // namespace

int moe_w4a8_pick_config_for(const char* gpu, int E, int N, int K, int slots) {
  if (const Entry* e = find_entry(gpu, E, N, K, slots)) return moe_w4a8_config_by_name(e->config);
  return heuristic(E > 0 ? std::max(1, (slots + E - 1) / E) : 1);
}

MoeW4A8Split moe_w4a8_pick_split(int E, int N, int K, int slots) {
  return moe_w4a8_pick_split_for(device_info().name.c_str(), E, N, K, slots);
}

std::vector<std::string> moe_w4a8_table_gpus() {
  std::vector<std::string> gpus;
  for (const Entry& e : kTable) {
    if (!e.gpu) break;
    if (std::find(gpus.begin(), gpus.end(), e.gpu) == gpus.end()) gpus.emplace_back(e.gpu);
  }
  return gpus;
}

bool moe_w4a8_table_has(const char* gpu, int E, int N, int K) {
  for (const Entry& e : kTable) {
    if (!e.gpu) break;
    if (std::strcmp(gpu, e.gpu) == 0 && e.E == E && e.N == N && e.K == K) return true;
  }
  return false;
}

MoeW4A8Split moe_w4a8_pick_split_for(const char* gpu, int E, int N, int K, int slots) {
  MoeW4A8Split split;
  const Entry* e = find_entry(gpu, E, N, K, slots);
  if (!e || !e->split_config) return split;
  const int id = moe_w4a8_config_by_name(e->split_config);
  if (id >= 0 && moe_w4a8_config_fits(id, N, K) && e->split_rows >= 0) {
    split.config = id;
    split.rows = e->split_rows;
  }
  return split;
}

}  // namespace moeserve::cuda
