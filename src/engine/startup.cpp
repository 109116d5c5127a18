#include "engine/startup.h"

#include "model/mxfp4_experts.h"
#include "planner/device.h"
#include "planner/presets.h"
#include "planner/profile.h"

namespace moeserve::engine {

EnginePlan plan_engine(const model::Model& model, const StartupOptions& o) { return plan_engine(model.config(), o); }

EnginePlan plan_engine(const io::ModelConfig& config, const StartupOptions& o) {
  check(o.device == "cpu" || o.device == "cuda", "--device '{}' (expected cpu or cuda)", o.device);
  const bool cuda = o.device == "cuda";
  planner::Profile profile = planner::load_profile(!o.profile.empty() ? o.profile : cuda ? "h200-reference" : "cpu");
  check((profile.gpu == "cpu") != cuda, "--profile {} is for {}, but the engine runs on --device {}", profile.name,
        profile.gpu == "cpu" ? "the CPU" : profile.gpu + " GPUs", o.device);
  check(!cuda || (profile.kv_format == planner::KvFormat::F32 &&
                  (profile.weights == planner::WeightFormat::BF16 || o.dummy_weights)),
        "--profile {}: the CUDA backend keeps BF16 weights and fp32 KV pools today (use --profile h200-reference)",
        profile.name);
  planner::DeviceSpec device = cuda ? planner::load_gpu_preset(profile.gpu) : planner::cpu_device(o.memory_bytes);
  if (cuda && o.memory_bytes > 0) device.memory_bytes = o.memory_bytes;
  planner::PlanOptions plan_options;
  if (o.max_running_requests > 0) plan_options.max_running_requests = o.max_running_requests;
  if (o.mem_fraction) {
    check(*o.mem_fraction > 0.0 && *o.mem_fraction <= 1.0, "--mem-fraction-static must be in (0, 1], got {}",
          *o.mem_fraction);
    plan_options.mem_fraction = o.mem_fraction;
  }
  if (o.dummy_weights) {  // the types GpuModel::dummy gives them, not the profile's
    const model::DummyWeightTypes types = model::dummy_weight_types(config, o.cuda_exact);
    plan_options.weights = types.mxfp4_experts ? planner::WeightFormat::MXFP4_FP8
                           : types.fp8_linears ? planner::WeightFormat::FP8
                                               : planner::WeightFormat::BF16;
  }
  EnginePlan result;
  result.plan = planner::plan_capacity(config, device, profile, plan_options);
  EngineOptions& e = result.options;
  e.limits.max_running_requests = result.plan.slots;
  e.limits.max_batch_tokens = o.max_batch_tokens > 0 ? o.max_batch_tokens : profile.chunked_prefill_size;
  e.kv_pages = result.plan.pages_per_rank;
  e.max_model_len = o.max_model_len;
  e.numerics = o.numerics;
  e.speculative_steps = o.speculative_steps;
  e.cuda_exact = o.cuda_exact;
  e.cuda_graphs = o.cuda_graphs;
  return result;
}

std::shared_ptr<Engine> start_engine(std::shared_ptr<const model::Model> model, const EnginePlan& plan,
                                     const std::string& device, std::shared_ptr<const TextDecoderFactory> decoder) {
  const EngineOptions& o = plan.options;
  if (device == "cuda") {
    check(o.speculative_steps == 0, "--speculative-algorithm runs on --device cpu only for now");
    return std::make_shared<Engine>(make_cuda_backend(*model, o.numerics, o.limits.max_running_requests, o.kv_pages,
                                                      o.cuda_exact, o.cuda_graphs),
                                    std::move(decoder), o);
  }
  return std::make_shared<Engine>(std::move(model), std::move(decoder), o);
}

std::shared_ptr<Engine> start_dummy_engine(const io::ModelConfig& config, uint64_t seed, const EnginePlan& plan,
                                           std::shared_ptr<const TextDecoderFactory> decoder) {
  const EngineOptions& o = plan.options;
  check(o.speculative_steps == 0, "--speculative-algorithm runs on --device cpu only for now");
  return std::make_shared<Engine>(make_cuda_dummy_backend(config, seed, o.numerics, o.limits.max_running_requests,
                                                          o.kv_pages, o.cuda_exact, o.cuda_graphs),
                                  std::move(decoder), o);
}

}  // namespace moeserve::engine
