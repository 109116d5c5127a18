#pragma once
// Interleaved rotary embedding on the trailing `rope_dim` values of each head: pairs (x[2i], x[2i+1]) are
// rotated by angle pos * inv_freq[i]. YaRN (DeepSeek-V4 compressed layers) only changes inv_freq; the
// optional attention_factor scales cos/sin (1 for DeepSeek-V4: no mscale).
#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace moeserve::kernels::cpu {

class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(const io::RopeSpec& spec, int64_t rope_dim);
  int64_t rope_dim() const { return rope_dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

  // Rotates the trailing rope_dim values of each of `heads` rows of `head_dim` at position `pos`.
  // inverse = true applies the conjugate rotation (de-rotates an attention output).
  void apply(float* x, int64_t heads, int64_t head_dim, int64_t pos, bool inverse = false) const;

 private:
  int64_t rope_dim_ = 0;
  float scale_ = 1.0f;
  std::vector<float> inv_freq_;
};

}  // namespace moeserve::kernels::cpu
