// `moeserve plan` run as a process: text and --json output, and errors with exit code 1.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/capacity.h"
#include "planner/presets.h"
#include "test_paths.h"

namespace moeserve::planner {
namespace {

struct PlanRun {
  int code = -1;
  std::string out;  // stdout and stderr
};

PlanRun run_plan(const std::string& args) {
  std::string command = moeserve::testing::binary() + " plan " + args + " 2>&1";
  PlanRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(PlannerCli, TextOutput) {
  PlanRun r = run_plan("--model deepseek-v4-pro --gpu h200 --profile h200-tp8 --weights mxfp4-fp8 --c128 online");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* needle : {"memory per rank", "routed_experts", "KV pools", "csa_kv", "hca_kv", "fixed state",
                             "full-token capacity per rank", "max concurrency", "1M", "SGLang's accounting"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
}

TEST(PlannerCli, JsonMatchesTheLibrary) {
  PlanRun r = run_plan("--model deepseek-v4-flash --gpu h20-141gb --profile dp16-ep16 --weights fp8 --c128 offline "
                   "--mem-fraction 0.85 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["full_token_capacity_per_rank"].is_number_integer());
  PlanOptions o;
  o.weights = WeightFormat::FP8;
  o.c128 = C128Mode::Offline;
  o.mem_fraction = 0.85;
  CapacityPlan plan = plan_capacity(load_model("deepseek-v4-flash"), load_gpu_preset("h20-141gb"),
                                    load_profile("dp16-ep16"), o);
  EXPECT_EQ(j["full_token_capacity_per_rank"].get<int64_t>(), plan.full_token_capacity_per_rank);
  EXPECT_EQ(j["pages_per_rank"].get<int64_t>() * 256, plan.full_token_capacity_per_rank);
  EXPECT_EQ(j["weights_format"], "fp8");
  EXPECT_EQ(j["c128"], "offline");
  EXPECT_EQ(j["stages"][0]["weights"]["bytes"].get<int64_t>(), plan.stage(0).weights.total_bytes);
  EXPECT_EQ(j["stages"][0]["kv_pools"].size(), 3u);
  EXPECT_EQ(j["concurrency"].size(), 9u);
  EXPECT_EQ(j["concurrency"][8]["context_tokens"], 1 << 20);
}

TEST(PlannerCli, CpuDeviceAndModelDirectory) {
  PlanRun r = run_plan("--model " + moeserve::testing::fixture("models/tiny_hf") +
                   " --gpu cpu --cpu-memory-gib 1 --profile cpu --json");
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"]["name"], "cpu");
  EXPECT_EQ(j["kv_format"], "f32");
  EXPECT_GT(j["full_token_capacity_per_rank"].get<int64_t>(), 0);
}

TEST(PlannerCli, Errors) {
  PlanRun gpu = run_plan("--model deepseek-v4-pro --gpu h300 --profile tp8");
  EXPECT_EQ(gpu.code, 1);
  EXPECT_NE(gpu.out.find("--gpu 'h300' is not a GPU preset"), std::string::npos) << gpu.out;
  PlanRun profile = run_plan("--model deepseek-v4-pro --gpu h200 --profile TP8");
  EXPECT_EQ(profile.code, 1);
  EXPECT_NE(profile.out.find("lower-case"), std::string::npos) << profile.out;
  PlanRun weights = run_plan("--model deepseek-v4-pro --profile tp8 --weights int4");
  EXPECT_EQ(weights.code, 1);
  EXPECT_NE(weights.out.find("--weights = 'int4'"), std::string::npos) << weights.out;
  PlanRun fit = run_plan("--model deepseek-v4-pro --gpu h200 --profile h200-1gpu");
  EXPECT_EQ(fit.code, 1);
  EXPECT_NE(fit.out.find("plan does not fit"), std::string::npos) << fit.out;
  PlanRun cpu = run_plan("--model deepseek-v4-pro --gpu cpu --profile cpu");
  EXPECT_EQ(cpu.code, 1);
  EXPECT_NE(cpu.out.find("--cpu-memory-gib"), std::string::npos) << cpu.out;
  PlanRun model = run_plan("--model nope --profile tp8");
  EXPECT_EQ(model.code, 1);
  EXPECT_NE(model.out.find("deepseek-v4-flash"), std::string::npos) << model.out;
}

}  // namespace
}  // namespace moeserve::planner
