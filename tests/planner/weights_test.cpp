// Weight bytes per rank, counted by hand on tiny_hf (see planner_fixtures.h for its shapes).
#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/layout.h"
#include "planner/weights.h"
#include "planner_fixtures.h"

namespace moeserve::planner {
namespace {

using testing::profile_with;
using testing::tiny;

WeightBreakdown weights_for(const io::ModelConfig& c, const Profile& p, WeightFormat f, int64_t stage = 0) {
  Layout l = resolve_layout(c, p.parallel, f, p.speculative.enabled());
  return stage_weights(c, l, l.stages.at(size_t(stage)), f);
}

int64_t kind(const WeightBreakdown& w, WeightKind k) { return w.bytes[size_t(k)]; }

TEST(PlannerWeights, TinyBf16EveryKindByHand) {
  WeightBreakdown w = weights_for(tiny(), profile_with(), WeightFormat::BF16);
  // attention per layer: wq_a 32x64 + q_norm 32 + wq_b 256x32 + wkv 64x64 + kv_norm 64 + wo_a 32x128 + wo_b 64x32
  // (all x2 B) + attn_sink 4 x 4 B = 41168
  EXPECT_EQ(kind(w, WeightKind::Attention), 4 * 41168);
  // CSA compressor: wkv, wgate 128x64 bf16 + ape 4x128 f32 + norm 64 bf16 = 34944; HCA (ratio 16): 64x64 x2 x2 +
  // ape 16x64 x4 + 128 = 20608
  EXPECT_EQ(kind(w, WeightKind::Compressor), 2 * 34944 + 20608);
  // indexer: wq_b 128x32 x2 + weights_proj 4x64 x2 + compressor 64x64 x2 x2 + ape 4x64 x4 + norm 32 x2 = 26176
  EXPECT_EQ(kind(w, WeightKind::Indexer), 2 * 26176);
  // mHC: 2 sites x (fn 24x256 + base 24 + scale 3) x 4 B
  EXPECT_EQ(kind(w, WeightKind::MHC), 4 * 2 * (24 * 256 + 24 + 3) * 4);
  EXPECT_EQ(kind(w, WeightKind::Norms), 4 * 2 * 64 * 2);
  // gate 8x64 bf16 per layer; layer 0 is hash-routed (tid2eid 320x2 int32), the rest have a bias of 8 fp32
  EXPECT_EQ(kind(w, WeightKind::Router), 4 * 8 * 64 * 2 + 320 * 2 * 4 + 3 * 8 * 4);
  EXPECT_EQ(kind(w, WeightKind::SharedExpert), 4 * 3 * 32 * 64 * 2);
  EXPECT_EQ(kind(w, WeightKind::RoutedExperts), 4 * 8 * 3 * 32 * 64 * 2);
  EXPECT_EQ(kind(w, WeightKind::Embedding), 320 * 64 * 2);
  // norm 64 x2 + hc_head_fn 4x256 x4 + base 4 x4 + scale 1 x4 + head 320x64 x2
  EXPECT_EQ(kind(w, WeightKind::Head), 128 + 4096 + 16 + 4 + 40960);
  EXPECT_EQ(kind(w, WeightKind::MTP), 0);
  EXPECT_EQ(w.total_bytes, 1041300);
}

TEST(PlannerWeights, TinyFp8AndMxfp4ByHand) {
  WeightBreakdown fp8 = weights_for(tiny(), profile_with(), WeightFormat::FP8);
  // FP8 linear = rows*cols + ceil(rows/128)*ceil(cols/128): wq_a 2049, wq_b 8194, wkv 4097, wo_b 2049; wo_a
  // stays BF16 (8192) and norms/sink keep their types: 2049 + 64 + 8194 + 4097 + 128 + 8192 + 2049 + 16 = 24789
  EXPECT_EQ(kind(fp8, WeightKind::Attention), 4 * 24789);
  // indexer wq_b 128x32 -> 4097; the rest stays BF16/F32
  EXPECT_EQ(kind(fp8, WeightKind::Indexer), 2 * (4097 + 512 + 16384 + 1024 + 64));
  EXPECT_EQ(kind(fp8, WeightKind::Compressor), 2 * 34944 + 20608);
  EXPECT_EQ(kind(fp8, WeightKind::SharedExpert), 4 * 3 * 2049);
  EXPECT_EQ(kind(fp8, WeightKind::RoutedExperts), 4 * 8 * 3 * 2049);

  WeightBreakdown mx = weights_for(tiny(), profile_with(), WeightFormat::MXFP4_FP8);
  // MXFP4: rows*cols/2 + rows*ceil(cols/32): w1, w3 32x64 -> 1024 + 64; w2 64x32 -> 1024 + 64
  EXPECT_EQ(kind(mx, WeightKind::RoutedExperts), 4 * 8 * 3 * 1088);
  EXPECT_EQ(kind(mx, WeightKind::SharedExpert), 4 * 3 * 2049);  // the shared expert is FP8
  EXPECT_EQ(kind(mx, WeightKind::Attention), kind(fp8, WeightKind::Attention));
}

TEST(PlannerWeights, TinyTensorParallelAndExpertParallel) {
  Profile tp2 = profile_with({{"parallel", {{"attention", {{"tp", 2}}}, {"moe", {{"tp", 2}}}, {"vocab_parallel", 2}}}});
  WeightBreakdown w = weights_for(tiny(), tp2, WeightFormat::BF16);
  // wq_b 128x32, wo_a 16x128, wo_b 64x16, sink 2 per rank: 4096 + 64 + 8192 + 8192 + 128 + 4096 + 2048 + 8
  EXPECT_EQ(kind(w, WeightKind::Attention), 4 * 26824);
  // indexer: wq_b 64x32 and weights_proj 2x64 split; its compressor is replicated
  EXPECT_EQ(kind(w, WeightKind::Indexer), 2 * (4096 + 256 + 16384 + 1024 + 64));
  EXPECT_EQ(kind(w, WeightKind::RoutedExperts), 4 * 8 * 3 * 16 * 64 * 2);  // every expert, half its width
  EXPECT_EQ(kind(w, WeightKind::SharedExpert), 4 * 3 * 16 * 64 * 2);
  EXPECT_EQ(kind(w, WeightKind::Embedding), 160 * 64 * 2);
  EXPECT_EQ(kind(w, WeightKind::Compressor), 2 * 34944 + 20608);  // replicated

  Profile ep2 = profile_with({{"parallel", {{"attention", {{"dp", 2}}}, {"moe", {{"ep", 2}, {"redundant_experts", 2}}}}}});
  WeightBreakdown e = weights_for(tiny(), ep2, WeightFormat::BF16);
  EXPECT_EQ(kind(e, WeightKind::RoutedExperts), 4 * 5 * 3 * 32 * 64 * 2);  // (8 + 2) / 2 experts per rank
  EXPECT_EQ(kind(e, WeightKind::Attention), 4 * 41168);                    // attention DP: replicated
  EXPECT_EQ(kind(e, WeightKind::SharedExpert), 4 * 3 * 32 * 64 * 2);
}

TEST(PlannerWeights, PipelineStagesSplitLayersEmbeddingHeadAndMtp) {
  io::ModelConfig c = io::load_model_config(moeserve::testing::fixture("models/tiny_yarn/config.json"));
  ASSERT_EQ(c.num_layers, 5);
  ASSERT_EQ(c.num_mtp_layers, 1);
  Profile pp2 = profile_with({{"parallel", {{"pp", 2}}},
                              {"speculative", {{"method", "mtp"}, {"num_steps", 1}, {"num_draft_tokens", 2}}}});
  Layout l = resolve_layout(c, pp2.parallel, WeightFormat::BF16, true);
  ASSERT_EQ(l.stages.size(), 2u);
  EXPECT_EQ(l.stages[0].num_layers, 3);  // 5 layers: the earlier stage takes the remainder
  EXPECT_EQ(l.stages[1].first_layer, 3);
  EXPECT_TRUE(l.stages[0].has_embedding && !l.stages[0].has_head && !l.stages[0].has_mtp);
  EXPECT_TRUE(l.stages[1].has_head && l.stages[1].has_mtp && !l.stages[1].has_embedding);
  WeightBreakdown s0 = stage_weights(c, l, l.stages[0], WeightFormat::BF16);
  WeightBreakdown s1 = stage_weights(c, l, l.stages[1], WeightFormat::BF16);
  EXPECT_GT(kind(s0, WeightKind::Embedding), 0);
  EXPECT_EQ(kind(s1, WeightKind::Embedding), 0);
  EXPECT_GT(kind(s1, WeightKind::MTP), 0);
  // MTP = e_proj + h_proj (D x D) + 3 norms + hc_head + one window-only, bias-routed block.
  const int64_t D = c.hidden_size;
  Profile one = profile_with();
  Layout single = resolve_layout(c, one.parallel, WeightFormat::BF16, true);
  int64_t mtp = 0;
  for (const auto& t : mtp_tensors(c)) mtp += tensor_bytes(t, single, WeightFormat::BF16);
  EXPECT_EQ(kind(s1, WeightKind::MTP), mtp);
  EXPECT_GT(mtp, 2 * D * D * 2);
}

TEST(PlannerWeights, LayoutErrorsNameTheConstraint) {
  io::ModelConfig c = tiny();
  auto expect_error = [&](const Profile& p, const std::string& needle, WeightFormat f = WeightFormat::BF16) {
    try {
      resolve_layout(c, p.parallel, f, false);
      FAIL() << "expected an error containing: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(profile_with({{"parallel", {{"attention", {{"tp", 3}}}, {"moe", {{"tp", 3}}}, {"vocab_parallel", 1}}}}),
               "num_attention_heads = 4 is not divisible by attention tp = 3");
  expect_error(profile_with({{"parallel", {{"attention", {{"tp", 4}}}, {"moe", {{"tp", 4}}}}}}),
               "o_groups = 2 is not divisible by attention tp = 4");
  expect_error(profile_with({{"parallel", {{"attention", {{"dp", 3}}}, {"moe", {{"ep", 3}}}}}}),
               "n_routed_experts + redundant experts = 8 + 0 = 8 is not divisible by moe ep = 3");
  expect_error(profile_with({{"parallel", {{"pp", 5}}}}), "pp = 5 stages exceed num_hidden_layers = 4");
  expect_error(profile_with({{"parallel", {{"pp", 2}, {"pp_layers", {1, 2}}}}}),
               "pp_layers sum to 3 layers, the model has num_hidden_layers = 4");
  // A split FP8 dimension must keep whole 128x128 blocks on each rank.
  expect_error(profile_with({{"parallel", {{"attention", {{"tp", 2}}}, {"moe", {{"tp", 2}}}}}}),
               "leaves 16 per rank, not a multiple of the 128-wide FP8 scale block", WeightFormat::FP8);
  c.vocab_size = 321;
  expect_error(profile_with({{"parallel", {{"attention", {{"tp", 2}}}, {"moe", {{"tp", 2}}}, {"vocab_parallel", 2}}}}),
               "vocab_size = 321 is not divisible by vocab_parallel = 2");
  c = tiny();
  c.index_n_heads = 3;
  expect_error(profile_with({{"parallel", {{"attention", {{"tp", 2}}}, {"moe", {{"tp", 2}}}}}}),
               "index_n_heads = 3 is not divisible by attention tp = 2");
  c = tiny();
  EXPECT_THROW(resolve_layout(c, profile_with().parallel, WeightFormat::BF16, /*mtp=*/true), Error);  // no MTP layer
}

}  // namespace
}  // namespace moeserve::planner
