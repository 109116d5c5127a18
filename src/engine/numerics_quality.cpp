#include "engine/numerics_quality.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "core/threads.h"
#include "engine/generate.h"
#include "io/safetensors.h"
#include "kernels/cpu/quant.h"

namespace moeserve::engine {

namespace fs = std::filesystem;

namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

double relative_rms(const std::vector<float>& exact, const std::vector<float>& rounded) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    err += double(rounded[i] - exact[i]) * double(rounded[i] - exact[i]);
    norm += double(exact[i]) * double(exact[i]);
  }
  return std::sqrt(err / norm);
}

// log-softmax of one row, in double.
std::vector<double> log_softmax(const float* z, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(z[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(z[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(z[i]) - lse;
  return out;
}

int64_t argmax(const float* z, int64_t n) { return int64_t(std::max_element(z, z + n) - z); }

}  // namespace

FormatErrors measure_format_errors() {
  namespace k = kernels::cpu;
  FormatErrors e;
  {
    auto x = gaussian(2048 * 128, 1), y = x;
    k::fp8_block_sim(y.data(), 2048, 128, 128, 128);
    e.act_fp8 = relative_rms(x, y);
  }
  {
    auto x = gaussian(2048 * 64, 2), y = x;
    k::fp8_block_sim(y.data(), 2048, 64, 64, 64);
    e.kv_fp8 = relative_rms(x, y);
  }
  {
    const int64_t n = 512;
    auto x = gaussian(n * n, 3);
    std::vector<uint8_t> q(size_t(n * n)), s(16);
    std::vector<float> y(x.size());
    k::fp8_weight_quantize(x.data(), n, n, q.data(), s.data());
    k::fp8_weight_dequantize(q.data(), DType::F8_E8M0, s.data(), n, n, y.data());
    e.weight_fp8 = relative_rms(x, y);
  }
  {
    const int64_t n = 512;
    auto x = gaussian(n * n, 4);
    std::vector<uint8_t> q(size_t(n * n / 2)), s(size_t(n * n / 32));
    std::vector<float> y(x.size());
    k::mxfp4_weight_quantize(x.data(), n, n, q.data(), s.data());
    k::mxfp4_weight_dequantize(q.data(), s.data(), n, n, y.data());
    e.weight_fp4 = relative_rms(x, y);
  }
  {
    auto x = gaussian(2048 * 128, 5);
    k::hadamard_rotate(x.data(), 2048, 128);
    auto y = x;
    k::fp4_block_sim(y.data(), 2048, 128, 32);
    e.indexer_fp4 = relative_rms(x, y);
  }
  return e;
}

DistributionDiff compare_distributions(const Tensor& reference, const Tensor& test) {
  check(reference.shape() == test.shape() && reference.rank() == 2, "compare_distributions: shapes {} and {}",
        shape_string(reference.shape()), shape_string(test.shape()));
  const int64_t T = reference.dim(0), V = reference.dim(1);
  DistributionDiff d;
  for (int64_t t = 0; t < T; ++t) {
    const float* zp = reference.f32() + t * V;
    const float* zq = test.f32() + t * V;
    auto lp = log_softmax(zp, V), lq = log_softmax(zq, V);
    double kl = 0;
    for (int64_t i = 0; i < V; ++i) kl += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
    kl = std::max(kl, 0.0);
    d.mean_kl += kl;
    d.max_kl = std::max(d.max_kl, kl);
    d.top1_agreement += argmax(zp, V) == argmax(zq, V) ? 1 : 0;
  }
  d.mean_kl /= double(T);
  d.top1_agreement /= double(T);
  return d;
}

double site_error_sq(const io::ModelConfig& c, model::WeightsTarget weights, const model::Numerics& numerics,
                     const FormatErrors& eps, int64_t positions) {
  const bool quantized = weights != model::WeightsTarget::Bf16;
  const double a = numerics.act_fp8 && quantized ? eps.act_fp8 * eps.act_fp8 : 0.0;
  const double w = quantized ? eps.weight_fp8 * eps.weight_fp8 : 0.0;
  const double we = weights == model::WeightsTarget::Mxfp4Fp8 ? eps.weight_fp4 * eps.weight_fp4 : w;
  double sum = 0;
  for (const io::LayerSpec& layer : c.layers) {
    // Attention: weights wq_a, wq_b, wkv, wo_a, wo_b; FP8 inputs x, q_norm(wq_a x), the grouped output (wo_b).
    sum += 5 * w + 3 * a;
    // KV FP8: the window KV, and the compressed entries where the layer has them.
    if (numerics.kv_fp8) sum += eps.kv_fp8 * eps.kv_fp8 * (layer.attention == io::AttentionKind::Sliding ? 1 : 2);
    // The indexer only selects entries: its wq_b and input, and the FP4 of q and of the keys, matter once
    // there are more entries than index_topk.
    if (layer.attention == io::AttentionKind::CSA && positions / layer.compress_ratio > c.index_topk) {
      sum += w + a;
      if (numerics.indexer_fp4) sum += 2 * eps.indexer_fp4 * eps.indexer_fp4;
    }
    // MoE: FP8 inputs of w1/w3 and of w2; weights w1, w3, w2 (routed: FP4 in mxfp4-fp8, >= the FP8 shared ones).
    sum += 2 * a + 3 * std::max(w, we);
  }
  return sum;
}

BoundBasis bound_basis(const model::Model& bf16, const Tensor& reference_logits) {
  const Tensor& W = bf16.weights().head.f32;  // [V, D]
  const float* gamma = bf16.weights().norm.f32();
  const int64_t T = reference_logits.dim(0), V = W.dim(0), D = W.dim(1);
  check(reference_logits.dim(1) == V, "bound_basis: logits have {} columns, the head {} rows",
        reference_logits.dim(1), V);
  BoundBasis basis;
  basis.logit_variance.resize(size_t(T));
  basis.competitors.resize(size_t(T));
  parallel_for(T, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> mean(static_cast<size_t>(D)), second(static_cast<size_t>(D));
    for (int64_t t = begin; t < end; ++t) {
      const float* z = reference_logits.f32() + t * V;
      auto lp = log_softmax(z, V);
      std::fill(mean.begin(), mean.end(), 0.0);
      std::fill(second.begin(), second.end(), 0.0);
      for (int64_t i = 0; i < V; ++i) {
        const double p = std::exp(lp[size_t(i)]);
        const float* row = W.f32() + i * D;
        for (int64_t k = 0; k < D; ++k) {
          mean[size_t(k)] += p * row[k];
          second[size_t(k)] += p * double(row[k]) * row[k];
        }
      }
      double var = 0;
      for (int64_t k = 0; k < D; ++k)
        var += double(gamma[k]) * gamma[k] * std::max(0.0, second[size_t(k)] - mean[size_t(k)] * mean[size_t(k)]);
      basis.logit_variance[size_t(t)] = var;
      const int64_t top = argmax(z, V);
      const float* wt = W.f32() + top * D;
      auto& comp = basis.competitors[size_t(t)];
      comp.reserve(size_t(V - 1));
      for (int64_t j = 0; j < V; ++j) {
        if (j == top) continue;
        const float* wj = W.f32() + j * D;
        double s2 = 0;
        for (int64_t k = 0; k < D; ++k) s2 += double(gamma[k]) * gamma[k] * double(wj[k] - wt[k]) * (wj[k] - wt[k]);
        comp.emplace_back(double(z[top]) - z[j], std::sqrt(s2));
      }
    }
  });
  return basis;
}

QualityBound bound_at(const BoundBasis& basis, double rho) {
  QualityBound b;
  const size_t T = basis.logit_variance.size();
  if (rho == 0 || T == 0) {
    b.top1_agreement = 1;
    return b;
  }
  double expected_flips = 0, flip_variance = 0;
  for (size_t t = 0; t < T; ++t) {
    // KL(p || q) ~= 1/2 Var_p(delta), E[Var_p(delta)] = rho^2 sum_k gamma_k^2 Var_p(W_k).
    b.mean_kl += 0.5 * rho * rho * basis.logit_variance[t];
    // P(top-1 flips) <= sum_j P(delta_j - delta_top > margin_j), delta_j - delta_top ~ N(0, (rho s_j)^2).
    double flip = 0;
    for (const auto& [margin, s] : basis.competitors[t]) {
      flip += s > 0 ? 0.5 * std::erfc(margin / (rho * s * std::sqrt(2.0))) : (margin > 0 ? 0.0 : 1.0);
      if (flip >= 1) break;
    }
    flip = std::min(flip, 1.0);
    expected_flips += flip;
    flip_variance += flip * (1 - flip);
  }
  b.mean_kl /= double(T);
  b.top1_agreement = std::max(0.0, 1.0 - (expected_flips + 3 * std::sqrt(flip_variance)) / double(T));
  return b;
}

std::vector<QualityModel> default_quality_models() {
  const fs::path src = MOESERVE_SOURCE_DIR;
  const fs::path fixtures = src / "tests/fixtures/models";
  std::vector<QualityModel> models = {
      {"tiny_hf", (fixtures / "tiny_hf").string(), (fixtures / "tiny_hf/oracle.safetensors").string()},
      {"tiny_yarn", (fixtures / "tiny_yarn").string(), (fixtures / "tiny_yarn/oracle.safetensors").string()}};
  if (fs::exists(src / "models/demo/config.json") && fs::exists(fixtures / "demo_oracle.safetensors"))
    models.push_back({"demo", (src / "models/demo").string(), (fixtures / "demo_oracle.safetensors").string()});
  return models;
}

std::vector<int32_t> read_input_ids(const std::string& safetensors_file) {
  auto file = io::Checkpoint::open_files({safetensors_file});
  const Tensor& t = file.get("input_ids").tensor;
  check(t.dtype() == DType::I64 && t.rank() == 1, "{}: input_ids must be a 1-D I64 tensor", safetensors_file);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < t.numel(); ++i) ids.push_back(int32_t(t.data<int64_t>()[i]));
  return ids;
}

QualityReport evaluate_numerics_quality(const std::string& model_dir, const std::vector<int32_t>& ids,
                                        const std::string& scratch_dir, double safety) {
  using model::WeightsTarget;
  QualityReport report;
  report.model = model_dir;
  report.safety = safety;
  report.eps = measure_format_errors();
  // The weights and config only (the fixtures keep oracle.safetensors beside the weights).
  const fs::path staged = fs::path(scratch_dir) / "source";
  fs::create_directories(staged);
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name != "oracle.safetensors" &&
        (entry.path().extension() == ".safetensors" || name == "model.safetensors.index.json" || name == "config.json"))
      fs::copy_file(entry.path(), staged / name, fs::copy_options::overwrite_existing);
  }
  const std::string bf16_dir = (fs::path(scratch_dir) / "bf16").string();
  model::ConvertOptions options;
  options.weights = WeightsTarget::Bf16;
  model::convert_checkpoint(staged.string(), bf16_dir, options);
  auto base = model::Model::load(bf16_dir);
  const Tensor reference = all_logits(*base, ids, 0, model::Numerics::reference());
  report.positions = reference.dim(0);
  const BoundBasis basis = bound_basis(*base, reference);

  for (WeightsTarget target : {WeightsTarget::Bf16, WeightsTarget::Fp8, WeightsTarget::Mxfp4Fp8}) {
    std::shared_ptr<model::Model> m = base;
    std::string unavailable;
    if (target != WeightsTarget::Bf16) {
      const std::string dir = (fs::path(scratch_dir) / model::weights_target_name(target)).string();
      options.weights = target;
      try {
        model::convert_checkpoint(bf16_dir, dir, options);
        m = model::Model::load(dir);
      } catch (const Error& e) {
        unavailable = e.what();
      }
    }
    for (bool kv : {false, true})
      for (bool idx : {false, true}) {
        QualityRow row;
        row.weights = model::weights_target_name(target);
        row.kv_fp8 = kv;
        row.indexer_fp4 = idx;
        if (!unavailable.empty()) {
          row.available = false;
          row.note = unavailable;
          report.rows.push_back(row);
          continue;
        }
        model::Numerics numerics;
        numerics.act_fp8 = true;  // acts only on quantized linears
        numerics.kv_fp8 = kv;
        numerics.indexer_fp4 = idx;
        row.diff = compare_distributions(reference, all_logits(*m, ids, 0, numerics));
        row.rho = safety * std::sqrt(site_error_sq(base->config(), target, numerics, report.eps, int64_t(ids.size())));
        row.bound = bound_at(basis, row.rho);
        report.rows.push_back(row);
      }
  }
  return report;
}

std::string quality_table_markdown(const std::vector<QualityReport>& reports) {
  std::string out =
      "| model | weights | KV FP8 | indexer FP4 | top-1 agreement | bound (>=) | mean KL (nats) | bound (<=) | "
      "max KL | rho |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const QualityReport& r : reports) {
    const std::string name = std::filesystem::path(r.model).filename().string();
    for (const QualityRow& row : r.rows) {
      const char* kv = row.kv_fp8 ? "on" : "off";
      const char* idx = row.indexer_fp4 ? "on" : "off";
      if (!row.available) {
        out += fmt::format("| {} | {} | {} | {} | n/a | | | | | |\n", name, row.weights, kv, idx);
        continue;
      }
      out += fmt::format("| {} | {} | {} | {} | {:.3f} | {:.3f} | {:.2e} | {:.2e} | {:.2e} | {:.3f} |\n", name,
                         row.weights, kv, idx, row.diff.top1_agreement, row.bound.top1_agreement, row.diff.mean_kl,
                         row.bound.mean_kl, row.diff.max_kl, row.rho);
    }
  }
  return out;
}

}  // namespace moeserve::engine
