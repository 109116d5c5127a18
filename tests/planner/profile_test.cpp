// Serving profiles as data: every profile in profiles/ loads, validates and plans; bad profiles fail with
// messages that name the field.
#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/capacity.h"
#include "planner/presets.h"
#include "planner_fixtures.h"

namespace moeserve::planner {
namespace {

using testing::profile_with;

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected an error containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PlannerProfiles, AllRequiredProfilesExist) {
  std::vector<std::string> names = profile_names();
  for (const char* name : {"tp8", "pp2-tp8", "dp16-ep16", "dp32-ep32", "pp2-cp8-tp8", "pp4-cp8-tp8", "h200-1gpu",
                           "h200-tp8", "cpu"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
}

TEST(PlannerProfiles, EveryProfileLoadsAndPlansOnItsGpu) {
  for (const std::string& name : profile_names()) {
    SCOPED_TRACE(name);
    Profile p = load_profile(name);
    EXPECT_EQ(p.name, name);
    EXPECT_FALSE(p.description.empty());
    DeviceSpec device = p.gpu == "cpu" ? cpu_device(64LL << 30) : load_gpu_preset(p.gpu);
    if (name == "h200-1gpu" || name == "cpu" || name == "h200-reference") {
      // Single-device profiles for the tiny and demo models: they fit; V4 does not.
      CapacityPlan plan = plan_capacity(testing::tiny(), device, p);
      EXPECT_GT(plan.full_token_capacity_per_rank, 0);
      expect_error([&] { plan_capacity(load_model("deepseek-v4-flash"), device, p); }, "plan does not fit");
      continue;
    }
    for (const char* model : {"deepseek-v4-flash", "deepseek-v4-pro"}) {
      if (name == "h200-tp2" && std::string(model) == "deepseek-v4-pro") continue;  // Flash only
      CapacityPlan plan = plan_capacity(load_model(model), device, p, {.model_name = model});
      EXPECT_GT(plan.full_token_capacity_per_rank, 0) << model;
      EXPECT_EQ(plan.full_token_capacity_per_rank % kPageTokens, 0);
      EXPECT_EQ(int64_t(plan.stages.size()), p.parallel.pp);
      for (const auto& s : plan.stages) {
        EXPECT_GE(s.free_bytes, 0);
        EXPECT_LT(s.free_bytes - (s.max_pages - s.pages) * s.page_bytes, s.page_bytes);
      }
    }
  }
}

TEST(PlannerProfiles, DecodeProfilesAgreeWithTheStudy) {
  io::ModelConfig pro = load_model("deepseek-v4-pro");
  DeviceSpec h20 = load_gpu_preset("h20-141gb");
  CapacityPlan dp16 = plan_capacity(pro, h20, load_profile("dp16-ep16"));
  CapacityPlan dp32 = plan_capacity(pro, h20, load_profile("dp32-ep32"));
  CapacityPlan tp8 = plan_capacity(pro, h20, load_profile("tp8"));
  // Fewer experts per GPU leave more HBM for KV.
  EXPECT_GT(dp32.full_token_capacity_per_rank, dp16.full_token_capacity_per_rank);
  EXPECT_EQ(dp16.layout.experts_per_rank, (384 + 16) / 16);
  // MXFP4 experts and online C128 both add capacity. With FP8 experts Pro does not even fit dp16-ep16.
  PlanOptions fp8;
  fp8.weights = WeightFormat::FP8;
  EXPECT_LT(plan_capacity(pro, h20, load_profile("dp32-ep32"), fp8).full_token_capacity_per_rank,
            dp32.full_token_capacity_per_rank);
  expect_error([&] { plan_capacity(pro, h20, load_profile("dp16-ep16"), fp8); }, "plan does not fit");
  PlanOptions offline;
  offline.c128 = C128Mode::Offline;
  EXPECT_LT(plan_capacity(pro, h20, load_profile("dp16-ep16"), offline).full_token_capacity_per_rank,
            dp16.full_token_capacity_per_rank);
  // PP2-TP8 holds 1M-token contexts at batch 4 (the study's headline).
  CapacityPlan pp2 = plan_capacity(pro, h20, load_profile("pp2-tp8"));
  EXPECT_GE(pp2.concurrency.back().requests_per_rank, 4);
  EXPECT_GT(pp2.full_token_capacity_per_rank, tp8.full_token_capacity_per_rank);
}

TEST(PlannerProfiles, BadProfilesNameTheField) {
  expect_error([] { load_profile("TP8"); }, "profile names are lower-case");
  expect_error([] { load_profile("tp9"); }, "--profile 'tp9' is not a profile");
  expect_error([] { profile_with({{"bogus", 1}}); }, "unknown field 'bogus'");
  expect_error([] { profile_with({{"parallel", {{"attention", {{"tp", 2}}}}}}); },
               "attention ranks per stage (tp 2 x dp 1 x cp 1 = 2) must equal MoE ranks per stage (tp 1 x ep 1 = 1)");
  expect_error([] { profile_with({{"weights", "int4"}}); }, "field 'weights' = 'int4' (expected bf16, fp8 or mxfp4-fp8)");
  expect_error([] { profile_with({{"c128", "lazy"}}); }, "expected offline or online");
  expect_error([] { profile_with({{"mem_fraction", 1.5}}); }, "mem_fraction = 1.5 must be in (0, 1]");
  expect_error([] { profile_with({{"cuda_graph_batch_sizes", {1, 8}}}); },
               "the largest CUDA-graph batch size 8 exceeds max_running_requests = 4");
  expect_error([] { profile_with({{"cuda_graph_batch_sizes", {2, 1}}}); }, "strictly increasing");
  expect_error([] { profile_with({{"speculative", {{"method", "eagle"}}}}); }, "speculative.method = 'eagle'");
  expect_error([] { profile_with({{"speculative", {{"method", "mtp"}, {"num_steps", 1}, {"num_draft_tokens", 4}}}}); },
               "num_draft_tokens = 4 exceeds num_steps x topk + 1 = 2");
  expect_error([] { profile_with({{"parallel", {{"moe", {{"redundant_experts", 4}}}}}}); },
               "redundant_experts = 4 needs expert parallelism");
  expect_error([] { profile_with({{"max_running_requests", 0}}); }, "field 'max_running_requests' = 0 must be >= 1");
  expect_error([] { profile_with({{"role", "train"}}); }, "field 'role' = 'train'");
  expect_error([] { profile_with({{"name", "Big"}}); }, "must be lower-case");
}

}  // namespace
}  // namespace moeserve::planner
