// Checkpoint numerics stay within the bound docs/numerics.md derives from the formats' rounding errors, on the
// tiny fixtures and the trained demo model (the rows of the docs table, bench/numerics_quality).
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "engine/numerics_quality.h"
#include "temp_dir.h"

namespace moeserve {
namespace {

TEST(NumericsQuality, FormatErrorsAreTheFormatsOwn) {
  const engine::FormatErrors e = engine::measure_format_errors();
  // e4m3 (3 mantissa bits): uniform rounding error over a step of 2^-3 x, relative to x with a log-uniform
  // mantissa m: 2^-3 / sqrt(12) * sqrt(E[1/m^2]) = 0.0361 * sqrt(3/(8 ln 2)) = 0.0266; never more than 2^-4.
  const double e4m3 = std::ldexp(1.0, -3) / std::sqrt(12.0) * std::sqrt(3.0 / (8.0 * std::log(2.0)));
  for (double v : {e.act_fp8, e.weight_fp8, e.kv_fp8}) {
    EXPECT_NEAR(v, e4m3, 0.001);
    EXPECT_LT(v, std::ldexp(1.0, -4));
  }
  // e2m1 per 32 with a power-of-two scale (block max in (3s, 6s]): steps s/2, s, 2s over N(0, (2s)^2)-like data
  // give about 0.115 (docs/numerics.md).
  for (double v : {e.weight_fp4, e.indexer_fp4}) {
    EXPECT_GT(v, 0.09);
    EXPECT_LT(v, 0.14);
  }
}

TEST(NumericsQuality, CompareDistributions) {
  Tensor a = Tensor::from_f32({2, 3}, {1, 2, 3, 0, 0, 5});
  Tensor shifted = Tensor::from_f32({2, 3}, {11, 12, 13, -7, -7, -2});  // same distributions
  auto d = engine::compare_distributions(a, shifted);
  EXPECT_EQ(d.top1_agreement, 1.0);
  EXPECT_NEAR(d.mean_kl, 0.0, 1e-12);
  Tensor other = Tensor::from_f32({2, 3}, {3, 2, 1, 0, 0, 5});
  d = engine::compare_distributions(a, other);
  EXPECT_EQ(d.top1_agreement, 0.5);
  // Row 0: p = softmax(1,2,3), q = softmax(3,2,1): KL = sum p (z_p - z_q) (the normalizers are equal).
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double kl0 = (std::exp(1.0) * -2 + std::exp(3.0) * 2) / z;
  EXPECT_NEAR(d.mean_kl, kl0 / 2, 1e-9);
  EXPECT_NEAR(d.max_kl, kl0, 1e-9);
}

class Bound : public ::testing::TestWithParam<engine::QualityModel> {};

TEST_P(Bound, EveryRowStaysWithinTheDerivedBound) {
  const auto& m = GetParam();
  testing::TempDir scratch;
  auto report = engine::evaluate_numerics_quality(m.dir, engine::read_input_ids(m.ids_file), scratch.path().string(),
                                                  engine::kNumericsSafetyFactor);
  ASSERT_EQ(report.rows.size(), 12u);
  int checked = 0;
  for (const auto& row : report.rows) {
    const std::string what = m.name + " " + row.weights + (row.kv_fp8 ? " kv-fp8" : "") +
                             (row.indexer_fp4 ? " indexer-fp4" : "");
    if (!row.available) {
      EXPECT_NE(row.note.find("MXFP4 needs a multiple of 32"), std::string::npos) << what << ": " << row.note;
      continue;
    }
    ++checked;
    EXPECT_LE(row.diff.mean_kl, row.bound.mean_kl) << what;
    EXPECT_GE(row.diff.top1_agreement, row.bound.top1_agreement) << what;
    RecordProperty(what, fmt::format("top1 {:.3f} (>= {:.3f}), KL {:.2e} (<= {:.2e})", row.diff.top1_agreement,
                                     row.bound.top1_agreement, row.diff.mean_kl, row.bound.mean_kl));
    if (row.weights == "bf16" && !row.kv_fp8 && !row.indexer_fp4) {
      EXPECT_EQ(row.diff.mean_kl, 0.0) << what;  // the baseline against itself
    } else if (row.weights != "bf16" || row.kv_fp8) {
      EXPECT_GT(row.diff.mean_kl, 0.0) << what << ": the simulation changed nothing";
    }
  }
  EXPECT_GE(checked, 8);
}

INSTANTIATE_TEST_SUITE_P(Models, Bound, ::testing::ValuesIn(engine::default_quality_models()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace moeserve
