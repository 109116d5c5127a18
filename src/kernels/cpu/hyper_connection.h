#pragma once
// Manifold-constrained hyper-connections (mHC): hc_mult residual streams per token.
//   mixes = rms_unweighted(flatten(h)) @ fn^T                        [mix = (2 + hc) * hc]
//   pre  = sigmoid(mixes[:hc] * scale[0] + base[:hc]) + hc_eps        collapses the streams into the block input
//   post = 2 * sigmoid(mixes[hc:2hc] * scale[1] + base[hc:2hc])       expands the block output
//   comb = Sinkhorn(softmax(rows of mixes[2hc:] * scale[2] + base[2hc:]) + eps)   mixes the residual streams
//   h'[k] = post[k] * block_out + sum_j comb[j, k] * h[j]
#include <cstdint>

namespace moeserve::kernels::cpu {

struct HyperConnectionParams {
  const float* fn;     // [mix, hc * dim]
  const float* base;   // [mix]
  const float* scale;  // [3]
  int64_t hc = 4;
  int64_t dim = 0;
  int64_t sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
};

// For `tokens` tokens of h [tokens, hc, dim]: collapsed [tokens, dim], post [tokens, hc], comb [tokens, hc, hc].
void hc_pre(const HyperConnectionParams& p, const float* h, int64_t tokens, float* collapsed, float* post,
            float* comb);
// In place: h[t] <- post[t, k] * block_out[t] + sum_j comb[t, j, k] * h[t, j].
void hc_post(const HyperConnectionParams& p, float* h, int64_t tokens, const float* block_out, const float* post,
             const float* comb);
// Final collapse (no post, no Sinkhorn): fn [hc, hc*dim], base [hc], scale [1].
void hc_head(const float* fn, const float* base, const float* scale, int64_t hc, int64_t dim, float hc_eps,
             float norm_eps, const float* h, int64_t tokens, float* out);

}  // namespace moeserve::kernels::cpu
