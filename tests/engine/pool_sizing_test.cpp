// The engine sizes its pools from the capacity plan: slots, pages and bytes equal what `moeserve plan` prints
// for the CPU device.
#include <gtest/gtest.h>

#include "engine/startup.h"
#include "model/model.h"
#include "test_paths.h"

namespace moeserve::engine {
namespace {

TEST(PoolSizing, EnginePoolsEqualThePlanForTheCpuDevice) {
  auto m = model::Model::load(testing::source_dir() + "/models/demo");
  for (int64_t memory : {int64_t(192) << 20, int64_t(512) << 20}) {
    StartupOptions o;
    o.memory_bytes = memory;
    EnginePlan p = plan_engine(*m, o);
    Engine engine(m, nullptr, p.options);
    auto s = engine.status();
    EXPECT_EQ(s.slots_total, p.plan.slots);
    EXPECT_EQ(s.pages_total, p.plan.pages_per_rank);
    EXPECT_EQ(s.pages_total * s.page_tokens, p.plan.full_token_capacity_per_rank);
    // Bytes: the KV pools, plus per slot the window rings and compressor rings (the page table is a host
    // vector the plan counts separately).
    const auto& stage = p.plan.stage(0);
    int64_t planned = 0;
    for (const auto& pool : stage.pools) planned += pool.bytes();
    for (const auto& item : stage.slot_state.items)
      if (item.name != "page_table") planned += p.plan.slots * item.bytes();
    EXPECT_EQ(engine.kv_cache_bytes(), planned) << "memory " << memory;
  }
}

}  // namespace
}  // namespace moeserve::engine
