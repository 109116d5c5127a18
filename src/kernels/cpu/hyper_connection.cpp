#include "kernels/cpu/hyper_connection.h"

#include <cmath>
#include <vector>

#include "core/threads.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"

namespace moeserve::kernels::cpu {

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// mixes[t] = rms_unweighted(h[t]) @ fn^T, computed as (h @ fn^T) * r like the official kernel.
void mixes_of(const float* fn, int64_t mix, int64_t width, float norm_eps, const float* h, int64_t tokens,
              float* mixes) {
  std::vector<float> normed(size_t(tokens * width));
  rms_norm(h, tokens, width, nullptr, norm_eps, normed.data());
  matmul_nt(normed.data(), tokens, width, fn, mix, mixes);
}
}  // namespace

void hc_pre(const HyperConnectionParams& p, const float* h, int64_t tokens, float* collapsed, float* post,
            float* comb) {
  const int64_t hc = p.hc, mix = (2 + hc) * hc, width = hc * p.dim;
  std::vector<float> mixes(size_t(tokens * mix));
  mixes_of(p.fn, mix, width, p.norm_eps, h, tokens, mixes.data());
  parallel_for(tokens, 1, [&](int64_t b, int64_t e) {
    std::vector<float> pre(static_cast<size_t>(hc)), c(size_t(hc * hc));
    for (int64_t t = b; t < e; ++t) {
      const float* m = mixes.data() + t * mix;
      for (int64_t j = 0; j < hc; ++j) {
        pre[size_t(j)] = sigmoid(m[j] * p.scale[0] + p.base[j]) + p.hc_eps;
        post[t * hc + j] = 2.0f * sigmoid(m[hc + j] * p.scale[1] + p.base[hc + j]);
      }
      for (int64_t r = 0; r < hc; ++r) {  // softmax over each row (last axis), then + eps
        float* row = c.data() + r * hc;
        float mx = -INFINITY;
        for (int64_t k = 0; k < hc; ++k) {
          row[k] = m[2 * hc + r * hc + k] * p.scale[2] + p.base[2 * hc + r * hc + k];
          mx = std::fmax(mx, row[k]);
        }
        float sum = 0;
        for (int64_t k = 0; k < hc; ++k) sum += (row[k] = std::exp(row[k] - mx));
        for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + p.hc_eps;
      }
      auto normalize_columns = [&] {
        for (int64_t k = 0; k < hc; ++k) {
          float sum = 0;
          for (int64_t r = 0; r < hc; ++r) sum += c[size_t(r * hc + k)];
          for (int64_t r = 0; r < hc; ++r) c[size_t(r * hc + k)] /= (sum + p.hc_eps);
        }
      };
      auto normalize_rows = [&] {
        for (int64_t r = 0; r < hc; ++r) {
          float sum = 0;
          for (int64_t k = 0; k < hc; ++k) sum += c[size_t(r * hc + k)];
          for (int64_t k = 0; k < hc; ++k) c[size_t(r * hc + k)] /= (sum + p.hc_eps);
        }
      };
      normalize_columns();
      for (int64_t it = 0; it < p.sinkhorn_iters - 1; ++it) {
        normalize_rows();
        normalize_columns();
      }
      for (int64_t i = 0; i < hc * hc; ++i) comb[t * hc * hc + i] = c[size_t(i)];
      const float* ht = h + t * width;
      float* out = collapsed + t * p.dim;
      for (int64_t d = 0; d < p.dim; ++d) {
        float acc = 0;
        for (int64_t j = 0; j < hc; ++j) acc += pre[size_t(j)] * ht[j * p.dim + d];
        out[d] = acc;
      }
    }
  });
}

void hc_post(const HyperConnectionParams& p, float* h, int64_t tokens, const float* block_out, const float* post,
             const float* comb) {
  const int64_t hc = p.hc, dim = p.dim;
  parallel_for(tokens, 1, [&](int64_t b, int64_t e) {
    std::vector<float> old(size_t(hc * dim));
    for (int64_t t = b; t < e; ++t) {
      float* ht = h + t * hc * dim;
      std::copy(ht, ht + hc * dim, old.begin());
      const float* c = comb + t * hc * hc;
      const float* y = block_out + t * dim;
      for (int64_t k = 0; k < hc; ++k) {
        float pk = post[t * hc + k];
        for (int64_t d = 0; d < dim; ++d) {
          float acc = pk * y[d];
          for (int64_t j = 0; j < hc; ++j) acc += c[j * hc + k] * old[size_t(j * dim + d)];
          ht[k * dim + d] = acc;
        }
      }
    }
  });
}

void hc_head(const float* fn, const float* base, const float* scale, int64_t hc, int64_t dim, float hc_eps,
             float norm_eps, const float* h, int64_t tokens, float* out) {
  std::vector<float> mixes(size_t(tokens * hc));
  mixes_of(fn, hc, hc * dim, norm_eps, h, tokens, mixes.data());
  for (int64_t t = 0; t < tokens; ++t) {
    const float* ht = h + t * hc * dim;
    float* o = out + t * dim;
    std::vector<float> pre(static_cast<size_t>(hc));
    for (int64_t j = 0; j < hc; ++j) pre[size_t(j)] = sigmoid(mixes[size_t(t * hc + j)] * scale[0] + base[j]) + hc_eps;
    for (int64_t d = 0; d < dim; ++d) {
      float acc = 0;
      for (int64_t j = 0; j < hc; ++j) acc += pre[size_t(j)] * ht[j * dim + d];
      o[d] = acc;
    }
  }
}

}  // namespace moeserve::kernels::cpu
