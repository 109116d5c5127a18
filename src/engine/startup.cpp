#include "engine/startup.h"

#include "planner/device.h"
#include "planner/profile.h"

namespace moeserve::engine {

EnginePlan plan_engine(const model::Model& model, const StartupOptions& o) {
  planner::Profile profile = planner::load_profile(o.profile);
  check(profile.gpu == "cpu", "--profile {} is for {} GPUs; the engine runs on the CPU here (use --profile cpu)",
        profile.name, profile.gpu);
  planner::PlanOptions plan_options;
  if (o.max_running_requests > 0) plan_options.max_running_requests = o.max_running_requests;
  EnginePlan result;
  result.plan = planner::plan_capacity(model.config(), planner::cpu_device(o.memory_bytes), profile, plan_options);
  EngineOptions& e = result.options;
  e.limits.max_running_requests = result.plan.slots;
  e.limits.max_batch_tokens = o.max_batch_tokens > 0 ? o.max_batch_tokens : profile.chunked_prefill_size;
  e.kv_pages = result.plan.pages_per_rank;
  e.max_model_len = o.max_model_len;
  e.numerics = o.numerics;
  e.speculative_steps = o.speculative_steps;
  return result;
}

}  // namespace moeserve::engine
