// `moeserve convert` per the CLI contract: --from/--to/--weights/--names, a JSON summary, loadable output in
// both namings with identical logits, and one-line errors for bad flags and inputs.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "model/fixture.h"
#include "model/model.h"
#include "run_command.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace moeserve {
namespace {

using Result = testing::CommandResult;

Result moeserve_cli(const std::string& args) { return testing::run_moeserve(args); }

// tiny_hf's weights and config without the oracle file.
std::string staged_tiny_hf(const testing::TempDir& dir) {
  namespace fs = std::filesystem;
  const fs::path to = dir.path() / "src";
  fs::create_directories(to);
  for (const char* f : {"model.safetensors", "config.json"})
    fs::copy_file(fs::path(testing::model_fixture("tiny_hf")) / f, to / f);
  return to.string();
}

TEST(ConvertCli, Fp8InBothNamingsLoadsWithIdenticalLogits) {
  testing::TempDir dir;
  const std::string src = staged_tiny_hf(dir);
  Result a = moeserve_cli("convert --from " + src + " --to " + dir.file("official") + " --weights fp8");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto summary = nlohmann::json::parse(a.out);
  EXPECT_EQ(summary["weights"], "fp8");
  EXPECT_EQ(summary["files"], nlohmann::json::array({"model.safetensors"}));
  EXPECT_GT(summary["tensors"].get<int64_t>(), 300);
  Result b = moeserve_cli("convert --from " + src + " --to " + dir.file("hf") + " --weights fp8 --names hf "
                          "--shard-size 100KB");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_GT(nlohmann::json::parse(b.out)["files"].size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(dir.file("hf/model.safetensors.index.json")));
  auto ckpt = io::Checkpoint::open_dir(dir.file("hf"));
  EXPECT_TRUE(ckpt.has("model.layers.0.attn.wq_a.scale"));
  EXPECT_TRUE(ckpt.has("model.embed_tokens.weight"));
  auto o = testing::load_oracle("tiny_hf");
  std::vector<int32_t> ids(o.ids.begin(), o.ids.begin() + 40);
  Tensor la = engine::all_logits(*model::Model::load(dir.file("official")), ids, 0, model::Numerics::checkpoint());
  Tensor lb = engine::all_logits(*model::Model::load(dir.file("hf")), ids, 0, model::Numerics::checkpoint());
  ASSERT_EQ(la.shape(), lb.shape());
  EXPECT_EQ(std::memcmp(la.raw(), lb.raw(), la.nbytes()), 0);
}

TEST(ConvertCli, BadFlagsAndInputs) {
  testing::TempDir dir;
  const std::string src = staged_tiny_hf(dir);
  Result r = moeserve_cli("convert --from " + src + " --to " + dir.file("x") + " --weights int4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: --weights 'int4' (expected bf16, fp8 or mxfp4-fp8)\n");
  r = moeserve_cli("convert --from " + src + " --to " + dir.file("x") + " --weights fp8 --names modules");
  EXPECT_EQ(r.err, "error: --names 'modules' (expected official or hf)\n");
  r = moeserve_cli("convert --from " + src + " --to " + dir.file("x") + " --weights fp8 --shard-size 5XB");
  EXPECT_EQ(r.err, "error: --shard-size '5XB' (expected a positive size such as 5GB, 512MiB or a byte count)\n");
  r = moeserve_cli("convert --from " + dir.file("missing") + " --to " + dir.file("x") + " --weights fp8");
  EXPECT_EQ(r.err, "error: --from " + dir.file("missing") + ": not a directory\n");
  r = moeserve_cli("convert --from " + testing::model_fixture("tiny_yarn") + " --to " + dir.file("x") +
                   " --weights mxfp4-fp8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("MXFP4 needs a multiple of 32"), std::string::npos) << r.err;
  r = moeserve_cli("convert --from " + src + " --weights fp8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--to is required"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}

}  // namespace
}  // namespace moeserve
