// The same weights under each naming dialect, and the same model under both config forms, give identical logits.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/generate.h"
#include "model/fixture.h"
#include "model/model.h"

namespace moeserve {
namespace {

using testing::model_fixture;

Tensor logits_of(const io::ModelConfig& config, const std::string& weights_dir, const std::vector<int32_t>& ids) {
  model::TensorSource source(io::Checkpoint::open_dir(weights_dir));
  model::Model m(config, model::load_weights(config, source));
  return engine::all_logits(m, ids, 0, model::Numerics::reference());
}

std::vector<int32_t> prompt_of(const std::string& fixture) {
  auto o = testing::load_oracle(fixture);
  return std::vector<int32_t>(o.ids.begin(), o.ids.begin() + 40);
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(Dialects, AreDetected) {
  EXPECT_EQ(model::TensorSource(io::Checkpoint::open_dir(model_fixture("tiny_hf"))).dialect(),
            model::NameDialect::Official);
  EXPECT_EQ(model::TensorSource(io::Checkpoint::open_dir(model_fixture("tiny_hf/hf_save_pretrained"))).dialect(),
            model::NameDialect::HfSavePretrained);
  EXPECT_EQ(model::TensorSource(io::Checkpoint::open_dir(model_fixture("tiny_hf/hf_modules"))).dialect(),
            model::NameDialect::HfModules);
}

TEST(Dialects, SameWeightsSameLogits) {
  auto config = io::load_model_config(model_fixture("tiny_hf") + "/config.json");
  auto ids = prompt_of("tiny_hf");
  Tensor official = logits_of(config, model_fixture("tiny_hf"), ids);
  // save_pretrained output is sharded (25 files + model.safetensors.index.json) and stores F32 tensors.
  EXPECT_TRUE(bit_identical(official, logits_of(config, model_fixture("tiny_hf/hf_save_pretrained"), ids)));
  EXPECT_TRUE(bit_identical(official, logits_of(config, model_fixture("tiny_hf/hf_modules"), ids)));
}

TEST(Dialects, SavePretrainedDirectoryLoadsWithItsOwnConfig) {
  auto m = model::Model::load(model_fixture("tiny_hf/hf_save_pretrained"));
  auto ids = prompt_of("tiny_hf");
  auto config = io::load_model_config(model_fixture("tiny_hf") + "/config.json");
  EXPECT_TRUE(bit_identical(engine::all_logits(*m, ids, 0, model::Numerics::reference()),
                            logits_of(config, model_fixture("tiny_hf"), ids)));
}

TEST(ConfigForms, OfficialAndHfFormsGiveIdenticalLogits) {
  for (const char* fixture : {"tiny_hf", "tiny_yarn"}) {
    auto a = io::load_model_config(model_fixture(fixture) + "/config.json");
    auto b = io::load_model_config(model_fixture(fixture) + "/config.other_form.json");
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t i = 0; i < a.layers.size(); ++i) {
      EXPECT_EQ(a.layers[i].attention, b.layers[i].attention) << fixture << " layer " << i;
      EXPECT_EQ(a.layers[i].compress_ratio, b.layers[i].compress_ratio) << fixture << " layer " << i;
      EXPECT_EQ(a.layers[i].hash_moe, b.layers[i].hash_moe) << fixture << " layer " << i;
    }
    EXPECT_EQ(a.rope_dim, b.rope_dim);
    EXPECT_EQ(a.rope_compress.yarn, b.rope_compress.yarn);
    auto ids = prompt_of(fixture);
    EXPECT_TRUE(bit_identical(logits_of(a, model_fixture(fixture), ids), logits_of(b, model_fixture(fixture), ids)))
        << fixture;
  }
}

TEST(Mtp, CheckpointWithoutMtpTensorsLoadsWithoutSpeculation) {
  auto m = model::Model::load(model_fixture("tiny_yarn"));  // config has num_nextn_predict_layers = 1
  EXPECT_EQ(m->config().num_mtp_layers, 1);
  EXPECT_FALSE(m->has_mtp());
}

}  // namespace
}  // namespace moeserve
