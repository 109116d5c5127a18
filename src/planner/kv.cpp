#include "planner/kv.h"

#include <map>

#include <fmt/format.h>

#include "core/error.h"

namespace moeserve::planner {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t kv_entry_bytes(const io::ModelConfig& c, KvFormat format) {
  switch (format) {
    case KvFormat::FP8: {
      const int64_t nope = c.nope_dim();
      return nope + 2 * c.rope_dim + ceil_div(ceil_div(nope, 64), 8) * 8;
    }
    case KvFormat::BF16: return 2 * c.head_dim;
    case KvFormat::F32: return 4 * c.head_dim;
  }
  return 0;
}

int64_t indexer_key_bytes(const io::ModelConfig& c, KvFormat format) {
  switch (format) {
    case KvFormat::FP8: return c.index_head_dim + 4 * ceil_div(c.index_head_dim, 128);
    case KvFormat::BF16: return 2 * c.index_head_dim;
    case KvFormat::F32: return 4 * c.index_head_dim;
  }
  return 0;
}

std::vector<PoolPlan> kv_pools(const io::ModelConfig& c, const StageMap& stage, KvFormat format) {
  PoolPlan csa_kv{"csa_kv", 0, kv_entry_bytes(c, format), 0, {}, 0};
  PoolPlan csa_index{"csa_index", 0, indexer_key_bytes(c, format), 0, {}, 0};
  std::map<int64_t, std::vector<int64_t>> hca;  // ratio -> layers
  for (int64_t i = stage.first_layer; i < stage.first_layer + stage.num_layers; ++i) {
    const io::LayerSpec& layer = c.layers.at(size_t(i));
    if (layer.attention == io::AttentionKind::Sliding) continue;
    const int64_t r = layer.compress_ratio;
    check(r > 0 && kPageTokens % r == 0,
          "{}: layer {} has compress ratio {}, which does not divide the {}-token page (the paged pools need whole "
          "entries per page)",
          c.source, i, r, kPageTokens);
    if (layer.attention == io::AttentionKind::CSA) {
      check(csa_kv.compress_ratio == 0 || csa_kv.compress_ratio == r,
            "{}: CSA layers with different compress ratios ({} and {}) cannot share one pool", c.source,
            csa_kv.compress_ratio, r);
      csa_kv.compress_ratio = csa_index.compress_ratio = r;
      csa_kv.layers.push_back(i);
      csa_index.layers.push_back(i);
    } else {
      hca[r].push_back(i);
    }
  }
  std::vector<PoolPlan> pools;
  if (!csa_kv.layers.empty()) {
    csa_kv.entries_per_page = csa_index.entries_per_page = kPageTokens / csa_kv.compress_ratio;
    pools.push_back(csa_kv);
    pools.push_back(csa_index);
  }
  for (const auto& [r, layers] : hca) {
    std::string name = hca.size() == 1 ? "hca_kv" : fmt::format("hca{}_kv", r);
    pools.push_back(PoolPlan{name, r, kv_entry_bytes(c, format), kPageTokens / r, layers, 0});
  }
  return pools;
}

SlotState slot_state(const io::ModelConfig& c, const StageMap& stage, KvFormat format, C128Mode c128,
                     int64_t speculative_tokens, int64_t max_tokens_per_request) {
  SlotState s;
  // Rings are indexed by position, so a rejected verify leaves nothing to undo as long as each ring has room
  // for the tokens a verify writes past the committed length (src/cache/kv_layout.h).
  const int64_t headroom = speculative_tokens;
  const int64_t d = c.head_dim, di = c.index_head_dim, f32 = 4;
  int64_t csa_layers = 0, csa_ratio = 0;
  std::map<int64_t, int64_t> hca;  // ratio -> layer count
  for (int64_t i = stage.first_layer; i < stage.first_layer + stage.num_layers; ++i) {
    const io::LayerSpec& layer = c.layers.at(size_t(i));
    if (layer.attention == io::AttentionKind::CSA) {
      ++csa_layers;
      csa_ratio = layer.compress_ratio;
    } else if (layer.attention == io::AttentionKind::HCA) {
      ++hca[layer.compress_ratio];
    }
  }
  const int64_t window_layers = stage.num_layers + (stage.has_mtp ? 1 : 0);
  s.items.push_back({"swa_ring", window_layers, c.sliding_window + headroom, kv_entry_bytes(c, format)});
  if (csa_layers) {
    const int64_t coff = 2, rows = coff * csa_ratio + headroom;
    s.items.push_back({"csa_compressor", csa_layers, rows, 2 * coff * d * f32});
    s.items.push_back({"csa_index_compressor", csa_layers, rows, 2 * coff * di * f32});
  }
  for (const auto& [r, layers] : hca) {
    if (c128 == C128Mode::Offline)
      s.items.push_back({"hca_state", layers, r + headroom, 2 * d * f32});
    else  // a running aggregate cannot be rewound by position: keep a snapshot under speculation
      s.items.push_back({"hca_state", layers, 3 * (headroom > 0 ? 2 : 1), d * f32});
  }
  s.items.push_back({"page_table", 1, ceil_div(max_tokens_per_request, kPageTokens), 4});
  for (const auto& item : s.items) s.bytes_per_slot += item.bytes();
  return s;
}

}  // namespace moeserve::planner
