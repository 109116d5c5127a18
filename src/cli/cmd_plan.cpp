// moeserve plan: memory breakdown and full-token capacity per rank for a model, a GPU and a serving
// profile. --weights / --c128 / --gpu default to the profile's own settings.
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "planner/capacity.h"
#include "planner/presets.h"
#include "planner/report.h"

namespace moeserve::cli {
namespace {

struct PlanArgs {
  std::string model, gpu, profile, weights, c128, kv_format;
  std::optional<double> mem_fraction;
  double cpu_memory_gib = 0;
  bool json = false;
};

int run_plan(const PlanArgs& a) {
  using namespace planner;
  io::ModelConfig config = load_model(a.model);
  Profile profile = load_profile(a.profile);
  std::string gpu = a.gpu.empty() ? profile.gpu : a.gpu;
  DeviceSpec device;
  if (gpu == "cpu") {
    check(a.cpu_memory_gib > 0, "--gpu cpu needs --cpu-memory-gib G (the host memory the CPU engine may use)");
    device = cpu_device(int64_t(a.cpu_memory_gib * double(1LL << 30)));
  } else {
    check(a.cpu_memory_gib == 0, "--cpu-memory-gib applies to --gpu cpu only");
    device = load_gpu_preset(gpu);
  }
  PlanOptions options;
  options.model_name = a.model;
  if (!a.weights.empty()) options.weights = parse_weight_format(a.weights, "--weights");
  if (!a.c128.empty()) options.c128 = parse_c128_mode(a.c128, "--c128");
  if (!a.kv_format.empty()) options.kv_format = parse_kv_format(a.kv_format, "--kv-format");
  options.mem_fraction = a.mem_fraction;
  CapacityPlan plan = plan_capacity(config, device, profile, options);
  if (a.json)
    std::cout << plan_to_json(plan).dump(2) << "\n";
  else
    std::cout << format_plan_text(plan);
  return 0;
}

CommandRegistration plan{{"plan", "memory breakdown and full-token capacity per rank", [](CLI::App& app) {
                            auto args = std::make_shared<PlanArgs>();
                            app.add_option("--model", args->model, "model preset name or a directory with config.json")
                                ->required();
                            app.add_option("--profile", args->profile, "serving profile name (profiles/<name>.json)")
                                ->required();
                            app.add_option("--gpu", args->gpu, "GPU preset (h200, h20-141gb, ...) or cpu; "
                                                               "default: the profile's GPU");
                            app.add_option("--weights", args->weights, "bf16|fp8|mxfp4-fp8; default: the profile's");
                            app.add_option("--c128", args->c128, "offline|online; default: the profile's");
                            app.add_option("--kv-format", args->kv_format, "fp8|bf16|f32; default: the profile's");
                            app.add_option("--mem-fraction", args->mem_fraction,
                                           "fraction of device memory the engine may use; default: the profile's");
                            app.add_option("--cpu-memory-gib", args->cpu_memory_gib,
                                           "host memory for --gpu cpu (the CPU reference engine), GiB");
                            app.add_flag("--json", args->json, "print JSON");
                            return [args] { return run_plan(*args); };
                          }}};

}  // namespace
}  // namespace moeserve::cli
