#include "planner/capacity.h"

#include <algorithm>

#include "core/error.h"
#include "planner/sglang_reference.h"
#include "planner/units.h"

namespace moeserve::planner {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

const std::vector<int64_t>& concurrency_contexts() {
  static const std::vector<int64_t> contexts = {4LL << 10,   8LL << 10,   16LL << 10,  32LL << 10, 64LL << 10,
                                                128LL << 10, 256LL << 10, 512LL << 10, 1LL << 20};
  return contexts;
}

CapacityPlan plan_capacity(const io::ModelConfig& config, const DeviceSpec& device, const Profile& base,
                           const PlanOptions& options) {
  CapacityPlan plan;
  plan.model_name = options.model_name.empty() ? config.source : options.model_name;
  plan.config = config;
  plan.device = device;
  plan.profile = base;
  Profile& p = plan.profile;
  if (options.weights) p.weights = *options.weights;
  if (options.c128) p.c128 = *options.c128;
  if (options.kv_format) p.kv_format = *options.kv_format;
  if (options.mem_fraction) {
    check(*options.mem_fraction > 0 && *options.mem_fraction <= 1, "--mem-fraction = {} must be in (0, 1]",
          *options.mem_fraction);
    p.mem_fraction = *options.mem_fraction;
  }
  if (options.max_running_requests) {
    check(*options.max_running_requests >= 1, "max_running_requests = {} must be >= 1", *options.max_running_requests);
    p.max_running_requests = *options.max_running_requests;
  }
  check(device.memory_bytes > 0, "device {}: memory_bytes = {} must be positive", device.name, device.memory_bytes);

  const bool spec = p.speculative.enabled();
  plan.layout = resolve_layout(config, p.parallel, p.weights, spec);
  plan.slots = p.max_running_requests;
  const int64_t cp = p.parallel.attn_cp;
  const int64_t max_tokens_per_rank = ceil_div(config.max_position_embeddings, cp);

  const int64_t usable = int64_t(double(device.memory_bytes) * p.mem_fraction);
  for (const StageMap& map : plan.layout.stages) {
    StagePlan s;
    s.map = map;
    s.weights = stage_weights(config, plan.layout, map, p.weights);
    s.pools = kv_pools(config, map, p.kv_format);
    s.slot_state = slot_state(config, map, p.kv_format, p.c128, spec ? p.speculative.num_steps + 1 : 0,
                              max_tokens_per_rank);
    s.buffers = runtime_buffers(config, plan.layout, map, p);
    s.usable_bytes = usable;
    s.fixed_state_bytes = plan.slots * s.slot_state.bytes_per_slot;
    for (const auto& pool : s.pools) s.page_bytes += pool.page_bytes();
    const int64_t committed = s.weights.total_bytes + s.buffers.total() + s.fixed_state_bytes;
    const int64_t need = committed + s.page_bytes;
    check(need <= usable,
          "plan does not fit: {} on {} with profile {} (stage {} of {}): usable {} ({} x mem_fraction {}) < weights {} "
          "+ runtime buffers {} + fixed state {} ({} slots x {}) + one KV page {} = {}; short by {}",
          plan.model_name, device.name, p.name, map.stage, plan.layout.stages.size(), format_gib(usable),
          format_gib(device.memory_bytes), p.mem_fraction, format_gib(s.weights.total_bytes),
          format_gib(s.buffers.total()), format_gib(s.fixed_state_bytes), plan.slots,
          format_bytes(s.slot_state.bytes_per_slot), format_bytes(s.page_bytes), format_gib(need),
          format_gib(need - usable));
    // A stage with no compressed layers pages nothing: its capacity is bounded by slots alone.
    s.max_pages = s.page_bytes > 0 ? (usable - committed) / s.page_bytes : INT64_MAX;
    plan.stages.push_back(std::move(s));
  }

  plan.binding_stage = 0;
  for (size_t i = 1; i < plan.stages.size(); ++i)
    if (plan.stages[i].max_pages < plan.stages[size_t(plan.binding_stage)].max_pages) plan.binding_stage = int64_t(i);
  int64_t pages = plan.stages[size_t(plan.binding_stage)].max_pages;
  if (pages == INT64_MAX) pages = 0;  // nothing paged anywhere
  plan.pages_per_rank = pages;
  plan.full_token_capacity_per_rank = pages * kPageTokens;
  for (StagePlan& s : plan.stages) {
    s.pages = s.page_bytes > 0 ? pages : 0;
    for (auto& pool : s.pools) pool.pages = s.pages;
    s.kv_bytes = s.pages * s.page_bytes;
    s.free_bytes = s.usable_bytes - s.weights.total_bytes - s.buffers.total() - s.fixed_state_bytes - s.kv_bytes;
  }

  const bool paged = plan.stages[size_t(plan.binding_stage)].page_bytes > 0;
  for (int64_t L : concurrency_contexts()) {
    ConcurrencyRow row;
    row.context_tokens = L;
    row.pages_per_request = ceil_div(ceil_div(L, cp), kPageTokens);
    row.beyond_model_context = L > config.max_position_embeddings;
    if (!row.beyond_model_context) {
      const int64_t by_kv = paged ? pages / row.pages_per_request : plan.slots;
      row.requests_per_rank = std::min(plan.slots, by_kv);
      row.limited_by_slots = plan.slots <= by_kv;
      row.requests_total = row.requests_per_rank * p.parallel.attn_dp;
    }
    plan.concurrency.push_back(row);
  }
  const StageMap& binding = plan.stages[size_t(plan.binding_stage)].map;
  plan.sglang_bytes_per_full_token =
      sglang_bytes_per_full_token(config, binding.first_layer, binding.num_layers, binding.has_mtp);
  return plan;
}

}  // namespace moeserve::planner
