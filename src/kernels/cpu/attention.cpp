#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/matmul.h"

namespace moeserve::kernels::cpu {

void softmax_pool(const float* kv, const float* score, int64_t slots, int64_t dim, float* out) {
  for (int64_t f = 0; f < dim; ++f) {
    float mx = -INFINITY;
    for (int64_t s = 0; s < slots; ++s) mx = std::fmax(mx, score[s * dim + f]);
    if (mx == -INFINITY) {
      out[f] = 0.0f;
      continue;
    }
    float sum = 0, acc = 0;
    for (int64_t s = 0; s < slots; ++s) {
      float v = score[s * dim + f];
      if (v == -INFINITY) continue;
      float e = std::exp(v - mx);
      sum += e;
      acc += e * kv[s * dim + f];
    }
    out[f] = acc / sum;
  }
}

void sink_attention(const float* q, int64_t heads, int64_t head_dim, const float* const* keys, int64_t num_keys,
                    const float* sinks, float scale, float* out) {
  std::vector<float> s(static_cast<size_t>(num_keys));
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * head_dim;
    float mx = sinks[h];
    for (int64_t j = 0; j < num_keys; ++j) {
      s[size_t(j)] = dot(qh, keys[j], head_dim) * scale;
      mx = std::fmax(mx, s[size_t(j)]);
    }
    float denom = std::exp(sinks[h] - mx);
    for (int64_t j = 0; j < num_keys; ++j) denom += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
    float* o = out + h * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    for (int64_t j = 0; j < num_keys; ++j) {
      float p = s[size_t(j)] / denom;
      const float* k = keys[j];
      for (int64_t d = 0; d < head_dim; ++d) o[d] += p * k[d];
    }
  }
}

void indexer_scores(const float* q, const float* weights, int64_t heads, int64_t dim, const float* keys,
                    int64_t num_keys, float softmax_scale, float* scores) {
  for (int64_t i = 0; i < num_keys; ++i) {
    float acc = 0;
    for (int64_t h = 0; h < heads; ++h) {
      float v = dot(q + h * dim, keys + i * dim, dim);
      acc += std::fmax(v, 0.0f) * softmax_scale * weights[h];
    }
    scores[i] = acc;
  }
}

std::vector<int32_t> top_k(const float* scores, int64_t n, int64_t k) {
  k = std::min(k, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace moeserve::kernels::cpu
