#include "planner/sglang_reference.h"

#include "planner/kv.h"

namespace moeserve::planner {

double sglang_bytes_per_full_token(const io::ModelConfig& c, int64_t first, int64_t n, bool speculative,
                                   const SglangAccounting& a) {
  const double K = double(kv_entry_bytes(c, KvFormat::FP8)), I = double(indexer_key_bytes(c, KvFormat::FP8));
  double n4 = 0, hca = 0;
  for (int64_t i = first; i < first + n; ++i) {
    const io::LayerSpec& layer = c.layers.at(size_t(i));
    if (layer.attention == io::AttentionKind::CSA) n4 += 1;
    if (layer.attention == io::AttentionKind::HCA) hca += K / double(layer.compress_ratio);
  }
  const double r = a.swa_ratio, W = double(a.swa_page), R4 = speculative ? 16 : 8;
  const double state_row = 2.0 * 2 * c.head_dim * 4, index_row = 2.0 * 2 * c.index_head_dim * 4;
  double bpft = r * K * double(n) + K * n4 / (4 * a.hisparse_ratio) + hca + I * n4 / 4 +
                (r * R4 / W) * state_row * n4 + (r * R4 / W) * index_row * n4;
  if (speculative) bpft *= double(n + 1) / double(n);
  return bpft;
}

}  // namespace moeserve::planner
