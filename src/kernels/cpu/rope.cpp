#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>

namespace moeserve::kernels::cpu {

namespace {
// The YaRN correction dimension for a number of rotations (transformers' find_correction_dim).
double correction_dim(double rotations, double dim, double base, double max_position) {
  return (dim * std::log(max_position / (rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
}
}  // namespace

RopeTable::RopeTable(const io::RopeSpec& spec, int64_t rope_dim) : rope_dim_(rope_dim) {
  // fp32 arithmetic where transformers uses fp32 (torch.float pow / reciprocal), so tables agree bit for bit
  // or within an ulp.
  int64_t half = rope_dim / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  std::vector<float> pos_freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    pos_freqs[size_t(i)] = std::pow(float(spec.theta), float(2 * i) / float(rope_dim));
  if (!spec.yarn) {
    for (int64_t i = 0; i < half; ++i) inv_freq_[size_t(i)] = 1.0f / pos_freqs[size_t(i)];
    return;
  }
  double low = correction_dim(spec.beta_fast, double(rope_dim), spec.theta, spec.original_max_position);
  double high = correction_dim(spec.beta_slow, double(rope_dim), spec.theta, spec.original_max_position);
  if (spec.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(rope_dim - 1));
  if (low == high) high += 0.001;  // transformers: avoid a zero-width ramp
  float factor = float(spec.factor);
  for (int64_t i = 0; i < half; ++i) {
    float ramp = std::clamp((float(i) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
    float extrapolation_factor = 1.0f - ramp;
    float extrapolation = 1.0f / pos_freqs[size_t(i)];
    float interpolation = 1.0f / (factor * pos_freqs[size_t(i)]);
    inv_freq_[size_t(i)] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  scale_ = float(spec.attention_factor);
}

void RopeTable::apply(float* x, int64_t heads, int64_t head_dim, int64_t pos, bool inverse) const {
  int64_t half = rope_dim_ / 2;
  for (int64_t i = 0; i < half; ++i) {
    float angle = float(pos) * inv_freq_[size_t(i)];  // fp32 product, as transformers computes it
    float c = float(std::cos(double(angle))) * scale_;
    float s = float(std::sin(double(angle))) * scale_;
    if (inverse) s = -s;
    for (int64_t h = 0; h < heads; ++h) {
      float* p = x + h * head_dim + (head_dim - rope_dim_) + 2 * i;
      float a = p[0], b = p[1];
      p[0] = a * c - b * s;
      p[1] = b * c + a * s;
    }
  }
}

}  // namespace moeserve::kernels::cpu
