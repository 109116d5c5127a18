// Runtime buffers and full-token capacity, by hand on tiny_hf with the CPU device.
#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/buffers.h"
#include "planner/capacity.h"
#include "planner_fixtures.h"

namespace moeserve::planner {
namespace {

using testing::profile_with;
using testing::tiny;

TEST(PlannerBuffers, TinyPrefillActivationsByHand) {
  io::ModelConfig c = tiny();
  Profile p = profile_with();  // one rank, bf16, chunk 512, 4 slots, no graphs
  Layout l = resolve_layout(c, p.parallel, p.weights, false);
  RuntimeBuffers b = runtime_buffers(c, l, l.stages[0], p);
  EXPECT_EQ(b.prefill_tokens, 512);
  EXPECT_EQ(b.decode_tokens, 0);
  const int64_t t = 512;
  const int64_t persistent = 2 * t * 256 * 2;  // residual + output mHC streams, bf16
  const int64_t attention = (t * 256 * 4 + t * 64 * 2)                 // hc_pre
                            + (t * 32 * 2 + t * 4 * 64 * 2)            // qr, q
                            + t * 64 * 2                               // kv
                            + 2 * t * 2 * 64 * 4                       // compressor kv + score (fp32, overlap 2x)
                            + t * (4 * 32 * 2 + 4 * 4 + 4096 * 4 + 4 * 4)  // indexer q, weights, score tile, top-k
                            + t * (4 * 64 * 2 + 2 * 16 * 2 + 64 * 4);   // o, wo_a out, wo_b out (fp32)
  EXPECT_EQ(b.activations.peak_of, "attention");
  EXPECT_EQ(b.activations.bytes, persistent + attention);
  EXPECT_EQ(b.activations.bytes, 10960896);
  EXPECT_EQ(b.cuda_graphs.bytes, 0);
  EXPECT_EQ(b.communication.bytes, 0);  // one rank: no collectives

  // The MoE block on its own: t tokens, 2 experts each, intermediate 32, bf16 activations.
  const int64_t pairs = t * 2;
  const int64_t moe = (t * 256 * 4 + t * 64 * 2) + (t * 8 * 4 + t * 2 * 8) + pairs * 64 * 2 + pairs * 2 * 32 * 2 +
                      pairs * 32 * 2 + pairs * 64 * 2 + (t * 2 * 32 * 2 + t * 64 * 2) + t * 64 * 4;
  EXPECT_EQ(moe, 1335296);
  EXPECT_LT(moe, attention);
}

TEST(PlannerBuffers, GraphsAndCommunication) {
  io::ModelConfig c = tiny();
  Profile p = profile_with({{"parallel", {{"attention", {{"tp", 2}}}, {"moe", {{"tp", 2}}}, {"vocab_parallel", 2}}},
                            {"cuda_graph_batch_sizes", {1, 2, 4}}});
  Layout l = resolve_layout(c, p.parallel, p.weights, false);
  RuntimeBuffers b = runtime_buffers(c, l, l.stages[0], p);
  EXPECT_EQ(b.decode_tokens, 4);
  EXPECT_GT(b.cuda_graphs.bytes, 0);
  EXPECT_EQ(b.cuda_graphs.bytes, forward_activations(c, l, l.stages[0], p.weights, 4, 4).bytes);
  ASSERT_EQ(b.communication.items.size(), 1u);  // TP all-reduce staging, fp32 in + out
  EXPECT_EQ(b.communication.bytes, 2 * 512 * 64 * 4);

  Profile ep = profile_with({{"parallel", {{"attention", {{"dp", 2}}}, {"moe", {{"ep", 2}}}}}});
  Layout le = resolve_layout(c, ep.parallel, ep.weights, false);
  RuntimeBuffers be = runtime_buffers(c, le, le.stages[0], ep);
  // g = 512 x 2 DP ranks; pairs per rank = g x 2 / 2 = 1024; dispatch bf16 64 x 2, combine 64 x 2
  EXPECT_EQ(be.communication.bytes, 1024 * 128 + 1024 * 128);
}

TEST(PlannerCapacity, TinyCpuPlanByHand) {
  io::ModelConfig c = tiny();
  const int64_t memory = 1LL << 30;
  CapacityPlan plan = plan_capacity(c, cpu_device(memory), profile_with());
  ASSERT_EQ(plan.stages.size(), 1u);
  const StagePlan& s = plan.stage(0);
  EXPECT_EQ(s.usable_bytes, memory / 2);
  EXPECT_EQ(s.weights.total_bytes, 1041300);
  EXPECT_EQ(s.buffers.total(), 10960896);
  EXPECT_EQ(s.fixed_state_bytes, 4 * 41024);
  EXPECT_EQ(s.page_bytes, 53248);  // 208 B per full token
  const int64_t avail = memory / 2 - 1041300 - 10960896 - 4 * 41024;
  EXPECT_EQ(s.pages, avail / 53248);
  EXPECT_EQ(plan.full_token_capacity_per_rank, avail / 53248 * 256);
  EXPECT_EQ(plan.full_token_capacity_per_rank % 256, 0);
  EXPECT_EQ(s.free_bytes, avail % 53248);
  for (const auto& pool : s.pools) EXPECT_EQ(pool.pages, s.pages);
  // Concurrency: 4 slots bind at 4K; the tiny model's context is 4096, so longer rows are not servable.
  ASSERT_EQ(plan.concurrency.size(), 9u);
  EXPECT_EQ(plan.concurrency[0].context_tokens, 4096);
  EXPECT_EQ(plan.concurrency[0].pages_per_request, 16);
  EXPECT_EQ(plan.concurrency[0].requests_per_rank, 4);
  EXPECT_TRUE(plan.concurrency[0].limited_by_slots);
  EXPECT_TRUE(plan.concurrency[1].beyond_model_context);
  EXPECT_EQ(plan.concurrency[1].requests_per_rank, 0);
}

TEST(PlannerCapacity, KvLimitedConcurrencyAndOverrides) {
  io::ModelConfig c = tiny();
  c.max_position_embeddings = 1 << 20;
  // 64 MiB x 0.5 leaves room for a few hundred pages: long contexts are KV-bound.
  PlanOptions o;
  o.max_running_requests = 64;
  CapacityPlan plan = plan_capacity(c, cpu_device(64LL << 20), profile_with({{"max_running_requests", 64}}), o);
  const int64_t pages = plan.pages_per_rank;
  for (const auto& row : plan.concurrency) {
    EXPECT_EQ(row.requests_per_rank, std::min<int64_t>(64, pages / (row.context_tokens / 256)));
    EXPECT_EQ(row.limited_by_slots, 64 <= pages / (row.context_tokens / 256));
  }
  EXPECT_FALSE(plan.concurrency.back().limited_by_slots);

  PlanOptions online;
  online.c128 = C128Mode::Online;
  online.mem_fraction = 0.25;
  CapacityPlan on = plan_capacity(c, cpu_device(1LL << 30), profile_with(), online);
  EXPECT_EQ(on.profile.c128, C128Mode::Online);
  EXPECT_EQ(on.stage(0).usable_bytes, (1LL << 30) / 4);
}

TEST(PlannerCapacity, DoesNotFitNamesTheNumbers) {
  try {
    plan_capacity(tiny(), cpu_device(8LL << 20), profile_with());
    FAIL() << "expected a does-not-fit error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("plan does not fit"), std::string::npos) << m;
    EXPECT_NE(m.find("mem_fraction 0.5"), std::string::npos) << m;
    EXPECT_NE(m.find("runtime buffers"), std::string::npos) << m;
    EXPECT_NE(m.find("short by"), std::string::npos) << m;
  }
}

TEST(PlannerCapacity, PipelineStagesShareThePageCount) {
  io::ModelConfig c = io::load_model_config(moeserve::testing::fixture("models/tiny_yarn/config.json"));
  CapacityPlan plan = plan_capacity(c, cpu_device(1LL << 30), profile_with({{"parallel", {{"pp", 2}}}}));
  ASSERT_EQ(plan.stages.size(), 2u);
  int64_t fewest = std::min(plan.stages[0].max_pages, plan.stages[1].max_pages);
  EXPECT_EQ(plan.pages_per_rank, fewest);
  for (const auto& s : plan.stages) {
    EXPECT_EQ(s.pages, fewest);
    EXPECT_EQ(s.free_bytes, s.usable_bytes - s.weights.total_bytes - s.buffers.total() - s.fixed_state_bytes -
                                fewest * s.page_bytes);
  }
}

}  // namespace
}  // namespace moeserve::planner
