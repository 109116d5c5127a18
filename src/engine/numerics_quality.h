#pragma once
// How far DeepSeek-V4's checkpoint numerics (FP8 / MXFP4 weights with FP8 activations, the KV FP8 simulation,
// the indexer's FP4 simulation) move next-token distributions away from the BF16 model, and the bound
// docs/numerics.md derives for it from the formats' rounding errors:
//  - per quantization site s, eps_s = relative rms rounding error of its format (measured on Gaussian data
//    through the real quantizers: a property of the format, not of the model);
//  - rho^2 = sum over the sites of one token's forward of eps_s^2 (first-order propagation, independent
//    errors, sublayer outputs no larger than the residual they join), rho_bound = S * rho (safety factor S);
//  - a relative error rho of the final hidden state moves logit i by delta_i = rho * sum_k W_ik gamma_k xi_k
//    (xi isotropic, W the head, gamma the final norm), so KL_t ~= 1/2 Var_{i~p_t}(delta_i), whose expectation
//    is 1/2 rho^2 sum_k gamma_k^2 Var_{i~p_t}(W_ik); and the top-1 token flips to j with probability
//    Phi(-(z_top - z_j) / sigma_j), sigma_j^2 = rho^2 sum_k gamma_k^2 (W_jk - W_top,k)^2.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/convert.h"
#include "model/model.h"

namespace moeserve::engine {

// The safety factor S of the bound (docs/numerics.md: 2 for the gain of the mHC post weights, which reach 2,
// times 2 for what the first-order model leaves out: non-Gaussian tails, top-k selections that flip).
inline constexpr double kNumericsSafetyFactor = 4.0;

// Relative rms rounding error of each quantization site's format on N(0, 1) data.
struct FormatErrors {
  double act_fp8 = 0;      // e4m3, per token per 128, power-of-two scale
  double weight_fp8 = 0;   // e4m3, 128x128 blocks
  double weight_fp4 = 0;   // e2m1, per-32 E8M0 (MXFP4)
  double kv_fp8 = 0;       // e4m3, blocks of 64
  double indexer_fp4 = 0;  // Hadamard, then e2m1 per 32
};
FormatErrors measure_format_errors();

// Agreement of two next-token distributions per row of [T, vocab] logits.
struct DistributionDiff {
  double top1_agreement = 0;  // fraction of rows with the same argmax
  double mean_kl = 0;         // mean over rows of KL(softmax(reference) || softmax(test)), nats
  double max_kl = 0;
};
DistributionDiff compare_distributions(const Tensor& reference, const Tensor& test);

// The first-order rounding-error model's sum of eps^2 over the quantization sites of one token's forward through
// a sequence of `positions` tokens (the indexer's sites count only when the sequence is long enough for its
// top-k to drop entries).
double site_error_sq(const io::ModelConfig& config, model::WeightsTarget weights, const model::Numerics& numerics,
                     const FormatErrors& eps, int64_t positions);

// What the bound needs from the BF16 model's own logits [T, vocab] (reference numerics), head and final norm:
// per position, sum_k gamma_k^2 Var_{i~p_t}(W_ik), and for every j != top the margin z_top - z_j and
// sqrt(sum_k gamma_k^2 (W_jk - W_top,k)^2).
struct BoundBasis {
  std::vector<double> logit_variance;
  std::vector<std::vector<std::pair<double, double>>> competitors;
};
BoundBasis bound_basis(const model::Model& bf16, const Tensor& reference_logits);

struct QualityBound {
  double mean_kl = 0;         // expected mean KL at hidden-state error rho
  double top1_agreement = 0;  // lower bound on the top-1 agreement (expected flips, less 3 binomial sigmas)
};
QualityBound bound_at(const BoundBasis& basis, double rho);

struct QualityRow {
  std::string weights;  // bf16 | fp8 | mxfp4-fp8
  bool kv_fp8 = false, indexer_fp4 = false;
  bool available = true;  // false when the model cannot take the format (note says why)
  std::string note;
  DistributionDiff diff;
  double rho = 0;  // S * sqrt(site_error_sq)
  QualityBound bound;
};

struct QualityReport {
  std::string model;
  int64_t positions = 0;
  double safety = 0;
  FormatErrors eps;
  std::vector<QualityRow> rows;
};

// The models of the docs/numerics.md table and their fixed token sequences (an input_ids tensor in a
// safetensors file): tiny_hf and tiny_yarn with their oracle ids, and the trained demo model (when present) with
// 300 held-out tokens (tests/fixtures/models/demo_oracle.safetensors).
struct QualityModel {
  std::string name, dir, ids_file;
};
std::vector<QualityModel> default_quality_models();
std::vector<int32_t> read_input_ids(const std::string& safetensors_file);

// Converts `model_dir` (BF16 or any format) into bf16 / fp8 / mxfp4-fp8 under `scratch_dir`, runs `ids` through
// each with KV FP8 and indexer FP4 on and off (FP8 activations wherever a linear is quantized), and compares
// with the bf16 model in reference numerics.
QualityReport evaluate_numerics_quality(const std::string& model_dir, const std::vector<int32_t>& ids,
                                        const std::string& scratch_dir, double safety);

// Markdown table rows for docs/numerics.md.
std::string quality_table_markdown(const std::vector<QualityReport>& reports);

}  // namespace moeserve::engine
