// DeepSeek-V4 MoE (reference, fp32): router scores s = act(x @ gate^T) with act = sqrt(softplus) (or softmax /
// sigmoid); experts chosen by tid2eid[token] in hash layers, else by top-k of s + bias (bias only selects);
// weights = s[chosen], normalised, times routed_scaling_factor; each expert is
// w2(weight * silu(min(w1 x, limit)) * clamp(w3 x, -limit, limit)) (the weight goes in before w2, as in the
// official code); plus the shared expert with the same clamp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threads.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "model/block.h"
#include "model/linear.h"
#include "model/routing_histogram.h"

namespace moeserve::model {

namespace {

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold
float silu(float x) { return x / (1.0f + std::exp(-x)); }

void route_scores(const std::string& func, float* logits, int64_t rows, int64_t experts) {
  for (int64_t r = 0; r < rows; ++r) {
    float* l = logits + r * experts;
    if (func == "sqrtsoftplus") {
      for (int64_t e = 0; e < experts; ++e) l[e] = std::sqrt(softplus(l[e]));
    } else if (func == "sigmoid") {
      for (int64_t e = 0; e < experts; ++e) l[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {  // softmax
      float mx = -INFINITY, sum = 0;
      for (int64_t e = 0; e < experts; ++e) mx = std::fmax(mx, l[e]);
      for (int64_t e = 0; e < experts; ++e) sum += (l[e] = std::exp(l[e] - mx));
      for (int64_t e = 0; e < experts; ++e) l[e] /= sum;
    }
  }
}

// act = silu(min(g, limit)) * clamp(u, -limit, limit), scaled by the routing weight of each row.
void swiglu(const float* gate, const float* up, int64_t rows, int64_t width, float limit, const float* row_weight,
            float* act) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i) {
      float g = std::fmin(gate[r * width + i], limit);
      float u = std::fmax(-limit, std::fmin(up[r * width + i], limit));
      act[r * width + i] = silu(g) * u * (row_weight ? row_weight[r] : 1.0f);
    }
}

// y = w2(weight * swiglu(w1 x, w3 x)) for `rows` rows of x.
void expert_ffn(const ExpertWeights& w, const float* x, int64_t rows, float limit, const float* row_weight,
                const Numerics& num, float* y) {
  const int64_t inter = w.w1.out;
  std::vector<float> g(size_t(rows * inter)), u(size_t(rows * inter));
  linear_into(x, rows, w.w1, num, g.data());
  linear_into(x, rows, w.w3, num, u.data());
  swiglu(g.data(), u.data(), rows, inter, limit, row_weight, g.data());
  linear_into(g.data(), rows, w.w2, num, y);
}

}  // namespace

void moe_forward(const BlockContext& ctx, int64_t layer, const io::LayerSpec& spec, const MoeWeights& w, const float* x,
                 float* out) {
  const io::ModelConfig& c = *ctx.config;
  const int64_t T = ctx.tokens, D = c.hidden_size, E = c.n_routed_experts, K = c.experts_per_token;
  const float limit = float(c.swiglu_limit);

  // Router (the gate is a BF16 linear computed in fp32; no activation quantization).
  std::vector<float> scores(size_t(T * E));
  kernels::cpu::matmul_nt(x, T, D, w.gate.f32.f32(), E, scores.data());
  route_scores(c.scoring_func, scores.data(), T, E);
  std::vector<int32_t> chosen(size_t(T * K));
  std::vector<float> weight(size_t(T * K));
  std::vector<float> biased(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* s = scores.data() + t * E;
    if (spec.hash_moe) {
      const int64_t token = (*ctx.token_ids)[size_t(t)];
      for (int64_t k = 0; k < K; ++k) chosen[size_t(t * K + k)] = int32_t(w.tid2eid.data<int64_t>()[token * K + k]);
    } else {
      for (int64_t e = 0; e < E; ++e) biased[size_t(e)] = s[e] + w.bias.f32()[e];
      auto top = kernels::cpu::top_k(biased.data(), E, K);
      for (int64_t k = 0; k < K; ++k) chosen[size_t(t * K + k)] = top[size_t(k)];
    }
    float sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += (weight[size_t(t * K + k)] = s[chosen[size_t(t * K + k)]]);
    for (int64_t k = 0; k < K; ++k) {
      float& v = weight[size_t(t * K + k)];
      if (c.norm_topk_prob) v /= (sum + 1e-20f);
      v *= float(c.routed_scaling_factor);
    }
  }

  if (ctx.routing) ctx.routing->add(layer, spec.hash_moe, E, chosen.data(), T, K);

  // Shared expert over every token.
  expert_ffn(w.shared, x, T, limit, nullptr, ctx.numerics, out);

  // Routed experts: gather each expert's rows, run it, add back in token order.
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(E));
  for (int64_t i = 0; i < T * K; ++i) rows_of[size_t(chosen[size_t(i)])].push_back(i);
  std::vector<std::vector<float>> results(static_cast<size_t>(E));
  parallel_for(E, 1, [&](int64_t b, int64_t e) {
    for (int64_t ex = b; ex < e; ++ex) {
      const auto& rows = rows_of[size_t(ex)];
      if (rows.empty()) continue;
      const int64_t n = int64_t(rows.size());
      std::vector<float> xs(size_t(n * D)), wt(static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r) {
        std::copy_n(x + (rows[size_t(r)] / K) * D, D, xs.begin() + r * D);
        wt[size_t(r)] = weight[size_t(rows[size_t(r)])];
      }
      results[size_t(ex)].resize(size_t(n * D));
      expert_ffn(w.experts[size_t(ex)], xs.data(), n, limit, wt.data(), ctx.numerics, results[size_t(ex)].data());
    }
  });
  // Deterministic order of the sum: per token, its k choices in routing order.
  std::vector<const float*> contribution(size_t(T * K));
  for (int64_t ex = 0; ex < E; ++ex)
    for (size_t r = 0; r < rows_of[size_t(ex)].size(); ++r)
      contribution[size_t(rows_of[size_t(ex)][r])] = results[size_t(ex)].data() + r * D;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const float* y = contribution[size_t(t * K + k)];
      for (int64_t d = 0; d < D; ++d) out[t * D + d] += y[d];
    }
}

}  // namespace moeserve::model
