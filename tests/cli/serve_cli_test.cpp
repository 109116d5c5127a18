// `moeserve serve` flags checked before anything loads: --load-format dummy and --num-layers name what is wrong.
#include <gtest/gtest.h>

#include "run_command.h"

namespace moeserve {
namespace {

using testing::run_moeserve;

TEST(ServeCli, DummyWeightsFlagsNameTheProblem) {
  const std::string flash = " --model " + testing::source_dir() + "/presets/models/deepseek-v4-flash --port 0";
  auto r = run_moeserve("serve --load-format dummy" + flash);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--load-format dummy runs on the GPU only; add --device cuda"), std::string::npos) << r.err;
  r = run_moeserve("serve --num-layers 2 --port 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--num-layers is for --load-format dummy"), std::string::npos) << r.err;
  r = run_moeserve("serve --device cuda --load-format dummy --num-layers 99" + flash);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--num-layers 99: the model has 43 layers"), std::string::npos) << r.err;
  r = run_moeserve("serve --load-format pt" + flash);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--load-format"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moeserve
