// KV entry formats, paged pools and fixed per-request state, by hand on tiny_hf and against the numbers of
// deepseek-v4.md §4 for V4-Pro.
#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/kv.h"
#include "planner/presets.h"
#include "planner_fixtures.h"

namespace moeserve::planner {
namespace {

using testing::tiny;

StageMap whole(const io::ModelConfig& c, bool mtp = false) {
  StageMap m;
  m.num_layers = c.num_layers;
  m.has_embedding = m.has_head = true;
  m.has_mtp = mtp;
  return m;
}

int64_t item(const SlotState& s, const std::string& name) {
  for (const auto& i : s.items)
    if (i.name == name) return i.bytes();
  return -1;
}

TEST(PlannerKv, EntryFormats) {
  io::ModelConfig c = tiny();  // head_dim 64, rope 16 -> nope 48; index_head_dim 32
  EXPECT_EQ(kv_entry_bytes(c, KvFormat::FP8), 48 + 2 * 16 + 8);  // one e8m0 scale, padded to 8 bytes
  EXPECT_EQ(kv_entry_bytes(c, KvFormat::BF16), 128);
  EXPECT_EQ(kv_entry_bytes(c, KvFormat::F32), 256);
  EXPECT_EQ(indexer_key_bytes(c, KvFormat::FP8), 32 + 4);
  EXPECT_EQ(indexer_key_bytes(c, KvFormat::BF16), 64);
  EXPECT_EQ(indexer_key_bytes(c, KvFormat::F32), 128);

  io::ModelConfig pro = load_model("deepseek-v4-pro");
  EXPECT_EQ(kv_entry_bytes(pro, KvFormat::FP8), 584);  // 448 e4m3 + 64 bf16 + 7 scales + 1 pad
  EXPECT_EQ(kv_entry_bytes(pro, KvFormat::BF16), 1024);
  EXPECT_EQ(indexer_key_bytes(pro, KvFormat::FP8), 132);
}

TEST(PlannerKv, TinyPoolsByHand) {
  io::ModelConfig c = tiny();
  std::vector<PoolPlan> pools = kv_pools(c, whole(c), KvFormat::F32);
  ASSERT_EQ(pools.size(), 3u);
  EXPECT_EQ(pools[0].name, "csa_kv");
  EXPECT_EQ(pools[0].layers, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(pools[0].entries_per_page, 64);
  EXPECT_EQ(pools[0].page_bytes(), 2 * 64 * 256);
  EXPECT_EQ(pools[1].name, "csa_index");
  EXPECT_EQ(pools[1].page_bytes(), 2 * 64 * 128);
  EXPECT_EQ(pools[2].name, "hca_kv");
  EXPECT_EQ(pools[2].layers, (std::vector<int64_t>{2}));
  EXPECT_EQ(pools[2].entries_per_page, 16);  // ratio 16
  EXPECT_EQ(pools[2].page_bytes(), 16 * 256);
  // A stage holding only the window layer pages nothing.
  StageMap first;
  first.num_layers = 1;
  EXPECT_TRUE(kv_pools(c, first, KvFormat::F32).empty());
}

TEST(PlannerKv, TinySlotStateByHand) {
  io::ModelConfig c = tiny();  // window 8; CSA layers 1,3; HCA layer 2 (ratio 16); max context 4096
  SlotState off = slot_state(c, whole(c), KvFormat::F32, C128Mode::Offline, 0, 4096);
  EXPECT_EQ(item(off, "swa_ring"), 4 * 8 * 256);
  EXPECT_EQ(item(off, "csa_compressor"), 2 * 8 * (2 * 2 * 64 * 4));      // 8 rows x (kv, score) x 128 floats
  EXPECT_EQ(item(off, "csa_index_compressor"), 2 * 8 * (2 * 2 * 32 * 4));
  EXPECT_EQ(item(off, "hca_state"), 1 * 16 * (2 * 64 * 4));              // 16 raw rows x (kv, score) x 64
  EXPECT_EQ(item(off, "page_table"), 16 * 4);
  EXPECT_EQ(off.bytes_per_slot, 8192 + 16384 + 8192 + 8192 + 64);

  SlotState on = slot_state(c, whole(c), KvFormat::F32, C128Mode::Online, 0, 4096);
  EXPECT_EQ(item(on, "hca_state"), 3 * 64 * 4);  // running max, sum, kv
  EXPECT_EQ(on.bytes_per_slot, 8192 + 16384 + 8192 + 768 + 64);

  // Speculative decoding (3 draft steps: a verify writes 4 tokens past the committed length): every ring gets
  // 4 rows of headroom, the online state keeps a snapshot, the MTP layer adds a window ring.
  SlotState spec = slot_state(c, whole(c, true), KvFormat::F32, C128Mode::Offline, 4, 4096);
  EXPECT_EQ(item(spec, "swa_ring"), 5 * (8 + 4) * 256);
  EXPECT_EQ(item(spec, "csa_compressor"), 2 * (8 + 4) * 1024);
  EXPECT_EQ(item(spec, "csa_index_compressor"), 2 * (8 + 4) * 512);
  EXPECT_EQ(item(spec, "hca_state"), (16 + 4) * 512);
  SlotState spec_on = slot_state(c, whole(c, true), KvFormat::F32, C128Mode::Online, 4, 4096);
  EXPECT_EQ(item(spec_on, "hca_state"), 2 * 3 * 64 * 4);
}

TEST(PlannerKv, ProMatchesTheReference) {
  io::ModelConfig pro = load_model("deepseek-v4-pro");
  std::vector<PoolPlan> pools = kv_pools(pro, whole(pro), KvFormat::FP8);
  ASSERT_EQ(pools.size(), 3u);
  EXPECT_EQ(pools[0].layers.size(), 30u);  // C4 = {2, 4, ..., 60}
  EXPECT_EQ(pools[2].layers.size(), 31u);  // C128 = {0, 1, 3, ..., 59}
  EXPECT_EQ(pools[2].entries_per_page, 2);
  int64_t page = 0;
  for (const auto& p : pools) page += p.page_bytes();
  EXPECT_EQ(page, 30 * 64 * (584 + 132) + 31 * 2 * 584);  // 1,410,928 B: 5,511.4 B per full token
  // §4.1: SWA 61 x 128 x 584 = 4.56 MB; C4 states 30 x (8x8192 + 8x2048); C128 offline 31 x 512 KiB, online 31 x 6 KiB.
  SlotState off = slot_state(pro, whole(pro), KvFormat::FP8, C128Mode::Offline, 0, 1 << 20);
  EXPECT_EQ(item(off, "swa_ring"), 61 * 128 * 584);
  EXPECT_EQ(item(off, "csa_compressor") + item(off, "csa_index_compressor"), 30 * (8 * 8192 + 8 * 2048));
  EXPECT_EQ(item(off, "hca_state"), 31 * 512 * 1024);
  SlotState on = slot_state(pro, whole(pro), KvFormat::FP8, C128Mode::Online, 0, 1 << 20);
  EXPECT_EQ(item(on, "hca_state"), 31 * 6 * 1024);
  EXPECT_EQ(item(on, "page_table"), 4096 * 4);
}

TEST(PlannerKv, RatioThatDoesNotDivideThePageIsAnError) {
  io::ModelConfig c = tiny();
  c.layers[2].compress_ratio = 24;
  EXPECT_THROW(kv_pools(c, whole(c), KvFormat::FP8), Error);
}

}  // namespace
}  // namespace moeserve::planner
