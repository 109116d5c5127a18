#pragma once
// The capacity plan: the one source of truth for how a rank's memory is spent. `moeserve plan` prints it;
// the engine calls plan_capacity() at startup and sizes its pools from it.
//
// Engine use:
//   io::ModelConfig config = io::load_model_config(dir + "/config.json");
//   planner::Profile profile = planner::load_profile("tp8");
//   planner::DeviceSpec device = planner::load_gpu_preset("h200");   // or: set memory_bytes from
//                                                                    // cudaMemGetInfo's total; cpu_device(bytes)
//   planner::CapacityPlan plan = planner::plan_capacity(config, device, profile, {});
//   const planner::StagePlan& mine = plan.stage(pp_rank);
//   for (const planner::PoolPlan& pool : mine.pools)            // csa_kv, csa_index, hca_kv
//     allocate(pool.name, pool.layers.size(), mine.pages, pool.entries_per_page, pool.entry_bytes);
//   allocate_slots(plan.slots, mine.slot_state);                // window rings, compressor state, page tables
//   // runtime buffers: mine.buffers (activations, CUDA-graph pool, communication)
//
// Capacity of a stage (one rank of it; every rank of a stage is alike):
//   usable  = floor(memory_bytes x mem_fraction)
//   avail   = usable - weights - runtime buffers - slots x fixed state per slot
//   pages   = floor(avail / page_bytes)         page_bytes = one 256-token page across all pools
//   full-token capacity F = pages x 256         (pages are the same on every stage: the smallest wins)
// Concurrency at context L: min(slots, floor(pages / ceil(ceil(L / cp) / 256))) per attention-DP rank.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "planner/buffers.h"
#include "planner/device.h"
#include "planner/formats.h"
#include "planner/kv.h"
#include "planner/layout.h"
#include "planner/profile.h"
#include "planner/weights.h"

namespace moeserve::planner {

// Overrides of the profile's settings (the CLI's --weights, --c128, --mem-fraction).
struct PlanOptions {
  std::string model_name;  // for the report; default: the config's path
  std::optional<WeightFormat> weights;
  std::optional<C128Mode> c128;
  std::optional<KvFormat> kv_format;
  std::optional<double> mem_fraction;
  std::optional<int64_t> max_running_requests;
};

struct StagePlan {
  StageMap map;
  WeightBreakdown weights;
  std::vector<PoolPlan> pools;  // pool.pages == pages
  SlotState slot_state;         // per request slot
  RuntimeBuffers buffers;
  int64_t usable_bytes = 0;       // floor(memory_bytes x mem_fraction)
  int64_t fixed_state_bytes = 0;  // slots x slot_state.bytes_per_slot
  int64_t page_bytes = 0;         // one page across all pools of the stage
  int64_t max_pages = 0;          // pages that would fit on this stage alone
  int64_t pages = 0;              // pages allocated (the minimum over stages)
  int64_t kv_bytes = 0;           // pages x page_bytes
  int64_t free_bytes = 0;         // usable - everything above
  double bytes_per_full_token() const { return double(page_bytes) / double(kPageTokens); }
};

struct ConcurrencyRow {
  int64_t context_tokens = 0;
  int64_t pages_per_request = 0;   // on one rank
  int64_t requests_per_rank = 0;   // per attention-DP rank
  int64_t requests_total = 0;      // x attention dp
  bool limited_by_slots = false;   // else by KV pages
  bool beyond_model_context = false;  // longer than max_position_embeddings: not servable
};

struct CapacityPlan {
  std::string model_name;
  io::ModelConfig config;
  DeviceSpec device;
  Profile profile;  // with the overrides applied
  Layout layout;
  int64_t slots = 0;                 // request slots per rank (max_running_requests)
  std::vector<StagePlan> stages;
  int64_t binding_stage = 0;         // the stage with the fewest pages
  int64_t pages_per_rank = 0;
  int64_t full_token_capacity_per_rank = 0;  // pages x 256
  std::vector<ConcurrencyRow> concurrency;   // 4K .. 1M
  double sglang_bytes_per_full_token = 0;    // SGLang's accounting for the binding stage (comparison only)
  const StagePlan& stage(int64_t pp_rank) const { return stages.at(size_t(pp_rank)); }
};

// The context lengths of the concurrency table: 4K, 8K, ..., 1M.
const std::vector<int64_t>& concurrency_contexts();

// Throws moeserve::Error when the layout does not divide the model or the plan does not fit (not even one
// page after weights, buffers and fixed state); the message names the constraint and the numbers.
CapacityPlan plan_capacity(const io::ModelConfig& config, const DeviceSpec& device, const Profile& profile,
                           const PlanOptions& options = {});

}  // namespace moeserve::planner
