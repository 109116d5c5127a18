// SGLang's bytes-per-full-token accounting (comparison only), against deepseek-v4.md §4.2
// (3562.4 + 4380 + 141.4 + 990 + 768 + 192 = 10,033.8 B; x 62/61 with the spec rings = 11,174 B).
#include <gtest/gtest.h>

#include "planner/presets.h"
#include "planner/sglang_reference.h"

namespace moeserve::planner {
namespace {

TEST(PlannerSglangReference, ProPublishedNumbers) {
  io::ModelConfig pro = load_model("deepseek-v4-pro");
  EXPECT_NEAR(sglang_bytes_per_full_token(pro, 0, 61, false), 10034, 0.5);
  EXPECT_NEAR(sglang_bytes_per_full_token(pro, 0, 61, true), 11174, 0.5);
}

}  // namespace
}  // namespace moeserve::planner
