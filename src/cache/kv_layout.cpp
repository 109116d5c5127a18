#include "cache/kv_layout.h"

#include "core/error.h"

namespace moeserve::cache {

KvLayout KvLayout::from_config(const io::ModelConfig& c, int64_t mtp_layers, int64_t speculative_tokens,
                               int64_t page_tokens) {
  KvLayout layout;
  layout.page_tokens = page_tokens;
  layout.head_dim = c.head_dim;
  layout.index_head_dim = c.index_head_dim;
  layout.window = c.sliding_window;
  layout.speculative_tokens = speculative_tokens;
  layout.window_capacity = c.sliding_window + speculative_tokens;
  for (int64_t l = 0; l < c.num_layers + mtp_layers; ++l) {
    LayerKvLayout k;
    if (l < c.num_layers) {
      const io::LayerSpec& spec = c.layers[size_t(l)];
      k.kind = spec.attention;
      k.ratio = spec.compress_ratio;
    }
    if (k.kind != io::AttentionKind::Sliding) {
      check(page_tokens % k.ratio == 0, "{}: layer {} compress ratio {} does not divide the {}-token page", c.source,
            l, k.ratio, page_tokens);
      bool overlap = k.kind == io::AttentionKind::CSA;
      k.entries_per_page = page_tokens / k.ratio;
      k.compressed_layer = layout.num_compressed_layers++;
      // Rows of the blocks an entry still needs (previous + current with overlap), plus headroom so that
      // speculative rows never overwrite rows a rollback would need.
      k.state_rows = (overlap ? 2 : 1) * k.ratio + speculative_tokens;
      k.state_width = (overlap ? 2 : 1) * c.head_dim;
      if (overlap) {
        k.indexer_layer = layout.num_indexer_layers++;
        k.index_state_width = 2 * c.index_head_dim;
      }
    }
    layout.layers.push_back(k);
  }
  return layout;
}

}  // namespace moeserve::cache
